"""The on-disk encoder-output cache: reuse across opens, a cut record dropped, keys by namespace."""

import numpy as np

from mushroom.models.vector_cache import (
    VectorCache,
    cache_file,
    cached_vectors,
    lookup,
    missing_texts,
    text_key,
)
from mushroom.util.cachedir import cache_root


def test_results_come_back_after_reopening_and_a_cut_record_is_dropped(tmp_path):
    path = tmp_path / "v.bin"
    cache = VectorCache(path)
    a, b = text_key("m|sentence", "a"), text_key("m|tokens", "a")
    assert a != b  # the same text under two kinds of output
    vec = np.arange(6, dtype=np.float32).reshape(2, 3)
    cache.put_many([(a, vec[:1], None), (b, vec, np.array([[0, 1], [2, 4]]))])
    cache.put_many([(a, vec[1:], None)])  # already stored: ignored
    cache.close()
    size = path.stat().st_size
    with path.open("ab") as handle:  # a kill in the middle of the next record
        handle.write(b"MVC1" + b"\0" * 20)
    again = VectorCache(path)
    assert again.dropped_bytes == 24 and path.stat().st_size == size
    got, offsets = again.get(a)
    assert np.array_equal(got, vec[:1]) and offsets is None
    got, offsets = again.get(b)
    assert np.array_equal(got, vec) and offsets.tolist() == [[0, 1], [2, 4]]
    assert again.get(text_key("m|sentence", "b")) is None
    c = text_key("m|sentence", "c")
    again.put_many([(c, np.zeros((0, 3), dtype=np.float32), None)])
    assert VectorCache(path).get(c)[0].shape == (0, 3)


def test_corrupted_payload_is_not_trusted(tmp_path):
    path = tmp_path / "v.bin"
    cache = VectorCache(path)
    key = text_key("m", "x")
    cache.put_many([(key, np.ones((1, 4), dtype=np.float32), None)])
    cache.close()
    raw = bytearray(path.read_bytes())
    raw[-8] ^= 0xFF  # flip a byte of the vector: the checksum no longer matches
    path.write_bytes(bytes(raw))
    assert VectorCache(path).get(key) is None


def test_a_damaged_record_costs_itself_alone_and_is_said(tmp_path):
    """A flipped byte in the first of 100 records cut the log there: 99 good results were
    truncated away and encoded again on every run, with nothing said (a review)."""
    import pytest

    path = tmp_path / "v.bin"
    cache = VectorCache(path)
    keys = [text_key("m", str(i)) for i in range(100)]
    cache.put_many([(k, np.full((1, 4), i, dtype=np.float32), None) for i, k in enumerate(keys)])
    cache.close()
    size = path.stat().st_size
    raw = bytearray(path.read_bytes())
    raw[40 + 12 + 2] ^= 0xFF  # a byte of the first record's vector
    raw[size // 2] ^= 0xFF  # and record 50's magic (69 bytes each): no framing to trust there
    path.write_bytes(bytes(raw))
    with pytest.warns(RuntimeWarning, match=r"v.bin: \d+ damaged or cut bytes .* skipped .*results read"):
        again = VectorCache(path)
    assert len(again) == 98 and again.get(keys[0]) is None and again.get(keys[50]) is None
    assert again.get(keys[99])[0][0, 0] == 99 and path.stat().st_size == size  # nothing truncated


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("MUSHROOM_CACHE_DIR", str(tmp_path / "c"))
    assert cache_root() == tmp_path / "c"
    assert cache_file("bundled:all-MiniLM-L6-v2@0.1").parent == tmp_path / "c" / "vectors"
    monkeypatch.delenv("MUSHROOM_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "x" / "mushroom"


def test_each_missing_text_is_computed_once_in_batches_by_length_and_kept_as_it_goes(tmp_path):
    cache = VectorCache(tmp_path / "v.bin")
    calls: list[list[str]] = []
    kill_at = [2]  # a kill during the second batch of the first run

    def compute(texts):
        calls.append(list(texts))
        if len(calls) in kill_at:
            raise KeyboardInterrupt
        return np.array([[len(t), 1.0] for t in texts], dtype=np.float32)

    texts = ["ccc", "a", "ccc", "bb", "dddd", "aa"]
    try:
        cached_vectors(cache, "m|sentence", texts, compute, batch_size=2)
    except KeyboardInterrupt:
        pass
    assert calls == [["a", "bb"], ["aa", "ccc"]]  # distinct, shortest first, ties as first seen
    assert missing_texts(cache, "m|sentence", texts) == ["ccc", "dddd", "aa"]  # the first batch was kept
    assert missing_texts(cache, "m|other", texts) == ["ccc", "a", "bb", "dddd", "aa"]

    calls.clear()
    kill_at.clear()
    got = cached_vectors(VectorCache(tmp_path / "v.bin"), "m|sentence", texts, compute, batch_size=2)
    assert calls == [["aa", "ccc"], ["dddd"]]  # the re-run computes only what the kill lost
    assert got[:, 0].tolist() == [3, 1, 3, 2, 4, 2]
    stored, missing = lookup(cache, "m|sentence", ["bb", "zz", "bb"])
    assert list(stored) == ["bb"] and stored["bb"][1] is None and missing == ["zz"]
    assert lookup(None, "m|sentence", ["x", "x"]) == ({}, ["x"])
