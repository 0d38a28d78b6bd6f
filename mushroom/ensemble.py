"""Per-character voting across runs: each run is one annotator.

As in the best open Mu-SHROOM system, a character is hallucinated when the share of runs
marking it exceeds a threshold, and its soft probability is that share (or, selectably,
the mean of the runs' soft probabilities, which keeps more ranking information for Cor).
"""

from __future__ import annotations

from enum import StrEnum

import numpy as np

from mushroom.errors import MushroomError
from mushroom.predictions import prediction_from_vectors, prediction_vectors
from mushroom.records import Item, Prediction


class SoftMode(StrEnum):
    """How the ensemble's soft label is computed."""

    vote = "vote"
    mean = "mean"


def vote(
    item_id: str,
    softs: list[np.ndarray],
    masks: list[np.ndarray],
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
) -> Prediction:
    """The per-character vote over runs' soft vectors and hard masks of one item."""
    share = np.mean(np.stack(masks).astype(float), axis=0)
    soft = share if soft_mode == SoftMode.vote else np.mean(np.stack(softs), axis=0)
    return prediction_from_vectors(item_id, soft, share > threshold)


def ensemble_item(
    item_id: str,
    runs: list[Prediction],
    length: int,
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
) -> Prediction:
    """Combines one item's predictions from several runs."""
    if not runs:
        raise MushroomError(f"no run has a prediction for item {item_id!r}")
    softs, masks = zip(*(prediction_vectors(p, length) for p in runs))
    return vote(item_id, list(softs), list(masks), threshold, soft_mode)


def ensemble(
    runs: list[dict[str, Prediction]],
    items: list[Item] | None = None,
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
) -> list[Prediction]:
    """Votes per character over runs that cover the same items.

    Args:
        runs: one id -> prediction mapping per run.
        items: the items (for text lengths); without them the length is the furthest span end.
        threshold: a character is hard-labelled when its vote share exceeds this.
        soft_mode: `vote` (share of runs) or `mean` (mean soft probability).
    """
    if not runs:
        raise MushroomError("ensemble needs at least one run")
    ids = list(runs[0])
    for k, run in enumerate(runs[1:], start=2):
        if set(run) != set(ids):
            diff = sorted(set(run) ^ set(ids))[:5]
            raise MushroomError(f"run {k} does not cover the same items as run 1 (e.g. {diff})")
    lengths: dict[str, int] = {}
    if items is not None:
        lengths = {item.id: len(item.model_output_text) for item in items}
        unknown = [i for i in ids if i not in lengths]
        if unknown:
            raise MushroomError(f"{len(unknown)} predicted ids are not among the items, e.g. {unknown[:3]}")
    out = []
    for item_id in ids:
        preds = [run[item_id] for run in runs]
        length = lengths.get(item_id)
        if length is None:
            ends = [s.end for p in preds for s in p.soft_labels] + [
                e for p in preds for _, e in p.hard_labels
            ]
            length = max(ends, default=0)
        out.append(ensemble_item(item_id, preds, length, threshold, soft_mode))
    return out
