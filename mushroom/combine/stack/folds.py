"""Fold assignment shared by the stack's cross-validation and its nested choices."""

from __future__ import annotations

import numpy as np

from mushroom.data.records import Item


def item_folds(items: list[Item], folds: int, seed: int = 0) -> np.ndarray:
    """Fold number of each item: shuffled within each language, then dealt round-robin.

    Stratifying by language keeps every fold's language mix close to the whole set's, so a
    per-language choice made on the other folds always has items of that language to look
    at. The same assignment serves the model's out-of-fold predictions and every choice
    nested inside them (cut-offs, hard-label source), so no item's own label ever informs a
    choice applied to it.
    """
    rng = np.random.default_rng(seed)
    fold_of = np.zeros(len(items), dtype=int)
    for lang in sorted({it.lang for it in items}):
        idx = [k for k, it in enumerate(items) if it.lang == lang]
        rng.shuffle(idx)
        for pos, k in enumerate(idx):
            fold_of[k] = pos % folds
    return fold_of


def split_indices(fold_of: np.ndarray, fold: int) -> tuple[list[int], list[int]]:
    """(train, test) item indices for one fold."""
    train = [k for k in range(len(fold_of)) if fold_of[k] != fold]
    test = [k for k in range(len(fold_of)) if fold_of[k] == fold]
    return train, test
