"""Gradient-boosted trees for the stack, fitted by scikit-learn and saved as plain JSON.

The evidence interacts in ways a linear model cannot weigh: an unsupported word is a likely
hallucination when it is rare or a number, hardly ever when it is common; a low model logit
matters in some languages and not in others. Shallow boosted trees learn those
interactions. The stack's default averages them with the logistic model (`BlendScorer`):
on val (5-fold CV by item, every choice nested, mean of three fold draws) the blend scored
IoU 0.569 / Cor 0.596 against 0.563 / 0.588 (logistic alone) and 0.565 / 0.587 (trees
alone); `benchmarks/stack_val.py --seeds 0,1,2 --model blend,trees,logistic` prints them.

scikit-learn's `HistGradientBoostingRegressor` fits the trees. The fitted trees are copied
into a pydantic record (nodes as arrays) and evaluated here with numpy, so that a stack.json
stays JSON: loading one never unpickles code, and applying it needs no scikit-learn.
`tests/test_stack.py` checks that this evaluation equals scikit-learn's own prediction.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

_BIG = float(np.finfo(float).max)


class TreeSettings(BaseModel):
    """How the trees are grown (saved with the stack; the defaults were chosen by CV on val)."""

    model_config = ConfigDict(extra="forbid")

    iterations: int = Field(50, ge=1, description="boosting rounds")
    learning_rate: float = Field(0.1, gt=0.0, le=1.0)
    max_depth: int = Field(3, ge=1, le=12)
    min_leaf_share: float = Field(
        0.003, gt=0.0, lt=0.5, description="share of the training characters a leaf holds at least"
    )
    l2: float = Field(1.0, ge=0.0, description="L2 penalty on leaf values")
    stride: int = Field(
        3, ge=1, description="fit on every stride-th character (neighbours within a word are near copies)"
    )
    max_bins: int = Field(63, ge=2, le=255, description="histogram bins per feature")
    seed: int = 0


class Tree(BaseModel):
    """One regression tree as node arrays (node 0 is the root)."""

    model_config = ConfigDict(extra="forbid")

    feature: list[int]
    threshold: list[float]
    left: list[int]
    right: list[int]
    missing_left: list[bool]
    leaf: list[bool]
    value: list[float]

    @model_validator(mode="after")
    def _a_tree(self) -> Tree:
        # a hand-edited tree walked off its arrays at apply time (an internal IndexError), or
        # round a loop for ever; sklearn numbers a child after its parent
        if not set(type(self).model_fields) <= self.__dict__.keys():
            return self  # put together with `model_construct`
        sizes = {len(getattr(self, name)) for name in type(self).model_fields}
        if len(sizes) != 1 or not self.leaf:
            raise ValueError("a tree's node arrays must be non-empty and of one length")
        n = len(self.leaf)
        # a leaf's children and feature are never read, but 10**20 there made the arrays of
        # Python objects, and every apply an internal IndexError (an audit)
        if any(abs(v) > n for v in (*self.left, *self.right)) or any(abs(v) >= 1 << 31 for v in self.feature):
            raise ValueError("a tree's children or features hold a number no tree has")
        for k in range(n):
            if not self.leaf[k] and not (
                k < self.left[k] < n and k < self.right[k] < n and self.feature[k] >= 0
            ):
                raise ValueError(f"node {k}: its children or feature are not nodes of the tree")
        return self


class TreeScorer(BaseModel):
    """A fitted tree ensemble: baseline plus the sum of the trees' leaf values, clipped to [0, 1]."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["trees"] = "trees"
    baseline: float
    trees: list[Tree]
    settings: TreeSettings = Field(default_factory=TreeSettings)

    _arrays: list[tuple[np.ndarray, ...]] | None = PrivateAttr(None)

    def _compiled(self) -> list[tuple[np.ndarray, ...]]:
        if self._arrays is None:
            self._arrays = [
                tuple(np.array(getattr(t, name)) for name in Tree.model_fields) for t in self.trees
            ]
        return self._arrays

    def __call__(self, feats: np.ndarray) -> np.ndarray:
        """Per-character probability of a feature matrix (one item's or many items' rows)."""
        out = np.full(len(feats), self.baseline)
        rows = np.arange(len(feats))
        for feature, threshold, left, right, missing_left, leaf, leaf_value in self._compiled():
            node = np.zeros(len(feats), dtype=int)
            while not leaf[node].all():
                x = feats[rows, feature[node]]
                go_left = np.where(np.isnan(x), missing_left[node], x <= threshold[node])
                node = np.where(leaf[node], node, np.where(go_left, left[node], right[node]))
            out += leaf_value[node]
        return np.clip(out, 0.0, 1.0)


def fit_trees(x: np.ndarray, y: np.ndarray, w: np.ndarray, settings: TreeSettings) -> TreeScorer:
    """Fits boosted regression trees on soft targets `y` with sample weights `w`.

    Every `stride`-th character is kept (its weight multiplied to match): characters of one
    word share almost every feature, so a third of the rows carries nearly all the
    information at a third of the fitting time (`benchmarks/main_job_time.py` prints the
    stack-fit stage's time, `benchmarks/stack_val.py --model trees` its CV score).
    """
    from sklearn.ensemble import HistGradientBoostingRegressor  # only fitting needs it
    from threadpoolctl import threadpool_limits

    step = settings.stride
    x, y, w = x[::step], y[::step], w[::step] * step
    regressor = HistGradientBoostingRegressor(
        max_bins=settings.max_bins,
        max_iter=settings.iterations,
        learning_rate=settings.learning_rate,
        max_depth=settings.max_depth,
        # A share, not a count: on val (130,000 characters, a third of them kept) about 130
        # rows per leaf, and still a few on a small set.
        min_samples_leaf=max(5, round(settings.min_leaf_share * len(y))),
        l2_regularization=settings.l2,
        early_stopping=False,
        random_state=settings.seed,
    )
    # One OpenMP thread: on an idle 2-core machine two fit the main job's stack in 12.1 s
    # against 14.0 s, but beside other work they spin on each other (77.6 s against 3.7 s for
    # an English stack, measured); the fitted trees are the same either way.
    with threadpool_limits(limits=1, user_api="openmp"):
        model = regressor.fit(x, y, sample_weight=w)
    return TreeScorer(
        baseline=float(np.ravel(model._baseline_prediction)[0]),
        trees=[_export(predictors[0].nodes) for predictors in model._predictors],
        settings=settings,
    )


def _export(nodes: np.ndarray) -> Tree:
    """scikit-learn's node records (leaf values already scaled by the learning rate) as a Tree."""
    return Tree(
        feature=nodes["feature_idx"].astype(int).tolist(),
        # sklearn splits "NaN goes right" with an infinite threshold, which JSON cannot hold;
        # the largest float keeps every finite value on the same side.
        threshold=np.nan_to_num(nodes["num_threshold"].astype(float), posinf=_BIG, neginf=-_BIG).tolist(),
        left=nodes["left"].astype(int).tolist(),
        right=nodes["right"].astype(int).tolist(),
        missing_left=nodes["missing_go_to_left"].astype(bool).tolist(),
        leaf=nodes["is_leaf"].astype(bool).tolist(),
        value=nodes["value"].astype(float).tolist(),
    )
