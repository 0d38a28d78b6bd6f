"""Run configs (TOML or YAML files in configs/): validated, unknown keys rejected.

A config names one detector with its options, the splits and languages, and optionally a
list of `variants`: each is a set of option overrides (a prompt file, temperatures, ...)
run on the same items with the same model, into its own folder of the run; LLM responses
are cached in one file shared by the variants, so a request two variants share is sent
once. After the variants, a comparison table against the first variant (95% CIs, paired
p-values) is printed and written to eval/ as Markdown and CSV.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from mushroom.data.contexts import DEFAULT_SOURCES
from mushroom.data.splits import load_split, workspace
from mushroom.errors import DataError, MissingExtra, MushroomError, Problem, did_you_mean
from mushroom.runs.reporter import PlainReporter, Reporter, Table
from mushroom.util.options import error_message

if TYPE_CHECKING:
    from mushroom.runs.service import SplitOutput


class DetectorSection(BaseModel):
    """Which detector, with its options (validated by the detector itself)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    options: dict[str, Any] = Field(default_factory=dict)


class Variant(BaseModel):
    """One prompt variant: a name and the detector options it overrides."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    options: dict[str, Any] = Field(default_factory=dict)


class RunConfig(BaseModel):
    """A whole run: splits, languages, contexts, the detector and its variants."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str = ""
    splits: list[str] = Field(default_factory=lambda: ["val"])
    langs: list[str] | None = None
    limit: int | None = Field(None, ge=1, description="only the first N items of each language")
    contexts: list[str] = Field(default_factory=lambda: list(DEFAULT_SOURCES))
    detector: DetectorSection
    variants: list[Variant] = Field(default_factory=list)

    @field_validator("variants")
    @classmethod
    def _unique(cls, value: list[Variant]) -> list[Variant]:
        names = [v.name for v in value]
        if len(set(names)) != len(names):
            raise ValueError(f"variant names must be unique, got {names}")
        return value

    def variant_options(self) -> list[tuple[str, dict[str, Any]]]:
        """(name, full detector options) per variant; one unnamed entry without variants."""
        if not self.variants:
            return [("", dict(self.detector.options))]
        return [(v.name, _merge(self.detector.options, v.options)) for v in self.variants]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
        )
    return out


def load_run_config(path: Path) -> RunConfig:
    """Reads and validates a config; errors name the file and the offending key."""
    if path.is_dir():
        raise MushroomError(
            f"config {path} is a folder; give a TOML or YAML file (e.g. configs/variants.toml)"
        )
    if not path.is_file():
        from mushroom.data.splits import IN_CHECKOUT, PROJECT_ROOT

        there = PROJECT_ROOT / path
        hint = (
            f" (there is {there}: paths are read from the folder you run in)"
            if (IN_CHECKOUT and not path.is_absolute() and there.is_file())
            else ""
        )
        raise MushroomError(f"config not found: {path}{hint}")
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError([Problem(str(path), None, None, f"cannot read: {exc}")], exit_code=2) from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise MissingExtra(
                    "YAML configs",
                    "yaml",
                    "yaml",
                    message="YAML configs need PyYAML: pip install 'mushroom[yaml]' (or use TOML)",
                ) from None
            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                raise ValueError(str(exc)) from exc
        else:
            data = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError) as exc:
        raise DataError([Problem(str(path), None, None, f"cannot parse: {exc}")], exit_code=2) from exc
    if not isinstance(data, dict):
        raise DataError(
            [Problem(str(path), None, None, "expected a table of settings at the top level")], exit_code=2
        )
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise DataError(
            [
                Problem(str(path), None, ".".join(map(str, e["loc"])), _config_message(e))
                for e in exc.errors()
            ],
            exit_code=2,
        ) from exc
    from mushroom.detectors import detector_class

    try:
        cls = detector_class(cfg.detector.name)
    except MushroomError as exc:
        raise DataError([Problem(str(path), None, "detector.name", str(exc))], exit_code=2) from None
    checks = [("detector.options", cfg.detector.options)]
    checks += [(f"variants.{n}.options", o) for n, o in cfg.variant_options() if n]
    for where, options in checks:
        try:
            cls.Options.model_validate(options)
        except ValidationError as exc:
            errors = exc.errors()
            if where == "detector.options" and cfg.variants:
                errors = [e for e in errors if e["type"] != "missing"]  # a variant may supply it
            if errors:
                raise DataError([_option_problem(path, where, cls, e) for e in errors], exit_code=2) from exc
    return cfg


def _config_message(err: dict) -> str:
    """A config error's message; an unknown key names the close one it may be a typo of."""
    loc = err["loc"]
    if err["type"] != "extra_forbidden":
        return error_message(err)
    # the table the key is in: the top level, [detector] or one [[variants]]
    table = {0: RunConfig, 1: DetectorSection if loc[0] == "detector" else None}.get(len(loc) - 1)
    if len(loc) == 3 and loc[0] == "variants":
        table = Variant
    names = list(table.model_fields) if table is not None else []
    return (
        "unknown key" + did_you_mean(str(loc[-1]), names) + (f"; valid: {', '.join(names)}" if names else "")
    )


