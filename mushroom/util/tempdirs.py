"""Temporary folders that live as long as the process, and do not outlive it when it is killed.

A saved dataset is copied to a temporary JSONL file that a run reads until it ends, so the
folder is removed at exit. A process killed with SIGKILL runs no exit hook, and each such kill
left a copy of the dataset in the temporary directory for good. So the process holds a lock on
a file in its folder for its whole life, and the next process that makes such a folder removes
those whose lock it can take: their process is gone. A lock, not a process id: a process of
another container sharing the folder has an id this one cannot see, but the same locks.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO

OWNER = ".owner"  # the file a living process holds locked
_held: list[IO[bytes]] = []  # open for the process's life: closing a file drops its lock


def _lock(path: Path, wait: bool) -> IO[bytes] | None:
    """The file opened and locked, or None when another process holds it (or it cannot be opened)."""
    import fcntl

    try:
        handle = path.open("ab")
    except OSError:
        return None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except OSError:
        handle.close()
        return None
    return handle


def sweep(prefix: str, root: Path | None = None) -> list[Path]:
    """Remove the folders `prefix*` of this user whose process is gone; the folders removed.

    A folder without the lock file (one being made, or of an older mushroom) is left alone,
    and so is one of another user. On Windows (no `fcntl`) nothing is swept.
    """
    if os.name == "nt":
        return []
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{prefix}*"):
        owner = folder / OWNER
        try:  # another user's folder (0700) cannot be looked into; one may vanish as its process ends
            if folder.is_symlink() or folder.lstat().st_uid != os.getuid() or not owner.is_file():
                continue
        except OSError:
            continue
        handle = _lock(owner, wait=False)
        if handle is None:
            continue  # its process runs
        with handle:
            shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def process_temp_dir(prefix: str) -> Path:
    """A new temporary folder removed when this process exits, or by a later process if it is killed."""
    sweep(prefix)
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    if os.name != "nt":
        # locked before it has its name: a sweep that found it unlocked would remove the folder
        handle = _lock(folder / f"{OWNER}.new", wait=True)
        if handle is not None:
            os.replace(folder / f"{OWNER}.new", folder / OWNER)
            _held.append(handle)
    return folder
