"""Detector evidence channels on disk: per item, named per-character value vectors.

A run keeps one language's channels once, in `raw/channels.<lang>.jsonl.gz`: one
`ChannelRecord` a line (each channel a list of spans with a value, like soft labels), gzip
compressed, appended as each item finishes, the last line per id winning. Why this form:

- the channels are runs of equal values over words, so spans are already far smaller than
  per-character arrays, and gzip takes the repeated keys and values down by about ten;
- each line is flushed with a zlib sync flush, so a kill loses at most the item being
  written and a re-run appends to the file (a cut stream is first rewritten whole), where
  Parquet or a columnar file would need a whole chunk written at once and a new dependency;
- it stays JSON Lines: `zcat` shows it, and one reader serves it and the uncompressed
  `raw/channels.<lang>.jsonl` that runs before it wrote (still read where no .gz exists).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from mushroom.data.jsonl import load_records, validation_problems, write_jsonl
from mushroom.data.records import ChannelRecord
from mushroom.data.spans import soft_to_vector, vector_to_soft
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.util.names import safe_name

Channels = dict[str, dict[str, np.ndarray]]  # item id -> channel name -> vector

GZ_LEVEL = 6  # zlib's default: within a few percent of 9's size at half its time


def channel_file(raw_dir: Path, lang: str) -> Path:
    """Where a run keeps one language's channels (compressed, appended per item)."""
    return raw_dir / f"channels.{safe_name(lang, 'language code')}.jsonl.gz"


def legacy_channel_file(raw_dir: Path, lang: str) -> Path:
    """Where runs before the compressed store kept one language's channels."""
    return raw_dir / f"channels.{safe_name(lang, 'language code')}.jsonl"


def find_channel_file(raw_dir: Path, lang: str) -> Path | None:
    """The channel file of a language in either form (the compressed one first); None if neither."""
    for path in (channel_file(raw_dir, lang), legacy_channel_file(raw_dir, lang)):
        if path.is_file():
            return path
    return None


def channel_files(raw_dir: Path) -> list[Path]:
    """Every channel file in a run's raw/ folder, in either form."""
    return sorted(p for p in raw_dir.glob("channels.*.jsonl*") if p.name.endswith((".jsonl", ".jsonl.gz")))


def write_channels(path: Path, channels: Channels) -> Path:
    """Writes channels (values clipped to [0, 1], 6 decimals) atomically; gzip when `path` ends in .gz."""
    rows = [
        ChannelRecord(
            id=item_id,
            channels={name: vector_to_soft(np.clip(vec, 0.0, 1.0)) for name, vec in named.items()},
        )
        for item_id, named in channels.items()
    ]
    if path.suffix != ".gz":
        return write_jsonl(path, rows)
    tmp = path.with_name(f".{path.name}.tmp")
    with ChannelWriter(tmp) as out:
        for row in rows:
            out.add(row)
    os.replace(tmp, path)
    return path


def _gz_members(path: Path) -> Iterator[tuple[bytes, bool]]:
    """(decompressed bytes, whether the stream so far ends a gzip member) of a file, in order."""
    dec = zlib.decompressobj(wbits=31)
    with path.open("rb") as raw:
        while data := raw.read(1 << 20):
            while data:
                try:
                    out = dec.decompress(data)
                except zlib.error as exc:
                    raise DataError([Problem(str(path), None, None, _damaged(path, exc))]) from None
                if dec.eof:  # a member ended; a resumed run may have appended another after it
                    data = dec.unused_data
                    dec = zlib.decompressobj(wbits=31)
                    yield out, True
                else:
                    data = b""
                    yield out, False


def _damaged(path: Path, exc: zlib.error) -> str:
    """What to do with a channel store whose stream cannot be read (not a kill's clean cut)."""
    lang = path.name.removeprefix("channels.").removesuffix(".jsonl.gz")
    what = f"it and {path.parent.parent / 'items' / f'{lang}.jsonl'} (that language's finished items)"
    if path.name != f"channels.{lang}.jsonl.gz" or path.parent.name != "raw":
        what = "it and the finished items whose evidence it held"
    return (
        f"its gzip stream is damaged ({exc}), so the evidence of the items it holds is lost; "
        f"remove {what}, then run again to compute them anew (a model's replies come back "
        "from the run's cache)"
    )


