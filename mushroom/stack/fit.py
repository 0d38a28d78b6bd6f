"""Fitting a stack on labelled member runs (with honest CV numbers) and applying it to a split."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mushroom.errors import MushroomError
from mushroom.predictions import prediction_from_vectors
from mushroom.records import Item, Prediction
from mushroom.scoring.metrics import mask_iou
from mushroom.scoring.score import score_predictions
from mushroom.spans import hard_to_mask, soft_to_vector
from mushroom.stack.decoding import (
    CutoffScores,
    best_hard_sources,
    decode_by_lang,
    nested_cutoffs,
    nested_hard_sources,
    word_hard_mask,
)
from mushroom.stack.features import StackData, feature_names, load_stack_data, member_columns
from mushroom.stack.folds import item_folds, split_indices
from mushroom.stack.members import Member
from mushroom.stack.model import StackModel, fit_items, predict


@dataclass
class StackFit:
    """What fitting returns: the model, the CV comparison and out-of-fold predictions."""

    model: StackModel
    comparison: dict[str, dict[str, dict[str, float]]]
    oof: dict[str, list[Prediction]]


def by_lang_scores(items: list[Item], preds: list[Prediction]) -> dict[str, dict[str, float]]:
    """Mean IoU and Cor per language and their unweighted mean over languages."""
    out: dict[str, dict[str, float]] = {}
    langs = sorted({it.lang for it in items})
    for lang in langs:
        idx = [k for k, it in enumerate(items) if it.lang == lang]
        res = score_predictions([items[k] for k in idx], [preds[k] for k in idx])
        out[lang] = {"iou": res.mean_iou, "cor": res.mean_cor}
    out["mean"] = {key: float(np.mean([out[lang][key] for lang in langs])) for key in ("iou", "cor")}
    return out


def cross_validate(data: StackData, fold_of: np.ndarray, l2: float = 1.0) -> list[np.ndarray]:
    """Out-of-fold probabilities per item."""
    probs: list[np.ndarray] = [np.zeros(0)] * len(data.items)
    for f in sorted(set(fold_of.tolist())):
        train, test = split_indices(fold_of, f)
        coef, mean, scale = fit_items(data, train, l2)
        for k in test:
            probs[k] = predict(coef, mean, scale, data.features[k])
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
    fold_of = item_folds(items, folds)
    oof = cross_validate(stack_data, fold_of, l2)
    scores = CutoffScores.build(items, oof)
    cutoffs = scores.choose_by_lang(range(len(items)))
    coef, mean, scale = fit_items(stack_data, list(range(len(items))), l2)
    # Cut-offs chosen on out-of-fold probabilities of the same items they are scored on
    # would flatter the CV numbers; nested: each fold's cut-offs come from the other folds
    # (the same folds as the model's, so no choice applied to an item has seen its label).
    nested = nested_cutoffs(scores, fold_of)
    own = [decode_by_lang([it], [p], nested[int(fold_of[k])])[0] for k, (it, p) in enumerate(zip(items, oof))]
    member_cols = member_columns(channels)
    masks = {"stack": [hard_to_mask(p.hard_labels, len(it.model_output_text)) for it, p in zip(items, own)]}
    comparison: dict[str, dict[str, dict[str, float]]] = {}
    for member, col in zip(members, member_cols):
        masks[member.name] = [f[:, col + 1] > 0.5 for f in stack_data.features]
        preds = [
            prediction_from_vectors(it.id, f[:, col], m)
            for it, f, m in zip(items, stack_data.features, masks[member.name])
        ]
        comparison[member.name] = by_lang_scores(items, preds)
    # The logistic model ranks characters well (Cor), but in some languages a member's own
    # hard labels have the better IoU than any threshold on the stack's probability; the
    # source of the hard labels is chosen per language on out-of-fold IoU (nested for the CV
    # numbers), and the stack always supplies the soft labels.
    gold = [hard_to_mask(it.hard_labels or [], len(it.model_output_text)) for it in items]
    ious = {name: np.array([mask_iou(g, m) for g, m in zip(gold, ms)]) for name, ms in masks.items()}
    chosen = nested_hard_sources(items, ious, fold_of)
    stack_preds = [
        prediction_from_vectors(it.id, soft_to_vector(p.soft_labels, len(g)), masks[src][k])
        for k, (it, p, g, src) in enumerate(zip(items, own, gold, chosen))
    ]
    comparison = {
        "stack (CV)": by_lang_scores(items, stack_preds),
        "stack (CV, own hard labels)": by_lang_scores(items, own),
        **comparison,
    }
    if len(members) > 1:
        vote_col = sum(2 + len(c) for c in channels) + 1
        preds = [
            prediction_from_vectors(it.id, f[:, vote_col - 1], f[:, vote_col] > 0.5)
            for it, f in zip(items, stack_data.features)
        ]
        comparison["vote (mean prob, majority)"] = by_lang_scores(items, preds)
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
    hard_cols = {m: c + 1 for m, c in zip(model.members, member_columns(channels))}
    out: dict[str, list[Prediction]] = {}
    for item, feats in zip(stack_data.items, stack_data.features):
        p = predict(coef, mean, scale, feats) if len(feats) else np.zeros(0)
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
