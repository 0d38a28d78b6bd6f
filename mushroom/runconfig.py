"""Run configs (TOML or YAML files in configs/): validated, unknown keys rejected."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console

from mushroom.contexts import DEFAULT_SOURCES
from mushroom.data import PROJECT_ROOT
from mushroom.errors import DataError, MushroomError, Problem


class DetectorSection(BaseModel):
    """Which detector, with its options (validated by the detector itself)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class RunConfig(BaseModel):
    """A whole run: splits, languages, contexts and the detector."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    splits: list[str] = Field(default_factory=lambda: ["val"])
    langs: list[str] | None = None
    contexts: list[str] = Field(default_factory=lambda: list(DEFAULT_SOURCES))
    detector: DetectorSection


def load_run_config(path: Path) -> RunConfig:
    """Reads and validates a config; errors name the file and the offending key."""
    if not path.is_file():
        raise MushroomError(f"config not found: {path}")
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise MushroomError("YAML configs need PyYAML: pip install pyyaml (or use TOML)") from None
            data = yaml.safe_load(text)
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise DataError([Problem(str(path), None, None, f"cannot parse: {exc}")]) from exc
    try:
        cfg = RunConfig.model_validate(data)
        from mushroom.detectors import detector_class

        detector_class(cfg.detector.name).Options.model_validate(cfg.detector.options)
    except ValidationError as exc:
        raise DataError(
            [Problem(str(path), None, ".".join(map(str, e["loc"])), e["msg"]) for e in exc.errors()]
        ) from exc
    return cfg


def execute(cfg: RunConfig, out: Path | None, quiet: bool = False, console: Console | None = None) -> Path:
    """Runs every split of a config into one run folder; val is scored, test is zipped."""
    from mushroom.detectors import build
    from mushroom.mainjob import report_scores, score_dir
    from mushroom.pipeline import detect_split
    from mushroom.runs import open_run_dir, timestamp, write_json
    from mushroom.submission import write_zip

    console = console or Console()
    det = build(cfg.detector.name, cfg.detector.options)
    out = out or PROJECT_ROOT / "runs" / f"{timestamp()}-{cfg.name}"
    if open_run_dir(out, {"run_config": cfg.model_dump(mode="json"), **det.describe()}):
        console.print(f"[yellow]resuming[/yellow] the run in {out}")
    for split in cfg.splits:
        folder = out / split
        result = detect_split(det, split, folder, cfg.langs, tuple(cfg.contexts), quiet=quiet)
        stats = getattr(det, "stats", None)
        if stats is not None:
            write_json(folder / "parse_stats.json", stats.to_dict())
        if split == "test":
            write_zip(folder / "submission.zip", list(result.files.values()))
        if split == "val":
            report_scores(folder, score_dir("val", result.files), f"{cfg.name} on val", console)
    return out
