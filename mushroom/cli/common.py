"""Option types and small helpers that several command modules share."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, get_args

import typer

from mushroom.cli.boundary import FLAG, err_console, out_console
from mushroom.cli.tables import RichReporter
from mushroom.data.contexts import DEFAULT_SOURCES, NO_CONTEXTS, no_source_problem, none_on_purpose
from mushroom.data.languages import language_code
from mushroom.data.records import ErrorType
from mushroom.errors import MushroomError
from mushroom.util.options import split_names

if TYPE_CHECKING:
    from mushroom.data.records import Item

DEFAULT_CONTEXTS = ",".join(DEFAULT_SOURCES)


def number_in(low: float, high: float = math.inf) -> Callable[[float | None], float | None]:
    """An option callback refusing a number outside [low, high], NaN and infinity included.

    click's own range let `--l2 nan` through (NaN compares false with every bound) and said
    of `--threshold nan` that it "should be less than or equal to 1".
    """
    said = f"a number from {low:g} to {high:g}" if math.isfinite(high) else f"a number, {low:g} or more"

    def check(value: float | None) -> float | None:
        if value is not None and not (low <= value <= high and math.isfinite(value)):
            raise typer.BadParameter(f"{value}: {said}")
        return value

    return check


def lang_codes(values: list[str] | None) -> list[str] | None:
    """--lang given as `--lang en --lang de` or `--lang en,de` (as score --langs takes them)."""
    if not values:
        return None
    # files say "EN"
    codes = [language_code(code) for value in values for code in split_names(value, what="language")]
    if not codes:  # `--lang "$EMPTY"` must not turn into "every language"
        raise typer.BadParameter("no language given (e.g. en, or en,de)")
    # `--langs en,en,de` scored English twice in the mean over languages, without a word
    return list(dict.fromkeys(codes))


def items_option(path: Path, option: str = "--items") -> Path:
    """An items file, or a folder of `Dataset.save_to_disk`, given as `option`; a usage error else."""
    from mushroom.cli.boundary import input_file
    from mushroom.data.hf import SAVED_MARKERS, is_saved_dataset, refuse_part_of_dataset

    if is_saved_dataset(path):
        return path
    refuse_part_of_dataset(path, option)
    if path.is_dir():  # "give a file" hid that a saved dataset's folder is taken too
        raise MushroomError(
            f"{option} {path}: a folder, but not one Dataset.save_to_disk wrote (it has no "
            f"{' or '.join(m for m in SAVED_MARKERS if not (path / m).is_file())}); give an items "
            "file (JSON Lines) or a saved dataset's folder"
        )
    return input_file(path, option)


def load_items_option(path: Path, option: str = "--items", answer_evidence: bool = True) -> list[Item]:
    """The items of an `items_option`, every problem named by line (or row) and field.

    `answer_evidence=False` drops the answering model's tokens and logits of a JSONL file's
    items as they are read (`load_items`).
    """
    from mushroom.data.hf import is_saved_dataset, items_from_dataset, load_saved
    from mushroom.data.splits import load_items
    from mushroom.errors import DataError

    path = items_option(path, option)
    if is_saved_dataset(path):
        items = items_from_dataset(load_saved(path), str(path))
    else:
        items = load_items(path, answer_evidence=answer_evidence)
    if not items:  # ensemble listed every prediction as "not among the items" of an empty file
        raise DataError.single(path, None, None, "no items")
    return items


def file_stem(value: str | None) -> str | None:
    """An option that names a file (`compare --name`): refused when it could leave its folder."""
    from mushroom.util.names import name_problem

    problem = None if value is None else name_problem(value)
    if problem is not None:
        raise typer.BadParameter(problem)
    return value


def reporter() -> RichReporter:
    """The run reporter of a command: rich tables and bars on stdout, warnings on stderr."""
    return RichReporter(out_console, err_console)


TAGS_HELP = "error-type tags JSONL {id, error_type}; error_type is one of " + ", ".join(get_args(ErrorType))
ALLOW_FAILURES_HELP = (
    "write files even when items failed (listed; left empty, or in a cascade the CPU stack's prediction)"
)
AllowFailures = Annotated[bool, typer.Option("--allow-failures", metavar=FLAG, help=ALLOW_FAILURES_HELP)]
Quiet = Annotated[bool, typer.Option("--quiet", metavar=FLAG, help="no progress bar")]
Langs = Annotated[
    list[str] | None, typer.Option("--lang", callback=lang_codes, help="language(s); default all")
]


def context_sources(text: str, needed_by: str | None, given_as: str | None = None) -> tuple[str, ...]:
    """`--contexts` as source names; none is refused when the detector checks against contexts.

    Args:
        text: the option's value.
        needed_by: what reads the contexts ("the lexical detector"), or None when nothing
            needs them (an LLM judging on its own knowledge may run with none).
        given_as: where the value was written, for the message (default: the option).
    """
    names = tuple(split_names(text, what="context source"))
    if none_on_purpose(names):  # on purpose: a plumbing check, or an LLM on its own knowledge
        return ()
    if not names and needed_by is not None:
        raise MushroomError(f"{given_as or f'--contexts {text!r}'} {no_source_problem(needed_by)}")
    return names


# The default is named in the help with spaces: as one long token, the help table cut it
# short with an ellipsis on an 80-column terminal.
Contexts = Annotated[
    str,
    typer.Option(
        "--contexts",
        show_default=False,
        help="context sources, comma-separated; a trailing ? skips a source with no file; "
        f"'{NO_CONTEXTS}': no contexts \\[default: " + ", ".join(DEFAULT_SOURCES) + "]",
    ),
]


def refuse_out_in_runs(
    out: Path, runs: list[Path], what: str, keep_suffix: str | None = None, option: str = "--out"
) -> None:
    """Refuses an --out inside a run folder a command reads: it would overwrite the run's files.

    A report or a stack written over a prediction file, a ledger or config.json broke the run
    for every later command, and any file there may be read back as the run's (a submission
    name in val/, a variant, a member). `keep_suffix` is the one kind of file a command may
    write there (a report's `.html`, its default place). Loose prediction files are
    `output_file`'s to guard (a file named as they are beside them), called as well.
    """
    from mushroom.data.runfolder import run_scope

    target = out.resolve()
    for run in runs:
        scope = run_scope(run.resolve())
        if scope is None:
            continue
        folder = scope.folder.resolve()
        allowed = keep_suffix is not None and target.suffix.lower() == keep_suffix
        if not target.is_relative_to(folder) or allowed:
            continue
        raise MushroomError(
            f"{option} {out} is inside the run folder {folder} of an input: {what} would overwrite or "
            "become one of that run's files; write it outside the runs it reads"
            + (f" (or give a {keep_suffix} file)" if keep_suffix else "")
        )


def given_twice(paths: list[Path]) -> list[tuple[int, int]]:
    """(later, first) index pairs of paths that name the same file or folder.

    A run given twice votes, fits or compares twice: a slip, or a way to weigh it double;
    the commands that take several runs say so either way.
    """
    first: dict[Path, int] = {}
    pairs = []
    for k, path in enumerate(paths):
        key = path.resolve()
        if key in first:
            pairs.append((k, first[key]))
        first.setdefault(key, k)
    return pairs
