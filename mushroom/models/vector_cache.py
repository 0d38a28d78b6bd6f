"""A disk cache of encoder outputs, keyed by model and text, written as vectors are computed.

The semantic member spends nearly all of the main job's time encoding the same English
contexts again on every run. Each computed result (a sentence vector, or one text's word-piece
vectors with their character offsets) is appended to one binary log per model as soon as
its batch is done, so a re-run, or a run killed mid-language and started again, encodes
only what is missing. A record is length-prefixed and checksummed: a record cut by a kill
is detected when the log is opened and cut off (under a file lock, so two processes that
share a cache never see each other's half-written records).

Record layout (little endian): magic `MVC1`, sha256 key (32 bytes), payload length (u32),
payload, crc32 of the payload (u32). Payload: rows (u32), dim (u32), has offsets (u8),
offsets (rows x 2 int32, when present), vectors (rows x dim float32).
"""

from __future__ import annotations

import fcntl
import hashlib
import mmap
import os
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mushroom.util.cachedir import cache_folder
from mushroom.util.warn import say

_MAGIC = b"MVC1"
_HEAD = struct.Struct("<4s32sI")
_TAIL = struct.Struct("<I")
_PAYLOAD_HEAD = struct.Struct("<IIB")


def text_key(namespace: str, text: str) -> bytes:
    """Key of one text's result under a namespace (model, settings and kind of output)."""
    return hashlib.sha256(f"{namespace}\x00{text}".encode()).digest()


Entry = tuple[np.ndarray, np.ndarray | None]  # vectors (rows x dim), offsets (rows x 2) or None


def missing_texts(cache: VectorCache | None, namespace: str, texts: list[str]) -> list[str]:
    """The distinct texts (first-seen order) whose result the cache lacks, without reading any."""
    distinct = dict.fromkeys(texts)
    if cache is None:
        return list(distinct)
    return [text for text in distinct if text_key(namespace, text) not in cache]


def lookup(cache: VectorCache | None, namespace: str, texts: list[str]) -> tuple[dict[str, Entry], list[str]]:
    """Each distinct text's stored result, and the distinct texts (first-seen order) it lacks.

    Every kind of encoder output reads the cache through here, so a text given twice is
    looked up, and later computed, once.
    """
    found: dict[str, Entry] = {}
    missing: list[str] = []
    for text in dict.fromkeys(texts):
        hit = cache.get(text_key(namespace, text)) if cache is not None else None
        if hit is None:
            missing.append(text)
        else:
            found[text] = hit
    return found, missing


def cached_vectors(
    cache: VectorCache | None,
    namespace: str,
    texts: list[str],
    compute: Callable[[list[str]], np.ndarray],
    batch_size: int,
) -> np.ndarray:
    """One vector per text (rows in `texts` order): cached ones read, each missing text computed once.

    Missing texts go to `compute` in batches of similar length (padding every text to its
    batch's longest one wastes encoder time), and each batch is written to the cache as soon
    as it is done, so an interrupted run keeps what it computed. `texts` must not be empty.
    """
    stored, missing = lookup(cache, namespace, texts)
    found = {text: vectors[0] for text, (vectors, _) in stored.items()}
    missing.sort(key=len)
    for start in range(0, len(missing), batch_size):
        batch = missing[start : start + batch_size]
        vecs = compute(batch)
        if cache is not None:
            cache.put_many([(text_key(namespace, t), vec[None, :], None) for t, vec in zip(batch, vecs)])
        found.update(zip(batch, vecs))
    return np.stack([found[text] for text in texts]).astype(np.float32)


def _pack(vectors: np.ndarray, offsets: np.ndarray | None) -> bytes:
    vectors = np.ascontiguousarray(vectors, dtype="<f4")
    rows, dim = vectors.shape
    parts = [_PAYLOAD_HEAD.pack(rows, dim, offsets is not None)]
    if offsets is not None:
        parts.append(np.ascontiguousarray(offsets, dtype="<i4").reshape(rows, 2).tobytes())
    parts.append(vectors.tobytes())
    return b"".join(parts)


def _unpack(payload: bytes) -> tuple[np.ndarray, np.ndarray | None]:
    rows, dim, has_offsets = _PAYLOAD_HEAD.unpack_from(payload)
    pos = _PAYLOAD_HEAD.size
    offsets = None
    if has_offsets:
        offsets = np.frombuffer(payload, dtype="<i4", count=rows * 2, offset=pos).reshape(rows, 2).astype(int)
        pos += rows * 8
    vectors = np.frombuffer(payload, dtype="<f4", count=rows * dim, offset=pos).reshape(rows, dim)
    return vectors.astype(np.float32), offsets


