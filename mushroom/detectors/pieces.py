"""What the piece-level detectors (nli, pyes) share: cutting the answer and painting back."""

from __future__ import annotations

from typing import Literal

import numpy as np

from mushroom.text.segment import Piece, clauses, sentences

Unit = Literal["sentence", "clause"]


def answer_pieces(answer: str, unit: Unit, min_clause_words: int = 4) -> list[Piece]:
    """The answer as sentences or claim-sized clauses, with offsets."""
    return sentences(answer) if unit == "sentence" else clauses(answer, min_clause_words)


def paint(length: int, pieces: list[Piece], probs: list[float]) -> np.ndarray:
    """Per-character vector: each piece's probability on its characters, 0 between pieces."""
    vec = np.zeros(length)
    for piece, prob in zip(pieces, probs):
        vec[piece.start : piece.end] = prob
    return vec
