"""Span algebra: spans <-> per-character vectors, soft -> hard, merging.

Per-character vectors are the common currency of the scorer, the ensemble and the detectors:
a detector may think in words or sentences, but it hands over characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from mushroom.data.records import SoftSpan

HardSpans = list[tuple[int, int]]


def hard_to_mask(hard: Iterable[Sequence[int]], length: int) -> np.ndarray:
    """Boolean mask of the characters covered by any span (spans are clipped to the text)."""
    mask = np.zeros(length, dtype=bool)
    for start, end in hard:
        mask[max(start, 0) : min(end, length)] = True
    return mask


def soft_to_vector(soft: Iterable[SoftSpan | dict], length: int) -> np.ndarray:
    """Per-character probabilities; where spans overlap the later one wins, as officially.

    A span is clipped to the text. The official scorer instead wraps a negative start (numpy
    indexing from the end): `evaluation.metrics` copies that for scoring; here a span is drawn.
    """
    vec = np.zeros(length, dtype=float)
    for span in soft:
        if isinstance(span, dict):
            start, end, prob = span["start"], span["end"], span["prob"]
        else:
            start, end, prob = span.start, span.end, span.prob
        vec[max(start, 0) : min(end, length)] = prob
    return vec


def mask_to_hard(mask: np.ndarray) -> HardSpans:
    """Maximal runs of True as [start, end) spans: adjacent and overlapping spans merge."""
    if mask.size == 0:
        return []
    padded = np.concatenate(([False], mask.astype(bool), [False]))
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(s), int(e)) for s, e in zip(edges[::2], edges[1::2])]


def check_finite(vec: np.ndarray) -> None:
    """Raises ValueError when a probability vector holds NaN or infinity.

    NaN compares False with every threshold and is dropped as "not > 0": a model or detector
    that returned NaN would read as "nothing hallucinated" there, which looks like an answer.
    """
    bad = ~np.isfinite(vec)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"{int(bad.sum())} of {vec.size} probabilities are not finite (NaN or infinity; "
            f"the first at character {first})"
        )


def vector_to_soft(vec: np.ndarray, decimals: int = 6) -> list[SoftSpan]:
    """Runs of equal non-zero probability as soft spans.

    Probabilities are rounded first: the official correlation treats values equal to 8
    decimals as a tie only for constancy, so rounding to 6 keeps files short without
    changing any rank that matters.
    """
    if vec.size == 0:
        return []
    vals = vec.astype(float)
    check_finite(vals)
    vals = np.clip(np.round(vals, decimals), 0.0, 1.0)
    change = np.flatnonzero(np.diff(vals) != 0) + 1
    starts = np.concatenate(([0], change))
    ends = np.concatenate((change, [vals.size]))
    # Built without validation: the values are valid by construction, and the lexical
    # detector builds one of these lists per item for its probabilities and one per channel.
    probs = vals[starts].tolist()
    return [
        SoftSpan.model_construct(start=s, end=e, prob=p)
        for s, e, p in zip(starts.tolist(), ends.tolist(), probs)
        if p > 0
    ]


def merge_hard(hard: Iterable[Sequence[int]]) -> HardSpans:
    """Sorts spans, drops empty ones and merges those that overlap or touch.

    The scorer's IoU counts the index set of a file's spans this way, so a span like
    [0, 10**12) costs no enumeration of its indices.
    """
    merged: HardSpans = []
    for start, end in sorted((int(s), int(e)) for s, e in hard):
        if start >= end:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def span_problems(
    length: int | None, soft: Sequence[SoftSpan] | None, hard: Sequence[Sequence[int]] | None
) -> list[tuple[str, str]]:
    """(field, message) for every span that is reversed, empty, negative or past the text.

    With `length` None (a prediction file read without its items), only the end of the
    text cannot be checked.
    """
    bound = "len(text)" if length is None else f"{length} (the answer's length)"
    spans = [(f"soft_labels.{i}", span.start, span.end) for i, span in enumerate(soft or [])]
    spans += [(f"hard_labels.{i}", span[0], span[1]) for i, span in enumerate(hard or [])]
    return [
        (name, f"span [{start}, {end}) must satisfy 0 <= start < end <= {bound}")
        for name, start, end in spans
        if not (0 <= start < end and (length is None or end <= length))
    ]