def _option_problem(path: Path, where: str, cls, err: dict) -> Problem:
    """A detector option error in a config, with a close match for a misspelt name."""
    msg = error_message(err)
    if err["type"] == "extra_forbidden":
        names = list(cls.Options.model_fields)
        msg = "unknown option" + did_you_mean(str(err["loc"][-1]), names)
        msg += f"; valid: {', '.join(names)}"
    return Problem(str(path), None, ".".join([where, *map(str, err["loc"])]), msg)


def execute(
    cfg: RunConfig,
    out: Path | None,
    quiet: bool = False,
    reporter: Reporter | None = None,
    allow_failures: bool = False,
    limit: int | None = None,
    eval_dir: Path | None = None,
) -> Path:
    """Runs every split (and variant) of a config into one run folder; val is scored, test zipped."""
    from mushroom.data.runfolder import new_run_folder, timestamp
    from mushroom.detectors import build
    from mushroom.runs.service import RunService

    reporter = reporter or PlainReporter()
    limit = limit or cfg.limit
    variants = cfg.variant_options()
    dets = [(name, build(cfg.detector.name, options)) for name, options in variants]
    from mushroom.data.contexts import source_names

    for _, det in dets:
        det.check_ready(source_names(cfg.contexts), out)
    # the items are read (a language a split lacks stops the command) before the folder is made
    data = {split: load_split(split, cfg.langs) for split in cfg.splits}
    out = out or new_run_folder(workspace() / "runs", f"{timestamp()}-{cfg.name}")
    config = {
        "run_config": cfg.model_dump(mode="json", exclude={"limit"}),
        "limit": limit,
        "variants": [{"name": n, **d.describe()} for n, d in dets],
    }
    service = RunService(out, config, reporter, quiet, allow_failures)
    shared_cache = out / "responses.cache.jsonl"
    summary: dict[str, Any] = {"splits": {}}
    val_results: list[tuple[str, SplitOutput]] = []
    for name, det in dets:
        if name and hasattr(det.options, "cache_path") and det.options.cache_path is None:
            det.options.cache_path = str(shared_cache)
        root = out / name if name else out
        for split in cfg.splits:
            folder = root / split
            result = service.detect_split(
                det, split, folder, cfg.langs, tuple(cfg.contexts), data=data[split], limit=limit
            )
            label = f"{cfg.name}{'/' + name if name else ''} on {split}"
            service.report_stats(f"{label}: counts", result.stats.get("all", {}))
            entry = summary["splits"].setdefault(f"{name or cfg.name}/{split}", {})
            entry["items_failed"] = len(result.failures)
            if split == "test":
                zipped = service.submit(list(result.files.values()), folder / "submission.zip")
                entry["zip"] = str(zipped) if zipped else None
            if split == "val":
                val_results.append((name, result))
                rows = service.score(
                    "val", result.files, folder, label, items=result.items if limit else None
                )
                if rows:
                    entry["val_iou_mean"] = sum(r["iou"] for r in rows) / len(rows)
                    entry["val_cor_mean"] = sum(r["cor"] for r in rows) / len(rows)
    if len(dets) > 1 and "val" in cfg.splits and not service.failures:
        summary["comparison"] = compare_variants(val_results, cfg.name, reporter, eval_dir, limit is not None)
    service.finish(summary)
    return out


def compare_variants(
    runs: list[tuple[str, SplitOutput]], name: str, reporter: Reporter, eval_dir: Path | None, limited: bool
) -> dict[str, str]:
    """Reports the variants against the first (CIs, paired p-values); writes Markdown and CSV."""
    from mushroom.data.runfolder import timestamp
    from mushroom.evaluation.compare import (
        COLUMNS,
        RunScores,
        comparison_rows,
        rows_csv,
        rows_markdown,
    )
    from mushroom.evaluation.score import ScoreResult
    from mushroom.runs.service import score_file

    scored = []
    for variant, result in runs:
        parts = [
            score_file("val", lang, path, result.items[lang] if limited else None)
            for lang, path in sorted(result.files.items())
        ]
        folder = next(iter(result.files.values())).parent
        scored.append(RunScores(variant, folder, ScoreResult.concat(parts)))
    rows = comparison_rows(scored, 0)
    reporter.table(Table(f"variants against {runs[0][0]} (paired by item)", kind="paired", rows=rows))
    folder = eval_dir or workspace() / "eval"
    folder.mkdir(parents=True, exist_ok=True)
    stem = folder / f"variants-{name}-{timestamp()}"
    stem.with_suffix(".md").write_text(f"# {name}: prompt variants on val\n\n" + rows_markdown(rows, COLUMNS))
    stem.with_suffix(".csv").write_text(rows_csv(rows, COLUMNS))
    reporter.message(f"wrote {stem}.md and .csv")
    return {"markdown": str(stem.with_suffix(".md")), "csv": str(stem.with_suffix(".csv"))}
