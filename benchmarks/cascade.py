"""The cascade's cost-quality curve: val IoU/Cor against the share of items sent to a costly member.

Usage: PYTHONPATH=$PWD python3 benchmarks/cascade.py [--members lexical] [--work DIR]
           [--langs de,it,...] [--replay RUN_FOLDER] [--seed 7]

The CPU stack (--members, run on val into --work and reused) is fitted by cross-validation
and ranks every val item by its uncertainty (`mushroom.combine.cascade`). For each budget
(0, 10, 20, 30, 50, 100%) the most uncertain items of each language go to the costly
member, the member stack is fitted by cross-validation on those items, and the rest keep
the CPU stack's out-of-fold prediction: what `main-job --llm-budget` does on val. The
numbers are out of fold at every budget; the paired 95% interval is of (budget - 100%),
the difference of the means over languages, resampled within each language (`paired_test`'s
`groups`).
The "items" column counts the items sent, "calls" the model calls they took, "stack" whether
the items sent took the member stack's prediction or kept the CPU stack's (the main job's rule,
`judge_member_stack`: the member stack must keep the model and beat the CPU stack out of fold).

Costly members:
- SIMULATED members, built here from the gold labels. They are not detectors and their
  numbers are no detector's result: they show what the cascade keeps of a member of known
  quality. One call per item sent, no tokens.
  - strong: errs as span detectors do (finds each gold span with p 0.85, ends off by up to
    3 characters; up to 0.2 wrong runs of 1-3 words per item); alone it scores val IoU about
    0.65, the mean of the leaderboard's #1 per language (the script prints its own). Also
    drawn with items sent at random (one draw, refitted; the share table averages 200).
  - near-oracle and weak: gold with 10% and 30% of its characters flipped (as
    tests/test_stack_simulated.py builds them); they gain on nearly every item alike.
- `--replay RUN_FOLDER`: a recorded run of a model-backed member, i.e. a folder (a run, or
  its val/ or predictions/ folder) holding `mushroom.<lang>-val.v2.jsonl` prediction files,
  with `raw/<lang>.raw.jsonl` beside them when the run recorded its calls (then calls and
  tokens are counted from them; otherwise one call per item). No model or server is used.

A table then says how much of the gain of sending every item the items each ranking sends
hold, and each ranking's rank correlation with the CPU stack's real error: the cascade's,
trees fitted on val to predict that error (from the stack's output, then also from the
members' outputs, the answering model's logits and the text), the cascade's with the items
chosen across languages instead of within each, random, two oracles, and the real error
blurred by noise (the rank correlation a ranking needs to hold a given share). The last line is
`cascade: budget B keeps IoU X (all: Y) with Z% of the model calls`, B the smallest budget
whose mean IoU is within 0.01 of sending every item to the simulated strong member (the
near-oracle's line comes before it).
"""

from __future__ import annotations

import argparse
import random
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from _args import val_langs, whole
from feature_ablation import lang_mean as mean_over_langs  # sibling scripts
from scipy.stats import spearmanr
from stack_val import run_member, run_script

from mushroom.combine.cascade import (
    MIN_VAL_SENT,
    Spend,
    chosen_items,
    fit_folds,
    judge_member_stack,
    merge_predictions,
    plan_split,
    prediction_uncertainty,
    select,
    spend_by_item,
)
from mushroom.combine.stack import Member, fit_stack
from mushroom.data.predictions import (
    load_predictions,
    prediction_from_vectors,
    submission_glob,
    submission_name,
)
from mushroom.data.records import Item, Prediction
from mushroom.data.runfolder import prediction_folder
from mushroom.data.spans import hard_to_mask, soft_to_vector
from mushroom.data.splits import load_split
from mushroom.errors import MushroomError
from mushroom.evaluation.runfiles import failed_item_messages
from mushroom.evaluation.score import score_predictions
from mushroom.evaluation.stats import paired_test
from mushroom.util.options import split_names

