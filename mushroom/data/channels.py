"""Detector evidence channels on disk: per item, named per-character value vectors."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mushroom.data.jsonl import load_records, write_jsonl
from mushroom.data.records import ChannelRecord
from mushroom.data.spans import soft_to_vector, vector_to_soft

Channels = dict[str, dict[str, np.ndarray]]  # item id -> channel name -> vector


def channel_file(raw_dir: Path, lang: str) -> Path:
    """Where a run keeps one language's channels."""
    return raw_dir / f"channels.{lang}.jsonl"


def write_channels(path: Path, channels: Channels) -> Path:
    """Writes channels (values clipped to [0, 1], 6 decimals) atomically."""
    rows = [
        ChannelRecord(
            id=item_id,
            channels={name: vector_to_soft(np.clip(vec, 0.0, 1.0)) for name, vec in named.items()},
        )
        for item_id, named in channels.items()
    ]
    return write_jsonl(path, rows)


def read_channels(path: Path, lengths: dict[str, int]) -> Channels:
    """Channels as vectors over each item's answer (`lengths`: id -> answer length)."""
    out: Channels = {}
    for rec in load_records(path, ChannelRecord):
        n = lengths.get(rec.id)
        if n is None:
            continue
        out[rec.id] = {name: soft_to_vector(spans, n) for name, spans in rec.channels.items()}
    return out
