"""Where mushroom keeps what it downloads and computes once: models and encoder vectors."""

from __future__ import annotations

import os
from pathlib import Path

from mushroom.errors import MushroomError


def cache_root() -> Path:
    """`$MUSHROOM_CACHE_DIR`, else `$XDG_CACHE_HOME/mushroom`, else `~/.cache/mushroom`."""
    if env := os.environ.get("MUSHROOM_CACHE_DIR"):
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "mushroom"


def cache_folder(name: str) -> Path:
    """The cache's folder `name`, made if need be; a usage error naming the setting when it cannot be.

    A `MUSHROOM_CACHE_DIR` that is a file (or a folder one may not write) failed every item
    of a semantic run, one by one, with advice to run again, which failed the same way.
    """
    folder = cache_root() / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise MushroomError(_unusable(folder, str(exc.strerror or exc))) from None
    return folder


def _unusable(folder: Path, why: str) -> str:
    """The message of a cache folder that cannot be used, naming the setting it comes from."""
    if os.environ.get("MUSHROOM_CACHE_DIR"):
        setting = "MUSHROOM_CACHE_DIR"
    else:
        setting = "XDG_CACHE_HOME" if os.environ.get("XDG_CACHE_HOME") else "the home folder's .cache"
    return (
        f"the cache folder {folder} cannot be used ({why}): it comes from {setting}; "
        "set MUSHROOM_CACHE_DIR to a folder you can write"
    )


def cache_problem(name: str) -> str | None:
    """Why the cache's folder `name` could not be made or written, found without making anything.

    For commands that only look (`models list`): "cached: no" alone, of a cache that is a
    file, sent a user to pull into it. None when it looks usable.
    """
    folder = cache_root() / name
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        why = f"{existing} is a file"
    elif not os.access(existing, os.W_OK | os.X_OK):
        why = f"{existing} is not writable"
    else:
        return None
    return _unusable(folder, why)
