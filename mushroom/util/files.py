"""Reading files a block at a time, for hashes of files that can be a corpus."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

BLOCK = 1 << 20


def file_blocks(path: Path, size: int = BLOCK) -> Iterator[bytes]:
    """The file's bytes in blocks of `size`: a member's predictions or a ledger are never held whole."""
    with path.open("rb") as handle:
        yield from iter(lambda: handle.read(size), b"")
