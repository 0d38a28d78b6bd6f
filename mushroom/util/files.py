"""Reading files a block at a time, for hashes of files that can be a corpus."""

from __future__ import annotations

import errno
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

BLOCK = 1 << 20


def file_blocks(path: Path, size: int = BLOCK) -> Iterator[bytes]:
    """The file's bytes in blocks of `size`: a member's predictions or a ledger are never held whole."""
    with path.open("rb") as handle:
        yield from iter(lambda: handle.read(size), b"")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read a block at a time (a model file is not held in memory twice)."""
    digest = hashlib.sha256()
    for block in file_blocks(path):
        digest.update(block)
    return digest.hexdigest()


NAMES_A_FILE = {"names_a_file": True}
"""`json_schema_extra` of an option whose value is a file's path: its content is part of a run."""


LINK_LOOP = "a loop of symbolic links, which leads to no file or folder"


def missing_reason(path: Path) -> str:
    """Why `path`, which is not there, is not: a loop of links reads as missing from Python 3.13.

    Path.resolve() raised RuntimeError on a loop up to 3.12, which the CLI names; from 3.13 it
    returns the path, exists() is False, and the loop was "no such file or folder".
    """
    if path.is_symlink():
        try:
            path.resolve(strict=True)
        except RuntimeError:  # 3.11-3.12
            return LINK_LOOP
        except OSError as exc:  # 3.13: errno ELOOP
            if exc.errno == errno.ELOOP:
                return LINK_LOOP
        return f"a symbolic link to {os.readlink(path)}, which is not there"
    return "no such file or folder"


def folder_problem(path: Path) -> str | None:
    """Why a folder is not at `path` ("no such folder", "is not a folder"); None for a folder."""
    if path.is_dir():
        return None
    return "is not a folder" if path.exists() else "no such folder"


FILE_DIGESTS = "file_sha256"
"""The config key of the files a detector's options name, by content (`Detector.describe`)."""


def option_file_digests(options: Any, prefix: str = "") -> dict[str, str]:
    """The sha256 of each file an options model names (in `NAMES_A_FILE` fields), nested too.

    A run's config recorded such a file by its path alone: a calibration table edited, or a
    replay file re-recorded, at the same path resumed the folder with the old predictions (an
    audit). A value that is no file (a packaged name such as "default") has none.
    """
    from pydantic import BaseModel

    out: dict[str, str] = {}
    if isinstance(options, BaseModel):
        for name, field in type(options).model_fields.items():
            value = getattr(options, name, None)
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            if extra.get("names_a_file") and isinstance(value, str) and value and Path(value).is_file():
                out[f"{prefix}{name}"] = sha256_file(Path(value))
            else:
                out.update(option_file_digests(value, f"{prefix}{name}."))
    elif isinstance(options, list | tuple):
        for k, value in enumerate(options):
            out.update(option_file_digests(value, f"{prefix}{k}."))
    elif isinstance(options, dict):
        for key, value in options.items():
            out.update(option_file_digests(value, f"{prefix}{key}."))
    return out
