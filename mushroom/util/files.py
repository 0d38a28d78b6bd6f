"""Reading files a block at a time, for hashes of files that can be a corpus."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

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