BUDGETS = (0.0, 0.1, 0.2, 0.3, 0.5, 1.0)
WITHIN = 0.01
FEW_REPLAYED = 20  # replayed items per language below which the curve says little
# the span-level member's rates: val IoU 0.650 over seeds 0-4 (0.62-0.67), the mean of the
# leaderboard's #1 IoU per language (data/mushroom/LEADERBOARD.md, 14 languages)
SPAN_HIT, SPAN_FALSE = 0.85, 0.2
LEADERBOARD_MEAN_IOU = 0.649


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


def _span_member(item: Item, rng: np.random.Generator, hit: float, false_spans: float) -> np.ndarray:
    """One item of the SIMULATED span-level member (see write_span_member)."""
    text = item.model_output_text
    vec = np.full(len(text), 0.1)
    gold = _gold(item).astype(bool)
    for start, end in item.hard_labels or []:
        if end > start and rng.random() < hit:
            # ends off by up to 3 characters, still overlapping the span
            lo = int(np.clip(start + rng.integers(-3, 4), 0, end - 1))
            hi = int(np.clip(end + rng.integers(-3, 4), max(lo, start) + 1, len(text)))
            vec[lo:hi] = np.maximum(vec[lo:hi], rng.uniform(0.6, 0.95))
    words = [m.span() for m in re.finditer(r"\w+", text)]
    for _ in range(rng.poisson(false_spans)):
        if not words:
            break
        k = int(rng.integers(len(words)))
        run = words[k : k + int(rng.integers(1, 4))]  # consecutive words
        lo, hi = run[0][0], run[-1][1]
        if not gold[lo:hi].any():  # a run touching gold would be half a hit: not drawn
            vec[lo:hi] = np.maximum(vec[lo:hi], rng.uniform(0.55, 0.9))
    return vec


def write_span_member(
    folder: Path, data: dict[str, list[Item]], hit: float, false_spans: float, seed: int
) -> None:
    """A SIMULATED member that errs as span detectors do, not character by character.

    It finds each gold span with probability `hit` (its ends off by up to 3 characters, still
    overlapping it) and misses the rest. It also draws a Poisson(`false_spans`) number of runs
    of 1-3 consecutive words per item, and marks those that touch no gold. With hit 0.85 and
    0.2 false spans its val IoU is 0.650 on average over seeds (0.62-0.67), the mean of the
    leaderboard's #1 per language: the member a GPU user can hope for. Its errors fall where
    they fall, so some items it gets wrong and some it gets right, unlike the
    character-flip members, which gain on every item alike.
    """
    from mushroom.data.jsonl import write_jsonl

    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for lang, items in data.items():
        rows = []
        for it in items:
            vec = _span_member(it, rng, hit, false_spans)
            rows.append(prediction_from_vectors(it.id, vec, vec > 0.5).submission_dict())
        write_jsonl(folder / submission_name(lang, "val"), rows)


def flat(preds: dict[str, list[Prediction]], data: dict[str, list[Item]]) -> list[Prediction]:
    return [p for lang in data for p in preds[lang]]


class Curve:
    """One costly member's points: per budget, per-item IoU/Cor (val order), calls and tokens."""

    def __init__(self, label: str, spend: Callable[[set[str]], Spend], simulated: bool):
        self.label, self.spend, self.simulated = label, spend, simulated
        self.points: dict[float, tuple[np.ndarray, np.ndarray, Spend]] = {}
        self.sent: dict[float, int] = {}  # items sent at each budget
        self.used: dict[float, bool] = {}  # whether the member stack was used (`judge_member_stack`)


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
            # as the main job: the CPU stack's prediction stands where the member stack is no better
            judged = judge_member_stack(sent, base_oof, member_fit.oof, member_fit.model.gate, [costly.name])
            out.used[budget] = judged.used
            preds = flat(merge_predictions(data, base_oof, member_fit.oof if judged.used else {}), data)
            sent_ids = {r.id for r in records if r.sent}
        scores = score_predictions(items, preds)
        order = {i: k for k, i in enumerate(scores.ids)}
        pick = [order[it.id] for it in items]
        out.points[budget] = (scores.iou[pick], scores.cor[pick], spend(sent_ids))
        out.sent[budget] = len(sent_ids) if budget < 1.0 else len(items)
    return out


def lang_mean(values: np.ndarray, items: list[Item]) -> float:
    """The mean over languages of each language's mean (as the main job's val_iou_mean)."""
    return mean_over_langs(values, np.array([it.lang for it in items]))


def print_curve(c: Curve, items: list[Item]) -> None:
    tag = "SIMULATED " if c.simulated else ""
    print(f"\n{tag}{c.label}")
    print(
        f"{'budget':>7} {'items':>5} {'IoU':>7} {'d IoU vs 100% [95% CI]':>28} {'Cor':>7} "
        f"{'d Cor vs 100% [95% CI]':>28} {'calls':>6} {'cached':>6} {'tokens':>9} {'stack':>6}"
    )
    iou_all, cor_all, spend_all = c.points[1.0]
    langs = np.array([it.lang for it in items])
    for budget, (iou, cor, spend) in c.points.items():
        di = paired_test(iou, iou_all, groups=langs)
        dc = paired_test(cor, cor_all, groups=langs)
        share = 100 * spend.calls / spend_all.calls if spend_all.calls else float("nan")
        print(
            f"{budget:>6.0%} {c.sent[budget]:>5} {lang_mean(iou, items):>7.4f} "
            f"{di.mean_diff:>+9.4f} [{di.ci_low:+.4f}, {di.ci_high:+.4f}] {lang_mean(cor, items):>7.4f} "
            f"{dc.mean_diff:>+9.4f} [{dc.ci_low:+.4f}, {dc.ci_high:+.4f}] "
            f"{spend.calls:>6} {spend.cached:>6} {('-' if c.simulated else spend.tokens):>9} "
            f"{('member' if c.used[budget] else 'CPU') if budget in c.used else '-':>6}"
            f"  ({share:.0f}% of the calls)"
        )


OURS = "expected loss (the cascade's)"
ACROSS = "expected loss, chosen across languages"
RANDOM_DRAWS = 200
RANDOM = f"random (mean of {RANDOM_DRAWS} draws)"
LEARNED = "learned: trees on the output, OOF"
LEARNED_MORE = "learned: + members, logits, text, OOF"
KNOWS_ERROR = "CPU stack error (oracle: knows its IoU)"
# the real error plus gaussian noise of these sizes: the rank correlation a ranking needs
BLUR, BLUR_DRAWS = (0.1, 0.2, 0.4), 50
BLURRED = "CPU stack error + noise sd"


def learned_error(
    items: list[Item],
    preds: dict[str, Prediction],
    cpu_error: np.ndarray,
    seed: int,
    members: list[dict[str, Prediction]] | None = None,
) -> np.ndarray:
    """The CPU stack's error on each item as boosted trees predict it, out of fold (5 folds).

    The "confidence band fitted on val" alternative: trees fitted on val items to predict the
    stack's IoU loss from what the stack outputs (its expected loss, doubt, largest and mean
    probability, share and count of marked spans, answer length, language), then asked on
    items they were not fitted on. If the stack's own expected loss ranks as well, the
    fitted model buys nothing. With `members` (each CPU member's own predictions), the trees
    also read what else is cheap before any model call: each member's mean and largest
    probability, how much the members disagree, the answering model's token logits (mean,
    lowest, 10th percentile, spread), and the text (words, digits, capitalised words, the
    question's length and the share of the answer's words it holds).
    """
    from sklearn.ensemble import GradientBoostingRegressor
    from sklearn.model_selection import KFold

    langs = sorted({it.lang for it in items})
    rows = []
    for it in items:
        n, pred = len(it.model_output_text), preds[it.id]
        v, h = soft_to_vector(pred.soft_labels, n), hard_to_mask(pred.hard_labels, n)
        doubt = float(np.mean(2 * np.minimum(v, 1 - v))) if n else 0.0
        out = [
            prediction_uncertainty(it, pred),
            doubt,
            float(v.max(initial=0)),
            float(v.mean()) if n else 0.0,
        ]
        out += [float(h.mean()) if n else 0.0, float(len(pred.hard_labels)), float(np.log1p(n))]
        if members is not None:
            out += _cheap_evidence(it, members)
        rows.append(out + [float(it.lang == lang) for lang in langs])
    x, y = np.array(rows), cpu_error
    guess = np.zeros(len(items))
    for train, test in KFold(5, shuffle=True, random_state=seed).split(x):
        trees = GradientBoostingRegressor(max_depth=2, n_estimators=100, learning_rate=0.05, subsample=0.8)
        guess[test] = trees.set_params(random_state=seed).fit(x[train], y[train]).predict(x[test])
    return guess


