"""`ensemble` and `stack`: combining the predictions of several runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mushroom.cli.boundary import (
    err_console,
    esc,
    file_to_write,
    input_file,
    out_console,
    output_file,
    print_warning,
    refuse_foreign,
)
from mushroom.cli.common import (
    Langs,
    given_twice,
    items_option,
    load_items_option,
    number_in,
    refuse_out_in_runs,
    reporter,
)
from mushroom.cli.tables import print_fitted, systems_table
from mushroom.data.languages import language_code
from mushroom.errors import DataError, MushroomError
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.combine.stack import StackModel

stack_app = typer.Typer(
    no_args_is_help=True, help="A learned combination of detector runs (fit on val, apply to test)."
)


def _a_prediction_file(path: Path) -> bool:
    """Whether a file's first line that is not blank is a prediction's: an earlier ensemble's output."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            line = next((line for line in handle if line.strip()), "")
        row = json.loads(line)
    except (OSError, ValueError):
        return False
    return isinstance(row, dict) and "id" in row and ("soft_labels" in row or "hard_labels" in row)


def _a_stack_file(path: Path) -> bool:
    """Whether a file is a stack `stack fit` wrote (a JSON object with its members and channels)."""
    try:
        if path.stat().st_size > 1 << 26:  # a stack is kilobytes; this is some other file
            return False
        model = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(model, dict) and "members" in model and "channels" in model


def ensemble(
    preds: Annotated[
        list[Path],
        typer.Argument(metavar="PREDS", help="prediction files or run folders of the runs to combine"),
    ],
    out: Annotated[Path, typer.Option("--out", parser=file_to_write, help="output prediction file")],
    threshold: Annotated[
        float,
        typer.Option("--threshold", callback=number_in(0, 1), help="hard label when vote share > T (0 to 1)"),
    ] = 0.5,
    soft: Annotated[
        str, typer.Option("--soft", help="soft label: 'vote' share or 'mean' probability")
    ] = "vote",
    items: Annotated[
        Path | None,
        typer.Option(
            "--items", help="items file: text lengths and a check (not needed for shipped val/test ids)"
        ),
    ] = None,
    lang: Annotated[
        str | None, typer.Option("--lang", help="language of the files taken from run folders (e.g. en)")
    ] = None,
    split: Annotated[
        str | None,
        typer.Option(
            "--split", help="val, test, train or test-labeled: split of the files taken from run folders"
        ),
    ] = None,
) -> None:
    """Per-character vote across runs (models, temperatures, detectors).

    Every span of every input is checked against its answer's length, from --items or, for
    ids of the shipped val/test files, from those files; a span that does not fit is an error.
    A run folder stands for its prediction file of --lang and --split (each may be left out
    when the folder holds one). A file of a run that lists failed items among its ids is
    refused (they were written empty), and so is an --out inside an input's run folder or
    named as a prediction file beside a loose input.
    """
    from mushroom.combine.ensemble import run_inputs, vote_files
    from mushroom.data.predictions import SoftMode
    from mushroom.data.runfolder import run_scope
    from mushroom.data.splits import SPLIT_DIRS, split_hint

    try:
        mode = SoftMode(soft)
    except ValueError:
        raise MushroomError(f"--soft must be 'vote' or 'mean', got {soft!r}") from None
    output_file(out, "--out", (*preds, items))
    refuse_foreign(out, "--out", "prediction file", _a_prediction_file)
    split = split.lower() if split is not None else None
    if split is not None and split not in SPLIT_DIRS:
        raise MushroomError(f"--split {split!r}: unknown split{split_hint(split)}")
    if lang is not None:
        lang = language_code(lang)
        if not lang or "," in lang:
            raise MushroomError(
                f"--lang {lang!r}: an ensemble votes over one language; give one code, e.g. --lang en"
            )
    _check_inputs(preds, bool(lang or split))
    given, preds = preds, run_inputs(preds, lang, split)
    _check_out(out, preds)
    _say_run_notes(given, preds, split)
    if len(preds) == 1 and mode is SoftMode.vote:
        # a vote of one run is 1.0 wherever it flagged: its probabilities were lost, unsaid
        print_warning(
            "one run: each character's vote share is 0 or 1, so the run's own probabilities are lost "
            "(Cor falls); give two runs or more, or --soft mean to keep them"
        )
    item_list = load_items_option(items) if items else None
    combined = vote_files(preds, out, item_list, threshold, mode)
    what = f"{plural(len(combined), 'prediction')} from {plural(len(preds), 'run')}"
    out_console.print(f"wrote {what} to {esc(out)}", highlight=False)
    partial = [scope for path in preds if (scope := run_scope(path)) is not None and scope.partial]
    if partial:
        err_console.print(
            f"note: {esc(partial[0].made_with())}: score the vote on the items it covers with "
            f"mushroom score --partial GOLD {esc(out)}",
            highlight=False,
        )


