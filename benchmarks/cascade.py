"""The cascade's cost-quality curve: val IoU/Cor against the share of items sent to a costly member.

Usage: PYTHONPATH=$PWD python3 benchmarks/cascade.py [--members lexical] [--work DIR]
           [--langs de,it,...] [--replay RUN_FOLDER] [--seed 7]

The CPU stack (--members, run on val into --work and reused) is fitted by cross-validation
and ranks every val item by its uncertainty (`mushroom.combine.cascade`). For each budget
(0, 10, 20, 30, 50, 100%) the most uncertain items of each language go to the costly
member, the member stack is fitted by cross-validation on those items, and the rest keep
the CPU stack's out-of-fold prediction: what `main-job --llm-budget` does on val. The
numbers are out of fold at every budget; the paired 95% interval is of (budget - 100%),
item by item.

Costly members:
- SIMULATED strong and weak members, built here from the gold labels (gold with 10% and 30%
  of its characters flipped, as tests/test_stack_simulated.py builds them). They are not
  detectors and their numbers are no detector's result: they show what the cascade keeps of
  a member of known quality. One call per item sent, no tokens.
- `--replay RUN_FOLDER`: a recorded run of a model-backed member, i.e. a folder (a run, or
  its val/ or predictions/ folder) holding `mushroom.<lang>-val.v2.jsonl` prediction files,
  with `raw/<lang>.raw.jsonl` beside them when the run recorded its calls (then calls and
  tokens are counted from them; otherwise one call per item). No model or server is used.

The last line is `cascade: budget B keeps IoU X (all: Y) with Z% of the model calls`, B the
smallest budget whose mean IoU is within 0.01 of sending every item to the simulated strong
member.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mushroom.combine.cascade import (
    MIN_VAL_SENT,
    Spend,
    chosen_items,
    fit_folds,
    merge_predictions,
    plan_split,
    prediction_uncertainty,
    select,
    spend_by_item,
)
from mushroom.combine.stack import Member, fit_stack
from mushroom.data.contexts import DEFAULT_SOURCES
from mushroom.data.predictions import load_predictions, prediction_from_vectors, submission_name
from mushroom.data.records import Item, Prediction
from mushroom.data.runfolder import prediction_folder
from mushroom.data.spans import soft_to_vector
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.evaluation.score import score_predictions
from mushroom.evaluation.stats import paired_test

BUDGETS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
WITHIN = 0.01


def run_member(name: str, folder: Path) -> None:
    """Runs one CPU member on val into `folder` (items already there are reused)."""
    from mushroom.runs.service import RunService

    det = build(name)
    config = {"benchmark": "cascade", **det.describe(), "sources": list(DEFAULT_SOURCES)}
    service = RunService(folder, config, quiet=True)
    service.detect_split(det, "val", folder)
    if service.failures:
        raise SystemExit(f"{name}: {len(service.failures)} items failed; see {folder}")


def _gold(item: Item) -> np.ndarray:
    vec = np.zeros(len(item.model_output_text))
    for start, end in item.hard_labels or []:
        vec[start:end] = 1.0
    return vec


def write_simulated(folder: Path, data: dict[str, list[Item]], flip: float, seed: int) -> None:
    """A SIMULATED member: gold with `flip` of its characters flipped, confident but imperfect."""
    from mushroom.data.jsonl import write_jsonl

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for lang, items in data.items():
        rows = []
        for it in items:
            gold = _gold(it)
            flipped = np.where(rng.random(gold.size) < flip, 1.0 - gold, gold)
            vec = np.clip(0.15 + 0.7 * flipped + rng.normal(0, 0.05, gold.size), 0, 1)
            rows.append(prediction_from_vectors(it.id, vec, vec > 0.5).submission_dict())
        write_jsonl(folder / submission_name(lang, "val"), rows)


def flat(preds: dict[str, list[Prediction]], data: dict[str, list[Item]]) -> list[Prediction]:
    return [p for lang in data for p in preds[lang]]


class Curve:
    """One costly member's points: per budget, per-item IoU/Cor (val order), calls and tokens."""

    def __init__(self, label: str, spend: Callable[[set[str]], Spend], simulated: bool):
        self.label, self.spend, self.simulated = label, spend, simulated
        self.points: dict[float, tuple[np.ndarray, np.ndarray, Spend]] = {}