def _cheap_evidence(it: Item, members: list[dict[str, Prediction]]) -> list[float]:
    """What learned_error reads beyond the stack's output (see its docstring)."""
    text, n = it.model_output_text, len(it.model_output_text)
    probs = [soft_to_vector(m[it.id].soft_labels, n) for m in members]
    marks = [hard_to_mask(m[it.id].hard_labels, n) for m in members]
    out = [float(v.mean()) if n else 0.0 for v in probs] + [float(v.max(initial=0)) for v in probs]
    if len(members) > 1 and n:
        out += [
            float(np.std(probs, axis=0).mean()),
            float(np.any(marks, axis=0).mean() - np.all(marks, axis=0).mean()),
        ]
    elif len(members) > 1:
        out += [0.0, 0.0]
    logits = np.array(it.model_output_logits or [0.0], dtype=float)
    out += [float(logits.mean()), float(logits.min()), float(np.percentile(logits, 10)), float(logits.std())]
    words = re.findall(r"\w+", text)
    asked = {w.lower() for w in re.findall(r"\w+", it.model_input)}
    out += [
        float(len(words)),
        sum(c.isdigit() for c in text) / max(n, 1),
        sum(w[:1].isupper() for w in words) / max(len(words), 1),
        float(len(it.model_input)),
        len(asked & {w.lower() for w in words}) / max(len({w.lower() for w in words}), 1),
    ]
    return out


def print_rankings(
    c: Curve,
    data: dict[str, list[Item]],
    base_oof: dict[str, list[Prediction]],
    members: list[dict[str, Prediction]],
    seed: int,
) -> dict[str, list[float]]:
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

    cpu_error = 1.0 - c.points[0.0][0]
    learned = learned_error(items, preds, cpu_error, seed)
    learned_more = learned_error(items, preds, cpu_error, seed, members)
    rankings = {
        OURS: lambda it: prediction_uncertainty(it, preds[it.id]),
        "doubt: mean 2 min(p, 1-p)": doubt,
        LEARNED: lambda it: learned[by_id[it.id]],
        LEARNED_MORE: lambda it: learned_more[by_id[it.id]],
        RANDOM: lambda it: rnd.random(),
        KNOWS_ERROR: lambda it: float(cpu_error[by_id[it.id]]),
        "oracle (knows each gain)": lambda it: float(gain[by_id[it.id]]),
    }
    print(f"\nshare of the gain of sending all to the {c.label} held by the items sent (before refits)")
    print(f"{'ranking':>40} " + " ".join(f"{b:>5.0%}" for b in BUDGETS[1:-1]) + "  rho with the CPU error")
    held: dict[str, list[float]] = {}

    def held_by(score: Callable[[Item], float]) -> list[float]:
        unsure = {lang: {it.id: score(it) for it in data[lang]} for lang in data}
        shares = []
        for budget in BUDGETS[1:-1]:
            sent = [by_id[i] for lang in data for i in select(unsure[lang], budget, MIN_VAL_SENT)]
            shares.append(gain[sent].sum() / gain.sum())
        return shares

    def show(name: str, shares: list[float], rho: float) -> None:
        print(
            f"{name:>40} "
            + " ".join(f"{v:>5.2f}" for v in shares)
            + ("  -" if rho != rho else f"  {rho:>+.2f}")
        )
        held[name] = shares

    for name, score in rankings.items():
        if name == RANDOM:  # one draw is luck: the mean of many
            shares = list(np.mean([held_by(score) for _ in range(RANDOM_DRAWS)], axis=0))
            rho = float("nan")
        else:
            shares = held_by(score)
            rho = spearmanr([score(it) for it in items], cpu_error)[0]
        show(name, shares, rho)
    # the same expected loss, with the items chosen across languages instead of within each
    # (chosen by `select`, as the cascade chooses: its count and its ties)
    loss = {it.id: prediction_uncertainty(it, preds[it.id]) for it in items}
    across = [gain[[by_id[i] for i in select(loss, b)]].sum() / gain.sum() for b in BUDGETS[1:-1]]
    show(ACROSS, across, spearmanr([loss[it.id] for it in items], cpu_error)[0])
    # how good a ranking must be: the real error blurred by noise, each level the mean of draws
    noise = np.random.default_rng(seed)
    for sd in BLUR:
        draws, rhos = [], []
        for _ in range(BLUR_DRAWS):
            blurred = cpu_error + noise.normal(0.0, sd, cpu_error.size)
            draws.append(held_by(lambda it, b=blurred: float(b[by_id[it.id]])))
            rhos.append(spearmanr(blurred, cpu_error)[0])
        show(f"{BLURRED} {sd}", list(np.mean(draws, axis=0)), float(np.mean(rhos)))
    return held


