"""Loading prediction files as records, with the official rules for missing labels."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from pydantic import ValidationError

from mushroom.errors import DataError, Problem
from mushroom.jsonl import iter_json_lines, validation_problems
from mushroom.records import Item, Prediction, SoftSpan
from mushroom.scoring.files import official_hard_from_soft
from mushroom.spans import hard_to_mask, mask_to_hard, soft_to_vector, vector_to_soft


def load_predictions(path: str | Path) -> dict[str, Prediction]:
    """Id -> prediction; a file without hard (soft) labels gets them derived as officially."""
    path = Path(path)
    problems: list[Problem] = []
    rows = list(iter_json_lines(path, problems))
    has_hard = any("hard_labels" in r for _, r in rows)
    has_soft = any("soft_labels" in r for _, r in rows)
    out: dict[str, Prediction] = {}
    for line, row in rows:
        try:
            pred = Prediction.model_validate(row)
        except ValidationError as exc:
            problems.extend(validation_problems(path, line, exc))
            continue
        if pred.id in out:
            problems.append(Problem(str(path), line, "id", f"duplicate id {pred.id!r}"))
            continue
        if not has_hard or "hard_labels" not in row:
            triples = [(s.start, s.end, s.prob) for s in pred.soft_labels]
            pred.hard_labels = official_hard_from_soft(triples)
        if not has_soft or "soft_labels" not in row:
            pred.soft_labels = [SoftSpan(start=s, end=e, prob=1.0) for s, e in pred.hard_labels]
        out[pred.id] = pred
    if problems:
        raise DataError(problems)
    return out


def prediction_from_vectors(
    item_id: str, soft: np.ndarray, hard_mask: np.ndarray, decimals: int = 6
) -> Prediction:
    """Builds a consistent prediction: every hard character keeps a positive probability."""
    soft = np.clip(soft.astype(float), 0.0, 1.0)
    floor = 10.0**-decimals
    soft = np.where(hard_mask & (np.round(soft, decimals) <= 0), floor, soft)
    return Prediction(
        id=item_id, soft_labels=vector_to_soft(soft, decimals), hard_labels=mask_to_hard(hard_mask)
    )


def prediction_vectors(pred: Prediction, length: int) -> tuple[np.ndarray, np.ndarray]:
    """(soft vector, hard mask) of a prediction over a text of `length` characters."""
    return soft_to_vector(pred.soft_labels, length), hard_to_mask(pred.hard_labels, length)


def mark_all(items: list[Item]) -> list[Prediction]:
    """The mark-all baseline: every character hallucinated with probability 1."""
    out = []
    for item in items:
        n = len(item.model_output_text)
        out.append(prediction_from_vectors(item.id, np.ones(n), np.ones(n, dtype=bool)))
    return out