def curve(
    label: str,
    cheap: list[Member],
    costly: Member,
    data: dict[str, list[Item]],
    base_oof: dict[str, list[Prediction]],
    rank_by: dict[str, list[Prediction]],
    spend: Callable[[set[str]], Spend],
    simulated: bool,
) -> Curve:
    """The member's points at every budget, out of fold (see the module docstring)."""
    items = [it for lang in data for it in data[lang]]
    out = Curve(label, spend, simulated)
    for budget in BUDGETS:
        if budget == 0.0:
            preds, sent_ids = flat(base_oof, data), set()
        else:
            records = plan_split("val", data, rank_by, budget, MIN_VAL_SENT)
            sent = chosen_items(data, records, "val")
            member_fit = fit_stack([*cheap, costly], sent, "val", folds=fit_folds(sent))
            preds = flat(merge_predictions(data, base_oof, member_fit.oof), data)
            sent_ids = {r.id for r in records if r.sent}
        scores = score_predictions(items, preds)
        order = {i: k for k, i in enumerate(scores.ids)}
        pick = [order[it.id] for it in items]
        out.points[budget] = (scores.iou[pick], scores.cor[pick], spend(sent_ids))
    return out


def lang_mean(values: np.ndarray, items: list[Item]) -> float:
    """The mean over languages of each language's mean (as the main job's val_iou_mean)."""
    langs = sorted({it.lang for it in items})
    return float(
        np.mean([values[[k for k, it in enumerate(items) if it.lang == lang]].mean() for lang in langs])
    )


def print_curve(c: Curve, items: list[Item]) -> None:
    tag = "SIMULATED " if c.simulated else ""
    print(f"\n{tag}{c.label}")
    print(
        f"{'budget':>7} {'sent':>5} {'IoU':>7} {'d IoU vs 100% [95% CI]':>28} {'Cor':>7} {'d Cor vs 100% [95% CI]':>28} "
        f"{'calls':>6} {'tokens':>9}"
    )
    iou_all, cor_all, spend_all = c.points[1.0]
    for budget, (iou, cor, spend) in c.points.items():
        di, dc = paired_test(iou, iou_all), paired_test(cor, cor_all)
        sent = spend.calls if c.simulated else spend.calls + spend.cached
        share = 100 * spend.calls / spend_all.calls if spend_all.calls else float("nan")
        print(
            f"{budget:>6.0%} {sent:>5} {lang_mean(iou, items):>7.4f} "
            f"{di.mean_diff:>+9.4f} [{di.ci_low:+.4f}, {di.ci_high:+.4f}] {lang_mean(cor, items):>7.4f} "
            f"{dc.mean_diff:>+9.4f} [{dc.ci_low:+.4f}, {dc.ci_high:+.4f}] "
            f"{spend.calls:>6} {('-' if c.simulated else spend.tokens):>9}  ({share:.0f}% of the calls)"
        )


def print_rankings(
    c: Curve, data: dict[str, list[Item]], base_oof: dict[str, list[Prediction]], seed: int
) -> None:
    """The share of sending everything's gain that each ranking's chosen items hold (no refits).

    The gain of an item is its IoU with the member stack on all items minus the CPU stack's;
    a ranking is good when the items it sends first are those that gain. The oracle, which
    reads the gains, is the most any ranking can hold.
    """
    items = [it for lang in data for it in data[lang]]
    gain = c.points[1.0][0] - c.points[0.0][0]
    by_id = {it.id: k for k, it in enumerate(items)}
    preds = {p.id: p for lang in data for p in base_oof[lang]}
    rnd = random.Random(seed)

    def doubt(it: Item) -> float:
        v = soft_to_vector(preds[it.id].soft_labels, len(it.model_output_text))
        return float(np.mean(2 * np.minimum(v, 1 - v))) if v.size else 0.0

    rankings = {
        "expected loss (the cascade's)": lambda it: prediction_uncertainty(it, preds[it.id]),
        "doubt: mean 2 min(p, 1-p)": doubt,
        "random": lambda it: rnd.random(),
        "oracle (knows each gain)": lambda it: float(gain[by_id[it.id]]),
    }
    print(f"\nshare of the gain of sending all to the {c.label} held by the items sent (before refits)")
    print(f"{'ranking':>30} " + " ".join(f"{b:>5.0%}" for b in BUDGETS[1:-1]))
    held: dict[str, list[float]] = {}
    for name, score in rankings.items():
        unsure = {lang: {it.id: score(it) for it in data[lang]} for lang in data}
        shares = []
        for budget in BUDGETS[1:-1]:
            sent = [by_id[i] for lang in data for i in select(unsure[lang], budget, MIN_VAL_SENT)]
            shares.append(gain[sent].sum() / gain.sum())
        print(f"{name:>30} " + " ".join(f"{v:>5.2f}" for v in shares))
        held[name] = shares
    return held


def replayed_items(folder: Path, data: dict[str, list[Item]]) -> dict[str, list[Item]]:
    """The val items a recorded run predicted: a recorded run may cover a few languages, in part.

    The curve is then drawn on those items only (the CPU stack and the simulated members too),
    so every row of the output is on the same items.
    """
    preds = prediction_folder(folder, "val")
    kept = {}
    for lang, items in data.items():
        path = preds / submission_name(lang, "val")
        if path.is_file():
            ids = set(load_predictions(path))
            kept[lang] = [it for it in items if it.id in ids]
    if not kept:
        raise SystemExit(f"--replay {folder}: no val prediction files in {preds}")
    print(
        "--replay: the curve is on the items it predicted: "
        + ", ".join(f"{k} {len(v)}" for k, v in kept.items())
    )
    return kept


