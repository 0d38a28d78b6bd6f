"""Temporary folders that live as long as the process, and do not outlive it when it is killed.

A saved dataset is copied to a temporary JSONL file that a run reads until it ends, so the
folder is removed at exit. A process killed with SIGKILL runs no exit hook, and each such kill
left a copy of the dataset in the temporary directory for good. The folder's name holds the
process id, so the next process that makes one removes those whose process is gone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path


def _alive(pid: int) -> bool:
    """Whether a process with this id runs (one of another user counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def sweep(prefix: str, root: Path | None = None) -> list[Path]:
    """Remove the folders `prefix<pid>-*` whose process is gone; the folders removed.

    A pid taken again by a new process keeps its folder (removed by a later sweep); a folder
    another user owns is left as it is. On Windows nothing is swept.
    """
    if os.name == "nt":  # os.kill(pid, 0) ends the process there: nothing is swept
        return []
    base = Path(root or tempfile.gettempdir())
    removed = []
    for folder in base.glob(f"{prefix}*-*"):
        pid_text = folder.name[len(prefix) :].split("-", 1)[0]
        if not pid_text.isdigit() or int(pid_text) == os.getpid() or _alive(int(pid_text)):
            continue
        if folder.is_dir() and not folder.is_symlink() and folder.stat().st_uid == os.getuid():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def process_temp_dir(prefix: str) -> Path:
    """A new temporary folder removed when this process exits, or by a later process if it is killed."""
    sweep(prefix)
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder
