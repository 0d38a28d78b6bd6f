"""From the stack's probabilities to submitted labels: word hard masks, cut-offs, hard-label source.

After fitting, the hard-label threshold that maximises mean IoU and a floor under which
probabilities are set to 0 (so an answer with only weak evidence is a constant vector,
which Spearman scores 1.0 when gold is empty too) are chosen on out-of-fold predictions,
and so is each language's source of hard labels: the stack's threshold or a member's own
hard labels, whichever has the better IoU there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from mushroom.data.predictions import prediction_from_vectors
from mushroom.data.records import Item, Prediction
from mushroom.data.spans import hard_to_mask, soft_to_vector
from mushroom.evaluation.metrics import mask_iou, vector_cor
from mushroom.text.tokenize import tokenize

_MAX_GAP = 3  # characters of space/punctuation between two marked words that are marked too

THRESHOLDS = np.round(np.arange(0.05, 0.96, 0.05), 2)
FLOORS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)

Cutoffs = tuple[tuple[float, float], dict[str, tuple[float, float]]]  # pooled, per language


@lru_cache(maxsize=8192)
def _word_runs(text: str) -> tuple[np.ndarray, np.ndarray]:
    """(token start/end pairs, the pairs' following gaps that may be bridged) of a text."""
    toks = tokenize(text)
    bounds = np.array([[t.start, t.end] for t in toks], dtype=int).reshape(-1, 2)
    bridge = np.array([b.start - a.end <= _MAX_GAP for a, b in zip(toks, toks[1:])], dtype=bool)
    return bounds, bridge


def word_hard_mask(text: str, probs: np.ndarray, threshold: float) -> np.ndarray:
    """Hard labels by word: a word is marked when any of its characters is above the threshold.

    Annotators mark whole words and the phrase between them, while the stack's probability
    varies inside a word and drops on the spaces and commas between two flagged words; a
    character threshold cuts spans the annotators drew whole. Short gaps (space, comma,
    hyphen) between two marked words are marked with them. Characters outside any word
    (punctuation at the edges) are never marked. On val (5-fold CV, stack of lexical +
    semantic) this raised the stack's own-hard-label IoU from 0.5275 to 0.5347.
    """
    bounds, bridge = _word_runs(text)
    return _mask_from_marked(len(text), bounds, bridge, _word_max(bounds, probs) > threshold)


def pool_words(text: str, probs: np.ndarray) -> np.ndarray:
    """Probabilities shaped like annotator spans: flat over a word, gaps like their words.

    Gold soft labels are built from character spans drawn over whole words, so on val:
    - a word's characters share one value (the word takes its highest probability; ranking
      a word's characters differently only costs Spearman);
    - a gap between two words (space, comma, newline) has the value of the lower of the two
      in 98% of the 19,725 gaps (97% of those between two marked words), is below it in 2%
      and above it in 6 gaps: a span covers the gap only when it covers both words. So a
      gap takes the lower word's value;
    - characters before the first word and after the last (a final full stop, a trailing
      newline) are 0 in all 488 items that have them: no annotator's span starts or ends
      there. A text with no word at all is 0 throughout, for the same reason.

    `benchmarks/gold_shape.py` prints these counts. On val (5-fold CV, fold draw 0) pooling
    words raised the stack's mean Cor from 0.5599 to 0.5626 (English 0.554 -> 0.571) on
    the stack of that time; on a later one (hard-label sources per language, shrunk by 20
    items) the gap and edge rules raised it from 0.5942 to 0.5976 (English 0.5715 -> 0.5877).
    IoU is unchanged: hard labels are by word already.
    """
    bounds, _ = _word_runs(text)
    if not len(bounds):
        return np.zeros(len(probs))
    out = probs.copy()
    top = _word_max(bounds, probs)
    for (start, end), value in zip(bounds, top):
        out[start:end] = value
    lower = np.minimum(top[:-1], top[1:])
    for (end, start), value in zip(zip(bounds[:-1, 1], bounds[1:, 0]), lower):
        out[end:start] = value
    out[: bounds[0, 0]] = 0.0
    out[bounds[-1, 1] :] = 0.0
    return out


def _word_max(bounds: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Each word's highest character probability."""
    if not len(bounds):
        return np.zeros(0)
    padded = np.append(probs, 0.0)  # reduceat needs every index inside the array
    return np.maximum.reduceat(padded, bounds.reshape(-1))[::2]


def _mask_from_marked(n: int, bounds: np.ndarray, bridge: np.ndarray, marked: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    for start, end in bounds[marked]:
        mask[start:end] = True
    if len(marked):
        for k in np.flatnonzero(marked[:-1] & marked[1:] & bridge):
            mask[bounds[k, 1] : bounds[k + 1, 0]] = True
    return mask


def decode(items: list[Item], probs: list[np.ndarray], threshold: float, floor: float) -> list[Prediction]:
    """Predictions with probabilities under the floor set to 0 and word hard labels."""
    out = []
    for item, p in zip(items, probs):
        p = np.where(p < floor, 0.0, p)
        out.append(prediction_from_vectors(item.id, p, word_hard_mask(item.model_output_text, p, threshold)))
    return out


@dataclass
class CutoffScores:
    """Each item's IoU at every threshold and Cor at every floor, computed once.

    An item's score at a cut-off does not depend on which other items a choice looks at, so
    every fold, language and shrinkage weight of the nested search reads one table instead
    of decoding every item again (the search used to take a minute on val).
    """

    items: list[Item]
    iou: np.ndarray  # items x THRESHOLDS
    cor: np.ndarray  # items x FLOORS

    @classmethod
    def build(cls, items: list[Item], probs: list[np.ndarray]) -> CutoffScores:
        iou = np.zeros((len(items), len(THRESHOLDS)))
        cor = np.zeros((len(items), len(FLOORS)))
        for k, (it, p) in enumerate(zip(items, probs)):
            n = len(it.model_output_text)
            gold_hard = hard_to_mask(it.hard_labels or [], n)
            gold_soft = soft_to_vector(it.soft_labels or [], n)
            p = np.round(p, 6)
            bounds, bridge = _word_runs(it.model_output_text)
            word_max = _word_max(bounds, p)
            iou[k] = [
                mask_iou(gold_hard, _mask_from_marked(n, bounds, bridge, word_max > t)) for t in THRESHOLDS
            ]
            cor[k] = [vector_cor(gold_soft, np.where(p < f, 0.0, p)) for f in FLOORS]
        return cls(items, iou, cor)

    def langs(self, idx: np.ndarray) -> list[str]:
        return sorted({self.items[k].lang for k in idx})

    def choose(
        self, idx, shrink: float = 0.0, pooled_idx=None, floor_shrink: float | None = None
    ) -> tuple[float, float]:
        """(threshold maximising mean IoU, then the floor at or under it maximising mean Cor).

        With `shrink` = k > 0 the items' IoU curve is pulled toward that of `pooled_idx`: each
        grid point scores (n * mean over idx + k * mean over pooled_idx) / (n + k), so a
        choice made on n items (one language's ~40) moves off the pooled one only when its
        own evidence outweighs k items' worth of the pooled curve. `floor_shrink` does the
        same for the floor's Cor curve (default: `shrink`).
        """
        floor_shrink = shrink if floor_shrink is None else floor_shrink
        idx = np.asarray(list(idx), dtype=int)
        iou = _column_means(self.iou, idx)
        cor = _column_means(self.cor, idx)
        if pooled_idx is not None:
            pooled_idx = np.asarray(list(pooled_idx), dtype=int)
            n = len(idx)
            if shrink > 0:
                iou = (n * iou + shrink * _column_means(self.iou, pooled_idx)) / (n + shrink)
            if floor_shrink > 0:
                cor = (n * cor + floor_shrink * _column_means(self.cor, pooled_idx)) / (n + floor_shrink)
        t = int(np.argmax(iou))
        allowed = [k for k, f in enumerate(FLOORS) if f <= THRESHOLDS[t]]
        f = allowed[int(np.argmax(cor[allowed]))]
        return float(THRESHOLDS[t]), float(FLOORS[f])

    def choose_by_lang(self, idx, shrink: float = 0.0, floor_shrink: float | None = None) -> Cutoffs:
        """Pooled cut-offs (for unseen languages) and each language's own (shrunk toward pooled)."""
        idx = np.asarray(list(idx), dtype=int)
        pooled = self.choose(idx)
        langs = np.array([self.items[k].lang for k in idx])
        per_lang = {
            str(lang): self.choose(idx[langs == lang], shrink, idx, floor_shrink)
            for lang in sorted(set(langs))
        }
        return pooled, per_lang


def _column_means(table: np.ndarray, idx: np.ndarray) -> np.ndarray:
    # One 1-D mean per column: the same summation as a mean over a list of item scores.
    return np.array([np.mean(table[idx, c]) for c in range(table.shape[1])])


def decode_by_lang(items: list[Item], probs: list[np.ndarray], cutoffs: Cutoffs) -> list[Prediction]:
    """Predictions with each item's language's cut-offs (the pooled ones for unseen languages)."""
    pooled, per_lang = cutoffs
    out = []
    for item, p in zip(items, probs):
        t, f = per_lang.get(item.lang, pooled)
        out.extend(decode([item], [p], t, f))
    return out


def nested_cutoffs(
    scores: CutoffScores, fold_of: np.ndarray, shrink: float = 0.0, floor_shrink: float | None = None
) -> dict[int, Cutoffs]:
    """Each fold's cut-offs, chosen on the other folds."""
    return {
        f: scores.choose_by_lang(np.flatnonzero(fold_of != f), shrink, floor_shrink)
        for f in sorted(set(fold_of.tolist()))
    }


def best_hard_sources(
    items: list[Item], ious: dict[str, np.ndarray], idx, shrink: float = 0.0
) -> tuple[str, dict[str, str]]:
    """(source with the best mean IoU over the chosen items, each language's best source).

    The stack comes first so a tie keeps its own hard labels. With `shrink` = k > 0 a
    language's mean IoU per source is pulled toward the pooled mean by k items' worth, so a
    language leaves the pooled source only when its own ~40 items say so clearly.
    """
    idx = np.asarray(list(idx), dtype=int)
    pooled_means = {name: float(ious[name][idx].mean()) for name in ious}

    def best(sel: np.ndarray, k: float) -> str:
        def score(name: str) -> float:
            own = float(ious[name][sel].mean())
            return (len(sel) * own + k * pooled_means[name]) / (len(sel) + k) if k > 0 else own

        return max(ious, key=score)

    langs = np.array([items[k].lang for k in idx])
    per_lang = {str(lang): best(idx[langs == lang], shrink) for lang in sorted(set(langs))}
    return best(idx, 0.0), per_lang


def nested_hard_sources(
    items: list[Item], ious: dict[str, np.ndarray], fold_of: np.ndarray, shrink: float = 0.0
) -> tuple[list[str], dict[int, dict[str, str]]]:
    """Each item's hard-label source as chosen on the other folds, and each fold's choices."""
    chosen = [""] * len(items)
    per_fold: dict[int, dict[str, str]] = {}
    for f in sorted(set(fold_of.tolist())):
        train = [k for k in range(len(items)) if fold_of[k] != f]
        pooled, per_lang = best_hard_sources(items, ious, train, shrink)
        per_fold[f] = per_lang
        for k in range(len(items)):
            if fold_of[k] == f:
                chosen[k] = per_lang.get(items[k].lang, pooled)
    return chosen, per_fold
