"""The main job: test submission files for all 14 languages, then a scored val run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console

from mushroom.contexts import DEFAULT_SOURCES
from mushroom.data import PROJECT_ROOT, split_files
from mushroom.detectors import build
from mushroom.languages import VAL_LANGUAGES
from mushroom.leaderboard import load_leaderboard
from mushroom.pipeline import detect_split
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