class VectorCache:
    """Key -> (vectors, offsets or None), backed by one append-only log file.

    Opening scans the record headers only (payloads stay on disk until asked for), so a
    cache of a few hundred megabytes opens in well under a second.
    """

    def __init__(self, path: Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.index: dict[bytes, tuple[int, int]] = {}  # key -> (payload offset, payload length)
        self.dropped_bytes = 0  # cut off the end (a record a kill cut)
        self.damaged_bytes = 0  # skipped inside the log (a flipped byte), kept on disk
        with self.path.open("ab+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                self._scan(handle)
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        self._reader = self.path.open("rb")

    def _scan(self, handle) -> None:
        """Indexes the log's records; a damaged one is skipped, a cut last one is cut off.

        A record whose checksum fails (a flipped byte) is passed over by its length; bytes that
        are no record (a length damaged too) are passed over to the next record that checks.
        Only what follows the last whole record is truncated (a record cut by a kill), so that
        appends stay aligned. The first damage cut every record after it, and a run encoded
        them all again with nothing said (a review).
        """
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:  # not read whole
                last_good = self._index(data, size)
        else:
            last_good = 0
        if last_good < size:
            # A record cut by a kill (or garbage after the last whole one): dropped, so that
            # appends stay aligned.
            self.dropped_bytes = size - last_good
            handle.truncate(last_good)
        if self.damaged_bytes or self.dropped_bytes:
            keep = " (kept on disk: delete the file to be rid of them)" if self.damaged_bytes else ""
            say(
                f"{self.path}: {self.damaged_bytes + self.dropped_bytes} damaged or cut bytes of the "
                f"encoder cache skipped{keep}; {len(self.index)} results read, what the rest held is "
                "encoded again"
            )

    def _index(self, data: mmap.mmap, size: int) -> int:
        """Indexes the whole records of `data`; returns where the last one ends."""
        pos, last_good = 0, 0
        while pos + _HEAD.size <= size:
            magic, key, length = _HEAD.unpack_from(data, pos)
            end = pos + _HEAD.size + length + _TAIL.size
            if self._checks_at(data, pos):
                self.index[key] = (pos + _HEAD.size, length)
            elif magic == _MAGIC and end <= size and (end == size or self._checks_at(data, end)):
                self.damaged_bytes += end - pos  # its bytes are wrong, its framing is not
            else:
                nxt = self._next_record(data, pos + 1)
                if nxt is None:
                    break
                self.damaged_bytes += nxt - pos
                end = nxt
            pos = last_good = end
        return last_good

    @staticmethod
    def _checks_at(data: mmap.mmap, pos: int) -> bool:
        """Whether a whole record with a good checksum starts at `pos`."""
        if pos + _HEAD.size > len(data):
            return False
        magic, _key, length = _HEAD.unpack_from(data, pos)
        end = pos + _HEAD.size + length + _TAIL.size
        if magic != _MAGIC or end > len(data):
            return False
        return (
            zlib.crc32(data[pos + _HEAD.size : end - _TAIL.size])
            == _TAIL.unpack_from(data, end - _TAIL.size)[0]
        )

    def _next_record(self, data: mmap.mmap, start: int) -> int | None:
        """The offset of the next whole record at or after `start`, if any."""
        pos = data.find(_MAGIC, start)
        while pos >= 0:
            if self._checks_at(data, pos):
                return pos
            pos = data.find(_MAGIC, pos + 1)
        return None

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, key: bytes) -> bool:
        return key in self.index

    def get(self, key: bytes) -> Entry | None:
        """The stored result, or None when the key was never written."""
        where = self.index.get(key)
        if where is None:
            return None
        self._reader.seek(where[0])
        return _unpack(self._reader.read(where[1]))

    def put_many(self, entries: list[tuple[bytes, np.ndarray, np.ndarray | None]]) -> None:
        """Appends results in one locked write; keys already stored are skipped."""
        records, fresh = [], []
        for key, vectors, offsets in entries:
            if key in self.index:
                continue
            payload = _pack(vectors, offsets)
            records.append(_HEAD.pack(_MAGIC, key, len(payload)) + payload + _TAIL.pack(zlib.crc32(payload)))
            fresh.append((key, len(payload)))
        if not records:
            return
        with self.path.open("ab") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.seek(0, os.SEEK_END)
                pos = handle.tell()
                handle.write(b"".join(records))
                handle.flush()
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        for (key, length), record in zip(fresh, records):
            self.index[key] = (pos + _HEAD.size, length)
            pos += len(record)
        self._reader.close()
        self._reader = self.path.open("rb")

    def close(self) -> None:
        self._reader.close()


def cache_file(model_id: str) -> Path:
    """The log file of one model under the cache root (a readable, filesystem-safe name)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id).strip("_")[:80] or "model"
    digest = hashlib.sha256(model_id.encode()).hexdigest()[:10]
    return cache_folder("vectors") / f"{safe}-{digest}.bin"
