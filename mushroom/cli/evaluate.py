"""`compare`, `sweep` and `report`: looking at finished runs side by side, by threshold, by item."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from mushroom.cli.boundary import (
    FLAG,
    err_console,
    esc,
    file_to_write,
    input_file,
    out_console,
    output_file,
    print_warning,
)
from mushroom.cli.common import (
    DEFAULT_CONTEXTS,
    TAGS_HELP,
    Langs,
    context_sources,
    file_stem,
    given_twice,
    load_items_option,
    refuse_out_in_runs,
)
from mushroom.cli.tables import paired_table, print_fitted
from mushroom.data.contexts import NO_CONTEXTS
from mushroom.errors import DataError, MushroomError
from mushroom.util.files import folder_problem
from mushroom.util.words import listed, plural


def _run_folders(runs: list[Path]) -> None:
    """Each RUNS argument must be a folder (a run, or a folder of prediction files)."""
    for run in runs:
        if not run.is_dir():
            raise MushroomError(f"RUNS {run}: {folder_problem(run)}")


def _baseline_index(value: str, runs: list[Path]) -> int:
    """The index of the run `--baseline` names: an index, a folder as given, or a folder's name.

    An index alone was taken; a run's name, the first thing a user tries, was refused as "not a
    valid integer" (an audit).
    """
    text = value.strip()
    if text.lstrip("-").isascii() and text.lstrip("-").isdigit():
        k = int(text)
        named = [j for j, run in enumerate(runs) if run.resolve().name == text and j != k]
        if named:  # folders named 0 and 1: an index picked the other one, unsaid (a review)
            raise MushroomError(
                f"--baseline {text}: is both an index and the name of run {runs[named[0]]}; give its "
                "folder as given"
            )
        if not 0 <= k < len(runs):
            raise MushroomError(
                f"--baseline {k}: {plural(len(runs), 'run')} given; give an index from 0 to {len(runs) - 1}, "
                "or a run's folder"
            )
        return k
    given = Path(text)
    same = [k for k, run in enumerate(runs) if run == given or run.resolve() == given.resolve()]
    same = same or [k for k, run in enumerate(runs) if run.resolve().name == given.name]
    if len(set(runs[k].resolve() for k in same)) == 1:
        return same[0]
    names = ", ".join(f"{k}: {run}" for k, run in enumerate(runs))
    if same:
        raise MushroomError(f"--baseline {value}: names more than one of the runs ({names}); give its index")
    alike = [k for k, run in enumerate(runs) if run.resolve().name.casefold() == given.name.casefold()]
    hint = f" (did you mean {runs[alike[0]]}, index {alike[0]}?)" if len(alike) == 1 else ""
    raise MushroomError(
        f"--baseline {value}: is none of the runs given ({names}){hint}; give its index or its folder"
    )


def compare(
    runs: Annotated[
        list[Path], typer.Argument(metavar="RUNS", help="run folders (or folders of prediction files)")
    ],
    split: Annotated[str, typer.Option("--split", help="labelled split")] = "val",
    baseline: Annotated[
        str,
        typer.Option("--baseline", help="the baseline run: its index (0: first), folder or folder name"),
    ] = "0",
    tags: Annotated[Path | None, typer.Option("--tags", help=TAGS_HELP)] = None,
    name: Annotated[
        str | None, typer.Option("--name", callback=file_stem, help="file name stem in eval/")
    ] = None,
    eval_dir: Annotated[
        Path | None, typer.Option("--eval-dir", help="where to write (default: eval/)")
    ] = None,
    items: Annotated[Path | None, typer.Option("--items", help=ITEMS_RUNS_HELP)] = None,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            metavar=FLAG,
            help="score each run on the items it predicts and compare on those every run predicts "
            "(a folder of an ensemble's files of --limit runs); runs made with --limit are so always",
        ),
    ] = False,
    answered: Annotated[
        bool,
        typer.Option(
            "--answered",
            metavar=FLAG,
            help="leave out of every run the items any run failed (written empty under "
            "--allow-failures), as `mushroom run` compares its variants",
        ),
    ] = False,
) -> None:
    """Compare runs: IoU/Cor with 95% CIs per language, paired difference and p-value vs a baseline."""
    from mushroom.data.jsonl import atomic_write_text
    from mushroom.data.runfolder import timestamp
    from mushroom.data.splits import require_some_labels, workspace
    from mushroom.evaluation.compare import (
        COLUMNS,
        common_items,
        comparison_rows,
        left_out_languages,
        load_tags,
        rows_csv,
        rows_markdown,
        score_run,
        tag_rows,
        without_failed,
    )
    from mushroom.evaluation.runfiles import run_notes

    baseline_index = _baseline_index(baseline, runs)
    _run_folders(runs)
    if items is not None:
        split = _items_instead_of_split(items, split, runs, "comparing runs")
    else:  # an unlabelled split was blamed on the shipped file, with exit 1 ("problem in input")
        require_some_labels(split, None, "comparing runs")
    for later, first in given_twice(runs):
        print_warning(f"{runs[later]} is given twice (also as {runs[first]}): it is compared with itself")
    folder = eval_dir or workspace() / "eval"
    if folder.exists() and not folder.is_dir():
        raise MushroomError(f"--eval-dir {folder}: is a file, not a folder")
    tag_map = load_tags(input_file(tags, "--tags")) if tags is not None else None
    stem = name or f"compare-{timestamp()}"
    written = [folder / f"{stem}.md", folder / f"{stem}.csv"]
    written += [folder / f"{stem}.tags.csv"] if tag_map is not None else []
    for path in written:  # none may replace an input, a run's file, or an official one
        output_file(path, "--eval-dir", (*runs, tags, items))
        refuse_out_in_runs(path, runs, "the comparison", option="--eval-dir")
    from mushroom.cli.scoring import with_partial_hint

    try:
        scored = [score_run(r, split, items=items, partial=partial) for r in runs]
    except DataError as exc:
        raise with_partial_hint(exc, "compare --partial compares on the items every run predicts") from None
    for run in scored:
        for warning in run.result.warnings:
            print_warning(warning)
    names = [s.name for s in scored]
    if len(set(names)) != len(names):
        for k, s in enumerate(scored):
            s.name = f"{k}:{s.name}"
    for note in filter(None, (s.coverage_note() for s in scored)):
        err_console.print(esc(note), highlight=False)
    for run in runs:
        for note in run_notes(run, split, failures=not answered):
            print_warning(note)
    for note in left_out_languages(scored):
        print_warning(note)
    for note in common_items(scored):
        err_console.print(esc(note), highlight=False)
    for note in without_failed(scored, split) if answered else []:
        err_console.print(esc(note), highlight=False)
    rows = comparison_rows(scored, baseline_index)
    title = f"{split}: runs against baseline {scored[baseline_index].name} (paired, items)"
    print_fitted(out_console, paired_table(title, rows), keys=2)
    folder.mkdir(parents=True, exist_ok=True)
    md = rows_markdown(rows, COLUMNS)
    csv_text = rows_csv(rows, COLUMNS)
    if tag_map is not None:
        _warn_unscored_tags(tags, tag_map, scored[0].result.ids, "scored items")
        t_rows = tag_rows(scored, tag_map)
        if t_rows:
            out_console.print(rows_markdown(t_rows), markup=False, highlight=False)
            md += "\n## Error types\n\n" + rows_markdown(t_rows)
            atomic_write_text(folder / f"{stem}.tags.csv", rows_csv(t_rows))
    atomic_write_text(folder / f"{stem}.md", f"# {split}: {', '.join(s.name for s in scored)}\n\n" + md)
    atomic_write_text(folder / f"{stem}.csv", csv_text)
    out_console.print(f"wrote {esc(folder / stem)}.md and .csv", highlight=False)


def _made_from(run_dir: Path) -> tuple[Path | None, list[Path]]:
    """The items file and context files a `detect --items` run recorded (`made_from`), as kept."""
    from mushroom.data.runfolder import run_scope

    scope = run_scope(run_dir)
    kept = scope.config.get("made_from") if scope is not None else None
    if not isinstance(kept, dict) or not isinstance(kept.get("items"), str):
        return None, []
    return Path(kept["items"]), [Path(p) for p in kept.get("contexts") or [] if isinstance(p, str)]


def _kept_contexts(run_dir: Path) -> str:
    """The context files an `--items` run read, as --contexts takes them; a gone one is said.

    Given --items alone, the page showed no contexts, those files there or not.
    """
    kept = _made_from(run_dir)[1]
    gone = [str(p) for p in kept if not p.is_file()]
    if gone:
        err_console.print(
            esc(f"note: the run read the contexts of {', '.join(gone)}, now gone: the page shows none"),
            highlight=False,
        )
        return ""
    return ",".join(map(str, kept))


def _recorded_items(run_dir: Path, contexts: str) -> tuple[Path | None, str]:
    """The items and context files a `detect --items` run recorded, where they still exist.

    Its config keeps them (`made_from`): a report had to be given them again. --contexts, when
    given, wins. (None, contexts) where the run kept none, or they are gone; said when taken.
    """
    from mushroom.data.hf import is_saved_dataset

    items, files = _made_from(run_dir)
    # a saved dataset folder is an items source as a file is (`detect --items` takes both)
    if items is None or not (items.is_file() or is_saved_dataset(items)):
        return None, contexts
    gone = [str(p) for p in files if not p.is_file()]
    if gone and contexts == DEFAULT_CONTEXTS:  # it asked for the items file, which was there
        raise MushroomError(
            f"{run_dir}: its context file {', '.join(gone)} is gone: give the contexts again, "
            f"mushroom report {run_dir} --contexts CTX.jsonl (or --contexts '' for a page without them)"
        )
    read_too = ""
    if contexts == DEFAULT_CONTEXTS:
        contexts = ",".join(map(str, files))
        # each named: the paths come from the run's config.json, which a folder from
        # elsewhere may hold anything in
        read_too = f" and its context files {', '.join(map(str, files))}" if files else ""
    err_console.print(
        esc(f"note: {run_dir} was made with --items {items}: reading it{read_too} from there"),
        highlight=False,
    )
    return items, contexts


ITEMS_RUNS_HELP = "the labelled items file the runs were made on (`detect --items`), instead of --split"


def _items_instead_of_split(items: Path, split: str, runs: list[Path], what: str) -> str:
    """The split "items": runs of `detect --items` read against their labelled items file."""
    from mushroom.data.hf import is_saved_dataset
    from mushroom.data.runfolder import items_files

    if split != "val":
        raise MushroomError(f"--items {items} replaces --split {split}: give one of them")
    if not is_saved_dataset(items):  # a saved dataset folder is read as a file is
        input_file(items, "--items")
    for run in runs:
        if not items_files(run):
            raise MushroomError(
                f"--items: {run} is not a run of an items file (`detect --items`); {what} "
                "of split runs takes --split"
            )
    return "items"


def _warn_unscored_tags(path: Path | None, tag_map: dict[str, str], ids: list[str], what: str) -> None:
    """Tags for other items are left out of the counts; named, as an id may be mistyped."""
    from mushroom.evaluation.compare import unscored_tags

    stray = unscored_tags(tag_map, ids)
    if stray:
        print_warning(
            f"--tags {path}: {len(stray)} of {plural(len(tag_map), 'tagged id')} are not among the "
            f"{len(ids)} {what} and are left out: {listed(stray)}"
        )


def sweep(
    runs: Annotated[
        list[Path], typer.Argument(metavar="RUNS", help="one run, or several (their mean probability)")
    ],
    split: Annotated[str, typer.Option("--split", help="labelled split")] = "val",
    lang: Langs = None,
    svg: Annotated[
        Path | None,
        typer.Option(
            "--svg",
            "--out",  # the other commands' name for what they write
            parser=file_to_write,
            help="write the plot here, and its numbers beside it as .csv (default: eval/sweep-<time>.svg)",
        ),
    ] = None,
    items: Annotated[Path | None, typer.Option("--items", help=ITEMS_RUNS_HELP)] = None,
) -> None:
    """IoU and Cor against the hard-label threshold, printed and plotted (SVG)."""
    from mushroom.data.jsonl import atomic_write_text
    from mushroom.data.runfolder import timestamp
    from mushroom.data.splits import require_some_labels, workspace
    from mushroom.evaluation.compare import ascii_sweep, rows_csv, sweep_scope, sweep_svg
    from mushroom.evaluation.compare import sweep as run_sweep
    from mushroom.evaluation.runfiles import run_notes

    _run_folders(runs)
    if items is not None:
        split = _items_instead_of_split(items, split, runs, "a threshold sweep")
    else:
        require_some_labels(split, lang, "a threshold sweep")  # before the runs are read
    for later, first in given_twice(runs):  # the sweep averages the runs: one given twice weighs double
        print_warning(f"{runs[later]} is given twice (also as {runs[first]}): its probabilities count twice")
    if svg is not None and svg.suffix.lower() != ".svg":  # an SVG in a .png file opens as a broken image
        raise MushroomError(f"--svg {svg}: the plot is written as SVG; give a file name ending in .svg")
    path = (
        output_file(svg, "--svg", [*runs, items])
        if svg
        else workspace() / "eval" / f"sweep-{timestamp()}.svg"
    )
    numbers = output_file(path.with_suffix(".csv"), "--svg's .csv", [*runs, items])  # written beside it
    if numbers.is_file() and not _a_sweeps_numbers(numbers):  # a file of the user's was written over, unsaid
        raise MushroomError(
            f"--svg {path}: its numbers go to {numbers}, which exists and is no sweep's; give another "
            "name, or move that file"
        )
    if items is not None:
        from mushroom.data.runfolder import FailureCheck, items_files, refuse_edited_answers

        data: dict[str, list] = {}
        for item in load_items_option(items):
            if lang is None or item.lang in lang:
                data.setdefault(item.lang, []).append(item)
        # spans of an answer edited since would be swept against the new one
        checks = [FailureCheck(file) for run in runs for file in items_files(run)]
        refuse_edited_answers(checks, [it for its in data.values() for it in its])
    else:
        scope = sweep_scope(runs, split, lang)
        for note in scope.notes:
            err_console.print(esc(note), highlight=False)
        data = scope.data
    for run in runs:
        for note in run_notes(run, split):
            print_warning(note)
    rows = run_sweep(runs, split, data=data)
    out_console.print(ascii_sweep(rows), highlight=False, markup=False)
    best = max(rows, key=lambda r: r["iou"])
    out_console.print(f"best IoU {best['iou']:.4f} at threshold {best['threshold']:.2f}", highlight=False)
    out_console.print(
        "Cor at a threshold: probabilities below it set to 0, as a submission floored there has them",
        highlight=False,
    )
    n_items = sum(len(its) for its in data.values())
    title = (
        f"{split}: {' + '.join(r.name for r in runs)} ({', '.join(sorted(data))}; {plural(n_items, 'item')})"
    )
    atomic_write_text(path, sweep_svg(rows, title))
    atomic_write_text(numbers, rows_csv(rows))
    # the .csv was written over, unsaid: both files are named
    out_console.print(f"plot: {esc(path)} (its numbers: {esc(numbers)})", highlight=False)


def _a_sweeps_numbers(path: Path) -> bool:
    """Whether `path` holds what `sweep` writes beside its plot (its header line), so may be written over."""
    try:
        with path.open(encoding="utf-8", errors="replace") as handle:
            return handle.readline().strip() == "threshold,iou,cor"
    except OSError:
        return False


def report(
    run_dir: Annotated[Path, typer.Argument(metavar="RUN_DIR", help="a run folder")],
    split: Annotated[str, typer.Option("--split", help="split whose predictions to show")] = "val",
    lang: Langs = None,
    contexts: Annotated[
        str,
        typer.Option(
            "--contexts",
            show_default=False,
            help=f"context sources to show, comma-separated; '{NO_CONTEXTS}': none "
            "(default: those the run read)",
        ),
    ] = DEFAULT_CONTEXTS,
    tags: Annotated[Path | None, typer.Option("--tags", help=TAGS_HELP)] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", parser=file_to_write, help="HTML file (default: RUN_DIR/report.<split>.html)"),
    ] = None,
    items: Annotated[
        Path | None,
        typer.Option("--items", help="a `detect --items` run's items file (--contexts: its context files)"),
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(
            "--limit",
            min=1,
            help="at most N items per language: the worst by IoU (the first if unlabelled)",
        ),
    ] = None,
) -> None:
    """Write one self-contained HTML page: answers with gold and predicted spans, scores, contexts."""
    from mushroom.data.jsonl import atomic_write_text
    from mushroom.data.runfolder import items_files, run_sources
    from mushroom.evaluation.compare import load_tags
    from mushroom.evaluation.report import MANY_ITEMS, build_report, left_out_note
    from mushroom.evaluation.runfiles import run_notes

    if not run_dir.is_dir():
        raise MushroomError(f"RUN_DIR {run_dir}: {folder_problem(run_dir)}")
    by_lang, context_files, from_run = None, None, False
    if items is None and items_files(run_dir):
        items, contexts = _recorded_items(run_dir, contexts)
    if items is not None:  # a run over a file of the user's: its items and context files
        if not items_files(run_dir):
            raise MushroomError(f"--items: {run_dir} is not a `detect --items` run (it has no items files)")
        by_lang = {}
        for item in load_items_option(items):
            if lang is None or item.lang in lang:
                by_lang.setdefault(item.lang, []).append(item)
        split = "items"
        if contexts == DEFAULT_CONTEXTS:  # --items given, --contexts not: those the run read
            contexts = _kept_contexts(run_dir)
        named = context_sources(contexts, None) if contexts != DEFAULT_CONTEXTS else ()
        context_files = [input_file(Path(name), "--contexts") for name in named]
    elif items_files(run_dir):  # it said to score the run, which is no answer to "show it"
        raise MushroomError(
            f"{run_dir} was made with --items: give its items file, "
            f"mushroom report {run_dir} --items ITEMS.jsonl [--contexts CTX.jsonl]"
        )
    elif contexts == DEFAULT_CONTEXTS and (used := run_sources(run_dir)) is not None:  # the run's own
        contexts, from_run = ",".join(used), True
    if out is not None:
        refuse_out_in_runs(out, [run_dir], "the report", keep_suffix=".html")
    inputs = (run_dir, tags, items, *(context_files or []))  # its contexts file was written over
    path = output_file(out, "--out", inputs) if out else run_dir / f"report.{split}.html"
    if path.suffix.lower() != ".html":  # as --svg: a page in r.txt opens as text
        raise MushroomError(f"--out {out}: the report is an HTML page; give a file name ending in .html")
    tag_map = load_tags(input_file(tags, "--tags")) if tags else None
    try:
        page = build_report(
            run_dir, split, lang, context_sources(contexts, None), tag_map, by_lang, context_files, limit
        )
    except MushroomError as exc:
        if not from_run or "no context file" not in str(exc):
            raise
        raise MushroomError(
            f"{exc}; the report shows the contexts the run read (--contexts {contexts}): set "
            "MUSHROOM_CONTEXT_DIR as the run had it, or give --contexts to show other sources"
        ) from None
    for note in run_notes(run_dir, split):
        print_warning(note)
    if tag_map:
        _warn_unscored_tags(tags, tag_map, page.item_ids, "items on the page")
    if page.left_out:
        print_warning(left_out_note(page.left_out, limit))
    elif len(page.item_ids) > MANY_ITEMS:
        print_warning(
            f"the page shows {len(page.item_ids)} items, more than a browser shows with ease; "
            "--limit N shows the N worst of each language"
        )
    atomic_write_text(path, page.html)
    out_console.print(f"report: {esc(path)}", highlight=False)