def _say_run_notes(given: list[Path], files: list[Path], split: str | None) -> None:
    """What compare and report say of a run folder given: stopped, in-sample, items failed.

    A vote over a stopped run, an in-sample stack or a run's empty failures was written
    without a word, then scored as a loose file, where nothing can say it.
    """
    from mushroom.data.predictions import split_of_file_name
    from mushroom.evaluation.runfiles import run_notes

    seen: set[Path] = set()
    for run, path in zip(given, files):
        which = split or split_of_file_name(path.name) or "val"
        if run.is_dir() and run.resolve() not in seen:  # a run given twice is said once
            seen.add(run.resolve())
            try:  # its failed items: the vote refuses them itself
                notes = run_notes(run, which, failures=False)
            except MushroomError:  # a folder the vote read its file from, but no run's: nothing to say
                continue
            for note in notes:
                print_warning(note)


def _check_inputs(preds: list[Path], picks: bool) -> None:
    """Each input exists; --lang and --split (`picks`) need a run folder among them."""
    for path in preds:
        if not path.exists():
            raise MushroomError(f"PREDS {path}: no such file or folder")
        if not path.is_dir():
            input_file(path, "PREDS")
    if picks and not any(path.is_dir() for path in preds):
        raise MushroomError("--lang and --split pick the file of a run folder; every input here is a file")


def _check_out(out: Path, preds: list[Path]) -> None:
    """--out is no file of the inputs' runs (output_file refused the inputs); an input given twice is said."""
    for later, first in given_twice(preds):
        print_warning(f"{preds[later]} is given twice (also as {preds[first]}): it votes twice")
    refuse_out_in_runs(out, preds, "the vote")


@stack_app.command("fit")
def stack_fit(
    members: Annotated[
        list[str], typer.Argument(metavar="MEMBERS", help="member runs: NAME=RUN_DIR or RUN_DIR")
    ],
    out: Annotated[
        Path, typer.Option("--out", parser=file_to_write, help="where to save the fitted stack (JSON)")
    ],
    split: Annotated[str, typer.Option("--split", help="labelled split to fit on")] = "val",
    lang: Langs = None,
    folds: Annotated[int, typer.Option("--folds", min=2, help="cross-validation folds (by item)")] = 5,
    l2: Annotated[
        float, typer.Option("--l2", callback=number_in(0), help="L2 penalty of the logistic regression")
    ] = 1.0,
    model: Annotated[
        str, typer.Option("--model", help="blend (the default: the mean of the other two), trees or logistic")
    ] = "blend",
) -> None:
    """Fit the stack on a labelled split; print the cross-validated comparison with each member."""
    from mushroom.combine.stack import fit_stack, parse_members, stack_behind
    from mushroom.combine.stack.model import check_model_kind
    from mushroom.data.runfolder import write_json
    from mushroom.data.splits import load_split, require_labelled

    check_model_kind(model, "--model")
    parsed = parse_members(members)
    output_file(out, "--out", [m.path for m in parsed])
    refuse_out_in_runs(out, [m.path for m in parsed], "the stack")
    refuse_foreign(out, "--out", "stack file", _a_stack_file)  # an earlier fit's is written over
    for later, first in given_twice([m.path for m in parsed]):  # one run's evidence, twice
        print_warning(f"members {parsed[first].name!r} and {parsed[later].name!r} are the same run")
    data = load_split(split, lang)
    require_labelled(data, split, "fitting a stack")
    fit = fit_stack(parsed, data, split, folds, l2, model=model)
    write_json(out, fit.model.model_dump(mode="json"))
    print_fitted(out_console, systems_table(f"stack on {split} ({folds}-fold CV by item)", fit.comparison))
    given = fit.model.fitted_members or fit.model.members
    for warning in stack_behind(fit.comparison, given, "its own predictions may serve better"):
        print_warning(warning)
    m = fit.model
    if m.gate:
        out_console.print(m.gate_summary())
    out_console.print(f"threshold {m.threshold}, floor {m.floor}; {m.hard_label_summary()}; saved {out}")


