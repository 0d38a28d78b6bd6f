"""`stack`: a learned per-character combination of detector runs, fitted on labelled data.

Hand-tuned mixing weights overfit whatever the tuner looked at last; a logistic regression on
per-character features is fitted once, cross-validated by item, and saved with the run so the
same model is applied to test. Features come from each member run's written files (soft
probability, hard label, and the evidence channels some detectors write next to their
predictions), from the members together (mean, vote share, max), from the neighbourhood (the
mean probability around the character, the item's maximum, the mean pooled over the word and
the sentence), from the text (number, capitalised word, function word, word length) and the
language as a one-hot (pooled model: languages without labelled data use the shared weights).
The target is the gold soft probability (annotator share), so the model learns the
annotators' rate rather than a majority label. After fitting, the hard-label threshold that
maximises mean IoU and a floor under which probabilities are set to 0 (so an answer with
only weak evidence is a constant vector, which Spearman scores 1.0 when gold is empty too)
are chosen on the out-of-fold predictions, and so is each language's source of hard labels:
the stack's threshold or a member's own hard labels, whichever has the better IoU there.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from mushroom.channels import channel_file, read_channels
from mushroom.errors import MushroomError
from mushroom.predictions import load_predictions, prediction_from_vectors, prediction_vectors
from mushroom.records import Item, Prediction
from mushroom.runs import prediction_folder
from mushroom.scoring.metrics import mask_iou, vector_cor
from mushroom.scoring.score import score_predictions
from mushroom.spans import hard_to_mask, soft_to_vector
from mushroom.submission import submission_name
from mushroom.text.segment import sentences
from mushroom.text.stopwords import stopwords
from mushroom.text.tokenize import tokenize

_WINDOW = 8  # characters on each side for the neighbourhood mean


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

    def hard_label_summary(self) -> str:
        """One line saying where each language's hard labels come from (for logs and tables)."""
        langs = ", ".join(f"{lang}: {src}" for lang, src in sorted(self.hard_sources.items()))
        return f"hard labels from {self.hard_from} by default" + (f" ({langs})" if langs else "")


@dataclass
class StackFit:
    """What fitting returns: the model, the CV comparison and out-of-fold predictions."""

    model: StackModel
    comparison: dict[str, dict[str, dict[str, float]]]
    oof: dict[str, list[Prediction]]


@dataclass
class Member:
    """One detector run: where its prediction files are, per split."""

    name: str
    path: Path

    def folder(self, split: str) -> Path:
        """The folder with this split's prediction files (main-job, detect and plain layouts)."""
        return prediction_folder(self.path, split)

    def load(self, split: str, lang: str, items: list[Item]) -> tuple[dict[str, Prediction], dict]:
        """Predictions and channels of one language; every item must be predicted."""
        folder = self.folder(split)
        path = folder / submission_name(lang, split)
        if not path.exists():
            raise MushroomError(f"{path}: missing (member {self.name!r}, language {lang})")
        preds = load_predictions(path)
        missing = [it.id for it in items if it.id not in preds]
        if missing:
            raise MushroomError(f"{path}: {len(missing)} items not predicted, e.g. {missing[:3]}")
        chan_path = channel_file(folder / "raw", lang)
        lengths = {it.id: len(it.model_output_text) for it in items}
        channels = read_channels(chan_path, lengths) if chan_path.exists() else {}
        return preds, channels


def parse_members(specs: list[str]) -> list[Member]:
    """`NAME=PATH` or `PATH` (named after the folder) -> members; names must be unique."""
    out = []
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            path, name = spec, Path(spec).name
        out.append(Member(name, Path(path)))
    names = [m.name for m in out]
    if len(set(names)) != len(names):
        raise MushroomError(f"member names must be unique, got {names}; name them with NAME=PATH")
    return out


def _neighbour_mean(vec: np.ndarray) -> np.ndarray:
    n = len(vec)
    csum = np.concatenate([[0.0], np.cumsum(vec)])
    lo = np.clip(np.arange(n) - _WINDOW, 0, n)
    hi = np.clip(np.arange(n) + _WINDOW + 1, 0, n)
    return (csum[hi] - csum[lo]) / np.maximum(hi - lo, 1)


def item_features(
    item: Item,
    member_data: list[tuple[Prediction, dict[str, np.ndarray]]],
    channel_names: list[list[str]],
    languages: list[str],
) -> np.ndarray:
    """Feature matrix (characters x features) of one item; see `feature_names` for columns."""
    text = item.model_output_text
    n = len(text)
    cols: list[np.ndarray] = []
    softs, masks = [], []
    for (pred, chans), names in zip(member_data, channel_names):
        soft, mask = prediction_vectors(pred, n)
        softs.append(soft)
        masks.append(mask.astype(float))
        cols += [soft, mask.astype(float)]
        cols += [chans.get(name, np.zeros(n)) for name in names]
    mean = np.mean(softs, axis=0)
    cols += [mean, np.mean(masks, axis=0), np.max(softs, axis=0), _neighbour_mean(mean)]
    cols.append(np.full(n, mean.max() if n else 0.0))
    cols.append(np.array([ch.isalnum() for ch in text], dtype=float))
    cols.append(np.arange(n) / max(n - 1, 1))
    cols += [np.full(n, float(item.lang == lang)) for lang in languages]
    # Language-specific slopes: a probability from the lexical table means different
    # things in languages whose annotators marked more or less.
    cols += [mean * float(item.lang == lang) for lang in languages]
    cols += _text_columns(item, mean)
    return np.stack(cols, axis=1) if n else np.zeros((0, len(cols)))


TEXT_FEATURES = ["is_number", "is_capitalised", "is_stopword", "word_length", "word_mean", "sentence_mean"]


def _text_columns(item: Item, mean: np.ndarray) -> list[np.ndarray]:
    """What kind of word each character is in, and the members' mean pooled over word and sentence.

    Annotators mark numbers, names and dates far more often than function words, and they
    mark whole words: a detector's evidence varies inside a word (the lexical table grades
    characters of a compound differently) while the gold label rarely does. Pooling the mean
    over the word and the sentence lets the model smooth along the units annotators used.
    """
    text = item.model_output_text
    n = len(text)
    is_num, is_cap, is_stop, length, word_mean = (np.zeros(n) for _ in range(5))
    function_words = stopwords(item.lang)
    for tok in tokenize(text):
        span = slice(tok.start, tok.end)
        is_num[span] = tok.kind == "num"
        is_cap[span] = tok.text[:1].isupper()
        is_stop[span] = tok.norm in function_words
        length[span] = min(len(tok.text), 15) / 15
        word_mean[span] = mean[span].mean()
    sentence_mean = np.zeros(n)
    for piece in sentences(text):
        sentence_mean[piece.start : piece.end] = mean[piece.start : piece.end].mean()
    return [is_num, is_cap, is_stop, length, word_mean, sentence_mean]


def feature_names(members: list[str], channels: list[list[str]], languages: list[str]) -> list[str]:
    """Column names matching `item_features`."""
    names = []
    for member, chans in zip(members, channels):
        names += [f"{member}.prob", f"{member}.hard"] + [f"{member}.{c}" for c in chans]
    names += ["mean_prob", "vote_share", "max_prob", "neighbour_mean", "item_max", "is_alnum", "position"]
    names += [f"lang={lang}" for lang in languages] + [f"mean_prob*lang={lang}" for lang in languages]
    return names + TEXT_FEATURES


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


