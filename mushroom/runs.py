"""Run directories: everything needed to trace and re-score a number without re-running.

A run directory holds `config.json` (what was asked), `versions.json` (what ran it), the
predictions as they were written, raw model outputs where a model was used, and scores.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from mushroom import __version__
from mushroom.data import PROJECT_ROOT
from mushroom.errors import MushroomError

_PACKAGES = ("numpy", "scipy", "pydantic", "rich", "typer", "regex", "rapidfuzz", "stopwordsiso")


def versions() -> dict[str, Any]:
    """Versions of Python, mushroom, its libraries and the git commit of the checkout."""
    libs = {}
    for name in _PACKAGES:
        try:
            libs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            libs[name] = None
    commit = None
    try:
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if out.returncode == 0:
            commit = out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "mushroom": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": commit,
        "packages": libs,
    }


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of a config, used to refuse resuming a run with other settings."""
    blob = json.dumps(config, sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def timestamp() -> str:
    """UTC time for folder names: sortable and free of characters shells dislike."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def open_run_dir(path: Path, config: dict[str, Any]) -> bool:
    """Creates a run directory, or reopens one made with the same config to resume it.

    Returns:
        True when an existing run is resumed.

    Raises:
        MushroomError: the directory holds a run with a different config.
    """
    path.mkdir(parents=True, exist_ok=True)
    cfg_path = path / "config.json"
    wanted = {"config": config, "config_hash": config_hash(config)}
    if cfg_path.exists():
        try:
            existing = json.loads(cfg_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise MushroomError(f"{cfg_path}: unreadable run config ({exc.msg})") from exc
        if existing.get("config_hash") != wanted["config_hash"]:
            raise MushroomError(
                f"{path} holds a run with another config (hash {existing.get('config_hash')} vs "
                f"{wanted['config_hash']}); choose another --out folder"
            )
        return True
    cfg_path.write_text(json.dumps(wanted, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (path / "versions.json").write_text(json.dumps(versions(), indent=2) + "\n", encoding="utf-8")
    return False


def write_json(path: Path, data: Any) -> None:
    """Writes pretty JSON (UTF-8), creating folders."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def prediction_folder(path: Path, split: str) -> Path:
    """The folder holding a run's prediction files for a split.

    Main-job runs keep test files at the top and val files in val/; `mushroom detect` runs
    keep them in predictions/; a plain folder of prediction files works too.
    """
    from mushroom.errors import MushroomError
    from mushroom.submission import submission_name

    candidates = [path / "val"] if split == "val" else []
    candidates += [path / "predictions", path]
    for folder in candidates:
        if any(folder.glob(submission_name("*", split))):
            return folder
    raise MushroomError(f"{path}: no {split} prediction files (looked in {', '.join(map(str, candidates))})")
