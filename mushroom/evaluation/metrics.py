"""Per-item IoU and Spearman correlation with the official scorer's exact semantics.

What the official scorer does, beyond its docstring, and what this module reproduces:
- IoU uses the *set* of indices `range(start, end)` of every hard span: overlaps count once,
  reversed spans are empty, and indices outside the text still count in the union.
- Correlation builds one value per character of the gold answer; soft spans are written in
  the order listed, so where spans overlap the later one wins; negative indices wrap around
  (Python list semantics) and an index past the end crashes the official scorer.
- A vector is constant when all its values rounded to 8 decimals (Python `round`) are equal;
  then the score is 1.0 if both are constant, else 0.0.
- Otherwise scipy's Spearman rho: average ranks for ties.

The fast path uses numpy slices when every span lies inside the text; anything else goes
through a per-index path that mirrors the official loops, so both give the same number.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from mushroom.data.spans import merge_hard

SoftTriple = tuple[int, int, float]


class OfficialScorerCrash(ValueError):
    """The official scorer would raise on this input (e.g. a span beyond the text)."""


def _inside(spans: Sequence[Sequence], length: int) -> bool:
    # Both ends in range: numpy slices then equal Python's range() (a negative end would wrap).
    return all(0 <= s[0] <= length and 0 <= s[1] <= length for s in spans)


def mask_iou(ref: np.ndarray, pred: np.ndarray) -> float:
    """IoU of two boolean character masks of the same text; 1.0 when both are empty."""
    union = int(np.count_nonzero(ref | pred))
    if union == 0:
        return 1.0
    return int(np.count_nonzero(ref & pred)) / union


def item_iou(ref_hard: Sequence[Sequence[int]], pred_hard: Sequence[Sequence[int]], length: int) -> float:
    """Character IoU of two hard-label lists; 1.0 when both are empty."""
    if _inside(ref_hard, length) and _inside(pred_hard, length):
        ref = np.zeros(length, dtype=bool)
        pred = np.zeros(length, dtype=bool)
        for start, end in ref_hard:
            ref[start:end] = True
        for start, end in pred_hard:
            pred[start:end] = True
        return mask_iou(ref, pred)
    # Spans outside the text: the official index sets, counted as merged intervals so that a
    # span like [0, 10**12) gives the same number without enumerating its indices.
    ref_set, pred_set = merge_hard(ref_hard), merge_hard(pred_hard)
    ref_size, pred_size = _size(ref_set), _size(pred_set)
    if not ref_size and not pred_size:
        return 1.0
    inter = _intersection_size(ref_set, pred_set)
    return inter / (ref_size + pred_size - inter)


def _size(intervals: list[tuple[int, int]]) -> int:
    return sum(e - s for s, e in intervals)


def _intersection_size(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    i = j = total = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        total += max(0, hi - lo)
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def soft_fits(soft: Sequence[SoftTriple], length: int) -> bool:
    """Whether the official loop can write every soft span (char_vector raises if not)."""
    return all(start >= end or (-length <= start and end <= length) for start, end, _ in soft)


def char_vector(soft: Sequence[SoftTriple], length: int) -> np.ndarray:
    """Per-character probabilities exactly as the official loop writes them."""
    vec = np.zeros(length, dtype=float)
    if _inside(soft, length):
        for start, end, prob in soft:
            vec[start:end] = prob
        return vec
    for start, end, prob in soft:
        for idx in range(start, end):
            if idx >= length or idx < -length:
                raise OfficialScorerCrash(
                    f"soft span [{start}, {end}) reaches index {idx}, outside a text of {length} "
                    "characters: the official scorer raises IndexError on it"
                )
            vec[idx] = prob
    return vec


def _n_distinct_rounded(vec: np.ndarray) -> int:
    # Python's round(), not numpy's, on the few distinct values: the official check uses it
    # and the two differ on some halfway cases.
    return len({round(float(v), 8) for v in np.unique(vec)}) if vec.size else 0


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho with average ranks, computed as scipy.stats.spearmanr does."""
    return float(np.corrcoef(rankdata(a), rankdata(b))[0, 1])


def vector_cor(ref_vec: np.ndarray, pred_vec: np.ndarray) -> float:
    """Official correlation of two per-character vectors.

    An empty answer gives NaN, as scipy's `spearmanr` of two empty lists does in the official
    scorer (so the mean over items is NaN too); said here without numpy's warnings, and by
    `score` in words.
    """
    if not len(ref_vec):
        return float("nan")
    n_ref = _n_distinct_rounded(ref_vec)
    n_pred = _n_distinct_rounded(pred_vec)
    if n_ref == 1 or n_pred == 1:
        return float(n_ref == n_pred)
    return spearman(ref_vec, pred_vec)


def item_cor(ref_soft: Sequence[SoftTriple], pred_soft: Sequence[SoftTriple], length: int) -> float:
    """Official Spearman correlation of one item's soft labels."""
    return vector_cor(char_vector(ref_soft, length), char_vector(pred_soft, length))