def member_predictions(member: Member, data: dict[str, list[Item]]) -> dict[str, Prediction]:
    """A CPU member's own val predictions, by item id."""
    preds: dict[str, Prediction] = {}
    for lang in data:
        preds.update(load_predictions(member.files("val", lang)[0]))
    return preds


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
    few = [lang for lang, items in kept.items() if len(items) < FEW_REPLAYED]
    if few:
        print(
            f"warning: fewer than {FEW_REPLAYED} replayed items in {', '.join(few)}: the small budgets "
            f"send the minimum of {MIN_VAL_SENT} there, and the intervals say little (a cascade's "
            "member folder holds only the items it was sent; replay a run over whole languages)"
        )
    return kept


def replay_member(folder: Path, data: dict[str, list[Item]]) -> tuple[Member, Callable[[set[str]], Spend]]:
    """The recorded member and its spend per set of items (from raw records, else a call per item)."""
    preds = prediction_folder(folder, "val")
    # a recorded run's failed items (written empty by --allow-failures) are its own: said, and
    # read as the run wrote them, as the run's own benchmark scores them
    failed = failed_item_messages(sorted(preds.glob(submission_glob("val"))))
    for message in failed:
        print(f"note: {message}; the recorded member is read with them empty")
    member = Member("replayed", folder, allow_failures=bool(failed))
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


