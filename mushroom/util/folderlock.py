"""One command at a time on a folder: `flock` on `<folder>/.lock`, so a killed command frees it.

Two commands on one folder would each call the model for every item and append to the same
files (two `contexts` runs wrote every id twice, and both exited 0). Holders of one process
on one folder (a resumed run in a notebook) share the lock, counted, so that the last to
finish frees it; `command_scope` frees what a command left held when it ended on an error.
Where the file system cannot lock (some network mounts) or there is no `fcntl` (Windows),
the command goes on unlocked, with a warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mushroom.errors import MushroomError

_HELD: dict[Path, list[Any]] = {}  # folders this process has locked -> [open lock file, holders]
_SCOPES: list[list[Path]] = []  # per command being run (`command_scope`), the holds it took


def hold(folder: Path, flag: str, warn: Callable[[str], None]) -> Path | None:
    """Locks `folder` for this process; the key to `release`, or None where it cannot lock.

    Raises:
        MushroomError: another process holds it; the message names its pid and `flag`, the
            option that picks another folder.
    """
    key = folder.resolve()
    if key not in _HELD:
        handle = _lock(key, folder, flag, warn)
        if handle is None:
            return None
        _HELD[key] = [handle, 0]
    _HELD[key][1] += 1
    if _SCOPES:
        _SCOPES[-1].append(key)
    return key


def _lock(key: Path, folder: Path, flag: str, warn: Callable[[str], None]) -> Any:
    """The open, flocked `<folder>/.lock` with this pid in it; None where it cannot lock."""
    try:
        import fcntl
    except ImportError:
        warn(f"{folder}: no file locks on this system; do not run two commands on this folder at once")
        return None
    handle = open(key / ".lock", "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip()
        handle.close()
        raise MushroomError(
            f"{folder} is in use by another mushroom run{f' (pid {holder})' if holder else ''}; "
            f"wait for it to end, or choose another {flag}"
        ) from None
    except OSError as exc:
        handle.close()
        warn(f"{folder}: cannot lock the folder ({exc.strerror}); do not run two commands on it at once")
        return None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def release(key: Path | None) -> None:
    """Gives up one hold on a folder (`hold`'s key); the last one frees it."""
    if key is None or key not in _HELD:
        return
    if _SCOPES and key in _SCOPES[-1]:
        _SCOPES[-1].remove(key)
    _release_one(key)


@contextmanager
def holding(folder: Path, flag: str, warn: Callable[[str], None]) -> Iterator[None]:
    """`hold` for the length of a `with` block."""
    key = hold(folder, flag, warn)
    try:
        yield
    finally:
        release(key)


@contextmanager
def command_scope() -> Iterator[None]:
    """Frees, when a command ends however it ended, the holds the command took and kept.

    A command stopped by Ctrl-C or an error never reached its `release`; in a process that
    goes on (the CLI called from Python, a notebook) its folder stayed locked, and a
    terminal's command on it was refused as "in use by another mushroom run". Holds taken
    outside the command (a notebook's own run) are left as they are.
    """
    _SCOPES.append([])
    try:
        yield
    finally:
        left = _SCOPES.pop()
        for key in left:
            _release_one(key)


def _release_one(key: Path) -> None:
    if key in _HELD:
        _HELD[key][1] -= 1
        if _HELD[key][1] == 0:
            _HELD.pop(key)[0].close()
