"""The main job: test submission files for all 14 languages, then a scored val run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from mushroom.contexts import DEFAULT_SOURCES
from mushroom.data import PROJECT_ROOT, split_files
from mushroom.detectors import build
from mushroom.errors import MushroomError
from mushroom.languages import VAL_LANGUAGES
from mushroom.leaderboard import load_leaderboard
from mushroom.pipeline import detect_split
from mushroom.predictions import mark_all
from mushroom.runs import open_run_dir, timestamp, write_json
from mushroom.scoring.score import ScoreResult, score_files
from mushroom.submission import write_zip
from mushroom.tables import markdown_table, rich_table, score_rows


def score_dir(split: str, pred_files: dict[str, Path]) -> dict[str, ScoreResult]:
    """Scores written prediction files against the split's gold files (official path)."""
    gold = split_files(split)
    return {lang: score_files(gold[lang], path) for lang, path in pred_files.items()}


def report_scores(
    folder: Path,
    results: dict[str, ScoreResult],
    title: str,
    console: Console,
    baselines: dict[str, ScoreResult] | None = None,
) -> list[dict]:
    """Writes scores.json (per item) and scores.md into `folder`, prints the table.

    Returns:
        The table rows (per language, with CIs, baselines and the leaderboard #1).
    """
    rows = score_rows(results, baselines, load_leaderboard())
    per_lang = {lang: r.to_dict(with_items=True) for lang, r in results.items()}
    payload: dict = per_lang
    if baselines is not None:
        payload = {"per_lang": per_lang, "mark_all": {lang: r.to_dict() for lang, r in baselines.items()}}
    write_json(folder / "scores.json", payload)
    (folder / "scores.md").write_text(markdown_table(rows), encoding="utf-8")
    console.print(rich_table(title, rows))
    return rows


DEFAULT_MEMBERS = ("lexical", "semantic")


def run_main_stack(
    out: Path | None = None,
    members: tuple[str, ...] = DEFAULT_MEMBERS,
    options: dict[str, dict[str, Any]] | None = None,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
    langs: list[str] | None = None,
    quiet: bool = False,
    console: Console | None = None,
) -> Path:
    """Runs each member detector on test and val, fits the stack on val, applies it to test.

    The submission files are the stack's test predictions. The val numbers printed for the
    stack are out-of-fold (cross-validated by item) and written to val/ as files, scored
    like any other run; each member's own val files are under members/<name>/val.

    Returns:
        The run folder (config.json, versions.json, members/, stack.json, submission files,
        submission.zip, val/ with the stack's out-of-fold predictions and scores).
    """
    from mushroom.data import load_split
    from mushroom.stack import Member, apply_stack, fit_stack
    from mushroom.submission import submission_name, write_predictions
    from mushroom.tables import comparison_table

    console = console or Console()
    started = time.perf_counter()
    options = options or {}
    dets = {name: build(name, options.get(name)) for name in members}
    out = out or PROJECT_ROOT / "submissions" / f"{timestamp()}-stack"
    config = {
        "job": "main",
        "members": [d.describe() for d in dets.values()],
        "combination": "stack",
        "sources": list(sources),
        "langs": langs,
    }
    if open_run_dir(out, config):
        console.print(f"[yellow]resuming[/yellow] the run in {out}")
    val_langs = [lang for lang in (langs or VAL_LANGUAGES) if lang in VAL_LANGUAGES]
    if not val_langs:
        raise MushroomError("the stack is fitted on val: choose at least one val language")
    seconds: dict[str, float] = {}
    for name, det in dets.items():
        t0 = time.perf_counter()
        detect_split(det, "test", out / "members" / name, langs, sources, quiet=quiet)
        detect_split(det, "val", out / "members" / name / "val", val_langs, sources, quiet=quiet)
        seconds[name] = round(time.perf_counter() - t0, 2)
    member_list = [Member(name, out / "members" / name) for name in members]
    val_data = load_split("val", val_langs)
    fit = fit_stack(member_list, val_data, "val")
    write_json(out / "stack.json", fit.model.model_dump(mode="json"))
    test_data = load_split("test", langs)
    test_preds = apply_stack(fit.model, member_list, "test", test_data)
    files = []
    for lang, items in test_data.items():
        files.append(write_predictions(out / submission_name(lang, "test"), test_preds[lang], items))
    zip_path = write_zip(out / "submission.zip", files)
    console.print(f"wrote {len(files)} checked submission files and {zip_path}")
    val_files = {}
    for lang, items in val_data.items():
        val_files[lang] = write_predictions(out / "val" / submission_name(lang, "val"), fit.oof[lang], items)
        write_predictions(out / "val" / "mark-all" / submission_name(lang, "val"), mark_all(items), items)
    console.print(
        comparison_table("val: each detector, their vote and the stack (5-fold CV by item)", fit.comparison)
    )
    results = score_dir("val", val_files)
    baselines = score_dir("val", {lang: out / "val" / "mark-all" / p.name for lang, p in val_files.items()})
    rows = report_scores(
        out / "val", results, "stack on val (out-of-fold, scored from the written files)", console, baselines
    )
    write_json(out / "val" / "comparison.json", fit.comparison)
    summary = {
        "test_files": [p.name for p in files],
        "zip": zip_path.name,
        "hard_labels_from": {"default": fit.model.hard_from, **fit.model.hard_sources},
        "val_iou_mean": sum(r["iou"] for r in rows) / len(rows),
        "val_cor_mean": sum(r["cor"] for r in rows) / len(rows),
        "member_seconds": seconds,
        "seconds": round(time.perf_counter() - started, 2),
    }
    write_json(out / "summary.json", summary)
    console.print(f"run folder: {out}  ({summary['seconds']} s)")
    return out