def _load_stack(path: Path) -> StackModel:
    """A stack saved by `stack fit`; another JSON file is named as such.

    A run's config.json or scores.json given by mistake would otherwise be answered with a
    list of the ten fields a stack has, which says nothing about the mistake. A file with
    every field of a stack but a bad value still gets the field-by-field problems.
    """
    from pydantic import RootModel, ValidationError

    from mushroom.combine.stack import StackModel
    from mushroom.data.jsonl import read_json_model, validation_problems

    try:
        raw = read_json_model(path, RootModel[Any]).root
    except DataError as exc:  # a predictions file (JSON Lines), an empty file: not JSON at all
        what = "an empty file" if path.is_file() and not path.stat().st_size else "not one JSON value"
        found = f"{exc.problems[0].message}" if exc.problems else ""
        raise DataError.single(
            path, None, None, f"not a stack.json ({what}: {found}); fit one with `mushroom stack fit`"
        ) from None
    required = {name for name, info in StackModel.model_fields.items() if info.is_required()}
    missing = sorted(required - raw.keys()) if isinstance(raw, dict) else sorted(required)
    if missing and len(missing) <= len(required) // 2:  # a stack.json with a field cut out: name it
        raise DataError.single(
            path, None, missing[0], f"missing from the stack.json: {', '.join(missing)}; fit it again"
        )
    if missing:
        raise DataError.single(path, None, None, "not a stack.json (fit one with `mushroom stack fit`)")
    try:
        return StackModel.model_validate(raw)
    except ValidationError as exc:
        raise DataError(validation_problems(path, None, exc)) from None


@stack_app.command("apply")
def stack_apply(
    model_path: Annotated[Path, typer.Argument(metavar="STACK", help="a stack saved by `stack fit`")],
    members: Annotated[
        list[str], typer.Argument(metavar="MEMBERS", help="member runs, same names and order as when fitted")
    ],
    out: Annotated[Path, typer.Option("--out", help="run folder for the prediction files")],
    split: Annotated[str, typer.Option("--split", help="split to predict")] = "test",
    lang: Langs = None,
    items_file: Annotated[
        Path | None,
        typer.Option(
            "--items", help="the items file the members ran on (`detect --items`), instead of a split"
        ),
    ] = None,
) -> None:
    """Apply a fitted stack to the members' files of a split; writes checked prediction files.

    On the split the stack was fitted on, the printed scores are in-sample (optimistic):
    `stack fit` prints the cross-validated ones. With --items, the members are `detect --items`
    runs of that file; the stack is applied a chunk at a time, so the file may be any size.
    """
    from mushroom.combine.stack import parse_members
    from mushroom.runs.stack import apply_stack_run

    model = _load_stack(input_file(model_path, "STACK"))
    if items_file is not None and split != "test":
        raise MushroomError(f"--items {items_file} replaces --split {split}: give one of them")
    if items_file is not None:
        items_option(items_file)  # a JSONL file, or a folder of Dataset.save_to_disk
    parsed = parse_members(members)
    # a member's own folder as --out was refused as "another config", with a diff of the two
    refuse_out_in_runs(out, [m.path for m in parsed], "the stack's predictions")
    apply_stack_run(model, parsed, out, split, lang, reporter(), items_file)
