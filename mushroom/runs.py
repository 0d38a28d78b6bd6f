"""Run directories: everything needed to trace and re-score a number without re-running.

A run directory holds `config.json` (what was asked), `versions.json` (what ran it), the
predictions as they were written, raw model outputs where a model was used, and scores.
"""

from __future__ import annotations

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


def timestamp() -> str:
    """UTC time for folder names: sortable and free of characters shells dislike."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


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