def run_main(
    out: Path | None = None,
    detector: str = "lexical",
    options: dict[str, Any] | None = None,
    sources: tuple[str, ...] = DEFAULT_SOURCES,
    langs: list[str] | None = None,
    with_val: bool = True,
    quiet: bool = False,
    console: Console | None = None,
) -> Path:
    """Writes the test submission (14 files + zip) and scores the same detector on val.

    Returns:
        The run folder, which holds config.json, versions.json, the submission files,
        submission.zip, and val/ with predictions, the mark-all baseline and scores.
    """
    console = console or Console()
    started = time.perf_counter()
    det = build(detector, options)
    out = out or PROJECT_ROOT / "submissions" / f"{timestamp()}-{detector}"
    config = {
        "job": "main",
        **det.describe(),
        "sources": list(sources),
        "langs": langs,
        "with_val": with_val,
    }
    if open_run_dir(out, config):
        console.print(f"[yellow]resuming[/yellow] the run in {out}")
    test = detect_split(det, "test", out, langs, sources, quiet=quiet)
    zip_path = write_zip(out / "submission.zip", list(test.files.values()))
    console.print(f"wrote {len(test.files)} checked submission files and {zip_path}")
    summary: dict[str, Any] = {
        "test_files": {k: str(v.relative_to(out)) for k, v in test.files.items()},
        "test_contexts_missing": test.contexts_missing,
        "zip": zip_path.name,
    }
    if with_val:
        val_langs = [lang for lang in (langs or VAL_LANGUAGES) if lang in VAL_LANGUAGES]
        if val_langs:
            val = detect_split(
                det,
                "val",
                out / "val",
                val_langs,
                sources,
                baseline_dir=out / "val" / "mark-all",
                quiet=quiet,
            )
            results = score_dir("val", val.files)
            baseline_files = {lang: out / "val" / "mark-all" / p.name for lang, p in val.files.items()}
            baselines = score_dir("val", baseline_files)
            rows = report_scores(
                out / "val", results, f"{detector} on val (scored from the written files)", console, baselines
            )
            summary["val_iou_mean"] = sum(r["iou"] for r in rows) / len(rows)
            summary["val_cor_mean"] = sum(r["cor"] for r in rows) / len(rows)
    summary["seconds"] = round(time.perf_counter() - started, 2)
    write_json(out / "summary.json", summary)
    console.print(f"run folder: {out}  ({summary['seconds']} s)")
    return out