def _gz_lines(path: Path) -> Iterator[bytes]:
    """Complete lines of a gzip file; a stream cut by a kill ends at its last whole line."""
    pending = b""
    for out, _ in _gz_members(path):
        *lines, pending = (pending + out).split(b"\n")
        yield from lines
    if pending.strip():
        # a writer ends every line: text after the last one is the line a kill cut off, unless
        # the file ends properly (a file someone wrote without a last newline)
        if _complete(path):
            yield pending


def _complete(path: Path) -> bool:
    """Whether a gzip file ends where a member ends (no kill cut it)."""
    ended = True
    for _, flag in _gz_members(path):
        ended = flag
    return ended


def iter_channel_records(path: Path) -> Iterator[ChannelRecord]:
    """Every record of a channel file in file order (a re-done item's last line comes last)."""
    if path.suffix != ".gz":
        yield from load_records(path, ChannelRecord, unique_ids=False)
        return
    for lineno, line in enumerate(_gz_lines(path), start=1):
        if not line.strip():
            continue
        try:
            yield ChannelRecord.model_validate_json(line)
        except ValidationError as exc:
            raise DataError(validation_problems(path, lineno, exc)) from None
        except ValueError as exc:
            raise DataError([Problem(str(path), lineno, None, f"invalid JSON: {exc}")]) from None


def iter_channel_ids(path: Path) -> Iterator[str]:
    """The item id of each record, each line read as JSON but not validated as channels.

    A resume asks this of stores of a million items: validating every record whole took
    0.2 ms each, plain JSON 0.06 ms. A line that is no record stops the resume, naming it:
    taken as lost, it would be appended after and fail every stack that reads the store.
    """
    if path.suffix != ".gz":
        yield from (rec.id for rec in iter_channel_records(path))
        return
    for lineno, line in enumerate(_gz_lines(path), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise DataError([Problem(str(path), lineno, None, f"invalid JSON: {exc}")]) from None
        if (
            not isinstance(row, dict)
            or set(row) != {"id", "channels"}
            or not isinstance(row["id"], str)
            or not row["id"]
            or not isinstance(row["channels"], dict)
        ):
            raise DataError.single(path, lineno, None, "not a channel record (an id and its channels)")
        yield row["id"]


def read_channels(path: Path, lengths: dict[str, int]) -> Channels:
    """Channels as vectors over each item's answer (`lengths`: id -> answer length); last line wins."""
    out: Channels = {}
    for rec in iter_channel_records(path):
        n = lengths.get(rec.id)
        if n is None:
            continue
        out[rec.id] = {name: soft_to_vector(spans, n) for name, spans in rec.channels.items()}
    return out


class ChannelWriter:
    """Appends channel records to a `.jsonl.gz` file, each flushed as it is written.

    A file cut by a kill (no gzip trailer) is rewritten from its whole lines before anything
    is appended, since a new gzip member after a cut one could not be read. One appending
    run is one gzip member, written with zlib's own gzip framing, so its trailer's checksum
    is zlib's count of what went into the stream. A record whose writing was interrupted
    (Ctrl-C lands between two Python statements) leaves the member without a trailer, cut as
    a kill cuts it: a trailer written then would not match the stream, and the file could not
    be read again.
    """

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_file() and path.stat().st_size and not _complete(path):
            tmp = path.with_name(f".{path.name}.mend")
            with gzip.open(tmp, "wb", compresslevel=GZ_LEVEL) as mended:
                for line in _gz_lines(path):
                    mended.write(line + b"\n")
            os.replace(tmp, path)
        self._raw = path.open("ab")
        self._zip = zlib.compressobj(GZ_LEVEL, zlib.DEFLATED, 31)  # 31: gzip header and trailer
        self._torn = False

    def add(self, record: ChannelRecord) -> None:
        if self._torn:  # the stream after a lost write would not decode: nothing more goes in
            raise MushroomError(
                f"{self.path}: an earlier write to it failed, so no more can be added; the run stops "
                "here: run it again to resume (the cut record is dropped, its item done again)"
            )
        line = json.dumps(record.model_dump(mode="json"), ensure_ascii=False) + "\n"
        self._torn = True  # until the line is on disk whole
        self._raw.write(self._zip.compress(line.encode("utf-8")) + self._zip.flush(zlib.Z_SYNC_FLUSH))
        self._raw.flush()
        self._torn = False

    def close(self) -> None:
        if self._raw.closed:
            return
        try:
            if not self._torn:
                self._raw.write(self._zip.flush())  # the member's end: checksum and length
        finally:
            self._raw.close()

    def __enter__(self) -> ChannelWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
