"""The `mushroom` command line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer
from rich.markup import escape

from mushroom.cli.boundary import (
    FLAG,
    err_console,
    esc,
    input_file,
    out_console,
    output_file,
    print_warning,
    reflow_help,
    run_cli,
    set_debug,
)
from mushroom.data.contexts import DEFAULT_SOURCES, GRADES_SUFFIX
from mushroom.data.records import ErrorType
from mushroom.errors import DataError, MushroomError
from mushroom.util.interrupts import interrupt_hint
from mushroom.util.options import field_default, nest_options, parse_float_list, parse_options, split_names
from mushroom.util.words import listed, plural

if TYPE_CHECKING:
    from mushroom.combine.stack import StackModel
    from mushroom.evaluation.score import ScoreResult

DEFAULT_CONTEXTS = ",".join(DEFAULT_SOURCES)

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Find hallucinated spans in LLM answers (Mu-SHROOM): detect, ensemble, check, score.",
)


@app.callback()
def _global_options(
    debug: Annotated[
        bool,
        typer.Option(
            "--debug", metavar=FLAG, help="show the Python traceback of any error (for bug reports)"
        ),
    ] = False,
) -> None:
    """Find hallucinated spans in LLM answers (Mu-SHROOM): detect, ensemble, check, score."""
    set_debug(debug)


@app.command()
def score(
    gold: Annotated[Path, typer.Argument(help="gold file, or a folder of per-language gold files")],
    pred: Annotated[Path, typer.Argument(help="prediction file, or a folder matched by language")],
    per_lang: Annotated[
        bool, typer.Option("--per-lang", metavar=FLAG, help="table per language with 95% CIs")
    ] = False,
    per_item: Annotated[bool, typer.Option("--per-item", metavar=FLAG, help="table per item")] = False,
    ci: Annotated[
        bool, typer.Option("--ci", metavar=FLAG, help="print bootstrap 95% CIs of the means")
    ] = False,
    json_out: Annotated[
        str | None,
        typer.Option("--json", help="write scores (with per-item) as JSON to FILE, or '-' for stdout only"),
    ] = None,
    compare: Annotated[
        Path | None, typer.Option("--compare", help="a second prediction: paired difference PRED - COMPARE")
    ] = None,
    output: Annotated[
        Path | None, typer.Option("--output", help="also write the two official lines to this file")
    ] = None,
    langs: Annotated[
        str | None,
        typer.Option(
            "--langs", help="folders: score only these languages, e.g. en,de (default: every gold one)"
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
    from mushroom.evaluation.leaderboard import load_leaderboard
    from mushroom.evaluation.stats import paired_test
    from mushroom.evaluation.tables import rich_table, score_rows

    json_only = json_out == "-"
    # With --json -, stdout carries the JSON document only; everything else goes to stderr.
    console = err_console if json_only else out_console
    if output is not None:
        output_file(output, "--output")
    if json_out is not None and not json_only:
        output_file(Path(json_out), "--json")
    lang_list = split_names(langs) if langs is not None else None
    try:
        result = _score_run_files(gold, pred, lang_list, show_pairing=gold.is_dir(), partial=partial)
    except DataError as exc:
        raise _with_partial_hint(exc) from None
    for warning in result.warnings:
        print_warning(warning)
    if per_lang:
        by_lang = result.by_lang()
        console.print(rich_table("per language", score_rows(by_lang, None, load_leaderboard())))
        if len(by_lang) > 1:
            console.print(
                "the table's mean weighs each language the same (as the run tables do); the IoU and Cor "
                f"lines below average all {len(result.ids)} items, as the official scorer does on one file",
                highlight=False,
                markup=False,
            )
    if per_item:
        from rich.table import Table

        table = Table(title="per item")
        for col in ("id", "lang", "IoU", "Cor"):
            table.add_column(col)
        for rid, lang, a, b in zip(result.ids, result.langs, result.iou, result.cor):
            table.add_row(esc(rid), esc(lang), f"{a:.4f}", f"{b:.4f}")
        console.print(table)
    if compare is not None:
        try:
            other = _score_run_files(gold, compare, lang_list, role="--compare", partial=partial)
        except DataError as exc:
            raise _with_partial_hint(exc) from None
        for warning in other.warnings:
            print_warning(warning)
        if other.ids != result.ids:
            raise MushroomError(
                f"PRED and --compare {compare} cover different items ({len(result.ids)} and "
                f"{len(other.ids)} scored); compare runs made on the same items (same --limit and --lang)"
            )
        for name, a, b in (("IoU", result.iou, other.iou), ("Cor", result.cor, other.cor)):
            res = paired_test(a, b)
            console.print(
                f"paired {name}: PRED - COMPARE = {res.mean_diff:+.4f} "
                f"95% CI [{res.ci_low:+.4f}, {res.ci_high:+.4f}], p = {res.p_value:.4f} (n = {res.n})",
                highlight=False,
                markup=False,
            )
    if ci:
        intervals = result.ci()
        console.print(
            f"IoU 95% CI [{intervals['iou'][0]:.4f}, {intervals['iou'][1]:.4f}]  "
            f"Cor 95% CI [{intervals['cor'][0]:.4f}, {intervals['cor'][1]:.4f}]  (n = {len(result.ids)})",
            highlight=False,
            markup=False,
        )
    if json_out is not None:
        payload = {
            **result.to_dict(with_items=True),
            "n_gold": result.n_gold,
            "per_lang": {k: v.to_dict() for k, v in result.by_lang().items()},
            "warnings": result.warnings,
        }
        text = json.dumps(payload, indent=2, ensure_ascii=False)
        if json_only:
            print(text)
        else:
            atomic_write_text(json_out, text + "\n")
    if output is not None:
        atomic_write_text(output, result.official_lines() + "\n")
    if json_only:
        err_console.print(result.official_lines(), highlight=False, markup=False)
    else:
        print(result.official_lines())


def _with_partial_hint(exc: DataError) -> DataError:
    """The error with `score --partial` named where a file lacks gold ids (score has the option)."""
    from dataclasses import replace

    problems = [
        replace(p, message=p.message + " (score --partial scores only the predicted items)")
        if p.field == "id" and p.message.startswith("no prediction for")
        else p
        for p in exc.problems
    ]
    return DataError(problems, exit_code=exc.exit_code)


def _score_run_files(
    gold: Path,
    pred: Path,
    langs: list[str] | None,
    show_pairing: bool = False,
    role: str = "PRED",
    partial: bool = False,
) -> ScoreResult:
    """Scores PRED against gold; a run made with --limit only on the items it predicted, said on stderr.

    A run made with --lang has files for its languages only: the others are listed, not
    errors. Without a run folder (files given directly) or for a run over every item, each
    gold item must have a prediction, as the official scorer requires.
    """
    from mushroom.data.predictions import submission_name
    from mushroom.data.runfolder import items_files, prediction_folder, run_scope, variant_names
    from mushroom.data.splits import lang_from_filename
    from mushroom.evaluation.score import pair_paths, score_pairs

    scope = run_scope(pred)
    if pred.is_dir():
        # A run folder (or a variant's folder of a run config), as compare, sweep and report
        # take it: its files of the gold's split. A plain folder of files is taken as it is.
        test = any(gold.glob("*-tst*.jsonl")) if gold.is_dir() else "-tst" in gold.name
        split = "test" if test else "val"
        own = items_files(pred)
        if gold.is_file() and len(own) == 1:  # a `detect --items` run, scored against its items
            pred = own[0]
        else:
            try:
                pred = prediction_folder(pred, split)
            except MushroomError:
                if (scope is not None and pred == scope.folder) or variant_names(pred, split):
                    raise
        lang = lang_from_filename(gold) if gold.is_file() else None
        if lang is not None and (pred / submission_name(lang, split)).is_file():
            pred = pred / submission_name(lang, split)  # one gold file: the run's file of its language
    pairing = pair_paths(
        gold, pred, langs, allow_missing=scope is not None and scope.langs is not None, role=role
    )
    if show_pairing:
        for line in pairing.summary():
            err_console.print(esc(line), highlight=False)
    result = score_pairs(pairing.pairs, partial=partial or (scope is not None and scope.partial))
    if scope is not None and scope.partial and result.unscored:
        err_console.print(esc(scope.note(len(result.ids), result.n_gold)), highlight=False)
    elif result.unscored:
        err_console.print(
            f"scored {len(result.ids)} of {result.n_gold} gold items (--partial): the others have no "
            "prediction",
            highlight=False,
        )
    _note_failed_items([path for _, _, path in pairing.pairs])
    return result


def _note_failed_items(paths: list[Path]) -> None:
    """Says on stderr which scored files hold items their run failed (scored as written).

    `--allow-failures` writes a failed item as an empty prediction, which scores like a
    detector that found nothing; `ensemble` and `stack` refuse such files, and a score of
    one should not pass for the method's.
    """
    from mushroom.data.predictions import load_predictions
    from mushroom.data.runfolder import failed_items

    for path in paths:
        try:
            predictions = load_predictions(path)
        except MushroomError:  # spans the official scorer takes as they are: scored, and warned about
            continue
        found = failed_items(path, predictions)
        if found is not None:
            err_console.print(esc(f"note: {found.message(path)} (scored as written)"), highlight=False)


@app.command()
def check(
    pred: Annotated[Path, typer.Argument(help="prediction JSONL file")],
    items: Annotated[Path, typer.Option("--items", help="the items file the predictions are for")],
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
    """Validate a prediction file against its items; exits 1 listing every problem."""
    from mushroom.data.splits import load_items
    from mushroom.evaluation.check import check_file

    input_file(pred, "PRED")
    report = check_file(pred, load_items(input_file(items, "--items")), strict=strict, partial=partial)
    for problem in report.warnings:
        print_warning(str(problem))
    for problem in report.errors:
        err_console.print(f"[red]error:[/red] {esc(problem)}", highlight=False, soft_wrap=True)
    if report.errors:
        err_console.print(f"{esc(pred)}: {esc(report.summary())}", highlight=False)
        strangers = report.unknown_ids
        if strangers and strangers >= report.n_lines / 2:
            print_warning(
                f"{strangers} of {report.n_lines} ids are not among the items of {items}: is it the items "
                "file of these predictions (language and split)?"
            )
        raise typer.Exit(1)
    counts = f"{plural(report.n_lines, 'prediction')}, {plural(len(report.warnings), 'warning')}"
    if report.missing:  # --partial: say so, since such a file is no submission
        counts += f"; {len(report.missing)} of {plural(report.n_items, 'item')} not predicted (--partial)"
    out_console.print(f"{esc(pred)}: OK ({counts})", highlight=False)


@app.command()
def ensemble(
    preds: Annotated[
        list[Path], typer.Argument(help="prediction files or run folders of the runs to combine")
    ],
    out: Annotated[Path, typer.Option("--out", help="output prediction file")],
    threshold: Annotated[
        float, typer.Option("--threshold", min=0.0, max=1.0, help="hard label when vote share > T (0 to 1)")
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
        str | None, typer.Option("--split", help="val or test: split of the files taken from run folders")
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
    from mushroom.combine.ensemble import ensemble as run_ensemble
    from mushroom.combine.ensemble import refuse_failed, run_inputs, shipped_lengths, text_lengths
    from mushroom.data.predictions import SoftMode, load_predictions
    from mushroom.data.splits import load_items
    from mushroom.evaluation.submission import write_predictions

    try:
        mode = SoftMode(soft)
    except ValueError:
        raise MushroomError(f"--soft must be 'vote' or 'mean', got {soft!r}") from None
    output_file(out, "--out")
    split = split.lower() if split is not None else None
    if split not in (None, "val", "test"):
        raise MushroomError(
            f"--split {split!r}: run folders hold val or test files; give --split val or test"
        )
    if lang is not None:
        lang = lang.strip().lower()
        if not lang or "," in lang:
            raise MushroomError(
                f"--lang {lang!r}: an ensemble votes over one language; give one code, e.g. --lang en"
            )
    for path in preds:
        if not path.exists():
            raise MushroomError(f"PREDS {path}: no such file or folder")
        if not path.is_dir():
            input_file(path, "PREDS")
    if (lang or split) and not any(path.is_dir() for path in preds):
        raise MushroomError("--lang and --split pick the file of a run folder; every input here is a file")
    preds = run_inputs(preds, lang, split)
    if out.resolve() in {p.resolve() for p in preds}:
        raise MushroomError(f"--out {out} is one of the inputs; write the vote to another file")
    seen: dict[Path, Path] = {}
    for path in preds:
        if path.resolve() in seen:  # a way to weigh a run double, or a slip: said either way
            print_warning(f"{path} is given twice (also as {seen[path.resolve()]}): it votes twice")
        seen[path.resolve()] = path
    for path in preds:
        _refuse_out_beside(out, path)
    item_list = load_items(input_file(items, "--items")) if items else None
    loaded = [load_predictions(p) for p in preds]
    ids_of = [set(found) for found in loaded]
    for path, ids in zip(preds, ids_of):
        if not ids:
            raise DataError.single(path, None, None, "no predictions in the file")
        # files of two languages (or splits): without this, every line of the second was "not
        # among the items" and the reason never named
        if not ids & ids_of[0]:
            raise MushroomError(
                f"{path} has no item in common with {preds[0]}: an ensemble votes over runs of the same "
                "items (files of other languages or splits?)"
            )
    refuse_failed(preds, loaded)
    if item_list is not None:
        lengths = text_lengths(item_list)
    else:
        found = shipped_lengths(sorted(ids_of[0]))
        if found is None:
            raise MushroomError(
                f"{preds[0]}: the ids are not all from the shipped val/test files, so the answers' lengths "
                "are unknown; pass --items FILE (the items the predictions are for)"
            )
        lengths = found
    runs = [load_predictions(p, lengths) for p in preds]
    combined = run_ensemble(runs, lengths, threshold, mode, names=[str(p) for p in preds])
    if item_list is not None:
        write_predictions(out, combined, item_list)
    else:
        from mushroom.data.jsonl import write_jsonl

        write_jsonl(out, [p.submission_dict() for p in combined])
    what = f"{plural(len(combined), 'prediction')} from {plural(len(runs), 'run')}"
    out_console.print(f"wrote {what} to {esc(out)}", highlight=False)
    from mushroom.data.runfolder import run_scope

    partial = [scope for path in preds if (scope := run_scope(path)) is not None and scope.partial]
    if partial:
        err_console.print(
            f"note: {esc(partial[0].made_with())}: score the vote on the items it covers with "
            f"mushroom score --partial GOLD {esc(out)}",
            highlight=False,
        )


def _refuse_out_beside(out: Path, pred: Path) -> None:
    """Refuses an --out that would become a file of the input `pred` comes from.

    Inside a run's folder any file may be read back as the run's (a submission name in val/,
    a variant, a member); beside a loose prediction file, only a file named as prediction
    files are would be taken for one more.
    """
    from mushroom.data.predictions import prediction_file_lang
    from mushroom.data.runfolder import run_scope

    target = out.resolve()
    scope = run_scope(pred.resolve())
    if scope is not None and target.is_relative_to(scope.folder):
        raise MushroomError(
            f"--out {out} is inside the run folder {scope.folder} of an input: the vote would become "
            "one of that run's files; write it outside the runs it combines"
        )
    if (
        scope is None
        and target.parent == pred.resolve().parent
        and prediction_file_lang(target.name) is not None
    ):
        raise MushroomError(
            f"--out {out} is named as a prediction file beside the input {pred}: the vote would be read "
            "as one of that folder's runs; give it another name or folder"
        )


def lang_codes(values: list[str] | None) -> list[str] | None:
    """--lang given as `--lang en --lang de` or `--lang en,de` (as score --langs takes them)."""
    if not values:
        return None
    codes = [code.lower() for value in values for code in split_names(value)]  # files say "EN"
    if not codes:  # `--lang "$EMPTY"` must not turn into "every language"
        raise typer.BadParameter("no language given (e.g. --lang en or --lang en,de)")
    return codes


TAGS_HELP = "error-type tags JSONL {id, error_type}; error_type is one of " + ", ".join(get_args(ErrorType))
ALLOW_FAILURES_HELP = "write files even when items failed (they are left empty and listed)"
AllowFailures = Annotated[bool, typer.Option("--allow-failures", metavar=FLAG, help=ALLOW_FAILURES_HELP)]
Quiet = Annotated[bool, typer.Option("--quiet", metavar=FLAG, help="no progress bar")]
Langs = Annotated[
    list[str] | None, typer.Option("--lang", callback=lang_codes, help="language(s); default all")
]
# The default is named in the help with spaces: as one long token, the help table cut it
# short with an ellipsis on an 80-column terminal.
Contexts = Annotated[
    str,
    typer.Option(
        "--contexts",
        show_default=False,
        help="context sources, comma-separated [default: " + ", ".join(DEFAULT_SOURCES) + "]",
    ),
]


def _backend_options(
    options: dict[str, Any],
    backend: str | None,
    model: str | None,
    base_url: str | None,
    responses: str | None,
    key: str = "backend",
) -> None:
    """Folds the --backend/--model/--base-url/--responses shortcuts into the detector options."""
    if not (backend or model or base_url or responses):
        return
    given = options.get(key, {})
    as_kind = f"-o {key}={given}" if isinstance(given, str) else None  # how a conflict names it
    if isinstance(given, str):  # `-o backend=openai` names the kind
        given = {"kind": given}
    if not isinstance(given, dict):
        raise MushroomError(
            f"-o {key}={given!r}: give the backend's settings as -o {key}.kind=…, -o {key}.model=…"
        )
    cfg = dict(given)
    for name, flag, value in (
        ("kind", "--backend", backend),
        ("model", "--model", model),
        ("base_url", "--base-url", base_url),
        ("responses", "--responses", responses),
    ):
        if value is not None:
            if name in cfg and str(cfg[name]) != value:  # the flag silently won (-o values are parsed)
                written = as_kind or f"-o {key}.{name}={cfg[name]}"
                raise MushroomError(f"{flag} {value} and {written} both given; give it once")
            cfg[name] = value
    cfg.setdefault("kind", "replay" if responses else "openai")
    options[key] = cfg


@app.command()
def detect(
    split: Annotated[str | None, typer.Option("--split", help="val (the default) or test")] = None,
    detector: Annotated[
        str | None,
        typer.Option("--detector", help="detector name (default: lexical, or llm with --backend/--model)"),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="run folder (default: a new one in runs/, named by time, detector and split)"
        ),
    ] = None,
    lang: Langs = None,
    contexts: Contexts = DEFAULT_CONTEXTS,
    option: Annotated[
        list[str] | None, typer.Option("--option", "-o", help="detector option KEY=VALUE")
    ] = None,
    backend: Annotated[
        str | None, typer.Option("--backend", help="llm: replay, openai, transformers, vllm")
    ] = None,
    model: Annotated[
        str | None, typer.Option("--model", help="llm: model name, path or registry name")
    ] = None,
    base_url: Annotated[str | None, typer.Option("--base-url", help="llm/openai: server URL")] = None,
    responses: Annotated[
        str | None, typer.Option("--responses", help="llm/replay: recorded responses or a run's raw file")
    ] = None,
    prompt: Annotated[str | None, typer.Option("--prompt", help="llm: prompt file name or path")] = None,
    temperatures: Annotated[str | None, typer.Option("--temperatures", help="llm: e.g. 0.05,0.1,0.2")] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="only the first N items per language")
    ] = None,
    items_file: Annotated[
        Path | None,
        typer.Option("--items", help="a JSONL file of items instead of a split; --contexts then takes files"),
    ] = None,
    allow_failures: AllowFailures = False,
    quiet: Quiet = False,
) -> None:
    """Run one detector on a split (or an items file); labelled items are scored.

    `--backend replay --responses FILE` re-parses recorded responses without any model. A
    re-run of the same command on the same --out folder redoes only missing or failed items.
    """
    from mushroom.data.runfolder import new_run_folder, timestamp
    from mushroom.data.splits import workspace
    from mushroom.detectors import build
    from mushroom.runs.service import RunService

    options = nest_options(parse_options(option or []))
    if backend or model or base_url or responses:
        # The shortcuts configure an LLM's backend, so they imply the llm detector; a named
        # detector without a backend (lexical) is refused by its options, not swapped.
        detector = detector or "llm"
        from mushroom.detectors import detector_class

        fields = detector_class(detector).Options.model_fields
        if "models" in fields and "backend" not in fields:  # pyes: a list of models
            raise MushroomError(
                f"--backend/--model/--base-url/--responses configure one LLM; detector {detector!r} takes "
                'its models as a list: -o \'models=[{"kind": "openai", "base_url": "URL", "model": "M"}]\''
            )
        if "backend" not in fields:
            raise MushroomError(
                f"--backend/--model/--base-url/--responses configure an LLM, and detector {detector!r} "
                "uses none; use --detector llm or chain, or leave them out"
            )
        _backend_options(options, backend, model, base_url, responses)
    detector = detector or "lexical"
    if items_file is None:
        split = split or "val"
    for key, given in (("prompt", prompt), ("temperatures", temperatures)):
        if given and key in options:  # one would silently win
            raise MushroomError(f"--{key} and -o {key}=… both given; give it once")
    if prompt:
        options["prompt"] = prompt
    if temperatures:
        options["temperatures"] = parse_float_list(temperatures, "--temperatures", low=0.0)
    det = build(detector, options)
    sources = tuple(split_names(contexts))
    data = context_files = None
    if items_file is not None:
        from mushroom.data.itemstream import ContextFiles, ItemsFile

        if split is not None:
            raise MushroomError(f"--items {items_file} replaces --split {split}: give one of them")
        split = "items"
        # checked whole, then read a chunk at a time by the run (an index of lines, not the items)
        items_index = ItemsFile(input_file(items_file, "--items"))
        data = items_index.by_lang()
        if not data:  # a run over nothing would "succeed" and write nothing
            raise DataError.single(items_file, None, None, "no items")
        from mushroom.data.languages import LANGUAGES

        for code in sorted(set(data) - set(LANGUAGES)):
            print_warning(
                f"{items_file}: {plural(len(data[code]), 'item')} in language {code!r}, which mushroom "
                f"does not know ({', '.join(LANGUAGES)}): no stopword list, calibration or word "
                "splitting of its own is used for them"
            )
        if lang:
            have = sorted(data)
            data = {code: its for code, its in data.items() if code in lang}
            if not data:
                raise MushroomError(
                    f"--lang {','.join(lang)}: {items_file} has no items in that language; "
                    f"it has {', '.join(have)}"
                )
        if contexts == DEFAULT_CONTEXTS:
            raise MushroomError("with --items, give the contexts as files: --contexts CTX.jsonl[,MORE.jsonl]")
        context_files = [Path(s) for s in sources]
        missing = [str(p) for p in context_files if not p.is_file()]
        if missing:
            raise MushroomError(
                f"with --items, --contexts takes JSONL files of {{id, context}}; not found: {missing}"
            )
        # a broken line stops the command before its folder exists; the index serves the run
        context_files = ContextFiles(context_files)
    else:
        from mushroom.data.contexts import check_sources
        from mushroom.data.splits import load_split

        # Read before the run folder exists: a wrong --lang or --contexts leaves no folder.
        data = load_split(split, lang)
        check_sources(split, sorted(data), sources)
    from mushroom.data.contexts import source_names

    det.check_ready(source_names(sources, context_files.paths if context_files else None), out)
    out = out or new_run_folder(workspace() / "runs", f"{timestamp()}-{detector}-{split}")
    config = {
        "job": "detect",
        "split": split,
        **det.describe(),
        "sources": list(sources),
        "items": str(items_file) if items_file else None,
        "langs": lang,
        "limit": limit,
    }
    service = RunService(out, config, out_console, quiet, allow_failures)
    result = service.detect_split(
        det, split, out / "predictions", lang, sources, data=data, limit=limit, context_files=context_files
    )
    if result.files:
        out_console.print(f"predictions in {escape(str(out / 'predictions'))}")
    else:  # every language has failed items: no file (the failures are listed below)
        out_console.print("no prediction file was written")
    service.print_stats(f"{detector} on {split}: counts (stats.json)", result.stats["all"])
    summary: dict[str, Any] = {"stats": result.stats["all"]}
    labelled = split == "val" or (items_file is not None and all(items_index.labelled[code] for code in data))
    rows = []
    if labelled:  # own items, or part of a split, are scored against the items' own labels
        own = items_file is not None or limit is not None
        title = f"{detector} on {items_file or split}"
        rows = service.score(split, result.files, out, title, items=result.items if own else None)
    if rows:
        summary["val_iou_mean"] = sum(r["iou"] for r in rows) / len(rows)
        summary["val_cor_mean"] = sum(r["cor"] for r in rows) / len(rows)
    service.finish(summary)


@app.command()
def main_job(
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="run folder (default: a new one in submissions/, named by time and detector)"
        ),
    ] = None,
    detector: Annotated[
        str,
        typer.Option(
            "--detector",
            help="'stack' (lexical + semantic, combined by a stack fitted on val) or one detector",
        ),
    ] = "stack",
    lang: Annotated[
        list[str] | None, typer.Option("--lang", callback=lang_codes, help="language(s); default all 14")
    ] = None,
    contexts: Contexts = DEFAULT_CONTEXTS,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="detector option KEY=VALUE (with stack: DETECTOR.KEY=VALUE)"),
    ] = None,
    no_val: Annotated[
        bool, typer.Option("--no-val", metavar=FLAG, help="skip the scored val run (one detector only)")
    ] = False,
    allow_failures: AllowFailures = False,
    skip_unavailable: Annotated[
        bool,
        typer.Option(
            "--skip-unavailable",
            metavar=FLAG,
            help="stack: leave out a member whose optional package is not installed (with a warning)",
        ),
    ] = False,
    quiet: Quiet = False,
) -> None:
    """Test submission for every language (checked files + zip), then a scored val run."""
    from mushroom.runs.mainjob import DEFAULT_MEMBERS, run_main, run_main_stack

    sources = tuple(split_names(contexts))
    # `backend.kind=openai`, `semantic.max_length=64`: nested the way `detect` nests them
    options = parse_options(option or [])
    if detector == "stack" and no_val:
        raise MushroomError(
            "--no-val: the stack (the default --detector) is fitted on val, so it always runs val; "
            "--no-val goes with one detector (--detector lexical)"
        )
    if skip_unavailable and detector != "stack":
        raise MushroomError(
            "--skip-unavailable leaves out members of the stack; it does not go with one detector"
        )
    if detector == "stack":
        for key in options:
            if "." not in key:
                raise MushroomError(
                    f"with --detector stack, options are DETECTOR.KEY=VALUE (DETECTOR one of "
                    f"{', '.join(DEFAULT_MEMBERS)}); got {key!r}"
                )
        per_detector = nest_options(options)
        run_main_stack(
            out=out,
            options=per_detector,
            sources=sources,
            langs=lang,
            quiet=quiet,
            console=out_console,
            allow_failures=allow_failures,
            skip_unavailable=skip_unavailable,
        )
        return
    run_main(
        out=out,
        detector=detector,
        options=nest_options(options),
        sources=sources,
        langs=lang,
        with_val=not no_val,
        quiet=quiet,
        console=out_console,
        allow_failures=allow_failures,
    )


@app.command("run")
def run_config(
    config: Annotated[Path, typer.Argument(help="a run config (TOML or YAML) from configs/")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="run folder (default: a new one in runs/, named by time and config name)"),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="only the first N items per language")
    ] = None,
    allow_failures: AllowFailures = False,
    eval_dir: Annotated[
        Path | None, typer.Option("--eval-dir", help="variants: where the comparison goes (default: eval/)")
    ] = None,
    quiet: Quiet = False,
) -> None:
    """Run a config: detector, backend, prompt(s), contexts, temperatures, splits, variants."""
    from mushroom.runs.config import execute, load_run_config

    cfg = load_run_config(config)
    execute(
        cfg,
        out,
        quiet=quiet,
        console=out_console,
        allow_failures=allow_failures,
        limit=limit,
        eval_dir=eval_dir,
    )


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="run folders (or folders of prediction files)")],
    split: Annotated[str, typer.Option("--split", help="labelled split")] = "val",
    baseline: Annotated[int, typer.Option("--baseline", help="index of the baseline run (0: first)")] = 0,
    tags: Annotated[Path | None, typer.Option("--tags", help=TAGS_HELP)] = None,
    name: Annotated[str | None, typer.Option("--name", help="file name stem in eval/")] = None,
    eval_dir: Annotated[
        Path | None, typer.Option("--eval-dir", help="where to write (default: eval/)")
    ] = None,
) -> None:
    """Compare runs: IoU/Cor with 95% CIs per language, paired difference and p-value vs a baseline."""
    from mushroom.data.jsonl import atomic_write_text
    from mushroom.data.runfolder import timestamp
    from mushroom.data.splits import workspace
    from mushroom.evaluation.compare import (
        COLUMNS,
        comparison_rows,
        comparison_table,
        left_out_languages,
        load_tags,
        rows_csv,
        rows_markdown,
        score_run,
        tag_rows,
    )

    if not 0 <= baseline < len(runs):
        raise MushroomError(
            f"--baseline {baseline}: {plural(len(runs), 'run')} given; "
            f"give an index from 0 to {len(runs) - 1}"
        )
    for run in runs:
        if not run.is_dir():
            raise MushroomError(f"RUNS {run}: {'no such folder' if not run.exists() else 'is not a folder'}")
    folder = eval_dir or workspace() / "eval"
    if folder.exists() and not folder.is_dir():
        raise MushroomError(f"--eval-dir {folder}: is a file, not a folder")
    tag_map = load_tags(input_file(tags, "--tags")) if tags is not None else None
    scored = [score_run(r, split) for r in runs]
    for run in scored:
        for warning in run.result.warnings:
            print_warning(warning)
    names = [s.name for s in scored]
    if len(set(names)) != len(names):
        for k, s in enumerate(scored):
            s.name = f"{k}:{s.name}"
    for note in filter(None, (s.coverage_note() for s in scored)):
        err_console.print(esc(note), highlight=False)
    for note in left_out_languages(scored):
        print_warning(note)
    rows = comparison_rows(scored, baseline)
    out_console.print(
        comparison_table(f"{split}: runs against baseline {scored[baseline].name} (paired, items)", rows)
    )
    folder.mkdir(parents=True, exist_ok=True)
    stem = name or f"compare-{timestamp()}"
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


def _warn_unscored_tags(path: Path | None, tag_map: dict[str, str], ids: list[str], what: str) -> None:
    """Tags for other items are left out of the counts; named, as an id may be mistyped."""
    from mushroom.evaluation.compare import unscored_tags

    stray = unscored_tags(tag_map, ids)
    if stray:
        print_warning(
            f"--tags {path}: {len(stray)} of {plural(len(tag_map), 'tagged id')} are not among the "
            f"{len(ids)} {what} and are left out: {listed(stray)}"
        )


@app.command()
def sweep(
    runs: Annotated[list[Path], typer.Argument(help="one run, or several (their mean probability)")],
    split: Annotated[str, typer.Option("--split", help="labelled split")] = "val",
    lang: Langs = None,
    svg: Annotated[
        Path | None,
        typer.Option(
            "--svg",
            help="write the plot here, and its numbers beside it as .csv (default: eval/sweep-<time>.svg)",
        ),
    ] = None,
) -> None:
    """IoU and Cor against the hard-label threshold, printed and plotted (SVG)."""
    from mushroom.data.jsonl import atomic_write_text
    from mushroom.data.runfolder import timestamp
    from mushroom.data.splits import workspace
    from mushroom.evaluation.compare import ascii_sweep, rows_csv, sweep_scope, sweep_svg
    from mushroom.evaluation.compare import sweep as run_sweep

    for run in runs:
        if not run.is_dir():
            raise MushroomError(f"RUNS {run}: {'no such folder' if not run.exists() else 'is not a folder'}")
    path = output_file(svg, "--svg") if svg else workspace() / "eval" / f"sweep-{timestamp()}.svg"
    scope = sweep_scope(runs, split, lang)
    for note in scope.notes:
        err_console.print(esc(note), highlight=False)
    rows = run_sweep(runs, split, data=scope.data)
    out_console.print(ascii_sweep(rows), highlight=False, markup=False)
    best = max(rows, key=lambda r: r["iou"])
    out_console.print(f"best IoU {best['iou']:.4f} at threshold {best['threshold']:.2f}", highlight=False)
    out_console.print(
        "Cor at a threshold: probabilities below it set to 0, as a submission floored there has them",
        highlight=False,
    )
    atomic_write_text(path, sweep_svg(rows, f"{split}: {' + '.join(r.name for r in runs)}"))
    atomic_write_text(path.with_suffix(".csv"), rows_csv(rows))
    out_console.print(f"plot: {esc(path)}", highlight=False)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a run folder")],
    split: Annotated[str, typer.Option("--split", help="split whose predictions to show")] = "val",
    lang: Langs = None,
    contexts: Contexts = DEFAULT_CONTEXTS,
    tags: Annotated[Path | None, typer.Option("--tags", help=TAGS_HELP)] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="HTML file (default: RUN_DIR/report.<split>.html)")
    ] = None,
) -> None:
    """Write one self-contained HTML page: answers with gold and predicted spans, scores, contexts."""
    from mushroom.data.jsonl import atomic_write_text
    from mushroom.evaluation.compare import load_tags
    from mushroom.evaluation.report import build_report

    if not run_dir.is_dir():
        raise MushroomError(
            f"RUN_DIR {run_dir}: {'no such folder' if not run_dir.exists() else 'is not a folder'}"
        )
    path = output_file(out, "--out") if out else run_dir / f"report.{split}.html"
    tag_map = load_tags(input_file(tags, "--tags")) if tags else None
    page = build_report(run_dir, split, lang, tuple(split_names(contexts)), tag_map)
    if tag_map:
        _warn_unscored_tags(tags, tag_map, page.item_ids, "items on the page")
    atomic_write_text(path, page.html)
    out_console.print(f"report: {esc(path)}", highlight=False)


@app.command("contexts")
def contexts_cmd(
    split: Annotated[str, typer.Option("--split", help="val, test or train")] = "val",
    lang: Langs = None,
    backend: Annotated[
        str, typer.Option("--backend", help="openai, transformers, vllm or replay")
    ] = "openai",
    model: Annotated[str, typer.Option("--model", help="model name, path or registry name")] = "",
    base_url: Annotated[str | None, typer.Option("--base-url", help="openai: server URL")] = None,
    responses: Annotated[str | None, typer.Option("--responses", help="replay: recorded responses")] = None,
    option: Annotated[
        list[str] | None,
        typer.Option("--option", "-o", help="backend setting KEY=VALUE (e.g. concurrency=1, timeout_s=600)"),
    ] = None,
    source: Annotated[str, typer.Option("--source", help="name of the generated source")] = "llm",
    tiers: Annotated[str, typer.Option("--tiers", help="sources used first, comma-separated")] = "",
    prompt: Annotated[str, typer.Option("--prompt", help="prompt file name or path")] = "context_generation",
    topic: Annotated[
        bool, typer.Option("--topic", metavar=FLAG, help="give the answer's first sentence as topic")
    ] = False,
    grade: Annotated[str, typer.Option("--grade", help="none, llm or embedding")] = "none",
    min_similarity: Annotated[float, typer.Option("--min-similarity", help="embedding grading cut")] = 0.3,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="length limit of a context")] = 512,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="only the first N items per language")
    ] = None,
    context_dir: Annotated[Path | None, typer.Option("--context-dir", help="default: contexts/")] = None,
) -> None:
    """Generate background contexts with an LLM for items no tier source covers (resumable).

    Every model call is recorded in CONTEXT_DIR/.raw/ (replayable with --backend replay
    --responses FILE); items whose call failed are retried by the next run.
    """
    from rich.table import Table

    from mushroom.backends.cache import build_cached
    from mushroom.backends.rawlog import RawLog, RecordingBackend
    from mushroom.data.contexts import (
        DEFAULT_CONTEXT_DIR,
        OPTIONAL,
        available_sources,
        context_file,
        is_fact_check,
    )
    from mushroom.data.splits import load_split
    from mushroom.errors import RunFailed, retry_advice
    from mushroom.retrieval.generate import generate_contexts

    if grade not in ("none", "llm", "embedding"):
        raise MushroomError(f"--grade must be none, llm or embedding, not {grade!r}")
    cfg: dict[str, Any] = {"kind": backend, "model": model, "base_url": base_url, "responses": responses}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    cfg.update(parse_options(option or []))
    root = context_dir or DEFAULT_CONTEXT_DIR
    data = load_split(split, lang)
    tier_list = tuple(t.strip() for t in tiers.split(",") if t.strip())
    for tier in tier_list:
        if is_fact_check(tier):
            raise MushroomError(
                f"--tiers: {tier!r} is a fact-check source (it repeats the answer to correct it); "
                "it covers no item, so it cannot be a tier"
            )
        if tier.endswith(OPTIONAL):
            continue  # used where it has a file
        if not any(context_file(split, code, tier, root) for code in data):
            have = sorted({s for code in data for s in available_sources(split, code, root)})
            listed = ", ".join(have) or "none"
            raise MushroomError(
                f"--tiers: no context files for source {tier!r} ({split}); available: {listed}"
            )
    from mushroom.backends.config import parse_backend_config

    cache = root / f".cache.{source}.jsonl"
    if not cache.is_file():  # else the answers may all be cached and no backend is built
        settings = parse_backend_config(cfg)
        settings.check_ready()
        settings.check_answers()  # contexts are written answers
    sink: list[RawLog | None] = [None]
    engine = RecordingBackend(build_cached(cfg, True, cache), lambda: sink[0])
    table = Table(title=f"contexts: {split}, source {escape(source)!r}")
    columns = ["lang", "items", "from tiers", "done before", "generated", "failed", "kept", "dropped"]
    if grade == "llm":
        columns.append("kept unread")  # a verdict neither relevant nor irrelevant keeps the context
    for col in columns:
        table.add_column(col, justify="right")
    failed = []
    unread = 0
    hint = (
        f"contexts kept so far are in {root}/{split}.<lang>.{source}.jsonl, and every answer received "
        f"in {cache}; run the same command again to go on (answers received are not asked again)"
    )
    with interrupt_hint(hint):
        for code, items in data.items():
            if limit is not None:
                items = items[:limit]
            sink[0] = RawLog(root / ".raw" / f"{split}.{code}.{source}.jsonl")
            st = generate_contexts(
                split,
                code,
                items,
                engine,
                source,
                tier_list,
                prompt,
                topic,
                grade,
                None,
                min_similarity,
                root,
                max_tokens=max_tokens,
            )
            counts = (
                st.items,
                st.covered_by_tiers,
                st.already_generated,
                st.generated,
                st.failed,
                st.kept,
                st.dropped,
            ) + ((st.unreadable_verdicts,) if grade == "llm" else ())
            unread += st.unreadable_verdicts
            table.add_row(code, *(str(v) for v in counts))
            failed += [f"{code}: {err}" for err in st.errors]
    out_console.print(table)
    if unread:
        err_console.print(
            f"[yellow]warning:[/yellow] {plural(unread, 'grading verdict')} said neither relevant nor "
            f"irrelevant; those contexts were kept (verdicts in "
            f"{root}/{split}.<lang>.{source}{GRADES_SUFFIX}.jsonl)"
        )
    if failed:
        for err in failed[:5]:
            err_console.print(f"[yellow]failed[/yellow] {escape(err)}")
        advice = retry_advice([err.split(": ", 2)[-1] for err in failed])  # "lang: id: error"
        raise RunFailed(f"{plural(len(failed), 'context')} could not be generated. {advice}")


stack_app = typer.Typer(help="A learned combination of detector runs (fit on val, apply to test).")
app.add_typer(stack_app, name="stack")


def _models_app() -> typer.Typer:
    from mushroom.cli.models import models_app

    return models_app


app.add_typer(_models_app(), name="models")


@stack_app.command("fit")
def stack_fit(
    members: Annotated[list[str], typer.Argument(help="member runs: NAME=RUN_DIR or RUN_DIR")],
    out: Annotated[Path, typer.Option("--out", help="where to save the fitted stack (JSON)")],
    split: Annotated[str, typer.Option("--split", help="labelled split to fit on")] = "val",
    lang: Langs = None,
    folds: Annotated[int, typer.Option("--folds", min=2, help="cross-validation folds (by item)")] = 5,
    l2: Annotated[float, typer.Option("--l2", min=0.0, help="L2 penalty of the logistic regression")] = 1.0,
    model: Annotated[
        str, typer.Option("--model", help="blend (the default: the mean of the other two), trees or logistic")
    ] = "blend",
) -> None:
    """Fit the stack on a labelled split; print the cross-validated comparison with each member."""
    from mushroom.combine.stack import fit_stack, parse_members, stack_behind
    from mushroom.combine.stack.model import check_model_kind
    from mushroom.data.runfolder import write_json
    from mushroom.data.splits import load_split, require_labelled
    from mushroom.evaluation.tables import comparison_table

    check_model_kind(model, "--model")
    data = load_split(split, lang)
    require_labelled(data, split, "fitting a stack")
    fit = fit_stack(parse_members(members), data, split, folds, l2, model=model)
    write_json(out, fit.model.model_dump(mode="json"))
    out_console.print(comparison_table(f"stack on {split} ({folds}-fold CV by item)", fit.comparison))
    for warning in stack_behind(fit.comparison, fit.model.members, "its own predictions may serve better"):
        print_warning(warning)
    m = fit.model
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

    raw = read_json_model(path, RootModel[Any]).root
    required = {name for name, info in StackModel.model_fields.items() if info.is_required()}
    if not isinstance(raw, dict) or not required <= raw.keys():
        raise DataError.single(path, None, None, "not a stack.json (fit one with `mushroom stack fit`)")
    try:
        return StackModel.model_validate(raw)
    except ValidationError as exc:
        raise DataError(validation_problems(path, None, exc)) from None


@stack_app.command("apply")
def stack_apply(
    model_path: Annotated[Path, typer.Argument(metavar="STACK", help="a stack saved by `stack fit`")],
    members: Annotated[list[str], typer.Argument(help="member runs, same names and order as when fitted")],
    out: Annotated[Path, typer.Option("--out", help="run folder for the prediction files")],
    split: Annotated[str, typer.Option("--split", help="split to predict")] = "test",
    lang: Langs = None,
) -> None:
    """Apply a fitted stack to the members' files of a split; writes checked prediction files.

    On the split the stack was fitted on, the printed scores are in-sample (optimistic):
    `stack fit` prints the cross-validated ones.
    """
    from mushroom.combine.stack import apply_stack, parse_members
    from mushroom.data.predictions import submission_name
    from mushroom.data.splits import load_split
    from mushroom.evaluation.submission import write_predictions
    from mushroom.runs.service import RunService

    model = _load_stack(input_file(model_path, "STACK"))
    member_list = parse_members(members)
    config = {
        "job": "stack-apply",
        "stack": model.model_dump(mode="json"),
        "members": [f"{m.name}={m.path}" for m in member_list],
        "split": split,
        "langs": lang,
    }
    # Members are read before the run folder exists: wrong or missing members leave none.
    data = load_split(split, lang)
    told: list[str] = []
    preds = apply_stack(model, member_list, split, data, warn=told.append)
    service = RunService(out, config, out_console, quiet=True)
    for warning in told:  # printed, and kept in the run's summary
        service.warn(warning)
    files = {}
    for code, items in data.items():
        files[code] = write_predictions(out / submission_name(code, split), preds[code], items)
    out_console.print(f"wrote {plural(len(preds), 'prediction file')} to {escape(str(out))}")
    summary: dict[str, Any] = {"files": [p.name for p in files.values()]}
    if split == "test":
        zipped = service.submit(list(files.values()), out / "submission.zip")
        summary["zip"] = zipped.name if zipped else None
    if split == "val":
        fitted_on = getattr(model, "fitted_on", None) or "val"
        title = f"stack on {split}" + (
            " (IN-SAMPLE: fitted on these items; see `stack fit` for CV)" if fitted_on == split else ""
        )
        service.score(split, files, out, title)
    service.finish(summary)


@app.command("detectors")
def list_detectors() -> None:
    """List the registered detectors and their options, with real defaults."""
    from mushroom.detectors import available, detector_class

    for name in available():
        cls = detector_class(name)
        doc = (cls.__doc__ or "").strip().splitlines()
        out_console.print(f"[bold]{esc(name)}[/bold]: {esc(doc[0] if doc else '')}", highlight=False)
        for key, info in cls.Options.model_fields.items():
            out_console.print(
                f"    {esc(key)} = {esc(field_default(info))}  {esc(info.description or '')}", highlight=False
            )


reflow_help(app)


def main() -> None:
    """Entry point: every expected failure is a clear message and an exit code (README)."""
    import os

    # Third-party download/loading bars ("Loading weights") would interleave with ours.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    raise SystemExit(run_cli(app))


if __name__ == "__main__":
    main()