def replay_member(folder: Path, data: dict[str, list[Item]]) -> tuple[Member, Callable[[set[str]], Spend]]:
    """The recorded member and its spend per set of items (from raw records, else a call per item)."""
    member = Member("replayed", folder)
    preds = prediction_folder(folder, "val")
    missing = [lang for lang in data if not (preds / submission_name(lang, "val")).is_file()]
    if missing:
        raise SystemExit(f"--replay {folder}: no val file for {', '.join(missing)} in {preds}; give --langs")
    raw = sorted((preds / "raw").glob("*.raw.jsonl"))
    by_item = spend_by_item(raw) if raw else {}
    if not raw:
        print(f"note: {preds / 'raw'} holds no raw records: one call per item is assumed, tokens unknown")

    def spend(ids: set[str]) -> Spend:
        total = Spend()
        for i in ids:
            total = total.add(by_item.get(i, Spend()) if raw else Spend(calls=1))
        return total

    return member, spend


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", default="lexical", help="the CPU stack's members")
    parser.add_argument("--work", default=None, help="where member runs are kept (reused when present)")
    parser.add_argument("--langs", default=None, help="val languages (default: all)")
    parser.add_argument("--replay", default=None, help="a recorded run of a model-backed member")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="cascade-"))
    langs = args.langs.split(",") if args.langs else None
    data = load_split("val", langs)
    if args.replay:
        data = replayed_items(Path(args.replay), data)
    items = [it for lang in data for it in data[lang]]
    cheap = []
    for name in args.members.split(","):
        run_member(name, work / name)
        cheap.append(Member(name, work / name))
    base = fit_stack(cheap, data, "val")
    print(
        f"CPU stack ({args.members}) on val, {len(items)} items, {len(data)} languages; "
        f"out-of-fold mean IoU {base.comparison['stack (CV)']['mean']['iou']:.4f}"
    )

    def per_call(ids: set[str]) -> Spend:
        return Spend(calls=len(ids))

    curves = []
    for label, flip, seed in (
        ("strong member (gold, 10% of characters flipped)", 0.1, args.seed),
        ("weak member (gold, 30% of characters flipped)", 0.3, args.seed + 1),
    ):
        folder = work / f"simulated-{flip}"
        write_simulated(folder, data, flip, seed)
        member = Member(f"simulated-{flip}", folder)
        curves.append(curve(label, cheap, member, data, base.oof, base.oof, per_call, True))
        if flip == 0.1:
            # the same member with items drawn at random, not by uncertainty: what the ranking is worth
            rnd = random.Random(args.seed)
            shuffled = {
                lang: [
                    p.model_copy(
                        update={
                            "soft_labels": [
                                {"start": 0, "end": len(it.model_output_text), "prob": rnd.random()}
                            ]
                        }
                    )
                    for it, p in zip(data[lang], base.oof[lang])
                ]
                for lang in data
            }
            curves.append(
                curve(
                    label + ", items drawn at random", cheap, member, data, base.oof, shuffled, per_call, True
                )
            )
    if args.replay:
        member, spend = replay_member(Path(args.replay), data)
        curves.append(
            curve(
                f"recorded run {args.replay} (replayed)",
                cheap,
                member,
                data,
                base.oof,
                base.oof,
                spend,
                False,
            )
        )
    for c in curves:
        print_curve(c, items)
    held = print_rankings(curves[0], data, base.oof, args.seed)
    strong = curves[0]
    all_iou = lang_mean(strong.points[1.0][0], items)
    budget = next(b for b in BUDGETS if lang_mean(strong.points[b][0], items) >= all_iou - WITHIN)
    share = strong.points[budget][2].calls / strong.points[1.0][2].calls
    if budget == 1.0:
        oracle = held["oracle (knows each gain)"][BUDGETS[1:-1].index(0.5)]
        gain = all_iou - lang_mean(strong.points[0.0][0], items)
        print(
            f"\nnote: no budget below 100% is within {WITHIN} IoU: the member gains {gain:.2f} IoU on "
            f"nearly every item, and even the oracle's half of the items holds {oracle:.0%} of it"
        )
    print("\nthe cascade line is the simulated strong member's (the first table):")
    print(
        f"cascade: budget {budget:.0%} keeps IoU {lang_mean(strong.points[budget][0], items):.4f} "
        f"(all: {all_iou:.4f}) with {share:.0%} of the model calls"
    )


if __name__ == "__main__":
    main()
