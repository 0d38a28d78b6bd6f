"""The stack's model: a weighted logistic regression on per-character features, saved as JSON.

Hand-tuned mixing weights overfit whatever the tuner looked at last; a logistic regression
is fitted once, cross-validated by item, and saved with the run so the same model is
applied to test. The target is the gold soft probability (annotator share), so the model
learns the annotators' rate rather than a majority label.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from mushroom.stack.features import StackData


class StackModel(BaseModel):
    """A fitted stack, saved as JSON with the run."""

    model_config = ConfigDict(extra="forbid")

    members: list[str] = Field(description="member names, in feature order")
    channels: dict[str, list[str]] = Field(description="member -> channel names used")
    languages: list[str] = Field(description="languages with a one-hot feature")
    features: list[str]
    coef: list[float]
    mean: list[float] = Field(description="feature means used for standardising")
    scale: list[float] = Field(description="feature scales used for standardising")
    threshold: float = Field(description="hard-label threshold for languages without their own")
    floor: float = Field(description="probability floor for languages without their own")
    thresholds: dict[str, float] = Field(default_factory=dict, description="per-language threshold")
    floors: dict[str, float] = Field(default_factory=dict, description="per-language floor")
    hard_from: str = Field(
        "stack",
        description="for languages without their own choice: 'stack' (its own threshold) or the "
        "member whose hard labels are kept",
    )
    hard_sources: dict[str, str] = Field(default_factory=dict, description="per-language hard_from")
    l2: float
    cv: dict[str, dict[str, float]] = Field(default_factory=dict, description="cross-validated val scores")
    fitted_on: str = ""
    fingerprint: str = Field("", description="hash of the inputs it was fitted from (stack_fingerprint)")
    config: dict = Field(default_factory=dict, description="the StackConfig it was fitted with")
    word_pooling: bool = Field(
        False, description="probabilities pooled over each word (max); False for stacks saved before"
    )

    def hard_label_summary(self) -> str:
        """One line saying where each language's hard labels come from (for logs and tables)."""
        langs = ", ".join(f"{lang}: {src}" for lang, src in sorted(self.hard_sources.items()))
        return f"hard labels from {self.hard_from} by default" + (f" ({langs})" if langs else "")


def fit_logistic(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, l2: float = 1.0, iterations: int = 50
) -> np.ndarray:
    """Weighted L2 logistic regression with soft targets, by Newton's method.

    Args:
        x: features with a leading column of ones (the intercept is not penalised).
        y: targets in [0, 1].
        w: sample weights.
        l2: penalty on the non-intercept coefficients.
        iterations: Newton steps at most (stops when the step is tiny).
    """
    beta = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-(x @ beta)))
        grad = x.T @ (w * (p - y)) + penalty * beta
        hess = (x * (w * p * (1 - p))[:, None]).T @ x + np.diag(penalty) + 1e-9 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        beta -= step
        if np.max(np.abs(step)) < 1e-8:
            break
    return beta


def design(features: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Standardised features with a leading intercept column."""
    return np.hstack([np.ones((len(features), 1)), (features - mean) / scale])


def predict(coef: np.ndarray, mean: np.ndarray, scale: np.ndarray, feats: np.ndarray) -> np.ndarray:
    """Per-character probability of one item's feature matrix."""
    return 1.0 / (1.0 + np.exp(-(design(feats, mean, scale) @ coef)))


def fit_items(data: StackData, idx: list[int], l2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, feature means, feature scales) fitted on the chosen items."""
    x, y, w = data.stacked(idx)
    mean, scale = x.mean(0), x.std(0) + 1e-6
    return fit_logistic(design(x, mean, scale), y, w * len(idx), l2), mean, scale
