"""Fitting a stack on labelled member runs (with honest CV numbers) and applying it to a split."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from mushroom.combine.stack.decoding import (
    CutoffScores,
    best_hard_sources,
    decode_by_lang,
    nested_cutoffs,
    nested_hard_sources,
    pool_words,
    word_hard_mask,
)
from mushroom.combine.stack.empty import fit_empty_rule, item_features, nested_empties
from mushroom.combine.stack.features import (
    POOLED_FEATURES,
    StackData,
    feature_names,
    load_stack_data,
    member_columns,
)
from mushroom.combine.stack.fingerprint import stack_fingerprint
from mushroom.combine.stack.folds import item_folds, split_indices
from mushroom.combine.stack.members import Member
from mushroom.combine.stack.model import ModelKind, Scorer, StackModel, fit_items
from mushroom.combine.stack.usage import ChannelUse
from mushroom.data.predictions import prediction_from_vectors
from mushroom.data.records import Item, Prediction
from mushroom.data.spans import hard_to_mask, soft_to_vector
from mushroom.detectors import calls_model
from mushroom.errors import MushroomError
from mushroom.evaluation.metrics import item_iou, mask_iou
from mushroom.evaluation.score import score_predictions


class StackConfig(BaseModel):
    """How the stack makes its choices (saved with the model).

    Per-language choices made on ~40 items did not transfer to test (English picked the
    member that does worse there), so each can be shrunk toward the pooled choice: a
    weight of k pulls a language's score curve toward the pooled one by k items' worth
    (0: each language on its own, as before; a very large k: one pooled choice).

    From val (5-fold CV, every choice nested, three fold draws): thresholds and hard-label
    sources shrunk by 20 items (the sources' default until it went to 50, below) gave mean
    IoU 0.5351 (draws 0.5393, 0.5349, 0.5310) against 0.5309 (0.5425, 0.5200, 0.5301) for
    per-language choices, at equal Cor; the floor stays per language (English's floor,
    0.05 against 0.30 pooled, is the same in every fold, and shrinking it cost English
    0.02 Cor).

    A language with no val items (ca, cs, eu, fa) has all its language columns at 0, a point
    no training row has. Held out in turn, the ten val languages were marked better by a
    stack fitted without language columns and ranked worse (IoU +0.0127 [+0.0014, +0.0234],
    Cor -0.0078 [-0.0125, -0.0032]; `python benchmarks/stack_lolo.py --compare`), so such a
    language takes that stack's hard labels and this one's soft labels (`unseen_hard`).

    The hard-label source is shrunk by 50 items: a language's ~40 items are averaged with
    50 items' worth of the pooled IoU per source, so in effect one pooled source (the
    stack) unless a language's own items differ from it by a wide margin. Over five fold
    draws with every choice nested, 20 items let Spanish (draw 0) and Hindi (draw 2) take
    the semantic member's hard labels (outside English it scores as the lexical member
    does, so in effect the lexical ones), and both lost IoU out of fold: mean IoU 0.5709
    against 0.5712 for 50 items or one pooled source, Spanish on draw 0 0.3803 against
    0.3914. In no draw did leaving the stack gain (`python benchmarks/stack_val.py --seeds
    0,1,2,3,4 --source-shrink 20,50,1e9` prints the five draws).
    """

    model_config = ConfigDict(extra="forbid")

    cutoff_shrink: float = Field(20.0, ge=0.0, description="shrinkage of per-language thresholds (items)")
    floor_shrink: float = Field(0.0, ge=0.0, description="shrinkage of per-language floors (items)")
    source_shrink: float = Field(50.0, ge=0.0, description="shrinkage of per-language hard-label source")
    empty_rule: bool = Field(
        True, description="learn an item-level 'mark nothing' rule (mushroom.combine.stack.empty)"
    )
    unseen_hard: bool = Field(
        True,
        description="a language the stack was not fitted on takes its hard labels from a stack "
        "fitted without language columns",
    )


@dataclass
class StackFit:
    """What fitting returns: the model, the CV comparison, out-of-fold predictions, fold spread.

    `folds` holds, per fold, the stack's scores on that fold's items (`scores`: lang ->
    metric, with the mean) and the choices made without them (`cutoffs`: lang -> [threshold,
    floor]; `sources`: lang -> hard-label source), so a reader sees how much each number
    and each choice moves with the draw of 40 items.
    """

    model: StackModel
    comparison: dict[str, dict[str, dict[str, float]]]
    oof: dict[str, list[Prediction]]
    folds: list[dict] = field(default_factory=list)

    def fingerprint(self) -> str:
        """The fingerprint of the inputs this fit was made from (see `stack_fingerprint`)."""
        return self.model.fingerprint

    def save(self, path: Path) -> Path:
        """Writes the whole fit (model, comparison, out-of-fold predictions, folds) as JSON."""
        record = StackFitRecord(model=self.model, comparison=self.comparison, oof=self.oof, folds=self.folds)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(record.model_dump_json(), encoding="utf-8")
        os.replace(tmp, path)  # a kill mid-write leaves the old file or none, never half of one
        return path

    @classmethod
    def load(cls, path: Path) -> StackFit:
        """A fit written by `save`; a file that is not one names itself in the error."""
        try:
            rec = StackFitRecord.model_validate_json(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise MushroomError(f"{path}: not a saved stack fit ({exc})") from exc
        return cls(rec.model, rec.comparison, rec.oof, rec.folds)


class StackFitRecord(BaseModel):
    """The on-disk form of a StackFit."""

    model_config = ConfigDict(extra="forbid")

    model: StackModel
    comparison: dict[str, dict[str, dict[str, float]]]
    oof: dict[str, list[Prediction]]
    folds: list[dict] = Field(default_factory=list)


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


def cross_validate(
    data: StackData,
    fold_of: np.ndarray,
    kind: ModelKind = "blend",
    l2: float = 1.0,
    word_pooling: bool = True,
) -> list[np.ndarray]:
    """Out-of-fold probabilities per item."""
    probs: list[np.ndarray] = [np.zeros(0)] * len(data.items)
    for f in sorted(set(fold_of.tolist())):
        train, test = split_indices(fold_of, f)
        scorer = fit_items(data, train, kind, l2)
        fold_probs = batch_probs(
            [data.items[k] for k in test], [data.features[k] for k in test], scorer, word_pooling
        )
        for k, p in zip(test, fold_probs):
            probs[k] = p
    return probs


def batch_probs(
    items: list[Item], feats: list[np.ndarray], scorer: Scorer, word_pooling: bool
) -> list[np.ndarray]:
    """The model's per-character probabilities of many items (pooled over words when asked).

    All items' rows go through the model in one call: the trees' numpy evaluation is a
    Python loop over trees and levels, so its cost is mostly per call, not per row.
    """
    rows = [f for f in feats if len(f)]
    flat = scorer(np.vstack(rows)) if rows else np.zeros(0)
    out, pos = [], 0
    for item, f in zip(items, feats):
        p, pos = flat[pos : pos + len(f)], pos + len(f)
        out.append(pool_words(item.model_output_text, p) if word_pooling and len(p) else p)
    return out


def fit_stack(
    members: list[Member],
    data: dict[str, list[Item]],
    split: str = "val",
    folds: int = 5,
    l2: float = 1.0,
    config: StackConfig | None = None,
    model: ModelKind = "blend",
    gate: Sequence[str] | None = None,
) -> StackFit:
    """Fits the stack on labelled items.

    `model` is the kind (`blend`, the default: the mean of `logistic` and `trees`); `l2` is
    the logistic model's penalty (the trees' settings are `TreeSettings`'s defaults).

    `gate` names the members the stack may leave out, chosen out of fold (`gate_members`);
    None: the members whose runs were made with a model-backed detector (llm, chain, pyes),
    so a weak model cannot pull the CPU stack down. A stack of CPU members alone is fitted
    once, as before.

    Returns:
        The model (fitted on all items, cut-offs and hard-label sources chosen out of fold),
        the scores per system (each member, their plain vote, the stack out of fold: system ->
        lang -> metric), the stack's out-of-fold predictions per language, which are honest
        to score, and the per-fold scores and choices.
    """
    if folds < 2 or l2 < 0:
        raise MushroomError(f"the stack needs folds >= 2 and l2 >= 0 (got folds={folds}, l2={l2})")
    largest = max((len(items) for items in data.values()), default=0)
    if largest and largest < 2:
        raise MushroomError("the stack is fitted by cross-validation: a language needs 2 items or more")
    if largest and largest < folds:
        # folds are dealt per language: past the largest language's count, folds are empty
        raise MushroomError(
            f"--folds {folds}: no language has more than {largest} items; "
            f"use --folds {max(2, largest)} or fewer"
        )
    languages = sorted(data)
    if gate is None:
        # a member whose detector calls a model (Detector.calls_model) may be left out: on small
        # hardware its model is usually weak, and 90 val items of a 270M model's P(yes) cost a
        # stack 0.07 IoU (benchmarks/llm_quality.py)
        gate = [m.name for m in members if calls_model(m.detector())]
    gated = [m.name for m in members if m.name in gate]

    def fit_on(chosen: list[Member]) -> StackFit:
        stack_data, channels, found = load_stack_data(chosen, split, data, None, languages)
        fit = fit_stack_data(stack_data, channels, [m.name for m in chosen], folds, l2, config, model)
        fit.model.channels_by_lang = {m.name: by_lang for m, by_lang in zip(chosen, found)}
        use = ChannelUse([m.name for m in chosen], channels)
        use.add(stack_data.items, stack_data.features)
        fit.model.channel_use = use.shares()
        return fit

    unseen = (config or StackConfig()).unseen_hard
    # its members known (none to gate), the second stack is fitted beside the first: 35 s
    # against 44 s on 2 cores (the trees and the linear algebra release the GIL)
    early = (
        _Background(_unseen_model, members, data, split, folds, l2, config, model)
        if unseen and not gated
        else None
    )
    fit = fit_on(members)
    items = [it for lang in languages for it in data[lang]]
    kept, decisions = list(members), {}
    for name in gated:  # each on its own, in the order given: a good llm is not dropped with a weak pyes
        rest = [m for m in kept if m.name != name]
        if not rest:
            break
        fit, decisions[name] = gate_members(fit, fit_on(rest), name, items, folds)
        if not decisions[name]["kept"]:
            kept = rest
    if decisions:
        fit.model.gate = decisions
    if early is not None:
        fit.model.unseen_hard = early.result()
    elif unseen:
        fit.model.unseen_hard = _unseen_model(
            [m for m in members if m.name in fit.model.members], data, split, folds, l2, config, model
        )
    if len(kept) < len(members):
        fit.model.fitted_members = [m.name for m in members]
    # read once, of every member given (a member left out is still applied with, and checked)
    fit.model.member_detectors = {m.name: d for m in members if (d := m.detector()) is not None}
    fit.model.member_settings = {m.name: s for m in members if (s := m.settings()) is not None}
    fit.model.fitted_on = f"{split}: " + ", ".join(f"{lang} ({len(v)})" for lang, v in data.items())
    fit.model.fingerprint = stack_fingerprint(members, data, split, folds, l2, config, model)
    return fit


class _Background:
    """A call run on a daemon thread: a Ctrl-C during the fit is not held up until it ends."""

    def __init__(self, call: Callable[..., Any], *args: Any):
        self._result: Any = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._result = call(*args)
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                self._error = exc

        self._thread = threading.Thread(target=run, name="mushroom-stack-fit", daemon=True)
        self._thread.start()

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result


def _unseen_model(
    members: list[Member],
    data: dict[str, list[Item]],
    split: str,
    folds: int,
    l2: float,
    config: StackConfig | None,
    model: ModelKind,
) -> StackModel:
    """The stack of the same members fitted without language columns: for languages it never saw."""
    stack_data, channels, found = load_stack_data(members, split, data, None, [])
    names = [m.name for m in members]
    fitted = fit_stack_data(
        stack_data, channels, names, folds, l2, config, model, language_columns=False
    ).model
    # applied on its own (benchmarks/stack_lolo.py --compare), it checks each language's
    # channels as the stack does: over all languages, English's encoder channels were owed
    fitted.channels_by_lang = {m.name: by_lang for m, by_lang in zip(members, found)}
    return fitted


def without_language_columns(model: StackModel, stack_data: StackData) -> StackData:
    """`stack_data` (loaded for `model`) without its language columns, as `model.unseen_hard` reads it."""
    start = sum(2 + len(model.channels[m]) for m in model.members) + POOLED_FEATURES
    stop = start + 2 * len(model.languages)
    return StackData(stack_data.items, [np.delete(f, np.s_[start:stop], axis=1) for f in stack_data.features])


def gate_members(
    with_: StackFit, without: StackFit, name: str, items: list[Item], folds: int
) -> tuple[StackFit, dict[str, Any]]:
    """The stack with or without member `name`: whichever has the better out-of-fold IoU.

    Nested as the stack's cut-offs are: each fold's items get the predictions of the fit that
    scored better on the other folds' items, so no item's own IoU takes part in the choice
    applied to it (the other folds' out-of-fold predictions come from models that saw it, as
    for the cut-offs); the model kept is the one better over all items. A tie keeps the
    stack without them (fewer model calls to depend on). The score is the task's: IoU
    averaged per language, then over languages. IoU decides, not Cor: the leaderboard ranks
    by IoU, and a weak member's harm shows in the hard labels (its probabilities can still
    sharpen the ranking). `with_` may itself be the outcome of an earlier member's choice.

    Returns:
        One StackFit (the chosen model, the gated out-of-fold predictions and per-fold
        reports, both fits' CV rows in the comparison) and the decision: kept, the two
        out-of-fold IoUs, in how many folds it was kept. The caller records the members
        given, so a stack that left some out is applied with the same list.
    """
    fold_of = item_folds(items, folds, 0)  # the folds both fits used (prepare's draw)

    def per_item(fit: StackFit) -> tuple[list[Prediction], np.ndarray]:
        taken = {lang: iter(v) for lang, v in fit.oof.items()}
        preds = [next(taken[it.lang]) for it in items]
        return preds, np.array(
            [
                item_iou(it.hard_labels or [], p.hard_labels, len(it.model_output_text))
                for it, p in zip(items, preds)
            ]
        )

    (preds_with, iou_with), (preds_without, iou_without) = per_item(with_), per_item(without)
    langs = np.array([it.lang for it in items])

    def task_mean(ious: np.ndarray, where: np.ndarray) -> float:
        """Mean over languages of the mean IoU of the items `where` selects."""
        return float(np.mean([ious[where & (langs == lang)].mean() for lang in np.unique(langs[where])]))

    keep_in_fold = {}
    for f in sorted(set(fold_of.tolist())):
        others = fold_of != f
        keep_in_fold[f] = task_mean(iou_with, others) > task_mean(iou_without, others)
    everything = np.ones(len(items), dtype=bool)
    mean_with, mean_without = task_mean(iou_with, everything), task_mean(iou_without, everything)
    keep = mean_with > mean_without
    gated = [preds_with[k] if keep_in_fold[int(fold_of[k])] else preds_without[k] for k in range(len(items))]
    oof: dict[str, list[Prediction]] = {}
    for it, pred in zip(items, gated):
        oof.setdefault(it.lang, []).append(pred)
    chosen = with_ if keep else without
    model = chosen.model.model_copy(deep=True)
    decision = {
        "kept": keep,
        "iou_with": round(mean_with, 4),
        "iou_without": round(mean_without, 4),
        "folds_kept": sum(keep_in_fold.values()),
        "folds": len(keep_in_fold),
    }
    cv = by_lang_scores(items, gated)
    model.cv = cv
    earlier = {k: v for k, v in with_.comparison.items() if k.startswith(("stack with ", "stack without "))}
    comparison = {
        "stack (CV)": cv,
        **earlier,  # an earlier member's decision
        f"stack with {name} (CV)": with_.comparison["stack (CV)"],
        f"stack without {name} (CV)": without.comparison["stack (CV)"],
        # the other rows (own hard labels, the vote) are the chosen stack's; each member's own
        # row comes from the fit that had it
        **{k: v for k, v in chosen.comparison.items() if k != "stack (CV)" and k not in earlier},
        **{k: v for k, v in with_.comparison.items() if k == name},
    }
    reports = []
    for f, (a, b) in enumerate(zip(with_.folds, without.folds)):
        kept = keep_in_fold.get(f, keep)
        reports.append({**(a if kept else b), name: "kept" if kept else "left out"})
    return StackFit(model, comparison, oof, reports), decision


@dataclass
class StackPrep:
    """What a fit computes before any choice: folds, out-of-fold probabilities, score tables.

    None of it depends on the StackConfig, so configurations are compared on one of these.
    """

    data: StackData
    channels: list[list[str]]
    member_names: list[str]
    fold_of: np.ndarray
    oof: list[np.ndarray]
    scores: CutoffScores
    scorer: Scorer


def prepare(
    stack_data: StackData,
    channels: list[list[str]],
    member_names: list[str],
    folds: int = 5,
    l2: float = 1.0,
    seed: int = 0,
    model: ModelKind = "blend",
) -> StackPrep:
    """Folds, the out-of-fold model probabilities, their cut-off score table and the full fit.

    `seed` draws the folds: the CV numbers of one draw move by about 0.01 on the mean and by
    up to 0.04 on one language's 50 items, so a benchmark can average over draws.
    """
    items = stack_data.items
    fold_of = item_folds(items, folds, seed)
    oof = cross_validate(stack_data, fold_of, model, l2)
    scorer = fit_items(stack_data, list(range(len(items))), model, l2)
    return StackPrep(stack_data, channels, member_names, fold_of, oof, CutoffScores.build(items, oof), scorer)


def fit_stack_data(
    stack_data: StackData,
    channels: list[list[str]],
    member_names: list[str],
    folds: int = 5,
    l2: float = 1.0,
    config: StackConfig | None = None,
    model: ModelKind = "blend",
    language_columns: bool = True,
    features: list[str] | None = None,
) -> StackFit:
    """`fit_stack` on features already loaded.

    `language_columns=False`: the features were loaded without language columns (a
    language-agnostic stack, `StackModel.unseen_hard`); the model says so.
    `features`: the columns' names where they are not the loaded ones (see `choose`).
    """
    prep = prepare(stack_data, channels, member_names, folds, l2, model=model)
    return choose(prep, config, language_columns, features)


def choose(
    prep: StackPrep,
    config: StackConfig | None = None,
    language_columns: bool = True,
    features: list[str] | None = None,
) -> StackFit:
    """The fit's choices (cut-offs, hard-label sources) for one configuration, nested and final.

    `features`: the names of the columns where a study changed them (a column dropped, evidence
    columns added: `benchmarks/feature_ablation.py`); the model's shape check refused such a
    fit ("its logistic model has 68 features, the stack 69").
    """
    config = config or StackConfig()
    stack_data, channels, member_names = prep.data, prep.channels, prep.member_names
    items, fold_of, oof = stack_data.items, prep.fold_of, prep.oof
    languages = sorted({it.lang for it in items})
    column_langs = languages if language_columns else []  # the model's language columns
    cutoffs = prep.scores.choose_by_lang(range(len(items)), config.cutoff_shrink, config.floor_shrink)
    # Cut-offs chosen on out-of-fold probabilities of the same items they are scored on
    # would flatter the CV numbers; nested: each fold's cut-offs come from the other folds
    # (the same folds as the model's, so no choice applied to an item has seen its label).
    nested = nested_cutoffs(prep.scores, fold_of, config.cutoff_shrink, config.floor_shrink)
    own = [decode_by_lang([it], [p], nested[int(fold_of[k])])[0] for k, (it, p) in enumerate(zip(items, oof))]
    member_cols = member_columns(channels)
    masks = {"stack": [hard_to_mask(p.hard_labels, len(it.model_output_text)) for it, p in zip(items, own)]}
    comparison: dict[str, dict[str, dict[str, float]]] = {}
    for name, col in zip(member_names, member_cols):
        masks[name] = [f[:, col + 1] > 0.5 for f in stack_data.features]
        preds = [
            prediction_from_vectors(it.id, f[:, col], m)
            for it, f, m in zip(items, stack_data.features, masks[name])
        ]
        comparison[name] = by_lang_scores(items, preds)
    # The logistic model ranks characters well (Cor), but in some languages a member's own
    # hard labels have the better IoU than any threshold on the stack's probability; the
    # source of the hard labels is chosen per language on out-of-fold IoU (nested for the CV
    # numbers), and the stack always supplies the soft labels.
    gold = [hard_to_mask(it.hard_labels or [], len(it.model_output_text)) for it in items]
    ious = {name: np.array([mask_iou(g, m) for g, m in zip(gold, ms)]) for name, ms in masks.items()}
    chosen, fold_sources = nested_hard_sources(items, ious, fold_of, config.source_shrink)
    stack_preds = [
        prediction_from_vectors(it.id, soft_to_vector(p.soft_labels, len(g)), masks[src][k])
        for k, (it, p, g, src) in enumerate(zip(items, own, gold, chosen))
    ]
    # Marking nothing gains 1[gold empty] - IoU on an item; the rule that predicts when it
    # pays is fitted pooled over languages, nested like the other choices.
    empty_feats = np.array([item_features(len(it.model_output_text), p) for it, p in zip(items, oof)])
    empty_gain = np.array([float(not g.any()) - ious[src][k] for k, (g, src) in enumerate(zip(gold, chosen))])
    empty_rule = None
    emptied = np.zeros(len(items), dtype=bool)
    if config.empty_rule:
        emptied = nested_empties(empty_feats, empty_gain, fold_of)
        stack_preds = [
            p.model_copy(update={"hard_labels": []}) if e else p for p, e in zip(stack_preds, emptied)
        ]
        empty_rule = fit_empty_rule(empty_feats, empty_gain)
    comparison = {
        "stack (CV)": by_lang_scores(items, stack_preds),
        "stack (CV, own hard labels)": by_lang_scores(items, own),
        **comparison,
    }
    if len(member_names) > 1:
        vote_col = sum(2 + len(c) for c in channels) + 1
        preds = [
            prediction_from_vectors(it.id, f[:, vote_col - 1], f[:, vote_col] > 0.5)
            for it, f in zip(items, stack_data.features)
        ]
        comparison["vote (mean prob, majority)"] = by_lang_scores(items, preds)
    pooled_source, lang_sources = best_hard_sources(items, ious, range(len(items)), config.source_shrink)
    fold_report = []
    for f in sorted(nested):
        idx = [k for k in range(len(items)) if fold_of[k] == f]
        fold_report.append(
            {
                "scores": by_lang_scores([items[k] for k in idx], [stack_preds[k] for k in idx]),
                "cutoffs": {lang: list(tf) for lang, tf in nested[f][1].items()},
                "sources": fold_sources[f],
                "emptied": {
                    lang: int(sum(emptied[k] for k in idx if items[k].lang == lang)) for lang in languages
                },
            }
        )
    model = StackModel(
        members=member_names,
        channels=dict(zip(member_names, channels)),
        languages=column_langs,
        features=features if features is not None else feature_names(member_names, channels, column_langs),
        scorer=prep.scorer,
        threshold=cutoffs[0][0],
        floor=cutoffs[0][1],
        thresholds={lang: tf[0] for lang, tf in cutoffs[1].items()},
        floors={lang: tf[1] for lang, tf in cutoffs[1].items()},
        hard_from=pooled_source,
        hard_sources=lang_sources,
        empty_rule=empty_rule,
        cv=comparison["stack (CV)"],
        config=config.model_dump(),
        word_pooling=True,
    )
    oof_by_lang: dict[str, list[Prediction]] = {}
    for item, pred in zip(items, stack_preds):
        oof_by_lang.setdefault(item.lang, []).append(pred)
    return StackFit(model, comparison, oof_by_lang, fold_report)


def stack_behind(
    comparison: dict[str, dict[str, dict[str, float]]],
    members: tuple[str, ...] | list[str],
    advice: str = "`--detector {best}` runs it alone",
) -> list[str]:
    """A warning when a member alone beat the stack out of fold on val (mean IoU over languages).

    On few labelled items (one language's 50, say) the stack's choices are noisy and it can
    score below a member; the table shows it, but a user who reads only the test files
    should hear it.
    """
    stack = comparison.get("stack (CV)", {}).get("mean", {}).get("iou")
    scores = {m: comparison.get(m, {}).get("mean", {}).get("iou") for m in members}
    scores = {m: v for m, v in scores.items() if v is not None}
    if stack is None or not scores:
        return []
    best = max(scores, key=lambda m: scores[m])
    if round(scores[best], 4) <= round(stack, 4):  # as printed: "0.4888 beat the stack (0.4888)" was said
        return []
    return [
        f"on val, member {best!r} alone (IoU {scores[best]:.4f}) beat the stack out of fold ({stack:.4f}): "
        f"with this little labelled data the stack may not help; " + advice.format(best=best)
    ]


def apply_stack(
    model: StackModel,
    members: list[Member],
    split: str,
    data: dict[str, list[Item]],
    warn: Callable[[str], None] | None = None,
) -> dict[str, list[Prediction]]:
    """Predictions per language from the members' files of a split, with a fitted stack.

    `warn` is told of what the prediction may lack, e.g. a language where a member wrote no
    evidence channels. For a corpus too large to hold, `mushroom.combine.stack.stream`
    applies the same model a chunk at a time.
    """
    members, channels = applicable_channels(model, members, warn)
    stack_data, _, _ = load_stack_data(
        members, split, data, channels, model.languages, model.channels_by_lang, warn
    )
    if warn is not None:
        use = ChannelUse([m.name for m in members], channels)
        use.add(stack_data.items, stack_data.features)
        for note in use.lost(model.channel_use):
            warn(note)
    out: dict[str, list[Prediction]] = {}
    for pred, item in zip(stack_predictions(model, stack_data), stack_data.items):
        out.setdefault(item.lang, []).append(pred)
    return out


def applicable_channels(
    model: StackModel, members: list[Member], warn: Callable[[str], None] | None = None
) -> tuple[list[Member], list[list[str]]]:
    """The members the model reads and their channels, once the members given are checked to fit it.

    The same members (names, order, detectors) and the same feature columns as when it was
    fitted, or a MushroomError that says what differs. A stack that left a member out
    (`gate_members`) is applied with every member it was fitted with, or with the kept ones
    alone; a member left out is not read, but a wrong path or another detector's run given
    for it is a mistake worth saying.
    """
    names = [m.name for m in members]
    fitted = model.fitted_members or model.members
    if names not in (fitted, model.members):
        raise MushroomError(
            f"the stack was fitted on members {fitted}; got {names} (same names and order, as NAME=PATH)"
        )
    for member in members:
        if member.name not in model.members and not member.path.exists():
            raise MushroomError(f"member {member.name!r}: {member.path} does not exist")
        detector, given = model.member_detectors.get(member.name), member.detector()
        if detector is not None and given is not None and detector != given:
            raise MushroomError(
                f"member {member.name!r} was fitted on a run of the {detector!r} detector; {member.path} is "
                f"a run of {given!r}"
            )
        if detector is None and given is not None and member.name in model.members and warn is not None:
            # fitted on a folder of plain files: the run's evidence went unread, unsaid
            warn(
                f"member {member.name!r}: the stack was fitted on plain prediction files for it, so it reads "
                f"only the predictions of {member.path}, a {given} run, and none of its evidence channels; "
                "fit the stack on that run to use them"
            )
    members = [m for m in members if m.name in model.members]
    channels = [model.channels[m.name] for m in members]
    columns = feature_names(model.members, channels, model.languages)
    if columns != model.features:
        raise MushroomError(
            f"the stack lists {len(model.features)} feature columns, and its members, channels and "
            f"languages make {len(columns)} with this version: a stack.json edited by hand or saved "
            "by another version; fit it again with `mushroom stack fit`"
        )
    if model.scorer is None:
        raise MushroomError("the stack was saved by an older version; fit it again with `mushroom stack fit`")
    return members, channels


def stack_predictions(
    model: StackModel, stack_data: StackData, emptied: list[str] | None = None
) -> list[Prediction]:
    """The fitted model's prediction of each item of `stack_data`, in its order.

    Each item's prediction depends on its own features alone, so a corpus cut into chunks
    gets, chunk by chunk, the predictions it gets whole. The ids of items whose hard labels
    the empty rule emptied are added to `emptied` when it is given (the main job reports how many).
    """
    channels = [model.channels[m] for m in model.members]
    hard_cols = {m: c + 1 for m, c in zip(model.members, member_columns(channels))}
    if model.scorer is None:
        raise MushroomError("the stack was saved by an older version; fit it again with `mushroom stack fit`")
    out: list[Prediction | None] = []
    soft: dict[int, np.ndarray] = {}  # of the items whose hard labels come from `unseen_hard`
    all_probs = batch_probs(stack_data.items, stack_data.features, model.scorer, model.word_pooling)
    for k, (item, feats, raw) in enumerate(zip(stack_data.items, stack_data.features, all_probs)):
        t = model.thresholds.get(item.lang, model.threshold)
        f = model.floors.get(item.lang, model.floor)
        p = np.where(raw < f, 0.0, raw)
        if model.unseen_hard is not None and item.lang not in model.languages:
            soft[k] = p  # its hard labels, and its empty rule, are the second stack's (below)
            out.append(None)
            continue
        source = model.hard_sources.get(item.lang, model.hard_from)
        if source == "stack":
            hard = word_hard_mask(item.model_output_text, p, t)
        else:
            hard = feats[:, hard_cols[source]] > 0.5
        if model.empty_rule is not None and model.empty_rule.empties(len(item.model_output_text), raw):
            if emptied is not None and hard.any():  # an item that marked nothing was not emptied
                emptied.append(item.id)
            hard = np.zeros(len(item.model_output_text), dtype=bool)
        out.append(prediction_from_vectors(item.id, p, hard))
    if soft and model.unseen_hard is not None:
        # a language it never saw: the hard labels of the stack fitted without language columns,
        # built again with this stack's probabilities, so that each hard character keeps one
        # above 0 (this stack's floor may have zeroed a character the other marks: an audit)
        unseen = sorted(soft)
        part = StackData([stack_data.items[k] for k in unseen], [stack_data.features[k] for k in unseen])
        hard = stack_predictions(model.unseen_hard, without_language_columns(model, part), emptied)
        for k, other in zip(unseen, hard):
            mask = hard_to_mask(other.hard_labels, len(stack_data.items[k].model_output_text))
            out[k] = prediction_from_vectors(stack_data.items[k].id, soft[k], mask)
    return cast(list[Prediction], out)  # every None was an unseen item's, filled above