def cascade_line(c: Curve, items: list[Item], held: dict[str, list[float]]) -> str:
    """The issue's one line for a member, with why no smaller budget is within WITHIN when none is."""
    all_iou = lang_mean(c.points[1.0][0], items)
    budget = next(b for b in BUDGETS if lang_mean(c.points[b][0], items) >= all_iou - WITHIN)
    share = c.points[budget][2].calls / c.points[1.0][2].calls
    line = (
        f"cascade: budget {budget:.0%} keeps IoU {lang_mean(c.points[budget][0], items):.4f} "
        f"(all: {all_iou:.4f}) with {share:.0%} of the model calls"
    )
    if budget < 1.0:
        return line
    half = BUDGETS[1:-1].index(0.5)
    gain = all_iou - lang_mean(c.points[0.0][0], items)
    ours, knows = held[OURS][half], held[KNOWS_ERROR][half]
    return (
        f"  {c.label}: no budget below 100% is within {WITHIN} IoU of sending all (+{gain:.2f} over the "
        f"CPU stack); the half of the items the cascade sends holds {ours:.0%} of the gain, the half "
        f"whose CPU IoU is worst {knows:.0%}\n{line}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", default="lexical", help="the CPU stack's members, e.g. lexical,semantic")
    parser.add_argument(
        "--work",
        default=None,
        help="where member runs are kept, reused by a later run (default: a new temp folder)",
    )
    parser.add_argument(
        "--langs", type=val_langs, default=None, help="val languages, e.g. de,it (default: all)"
    )
    parser.add_argument(
        "--replay", default=None, help="a recorded run of a model-backed member (see RUN_FOLDER above)"
    )
    parser.add_argument("--seed", type=whole, default=7, help="the simulated members' and random draws' seed")
    args = parser.parse_args()
    names = split_names(args.members, what="member")
    if len(set(names)) < len(names):
        raise MushroomError(f"--members {args.members}: a member is named twice")
    work = Path(args.work or tempfile.mkdtemp(prefix="cascade-"))
    langs = args.langs
    data = load_split("val", langs)
    if args.replay:
        data = replayed_items(Path(args.replay), data)
    items = [it for lang in data for it in data[lang]]
    cheap = []
    for name in names:
        run_member(name, work / name)
        cheap.append(Member(name, work / name))
    base = fit_stack(cheap, data, "val")
    print(
        f"CPU stack ({args.members}) on val, {len(items)} items, {len(data)} languages; "
        f"out-of-fold mean IoU {base.comparison['stack (CV)']['mean']['iou']:.4f}"
    )

    def per_call(ids: set[str]) -> Spend:
        return Spend(calls=len(ids))

    def random_order() -> dict[str, list[Prediction]]:
        """The CPU stack's predictions with a random doubt each: items drawn at random."""
        rnd = random.Random(args.seed)
        return {
            lang: [
                p.model_copy(
                    update={
                        "soft_labels": [{"start": 0, "end": len(it.model_output_text), "prob": rnd.random()}]
                    }
                )
                for it, p in zip(data[lang], base.oof[lang])
            ]
            for lang in data
        }

    strong = (
        f"strong member (span-level: finds a gold span with p {SPAN_HIT}, "
        f"up to {SPAN_FALSE} false runs per item; leaderboard-level)"
    )
    folder = work / "simulated-spans"
    write_span_member(folder, data, SPAN_HIT, SPAN_FALSE, args.seed)
    member = Member("simulated-spans", folder)
    alone = {}
    for lang in data:
        alone.update(load_predictions(folder / submission_name(lang, "val")))
    own = score_predictions(items, [alone[it.id] for it in items])
    at = {i: k for k, i in enumerate(own.ids)}
    print(
        f"SIMULATED strong member alone: IoU {lang_mean(own.iou[[at[it.id] for it in items]], items):.4f} "
        f"(mean over languages; the leaderboard's #1 per language averages {LEADERBOARD_MEAN_IOU})"
    )
    curves = [
        curve(strong, cheap, member, data, base.oof, base.oof, per_call, True),
        curve(
            strong + ", items drawn at random", cheap, member, data, base.oof, random_order(), per_call, True
        ),
    ]
    for label, flip, seed in (
        ("near-oracle member (gold, 10% of characters flipped)", 0.1, args.seed),
        ("weak member (gold, 30% of characters flipped)", 0.3, args.seed + 1),
    ):
        folder = work / f"simulated-{flip}"
        write_simulated(folder, data, flip, seed)
        member = Member(f"simulated-{flip}", folder)
        curves.append(curve(label, cheap, member, data, base.oof, base.oof, per_call, True))
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
    own_preds = [member_predictions(m, data) for m in cheap]
    held = {c.label: print_rankings(c, data, base.oof, own_preds, args.seed) for c in (curves[0], curves[2])}
    print(
        "\nthe cascade line is the simulated strong member's (the first table); the near-oracle's before it"
    )
    for c in (curves[2], curves[0]):
        print(cascade_line(c, items, held[c.label]))


if __name__ == "__main__":
    run_script(main)
