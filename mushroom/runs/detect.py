"""The `detect` job: one built detector over a split or an items file, into one run folder.

The command line parses its options and builds the detector; reading the items, checking
the contexts, running, scoring labelled items and the run's summary are here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mushroom.data.contexts import graded_unusable
from mushroom.data.itemstream import ContextFiles
from mushroom.data.jsonl import refuse_irregular
from mushroom.data.records import Item
from mushroom.detectors.base import Detector
from mushroom.errors import DataError, MushroomError
from mushroom.runs.reporter import PlainReporter, Reporter
from mushroom.util.words import plural


def items_file_data(
    items_file: Path,
    langs: list[str] | None,
    sources: tuple[str, ...],
    default_contexts: bool,
    warn: Callable[[str], None],
) -> tuple[dict[str, Sequence[Item]], ContextFiles]:
    """The items of a JSONL file by language, and its context files, checked before any folder exists.

    With an items file, `--contexts` names JSONL files of `{id, context}` (there is no split
    whose named sources could be found); a broken line in one stops the run before it starts.
    """
    from mushroom.data.itemstream import keep_langs, read_items_file
    from mushroom.data.languages import LANGUAGES, unknown_language_hint

    # checked whole, then read a chunk at a time by the run (an index of lines, not the items)
    every: dict[str, Sequence[Item]] = read_items_file(items_file)  # type: ignore[assignment]
    data = keep_langs(every, langs, items_file)  # type: ignore[arg-type]
    for code in sorted(set(data) - set(LANGUAGES)):
        hint = unknown_language_hint(code)  # "lang": "English", where the files give "en"
        warn(
            f"{items_file}: {plural(len(data[code]), 'item')} in language {code!r}{hint}, which mushroom "
            f"does not know ({', '.join(LANGUAGES)}): no stopword list, calibration or word "
            "splitting of its own is used for them"
        )
    if default_contexts:
        raise MushroomError(
            "with --items, give the contexts as files: --contexts CTX.jsonl[,MORE.jsonl] (a saved "
            "dataset's `contexts` column is read by the Python API, mushroom.detect_batch, not here)"
        )
    context_files = [Path(s) for s in sources]
    folders = [str(p) for p in context_files if p.is_dir()]
    if folders:
        raise MushroomError(
            f"with --items, --contexts takes JSONL files of {{id, context}}; {', '.join(folders)} is a "
            "folder: name its files"
        )
    for path in context_files:
        refuse_irregular(path)  # a device or pipe was "not found"
    missing = [str(p) for p in context_files if not p.is_file()]
    if missing:
        raise MushroomError(
            f"with --items, --contexts takes JSONL files of {{id, context}}; not found: {', '.join(missing)}"
        )
    # a broken line stops the command before its folder exists; the index serves the run
    files = ContextFiles(context_files)
    _check_some_context(files, data, items_file)
    _warn_stray_contexts(files, every, items_file, warn)
    return data, files


def _warn_stray_contexts(
    files: ContextFiles, data: dict[str, Sequence[Item]], items_file: Path, warn: Callable[[str], None]
) -> None:
    """Warns of a context file's ids that no item of the items file has (of any language).

    A context file built for another version of the items (ids renumbered, items dropped)
    gave some items their contexts and left the rest unread, unsaid: the run's "no context
    for N items" counts the items, not the contexts that match none. Only the ids matched are
    held, not the items'.
    """
    matched: list[set[str]] = [set() for _ in files.paths]
    for items in data.values():
        for item in items:
            for k, where in enumerate(files.index):
                if item.id in where:
                    matched[k].add(item.id)
    for path, where, hit in zip(files.paths, files.index, matched):
        stray = len(where) - len(hit)
        if stray:
            example = next(i for i in where if i not in hit)
            warn(
                f"--contexts {path}: {stray} of its {len(where)} contexts {'is' if stray == 1 else 'are'} "
                f"for ids no item of "
                f"{items_file} has (e.g. {example!r}); they are not read: a context file of other items?"
            )


def _check_some_context(files: ContextFiles, data: dict[str, Sequence[Item]], items_file: Path) -> None:
    """A usage error when the context files give no item any context: their ids are of other items.

    The run went on with one warning and wrote every item empty: "nothing wrong" where nothing
    was checked. The items are read until one has a context (most often the first).
    """
    if not files.paths:
        return
    ids = (item.id for items in data.values() for item in items)
    if any(any(i in where and i not in blank for where, blank in zip(files.index, files.blank)) for i in ids):
        return
    # a source whose every context was graded irrelevant is an empty file beside its grades:
    # its items were checked, and found with no usable context (`context.none` counts them)
    unusable = set().union(*(graded_unusable(path) for path in files.paths))
    if any(item.id in unusable for items in data.values() for item in items):
        return
    for path, where, blank in zip(files.paths, files.index, files.blank):
        if not where:
            # an empty file is an invalid input file (exit 1), as an empty --items file is
            raise DataError.single(path, None, None, "the file has no contexts (--contexts)")
        if len(blank) == len(where):  # read as no context at all: every item unchecked
            raise DataError.single(path, None, "context", "every context in the file is blank (--contexts)")
    for path, where in zip(files.paths, files.index):  # its ids match, but only with blank contexts
        if any(item.id in where for items in data.values() for item in items):
            raise DataError.single(
                path,
                None,
                "context",
                f"its contexts for the items of {items_file} are all blank (--contexts)",
            )
    first = next(iter(next(iter(data.values()), [])), None)
    ours, theirs = first.id if first else "-", next(iter(files.index[0]))
    raise MushroomError(
        f"--contexts {', '.join(map(str, files.paths))}: none of its ids is the id of an item of "
        f"{items_file} (items: {ours!r}, ...; contexts: {theirs!r}, ...), so no item would be checked"
    )


def run_detect(
    det: Detector,
    split: str,
    out: Path | None,
    langs: list[str] | None,
    sources: tuple[str, ...],
    data: dict[str, Sequence[Item]] | None = None,
    context_files: ContextFiles | None = None,
    items_file: Path | None = None,
    limit: int | None = None,
    quiet: bool = False,
    allow_failures: bool = False,
    reporter: Reporter | None = None,
    name: str | None = None,
    said: Sequence[str] = (),
) -> Path:
    """Runs `det` (registered as `name`) over a split, or the items of `items_file` in `data`.

    Labelled items are scored.

    Without `data`, the split's items are read and its context sources checked first, so a
    wrong language or source leaves no folder behind.

    `said` are warnings printed before the folder existed (an items file's unknown language),
    kept in its summary.json with the run's own.

    Returns:
        The run folder: predictions/ with the files, items/ and raw/, scores when labelled.
    """
    from mushroom.data.contexts import check_sources, source_names, stray_contexts
    from mushroom.data.runfolder import made_from, new_run_folder, timestamp
    from mushroom.data.splits import LABELLED_SPLITS, load_split, workspace
    from mushroom.runs.service import RunService

    reporter = reporter or PlainReporter()
    name = name or det.name
    stray: list[str] = []  # an items file's own context files are checked by `detect`
    if data is None:
        # Read before the run folder exists: a wrong --lang or --contexts leaves no folder.
        data = load_split(split, langs)
        check_sources(split, sorted(data), sources)
        stray = stray_contexts(split, data, sources)
    det.check_ready(source_names(sources, context_files.paths if context_files else None), out)
    out = out or new_run_folder(workspace() / "runs", f"{timestamp()}-{name}-{split}")
    config = {
        "job": "detect",
        "split": split,
        **det.describe(),
        "sources": list(sources),
        "items": str(items_file) if items_file else None,
        "langs": langs,
        "limit": limit,
        **made_from(items_file, context_files.paths if context_files else (), sources),
    }
    service = RunService(out, config, reporter, quiet, allow_failures)
    for warning in stray:
        service.warn(warning)
    service.warnings.extend(w for w in said if w not in service.warnings)
    result = service.detect_split(
        det, split, out / "predictions", langs, sources, data=data, limit=limit, context_files=context_files
    )
    if items_file is not None:
        _drop_stale_files(out / "predictions", set(data), service.warn)
    if result.files:
        reporter.message(f"predictions in {out / 'predictions'}")
    else:  # every language has failed items: no file (the failures are listed below)
        reporter.message("no prediction file was written")
    service.report_stats(f"{name} on {split}: counts (stats.json)", result.stats["all"])
    summary: dict[str, Any] = {"stats": result.stats["all"]}
    labelled = split in LABELLED_SPLITS or (
        items_file is not None and all(_all_labelled(its) for its in data.values())
    )
    if items_file is not None and not labelled:
        some = sum(_labelled_count(its) for its in data.values())
        if some:  # a run of items some of which have labels was left unscored without a word
            reporter.message(
                f"not scored: {some} of the {sum(len(its) for its in data.values())} items of {items_file} "
                "have gold labels, and a run is scored when all do (give the labelled ones a file of "
                "their own to score them)",
                lead="note:",
            )
    rows = []
    if labelled:  # own items, or part of a split, are scored against the items' own labels
        own = items_file is not None or limit is not None
        title = f"{name} on {items_file or split}"
        rows = service.score(split, result.files, out, title, items=result.items if own else None)
    if rows:
        summary["val_iou_mean"] = sum(r["iou"] for r in rows) / len(rows)
        summary["val_cor_mean"] = sum(r["cor"] for r in rows) / len(rows)
    service.finish(summary)
    return out


def _drop_stale_files(folder: Path, langs: set[str], warn: Callable[[str], None]) -> None:
    """Removes an items run's prediction files of languages its items no longer have.

    Left there, `score ITEMS RUN` found two files and named the stale one: an items file
    edited to drop a language, or a regional tag ("zh-Hans") now read as its language.
    """
    from mushroom.data.predictions import prediction_langs, submission_name

    for lang in sorted(set(prediction_langs(folder, "items")) - langs):
        stale = folder / submission_name(lang, "items")
        stale.unlink(missing_ok=True)
        warn(f"removed {stale}: the items have no language {lang!r} now (edited, or a regional tag)")


def _labelled_count(items: Sequence[Item]) -> int:
    """How many items have gold labels; an items file's index counted them as it read the file."""
    known = getattr(items, "n_labelled", None)
    return known if isinstance(known, int) else sum(1 for it in items if it.is_labelled)


def _all_labelled(items: Sequence[Item]) -> bool:
    """Whether every item has gold labels; an items file's index knows it without reading them."""
    known = getattr(items, "labelled", None)
    return known if isinstance(known, bool) else all(it.is_labelled for it in items)
