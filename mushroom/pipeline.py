"""Running a detector over a split, language by language, writing files as it goes.

Each language's predictions are written (checked) as soon as they are done, so a run that
is stopped loses at most the language in progress, and a rerun into the same folder with
the same config skips the languages already written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from mushroom.channels import channel_file, write_channels
from mushroom.contexts import load_contexts
from mushroom.data import load_split
from mushroom.detectors.base import Detector
from mushroom.predictions import mark_all
from mushroom.records import Item
from mushroom.submission import submission_name, write_predictions


@dataclass
class SplitOutput:
    """Per-language prediction files of one split, with context accounting."""

    files: dict[str, Path] = field(default_factory=dict)
    items: dict[str, list[Item]] = field(default_factory=dict)
    contexts_missing: dict[str, dict[str, int]] = field(default_factory=dict)
    resumed: list[str] = field(default_factory=list)


def progress_bar(quiet: bool = False) -> Progress:
    """The progress bar every long stage uses."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=quiet,
        transient=False,
    )


def detect_split(
    detector: Detector,
    split: str,
    out_dir: Path,
    langs: list[str] | None = None,
    sources: tuple[str, ...] = ("perplexity-sonar-pro", "deepseek-r1"),
    baseline_dir: Path | None = None,
    quiet: bool = False,
) -> SplitOutput:
    """Runs the detector on every language of a split and writes checked prediction files.

    Args:
        detector: a built detector.
        split: "val" or "test".
        out_dir: folder for the files, named as official submissions.
        langs: languages to run (default: all languages of the split).
        sources: context sources, in order.
        baseline_dir: when given, the mark-all baseline is written there too.
        quiet: no progress bar.
    """
    data = load_split(split, langs)
    result = SplitOutput(items=data)
    detector.workdir = out_dir / "raw"
    detector.workdir.mkdir(parents=True, exist_ok=True)
    total = sum(len(v) for v in data.values())
    with progress_bar(quiet) as bar:
        task = bar.add_task(f"{detector.name} on {split}", total=total)
        for lang, items in data.items():
            path = out_dir / submission_name(lang, split)
            result.files[lang] = path
            if baseline_dir is not None:
                write_predictions(baseline_dir / submission_name(lang, split), mark_all(items), items)
            if path.exists():
                result.resumed.append(lang)
                bar.advance(task, len(items))
                continue
            ctx = load_contexts(split, lang, sources, item_ids=[i.id for i in items])
            result.contexts_missing[lang] = ctx.missing
            detector.channels = {}
            preds = detector.detect(items, ctx.by_id, advance=lambda n: bar.advance(task, n))
            if detector.channels:
                write_channels(channel_file(detector.workdir, lang), detector.channels)
            write_predictions(path, preds, items)
    return result
