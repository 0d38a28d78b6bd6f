"""The stack's logistic regression: a Newton fit with soft targets, and its fast prediction.

Its own module because both the per-character model and the item-level empty rule use it.
"""

from __future__ import annotations

import numpy as np


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
    from threadpoolctl import threadpool_limits

    beta = np.zeros(x.shape[1])
    penalty = np.full(x.shape[1], l2)
    penalty[0] = 0.0
    # One BLAS thread: as fast on an idle 2-core machine, and a threaded BLAS that shares its
    # cores with other work spins instead of computing.
    with threadpool_limits(limits=1, user_api="blas"):
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
    """Per-character probability of a feature matrix.

    The standardisation is folded into the weights instead of building the standardised
    copy `design` makes: applying the stack to test scores a million rows at once.
    """
    weights = coef[1:] / scale
    return 1.0 / (1.0 + np.exp(-(feats @ weights + (coef[0] - mean @ weights))))


def check_shapes(
    coef: list[float], mean: list[float], scale: list[float], n_features: int | None = None
) -> None:
    """Raises ValueError for weights that cannot have come from a fit: a hand-edited stack.json.

    Without it such a file failed at apply time as "internal error: operands could not be
    broadcast together", or divided by a zero scale and changed the output, with numpy's
    warning as the only word.
    """
    if not len(coef) == len(mean) + 1 == len(scale) + 1:
        raise ValueError(
            f"coef has {len(coef)} weights, mean {len(mean)} and scale "
            f"{len(scale)} values: coef holds one more (the intercept)"
        )
    if n_features is not None and len(mean) != n_features:
        raise ValueError(f"mean and scale have {len(mean)} values; this model reads {n_features} features")
    if not all(np.isfinite(x) for x in [*coef, *mean, *scale]):
        raise ValueError("coef, mean and scale: every value must be a finite number")
    if not all(x > 0 for x in scale):
        raise ValueError("scale: every value must be above 0")