def _design(features: np.ndarray, mean: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.hstack([np.ones((len(features), 1)), (features - mean) / scale])


@dataclass
class StackData:
    """Features of a labelled or unlabelled set of items, with their item boundaries."""

    items: list[Item]
    features: list[np.ndarray]

    def stacked(self, idx: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(features, gold, weights) of the chosen items; each item weighs the same in total."""
        xs, ys, ws = [], [], []
        for k in idx:
            item, feats = self.items[k], self.features[k]
            n = len(item.model_output_text)
            if n == 0:
                continue
            xs.append(feats)
            ys.append(soft_to_vector(item.soft_labels or [], n))
            ws.append(np.full(n, 1.0 / n))
        return np.vstack(xs), np.concatenate(ys), np.concatenate(ws)


def load_stack_data(
    members: list[Member],
    split: str,
    data: dict[str, list[Item]],
    channels: list[list[str]] | None,
    languages: list[str],
) -> tuple[StackData, list[list[str]]]:
    """Features of every item of the split; channel names default to those found in files."""
    per_member: list[dict[str, tuple[Prediction, dict]]] = [{} for _ in members]
    found: list[set[str]] = [set() for _ in members]
    for lang, items in data.items():
        for k, member in enumerate(members):
            preds, chans = member.load(split, lang, items)
            for it in items:
                per_member[k][it.id] = (preds[it.id], chans.get(it.id, {}))
                found[k].update(chans.get(it.id, {}))
    names = channels if channels is not None else [sorted(f) for f in found]
    all_items = [it for items in data.values() for it in items]
    feats = [
        item_features(it, [per_member[k][it.id] for k in range(len(members))], names, languages)
        for it in all_items
    ]
    return StackData(all_items, feats), names


def _predict(model_coef: np.ndarray, mean: np.ndarray, scale: np.ndarray, feats: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-(_design(feats, mean, scale) @ model_coef)))


_MAX_GAP = 3  # characters of space/punctuation between two marked words that are marked too


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
    mask = np.zeros(len(text), dtype=bool)
    bounds, bridge = _word_runs(text)
    if not len(bounds):
        return mask
    marked = np.array([probs[start:end].max() > threshold for start, end in bounds])
    for (start, end), on in zip(bounds, marked):
        if on:
            mask[start:end] = True
    both = marked[:-1] & marked[1:] & bridge
    for k in np.flatnonzero(both):
        mask[bounds[k, 1] : bounds[k + 1, 0]] = True
    return mask


def _predictions(
    items: list[Item], probs: list[np.ndarray], threshold: float, floor: float
) -> list[Prediction]:
    out = []
    for item, p in zip(items, probs):
        p = np.where(p < floor, 0.0, p)
        out.append(prediction_from_vectors(item.id, p, word_hard_mask(item.model_output_text, p, threshold)))
    return out


def _by_lang_scores(items: list[Item], preds: list[Prediction]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    langs = sorted({it.lang for it in items})
    for lang in langs:
        idx = [k for k, it in enumerate(items) if it.lang == lang]
        res = score_predictions([items[k] for k in idx], [preds[k] for k in idx])
        out[lang] = {"iou": res.mean_iou, "cor": res.mean_cor}
    out["mean"] = {key: float(np.mean([out[lang][key] for lang in langs])) for key in ("iou", "cor")}
    return out


THRESHOLDS = np.round(np.arange(0.05, 0.96, 0.05), 2)
FLOORS = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)


def choose_cutoffs(items: list[Item], probs: list[np.ndarray]) -> tuple[float, float]:
    """(threshold maximising mean IoU, then the floor maximising mean Cor) over the items.

    Scored on vectors directly (the official per-item metrics, without building files):
    this runs for every fold, language and grid point.
    """
    golds = [
        (
            hard_to_mask(it.hard_labels or [], len(it.model_output_text)),
            soft_to_vector(it.soft_labels or [], len(it.model_output_text)),
        )
        for it in items
    ]
    rounded = [np.round(p, 6) for p in probs]

    def mean_iou(t: float) -> float:
        return float(
            np.mean(
                [
                    mask_iou(g[0], word_hard_mask(it.model_output_text, p, t))
                    for it, g, p in zip(items, golds, rounded)
                ]
            )
        )

    def mean_cor(f: float) -> float:
        return float(np.mean([vector_cor(g[1], np.where(p < f, 0.0, p)) for g, p in zip(golds, rounded)]))

    best_t = max(THRESHOLDS, key=mean_iou)
    best_f = max((f for f in FLOORS if f <= best_t), key=mean_cor)
    return float(best_t), float(best_f)


def choose_cutoffs_by_lang(
    items: list[Item], probs: list[np.ndarray]
) -> tuple[tuple[float, float], dict[str, tuple[float, float]]]:
    """Pooled cut-offs (for unseen languages) and each language's own."""
    pooled = choose_cutoffs(items, probs)
    per_lang = {}
    for lang in sorted({it.lang for it in items}):
        idx = [k for k, it in enumerate(items) if it.lang == lang]
        per_lang[lang] = choose_cutoffs([items[k] for k in idx], [probs[k] for k in idx])
    return pooled, per_lang


def _predictions_by_lang(items: list[Item], probs: list[np.ndarray], cutoffs) -> list[Prediction]:
    out = []
    for item, p in zip(items, probs):
        pooled, per_lang = cutoffs
        t, f = per_lang.get(item.lang, pooled)
        out.extend(_predictions([item], [p], t, f))
    return out


def _fit(data: StackData, idx: list[int], l2: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(coefficients, feature means, feature scales) fitted on the chosen items."""
    x, y, w = data.stacked(idx)
    mean, scale = x.mean(0), x.std(0) + 1e-6
    return fit_logistic(_design(x, mean, scale), y, w * len(idx), l2), mean, scale


def cross_validate(data: StackData, folds: int = 5, l2: float = 1.0, seed: int = 0) -> list[np.ndarray]:
    """Out-of-fold probabilities per item (folds drawn by item, stratified by language)."""
    rng = np.random.default_rng(seed)
    fold_of = np.zeros(len(data.items), dtype=int)
    for lang in sorted({it.lang for it in data.items}):
        idx = [k for k, it in enumerate(data.items) if it.lang == lang]
        rng.shuffle(idx)
        for pos, k in enumerate(idx):
            fold_of[k] = pos % folds
    probs: list[np.ndarray] = [np.zeros(0)] * len(data.items)
    for f in range(folds):
        train = [k for k in range(len(data.items)) if fold_of[k] != f]
        test = [k for k in range(len(data.items)) if fold_of[k] == f]
        coef, mean, scale = _fit(data, train, l2)
        for k in test:
            probs[k] = _predict(coef, mean, scale, data.features[k])
    return probs


def fit_stack(
    members: list[Member],
    data: dict[str, list[Item]],
    split: str = "val",
    folds: int = 5,
    l2: float = 1.0,
) -> StackFit:
    """Fits the stack on labelled items.

    Returns:
        The model (fitted on all items, cut-offs and hard-label sources chosen out of fold),
        the scores per system (each member, their plain vote, the stack out of fold: system ->
        lang -> metric) and the stack's out-of-fold predictions per language, which are honest
        to score.
    """
    languages = sorted(data)
    stack_data, channels = load_stack_data(members, split, data, None, languages)
    items = stack_data.items
    oof = cross_validate(stack_data, folds, l2)
    cutoffs = choose_cutoffs_by_lang(items, oof)
    coef, mean, scale = _fit(stack_data, list(range(len(items))), l2)
    # Cut-offs chosen on out-of-fold probabilities of the same items they are scored on
    # would flatter the CV numbers; nested: each fold's cut-offs come from the other folds.
    own = _nested_cutoff_predictions(items, oof, folds)
    member_cols = _member_columns(members, channels)
    masks = {"stack": [hard_to_mask(p.hard_labels, len(it.model_output_text)) for it, p in zip(items, own)]}
    comparison: dict[str, dict[str, dict[str, float]]] = {}
    for member, col in zip(members, member_cols):
        masks[member.name] = [f[:, col + 1] > 0.5 for f in stack_data.features]
        preds = [
            prediction_from_vectors(it.id, f[:, col], m)
            for it, f, m in zip(items, stack_data.features, masks[member.name])
        ]
        comparison[member.name] = _by_lang_scores(items, preds)
    # The logistic model ranks characters well (Cor), but in some languages a member's own
    # hard labels have the better IoU than any threshold on the stack's probability; the
    # source of the hard labels is chosen per language on out-of-fold IoU (nested for the CV
    # numbers), and the stack always supplies the soft labels.
    gold = [hard_to_mask(it.hard_labels or [], len(it.model_output_text)) for it in items]
    ious = {name: np.array([mask_iou(g, m) for g, m in zip(gold, ms)]) for name, ms in masks.items()}
    chosen = nested_hard_sources(items, ious, folds)
    stack_preds = [
        prediction_from_vectors(it.id, soft_to_vector(p.soft_labels, len(g)), masks[src][k])
        for k, (it, p, g, src) in enumerate(zip(items, own, gold, chosen))
    ]
    comparison = {
        "stack (CV)": _by_lang_scores(items, stack_preds),
        "stack (CV, own hard labels)": _by_lang_scores(items, own),
        **comparison,
    }
    if len(members) > 1:
        vote_col = sum(2 + len(c) for c in channels) + 1
        preds = [
            prediction_from_vectors(it.id, f[:, vote_col - 1], f[:, vote_col] > 0.5)
            for it, f in zip(items, stack_data.features)
        ]
        comparison["vote (mean prob, majority)"] = _by_lang_scores(items, preds)
    pooled_source, lang_sources = best_hard_sources(items, ious, range(len(items)))
    model = StackModel(
        members=[m.name for m in members],
        channels={m.name: c for m, c in zip(members, channels)},
        languages=languages,
        features=feature_names([m.name for m in members], channels, languages),
        coef=coef.tolist(),
        mean=mean.tolist(),
        scale=scale.tolist(),
        threshold=cutoffs[0][0],
        floor=cutoffs[0][1],
        thresholds={lang: tf[0] for lang, tf in cutoffs[1].items()},
        floors={lang: tf[1] for lang, tf in cutoffs[1].items()},
        l2=l2,
        hard_from=pooled_source,
        hard_sources=lang_sources,
        cv=comparison["stack (CV)"],
        fitted_on=f"{split}: " + ", ".join(f"{lang} ({len(v)})" for lang, v in data.items()),
    )
    oof_by_lang: dict[str, list[Prediction]] = {}
    for item, pred in zip(items, stack_preds):
        oof_by_lang.setdefault(item.lang, []).append(pred)
    return StackFit(model, comparison, oof_by_lang)


def best_hard_sources(items: list[Item], ious: dict[str, np.ndarray], idx) -> tuple[str, dict[str, str]]:
    """(source with the best mean IoU over the chosen items, each language's best source).

    The stack comes first so a tie keeps its own hard labels.
    """
    idx = np.asarray(list(idx), dtype=int)

    def best(sel: np.ndarray) -> str:
        return max(ious, key=lambda name: float(ious[name][sel].mean()))

    langs = np.array([items[k].lang for k in idx])
    per_lang = {str(lang): best(idx[langs == lang]) for lang in sorted(set(langs))}
    return best(idx), per_lang


def nested_hard_sources(items: list[Item], ious: dict[str, np.ndarray], folds: int) -> list[str]:
    """Each item's hard-label source as chosen on the other folds (same folds as the cut-offs)."""
    chosen = [""] * len(items)
    for f in range(folds):
        train = [k for k in range(len(items)) if k % folds != f]
        pooled, per_lang = best_hard_sources(items, ious, train)
        for k in range(f, len(items), folds):
            chosen[k] = per_lang.get(items[k].lang, pooled)
    return chosen


def _nested_cutoff_predictions(
    items: list[Item], probs: list[np.ndarray], folds: int = 5
) -> list[Prediction]:
    """Out-of-fold predictions whose cut-offs were chosen without the item (by item folds)."""
    out: list[Prediction | None] = [None] * len(items)
    for f in range(folds):
        test = [k for k in range(len(items)) if k % folds == f]
        train = [k for k in range(len(items)) if k % folds != f]
        cutoffs = choose_cutoffs_by_lang([items[k] for k in train], [probs[k] for k in train])
        for k, pred in zip(
            test, _predictions_by_lang([items[k] for k in test], [probs[k] for k in test], cutoffs)
        ):
            out[k] = pred
    return [p for p in out if p is not None]


def _member_columns(members: list[Member], channels: list[list[str]]) -> list[int]:
    cols, pos = [], 0
    for chans in channels:
        cols.append(pos)
        pos += 2 + len(chans)
    return cols


def apply_stack(
    model: StackModel, members: list[Member], split: str, data: dict[str, list[Item]]
) -> dict[str, list[Prediction]]:
    """Predictions per language from the members' files of a split, with a fitted stack."""
    if [m.name for m in members] != model.members:
        raise MushroomError(
            f"the stack was fitted on members {model.members}; got {[m.name for m in members]} "
            "(same names and order, as NAME=PATH)"
        )
    channels = [model.channels[m.name] for m in members]
    names = feature_names(model.members, channels, model.languages)
    if names != model.features:
        raise MushroomError(
            f"the stack was fitted with other features ({len(model.features)} columns, this version "
            f"makes {len(names)}); fit it again with `mushroom stack fit`"
        )
    stack_data, _ = load_stack_data(members, split, data, channels, model.languages)
    coef, mean, scale = np.array(model.coef), np.array(model.mean), np.array(model.scale)
    hard_cols = {m: c + 1 for m, c in zip(model.members, _member_columns(members, channels))}
    out: dict[str, list[Prediction]] = {}
    for item, feats in zip(stack_data.items, stack_data.features):
        p = _predict(coef, mean, scale, feats) if len(feats) else np.zeros(0)
        t = model.thresholds.get(item.lang, model.threshold)
        f = model.floors.get(item.lang, model.floor)
        p = np.where(p < f, 0.0, p)
        source = model.hard_sources.get(item.lang, model.hard_from)
        if source == "stack":
            hard = word_hard_mask(item.model_output_text, p, t)
        else:
            hard = feats[:, hard_cols[source]] > 0.5
        out.setdefault(item.lang, []).append(prediction_from_vectors(item.id, p, hard))
    return out
