"""A straightforward per-character scorer, written from the task's definition.

It exists for two reasons: the benchmark measures the fast scorer against it, and the tests
check that both agree on every item. It uses Python lists and scipy's own `spearmanr`.
"""

from __future__ import annotations

from collections.abc import Sequence

from scipy.stats import spearmanr


def reference_iou(ref_hard: Sequence[Sequence[int]], pred_hard: Sequence[Sequence[int]]) -> float:
    """Character IoU over index sets; 1.0 when both are empty."""
    ref = {i for s, e in ref_hard for i in range(s, e)}
    pred = {i for s, e in pred_hard for i in range(s, e)}
    if not ref and not pred:
        return 1.0
    return len(ref & pred) / len(ref | pred)


def reference_cor(
    ref_soft: Sequence[tuple[int, int, float]],
    pred_soft: Sequence[tuple[int, int, float]],
    length: int,
) -> float:
    """Spearman correlation of per-character probabilities, constants handled officially."""
    ref_vec = [0.0] * length
    pred_vec = [0.0] * length
    for start, end, prob in ref_soft:
        for idx in range(start, end):
            ref_vec[idx] = prob
    for start, end, prob in pred_soft:
        for idx in range(start, end):
            pred_vec[idx] = prob
    ref_levels = {round(v, 8) for v in ref_vec}
    pred_levels = {round(v, 8) for v in pred_vec}
    if len(ref_levels) == 1 or len(pred_levels) == 1:
        return float(len(ref_levels) == len(pred_levels))
    return float(spearmanr(ref_vec, pred_vec).statistic)
