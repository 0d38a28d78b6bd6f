"""`score` and `check`: a prediction file against its gold or its items."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from mushroom.cli.boundary import (
    FLAG,
    echo,
    err_console,
    esc,
    file_to_write,
    input_file,
    json_to_write,
    out_console,
    output_file,
    print_warning,
)
from mushroom.cli.common import lang_codes, load_items_option
from mushroom.cli.tables import print_fitted, score_table
from mushroom.errors import DataError, MushroomError
from mushroom.util.words import plural

if TYPE_CHECKING:
    from rich.console import Console

    from mushroom.evaluation.score import ScoreResult


def score(
    gold: Annotated[
        Path, typer.Argument(metavar="GOLD", help="gold file, or a folder of per-language gold files")
    ],
    pred: Annotated[
        Path, typer.Argument(metavar="PRED", help="prediction file, or a folder matched by language")
    ],
    per_lang: Annotated[
        bool, typer.Option("--per-lang", metavar=FLAG, help="table per language with 95% CIs")
    ] = False,
    per_item: Annotated[bool, typer.Option("--per-item", metavar=FLAG, help="table per item")] = False,
    ci: Annotated[
        bool, typer.Option("--ci", metavar=FLAG, help="print bootstrap 95% CIs of the means")
    ] = False,
    json_out: Annotated[
        str | None,
        typer.Option(
            "--json",
            parser=json_to_write,
            help="write scores (with per-item) as JSON to FILE, or '-' for stdout only",
        ),
    ] = None,
    compare: Annotated[
        Path | None, typer.Option("--compare", help="a second prediction: paired difference PRED - COMPARE")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "--out",  # the other commands' name for what they write
            parser=file_to_write,
            help="also write the two official lines to this file",
        ),
    ] = None,
    langs: Annotated[
        list[str] | None,
        typer.Option(
            "--langs",
            "--lang",
            help="folders: score only these languages, e.g. en,de or --lang en --lang de (default: every "
            "gold one)",
        ),
    ] = None,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            metavar=FLAG,
            help="score only the gold items that have a prediction (e.g. an ensemble of --limit runs); "
            "how many were left out is printed",
        ),
    ] = False,
) -> None:
    """Score predictions exactly as the official scorer; the last two lines are IoU and Cor.

    Exits 1 when a file is invalid. Warns (stderr) about what the official scorer accepts
    silently but that changes a number: reversed spans, probabilities outside [0, 1].
    """
    from mushroom.data.jsonl import atomic_write_text

    json_only = json_out == "-"
    # With --json -, stdout carries the JSON document only; everything else goes to stderr.
    console = err_console if json_only else out_console
    if output is not None:
        output_file(output, "--output", (gold, pred, compare))
    if json_out is not None and not json_only:
        output_file(Path(json_out), "--json", (gold, pred, compare))
        if output is not None and Path(json_out).resolve() == output.resolve():
            # the second write won, and the JSON was lost (exit 0)
            raise MushroomError(f"--json {json_out} is the --output file too; give each its own file")
    lang_list = lang_codes(langs) if langs else None  # repeated, as every other command's --lang
    result = _score_or_hint(gold, pred, lang_list, show_pairing=gold.is_dir(), partial=partial)
    if per_lang:
        _print_per_lang(console, result)
    if per_item:
        _print_per_item(console, result)
    paired: dict[str, Any] | None = None
    if compare is not None:
        if compare.resolve() == pred.resolve():  # a difference of +0.0000, p = 1, as if measured
            print_warning(f"--compare {compare} is PRED itself: the paired difference is 0 by construction")
        other = _score_or_hint(gold, compare, lang_list, role="--compare", partial=partial)
        paired = _print_paired(console, result, other, compare)
    if ci:
        intervals = result.ci()
        console.print(
            f"IoU 95% CI [{intervals['iou'][0]:.4f}, {intervals['iou'][1]:.4f}]  "
            f"Cor 95% CI [{intervals['cor'][0]:.4f}, {intervals['cor'][1]:.4f}]  (n = {len(result.ids)})",
            highlight=False,
            markup=False,
        )
    if json_out is not None:
        payload = _json_payload(result) | ({"paired_vs_compare": paired} if paired is not None else {})
        payload["scored"] = _provenance(gold, pred, compare, partial)
        text = json.dumps(_no_nan(payload), indent=2, ensure_ascii=False, allow_nan=False)
        if json_only:
            echo(text)
        else:
            atomic_write_text(json_out, text + "\n")
    if output is not None:
        atomic_write_text(output, result.official_lines() + "\n")
    if json_only:
        err_console.print(result.official_lines(), highlight=False, markup=False)
    else:
        echo(result.official_lines())


def _json_payload(result: ScoreResult) -> dict[str, Any]:
    """What `--json` writes: the scores with every item, per language, and the warnings."""
    return {
        **result.to_dict(with_items=True),
        "n_gold": result.n_gold,
        "per_lang": {k: v.to_dict() for k, v in result.by_lang().items()},
        "warnings": result.warnings,
    }


def _provenance(gold: Path, pred: Path, compare: Path | None, partial: bool) -> dict[str, Any]:
    """What a saved score was computed on and with: a JSON file kept alone named neither."""
    from mushroom.version import __version__

    files = {"gold": gold, "pred": pred} | ({"compare": compare} if compare is not None else {})
    return {k: str(v.resolve()) for k, v in files.items()} | {"partial": partial, "mushroom": __version__}


def _no_nan(value: Any) -> Any:
    """NaN (an empty answer's Cor) as null: `NaN` is no JSON, and strict readers refuse the file."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_no_nan(v) for v in value]
    return value


def _score_or_hint(gold: Path, pred: Path, langs: list[str] | None, **kwargs: Any) -> ScoreResult:
    """`score_run_files`, its notes and warnings printed; a missing prediction names `--partial`."""
    from mushroom.evaluation.runfiles import score_run_files

    try:
        result = score_run_files(gold, pred, langs, note=_note, **kwargs)
    except DataError as exc:
        raise (exc if kwargs.get("partial") else with_partial_hint(exc)) from None
    for warning in result.warnings:
        print_warning(warning)
    return result


def _note(line: str) -> None:
    """What the scorer says about the files it took: a line on stderr, so stdout stays the score."""
    err_console.print(esc(line), highlight=False)


def _print_per_lang(console: Console, result: ScoreResult) -> None:
    from mushroom.evaluation.leaderboard import load_leaderboard
    from mushroom.evaluation.tables import score_rows

    by_lang = result.by_lang()
    print_fitted(console, score_table("per language", score_rows(by_lang, None, load_leaderboard())))
    if len(by_lang) > 1:
        console.print(
            "the table's mean weighs each language the same (as the run tables do); the IoU and Cor "
            f"lines below average all {len(result.ids)} items, as the official scorer does on one file",
            highlight=False,
            markup=False,
        )


def _print_per_item(console: Console, result: ScoreResult) -> None:
    from rich.table import Table

    table = Table(title="per item")
    for col in ("id", "lang", "IoU", "Cor"):
        table.add_column(col)
    for rid, lang, a, b in zip(result.ids, result.langs, result.iou, result.cor):
        table.add_row(esc(rid), esc(lang), f"{a:.4f}", f"{b:.4f}")
    console.print(table)


def _print_paired(console: Console, result: ScoreResult, other: ScoreResult, compare: Path) -> dict[str, Any]:
    """The paired difference PRED - COMPARE of both metrics, over the same items; returned for --json."""
    from dataclasses import asdict

    from mushroom.evaluation.stats import paired_test

    if other.ids != result.ids:
        raise MushroomError(
            f"PRED and --compare {compare} cover different items ({len(result.ids)} and "
            f"{len(other.ids)} scored); compare runs made on the same items (same --limit and --lang)"
        )
    found: dict[str, Any] = {"compare": str(compare)}
    for name, a, b in (("IoU", result.iou, other.iou), ("Cor", result.cor, other.cor)):
        res = paired_test(a, b)
        found[name.lower()] = asdict(res)
        undefined = sum(not (math.isfinite(x) and math.isfinite(y)) for x, y in zip(a, b, strict=True))
        why = (
            f": {plural(undefined, 'item')} with no {name} (an empty answer: the official scorer's NaN), "
            "so the mean and its test are undefined"
            if undefined
            else ""
        )
        console.print(
            f"paired {name}: PRED - COMPARE = {res.mean_diff:+.4f} "
            f"95% CI [{res.ci_low:+.4f}, {res.ci_high:+.4f}], p = {res.p_value:.4f} (n = {res.n}){why}",
            highlight=False,
            markup=False,
        )
    return found


def with_partial_hint(
    exc: DataError, hint: str = "score --partial scores only the predicted items"
) -> DataError:
    """The error with `--partial` named where a file lacks gold ids (`score` and `compare` have it)."""
    from dataclasses import replace

    problems = [
        replace(p, message=p.message + f" ({hint})")
        if p.field == "id" and p.message.startswith("no prediction for")
        else p
        for p in exc.problems
    ]
    return DataError(problems, exit_code=exc.exit_code)


def _lines_with_text(path: Path) -> int:
    """How many lines of a file are not blank, read as bytes (a corpus is not held)."""
    with open(path, "rb") as handle:
        return sum(1 for line in handle if line.strip())


MAX_ERRORS_SHOWN = 100
SUBMISSION_ERRORS_SHOWN = 10  # a file's, in a whole submission's check
STRAY_SHOWN = 5  # lines whose id is not among the items, shown when most are (a wrong items file)


def _check_submission(path: Path, items: Path | None, strict: bool, partial: bool) -> None:
    """`check` of a zip or folder: each file's problems, then what is wrong with the set."""
    from mushroom.cli.tables import plain_table
    from mushroom.evaluation.submission_check import check_submission
    from mushroom.runs.reporter import Table

    item_list = load_items_option(items) if items is not None else None
    report = check_submission(path, item_list, strict, partial)
    for problem in report.warnings:
        print_warning(str(problem))
    for problem in report.errors[:MAX_ERRORS_SHOWN]:  # 20,000 badly named entries printed each
        err_console.print(f"[red]error:[/red] {esc(problem)}", highlight=False, soft_wrap=True)
    if len(report.errors) > MAX_ERRORS_SHOWN:
        err_console.print(
            f"... and {len(report.errors) - MAX_ERRORS_SHOWN} more problems of the set", highlight=False
        )
    for lang, (name, file_report) in sorted(report.files.items()):
        if file_report.unknown_ids >= max(file_report.n_lines, 1) / 2:  # the diagnosis, not 150 lines of it
            print_warning(
                f"{name}: {file_report.unknown_ids} of {file_report.n_lines} ids are not among the {lang!r} "
                "items: is it another language's file, or another split's? (its name says which items "
                "it is checked against: -tst.v1 test, -val.v2 val)"
            )
        for problem in file_report.errors[:SUBMISSION_ERRORS_SHOWN]:  # the temporary copy's path: the name
            said = str(problem).replace(str(problem.path), name, 1)
            err_console.print(f"[red]error:[/red] {esc(said)}", highlight=False, soft_wrap=True)
        if len(file_report.errors) > SUBMISSION_ERRORS_SHOWN:
            more = len(file_report.errors) - SUBMISSION_ERRORS_SHOWN
            err_console.print(f"... and {more} more errors in {esc(name)}", highlight=False)
        if file_report.warnings:
            many = plural(len(file_report.warnings), "warning")
            print_warning(f"{name}: {many} (check the file on its own, with --items, to see them)")
    rows = []
    for lang, (name, file_report) in sorted(report.files.items()):
        said = [] if file_report.ok else [file_report.summary()]
        if name in report.in_sub_folder:  # its lines may be fine, but the set is refused for it
            said.append("in a sub-folder")
        shown = report.in_sub_folder.get(name, name)
        rows.append([lang, shown, file_report.n_lines, "; ".join(said) or "ok"])
    if rows:  # no file could be read: the errors said why
        columns = ["lang", "file", "predictions", "check"]
        print_fitted(out_console, plain_table(Table(f"{path}", columns=columns, rows=rows)))
    if not report.ok:
        bad = sum(not r.ok for _, r in report.files.values())
        parts = [f"{plural(bad, 'file')} with errors"] if bad else []
        parts += [f"{plural(len(report.errors), 'problem')} of the set of files"] if report.errors else []
        err_console.print(f"{esc(path)}: {', '.join(parts)}", highlight=False)
        raise typer.Exit(1)
    n = sum(r.n_lines for _, r in report.files.values())
    out_console.print(
        f"{esc(path)}: OK ({plural(len(report.files), 'file')}, {plural(n, 'prediction')})", highlight=False
    )


def check(
    pred: Annotated[
        Path,
        typer.Argument(
            metavar="PRED", help="prediction JSONL file, or a whole submission: its zip or folder"
        ),
    ],
    items: Annotated[
        Path | None,
        typer.Option(
            "--items",
            help="the items file the predictions are for (a submission's: the split its file names say)",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            metavar=FLAG,
            help="also report keys the official scorer ignores (e.g. 'text' in spans)",
        ),
    ] = False,
    partial: Annotated[
        bool,
        typer.Option(
            "--partial",
            metavar=FLAG,
            help="accept a file that predicts only some of the items (a --limit run); not for upload",
        ),
    ] = False,
) -> None:
    """Validate a prediction file against its items; exits 1 listing every problem.

    Given a zip or a folder, checks the whole submission as it would be uploaded: one file per
    language, each named for it and right for that language's items, and the languages missing.
    """
    from mushroom.data.hf import is_saved_dataset
    from mushroom.data.predictions import items_of_file, load_predictions, prediction_file_lang
    from mushroom.data.runfolder import FailureCheck
    from mushroom.errors import UNKNOWN_ID
    from mushroom.evaluation.check import check_file
    from mushroom.evaluation.saved_predictions import saved_predictions
    from mushroom.evaluation.submission_check import is_submission

    if pred.exists() and is_saved_dataset(pred):  # predictions_to_dataset's: its rows, as a file's lines
        saved = saved_predictions(pred)
        shown, pred = pred, saved.path
    elif pred.exists() and is_submission(pred):
        _check_submission(pred, items, strict, partial)
        return
    else:
        saved = None
        input_file(pred, "PRED")
        shown = pred
    if items is None:
        from mushroom.data.jsonl import binary_kind

        kind = binary_kind(pred)
        if kind is not None:
            raise MushroomError(f"PRED {shown} {kind}")
        raise MushroomError("give --items ITEMS.jsonl: the items file the predictions are for")
    try:
        item_list = load_items_option(items, answer_evidence=False)  # spans are checked with answers only
    except DataError as exc:
        # the two files swapped: one "Field required" line per field of every item
        answers = {p.line for p in exc.problems if p.field == "model_output_text" and "required" in p.message}
        if answers and items.is_file() and len(answers) == _lines_with_text(items):
            raise DataError.single(
                items,
                None,
                None,
                "--items looks like a prediction file (no line has model_output_text): give the items "
                "file the predictions are for, mushroom check PRED --items ITEMS",
            ) from None
        raise
    if not item_list:  # every prediction was "not among the items", one line each
        raise DataError.single(items, None, None, "no items: give the items file the predictions are for")
    item_list, one_lang = items_of_file(item_list, pred)
    named, langs = prediction_file_lang(pred.name), sorted({it.lang for it in item_list})
    if named is not None and named not in langs:
        # English predictions named as the German file passed: the upload reads the language
        # from the name, and finds none of its ids
        raise DataError.single(
            pred,
            None,
            None,
            f"its name says language {named!r}, but the items of {items} are {', '.join(map(repr, langs))}: "
            "rename it, or give the items of its language",
        )
    report = check_file(pred, item_list, strict=strict, partial=partial)
    if saved is not None:
        report.errors = [saved.problem(p) for p in report.errors]
        report.warnings = [saved.problem(p) for p in report.warnings]
    for problem in report.warnings[:MAX_ERRORS_SHOWN]:
        print_warning(str(problem))
    if len(report.warnings) > MAX_ERRORS_SHOWN:  # 429 "hard spans overlap" lines were printed
        print_warning(
            f"... and {len(report.warnings) - MAX_ERRORS_SHOWN} more (the first {MAX_ERRORS_SHOWN} are shown)"
        )
    errors = report.errors
    strangers = report.unknown_ids
    if errors and strangers and strangers >= report.n_lines / 2:
        # the diagnosis first, and a few of its lines: fifty "not among the items" lines came
        # before the one that said why
        print_warning(
            f"{strangers} of {report.n_lines} ids are not among the items of {items}: is it the items "
            "file of these predictions (language and split)?"
        )
        stray = [p for p in errors if UNKNOWN_ID in p.message]
        if len(stray) > STRAY_SHOWN:
            more = f"... and {len(stray) - STRAY_SHOWN} more lines whose id is not among the items"
            hidden = {id(p) for p in stray[STRAY_SHOWN:]}  # by identity: a corpus has many
            errors = [p for p in errors if id(p) not in hidden]
            errors.insert(errors.index(stray[STRAY_SHOWN - 1]) + 1, more)
    for problem in errors[:MAX_ERRORS_SHOWN]:
        err_console.print(f"[red]error:[/red] {esc(problem)}", highlight=False, soft_wrap=True)
    if len(errors) > MAX_ERRORS_SHOWN:  # a file of 500,000 bad spans printed them all
        err_console.print(
            f"... and {len(errors) - MAX_ERRORS_SHOWN} more errors (the first {MAX_ERRORS_SHOWN} are shown)",
            highlight=False,
        )
    if report.errors:
        err_console.print(f"{esc(shown)}: {esc(report.summary())}", highlight=False)
        raise typer.Exit(1)
    failures = FailureCheck(pred)  # a run's failed items, written empty; a plain file is not read again
    found = failures.check(load_predictions(pred)) if failures.has_record else None
    if found is not None:
        print_warning(found.message(shown))
    n_warnings = len(report.warnings) + (found is not None)
    counts = f"{plural(report.n_lines, 'prediction')}, {plural(n_warnings, 'warning')}"
    if report.missing:  # --partial: say so, since such a file is no submission
        counts += f"; {len(report.missing)} of {plural(report.n_items, 'item')} not predicted (--partial)"
    if one_lang is not None:
        counts += f"; against the {one_lang!r} items of {items}, the file's language"
    out_console.print(f"{esc(shown)}: OK ({counts})", highlight=False)
