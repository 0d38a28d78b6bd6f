"""The cascade: which items a model-backed member is sent, chosen from the CPU stack's output.

A model-backed member (an LLM, the claim chain) costs a GPU call or more per item, where the
CPU stack costs milliseconds; on most items the stack is already sure of its answer. So the
stack scores every item first and only the items it is least sure of go to the model.

Uncertainty of an item is the loss the stack expects of its own answer: 1 - the IoU its hard
labels h would score if its probabilities p were right, taken as the expected overlap over the
expected union, sum(p * h) / (sum(h) + sum(p * (1 - h))). When it marks nothing, the answer
scores 1 only if nothing is wrong, whose chance is taken as 1 - max(p) (its most suspect
character), so the uncertainty is max(p). The items sent are those where a better member has
the most to gain, and confidence is not correctness: an item can be marked with conviction
and still be wrong. On val (10 languages, lexical stack; `benchmarks/cascade.py`), with a
simulated member at the leaderboard's level, the half of the items this ranking sends holds
74% of what sending all gains; items drawn at random 50%, trees fitted on val to predict
the stack's error from its output 67%, and the half where the stack's real IoU is worst 97%.
The gain sits where the stack is wrong; its doubt finds those items only in part.

A budget B sends the ceil(B * n) most uncertain items of each split and language (n its
item count). A fixed share rather than a confidence band fitted on val: the cost is known
before the run (B of the calls), every language gets its share (a band fitted pooled would
spend it all on the languages whose stack is least sure, and a band per language on ~50
items is noise), and a larger budget chooses a superset of a smaller one on the same stack
output, so a re-run that widens the budget sends only the items it adds. Ties are broken
by item id, so the choice is the same on every run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from mushroom.data.records import CascadeRecord, Item, Prediction
from mushroom.data.spans import hard_to_mask, soft_to_vector
from mushroom.errors import NOT_SENT, DataError, MushroomError, Problem

# The member stack is fitted by cross-validation on the val items sent: two per language at least.
MIN_VAL_SENT = 2
MAX_FOLDS = 5


def uncertainty(probs: np.ndarray, hard: np.ndarray) -> float:
    """1 - the IoU the stack expects of its hard labels (see the module docstring); 0 for no characters.

    Args:
        probs: the stack's per-character probabilities.
        hard: its per-character hard labels (booleans).
    """
    if probs.size == 0:
        return 0.0
    p = np.clip(probs.astype(float), 0.0, 1.0)
    h = hard.astype(float)
    if not h.any():
        return float(p.max())
    expected = float((p * h).sum() / (h.sum() + (p * (1.0 - h)).sum()))
    return 1.0 - expected


def prediction_uncertainty(item: Item, pred: Prediction) -> float:
    """The uncertainty of a prediction (its soft and hard labels) over its item's answer."""
    length = len(item.model_output_text)
    return uncertainty(soft_to_vector(pred.soft_labels, length), hard_to_mask(pred.hard_labels, length))


def check_budget(budget: float, where: str = "--llm-budget") -> float:
    """`budget` if it is a share in (0, 1]; otherwise an error saying what is accepted."""
    if not (isinstance(budget, int | float) and 0.0 < budget <= 1.0):
        raise MushroomError(
            f"{where} {budget!r}: give the share of items sent to the model-backed members, "
            "above 0 and at most 1 (0.3: the most uncertain 30% of each language)"
        )
    return float(budget)


def budget_count(n: int, budget: float, minimum: int = 0) -> int:
    """How many of n items a budget sends: ceil(budget * n), at least `minimum`, at most n."""
    if not 0.0 <= budget <= 1.0:
        raise MushroomError(f"a budget is a share of items from 0 to 1, got {budget}")
    # the rounding guards a share that is a whole count in decimal (0.3 * 50 = 15.000000000000002)
    return min(n, max(minimum, math.ceil(round(budget * n, 9))))


def rank_key(item_id: str, unsure: float) -> tuple[float, str]:
    """Where an item stands in its language's order: the smaller key is the more uncertain item.

    The one place the order is written, so the ranking here and a cut applied elsewhere (an
    item on a Ray worker compared with its language's `Cut`) cannot disagree on ties.
    """
    return (-unsure, item_id)


def ranked(uncertainty_by_item: Mapping[str, float]) -> list[str]:
    """Item ids from the most to the least uncertain; equal values in the order of their ids."""
    return sorted(uncertainty_by_item, key=lambda item_id: rank_key(item_id, uncertainty_by_item[item_id]))


def select(uncertainty_by_item: Mapping[str, float], budget: float, minimum: int = 0) -> list[str]:
    """The ids a budget sends from one split and language, the most uncertain first.

    Args:
        uncertainty_by_item: item id -> uncertainty (see `uncertainty`).
        budget: the share of items to send, 0 to 1.
        minimum: send at least this many (the member stack is fitted on the items sent on
            val, and a fit needs two items per language).
    """
    order = ranked(uncertainty_by_item)
    return order[: budget_count(len(order), budget, minimum)]


class Cut(BaseModel):
    """The last item a budget sends from one split and language, the least uncertain of those sent.

    An item is sent when its rank key is at most the cut's, so a worker that holds one item
    and its language's cut decides as `select` does on the whole language, without the
    other items' uncertainties.
    """

    model_config = ConfigDict(extra="forbid")

    lang: str
    of: int = Field(ge=1, description="items of the language")
    sent: int = Field(ge=0, description="items the budget sends")
    id: str | None = Field(description="the last item sent (None when none is)")
    uncertainty: float = Field(0.0, description="its uncertainty")

    def sends(self, item_id: str, unsure: float) -> bool:
        """Whether the item is among those sent (its rank at most the cut's)."""
        return self.id is not None and rank_key(item_id, unsure) <= rank_key(self.id, self.uncertainty)


def cut(lang: str, uncertainty_by_item: Mapping[str, float], budget: float, minimum: int = 0) -> Cut:
    """A language's cut: the last of the ids `select` sends from it (same order, same count)."""
    if not uncertainty_by_item:
        raise MushroomError(f"language {lang}: a cut needs at least one item")
    chosen = select(uncertainty_by_item, budget, minimum)
    last = chosen[-1] if chosen else None
    return Cut(
        lang=lang,
        of=len(uncertainty_by_item),
        sent=len(chosen),
        id=last,
        uncertainty=uncertainty_by_item[last] if last is not None else 0.0,
    )


def plan(
    split: str,
    lang: str,
    uncertainty_by_item: Mapping[str, float],
    budget: float,
    minimum: int = 0,
) -> list[CascadeRecord]:
    """A record per item of one split and language: its rank, whether it is sent, and why."""
    order = ranked(uncertainty_by_item)
    n = len(order)
    by_budget = budget_count(n, budget)
    k = budget_count(n, budget, minimum)
    records = []
    for rank, item_id in enumerate(order, start=1):
        if rank <= by_budget:
            reason = f"among the {by_budget} most uncertain of {n} (budget {budget:g})"
        elif rank <= k:
            reason = f"sent beyond the budget's {by_budget}: the member stack is fitted on at least {minimum}"
        else:
            reason = f"the stack is surer of it than of the {k} sent: keeps the CPU stack's prediction"
        records.append(
            CascadeRecord(
                id=item_id,
                lang=lang,
                split=split,
                uncertainty=round(uncertainty_by_item[item_id], 6),
                rank=rank,
                of=n,
                sent=rank <= k,
                reason=reason,
            )
        )
    return records


def member_stack_verdict(
    gate: Mapping[str, Mapping], costly: list[str], member_iou: float, cpu_iou: float
) -> tuple[bool, str]:
    """Whether the items sent take the member stack's prediction rather than the CPU stack's, and why.

    A member stack that left every model-backed member out holds no model evidence: it is the
    CPU stack refitted on the few items sent, a noisier copy of it. It replaced the CPU stack's
    labels on the test items sent while the job said, of the same val items, that the CPU stack
    did better (an audit). One that scores at most the CPU stack's IoU out of fold on the val
    items the model answered is not worth its calls there either: a bad model is shrugged off,
    and a tie goes to the CPU stack, as the gate's does. The choice is made on those
    out-of-fold scores, once for all languages (per language, ~10 items make it noise).

    Args:
        gate: the member stack's `gate` (member -> its decision, `kept` among them).
        costly: the model-backed members.
        member_iou: the member stack's out-of-fold IoU on the val items answered (mean over languages).
        cpu_iou: the CPU stack's on the same items.
    """
    if costly and all(name in gate and not gate[name]["kept"] for name in costly):
        return False, f"the member stack left {', '.join(costly)} out, so it holds no model evidence"
    scores = (
        f"on the val items the model answered, the member stack scored IoU {member_iou:.4f} out of "
        f"fold, the CPU stack {cpu_iou:.4f}"
    )
    return member_iou > cpu_iou, scores


@dataclass
class MemberStackJudgement:
    """The two stacks' out-of-fold scores on the val items the model answered, and the verdict."""

    used: bool
    why: str
    member: dict[str, dict[str, float]]  # by_lang_scores of the member stack
    cpu: dict[str, dict[str, float]]  # of the CPU stack, on the same items


def judge_member_stack(
    fitted: dict[str, list[Item]],
    cpu_oof: dict[str, list[Prediction]],
    member_oof: dict[str, list[Prediction]],
    gate: Mapping[str, Mapping],
    costly: list[str],
) -> MemberStackJudgement:
    """`member_stack_verdict` on the val items fitted on, scored as the main job and the benchmark score them.

    Args:
        fitted: the val items the member stack was fitted on, by language.
        cpu_oof: the CPU stack's out-of-fold predictions, by language (a superset of `fitted`).
        member_oof: the member stack's, in `fitted`'s order.
        gate: the member stack's `gate`.
        costly: the model-backed members.
    """
    from mushroom.combine.stack.fit import by_lang_scores

    items = [it for lang in fitted for it in fitted[lang]]
    cpu_by_id = {p.id: p for lang in fitted for p in cpu_oof[lang]}
    member = by_lang_scores(items, [p for lang in fitted for p in member_oof[lang]])
    cpu = by_lang_scores(items, [cpu_by_id[it.id] for it in items])
    used, why = member_stack_verdict(gate, costly, member["mean"]["iou"], cpu["mean"]["iou"])
    return MemberStackJudgement(used, why, member, cpu)


def fit_folds(data: dict[str, list[Item]]) -> int:
    """Folds for the member stack's fit on these items: 5, or fewer when no language has 5."""
    return min(MAX_FOLDS, max(len(items) for items in data.values()))


def plan_split(
    split: str,
    data: dict[str, list[Item]],
    preds: dict[str, list[Prediction]],
    budget: float,
    minimum: int = 0,
) -> list[CascadeRecord]:
    """The plan of every language of a split, from the base stack's predictions of its items."""
    records = []
    for lang, items in data.items():
        by_id = {p.id: p for p in preds[lang]}
        unsure = {it.id: prediction_uncertainty(it, by_id[it.id]) for it in items}
        records += plan(split, lang, unsure, budget, minimum)
    return records


def chosen_items(
    data: dict[str, list[Item]], records: list[CascadeRecord], split: str
) -> dict[str, list[Item]]:
    """The items sent, per language, in the split's order (the ledger and files keep that order)."""
    sent = {r.id for r in records if r.split == split and r.sent}
    return {lang: [it for it in items if it.id in sent] for lang, items in data.items()}


def planned_ids(path: Path, split: str) -> dict[str, set[str]]:
    """The ids a cascade's records send, per language, for one split.

    Read from a run's cascade.jsonl or cascade-plan.jsonl (`main-job --plan-only`), so that
    contexts are generated for those items alone. Each line is checked as a `CascadeRecord`;
    an error names the file, the line and the field.
    """
    from mushroom.data.jsonl import load_records, refuse_irregular

    if path.is_dir():
        raise MushroomError(
            f"--cascade {path} is a folder; give its cascade-plan.jsonl (from main-job --plan-only) "
            "or cascade.jsonl"
        )
    refuse_irregular(path)
    if not path.is_file():
        raise MushroomError(f"--cascade: no such file: {path}")
    records = load_records(path, CascadeRecord)
    if not records:
        raise DataError([Problem(str(path), None, None, "empty: it holds no cascade's records")])
    splits = sorted({r.split for r in records})
    if split not in splits:
        raise MushroomError(
            f"--cascade {path} has no {split} items (it has {', '.join(splits)}): give --split "
            + " or --split ".join(splits)
        )
    sent: dict[str, set[str]] = {}
    for r in records:
        if r.split == split:
            sent.setdefault(r.lang, set())
            if r.sent:
                sent[r.lang].add(r.id)
    return sent


def merge_predictions(
    data: dict[str, list[Item]], base: dict[str, list[Prediction]], member: dict[str, list[Prediction]]
) -> dict[str, list[Prediction]]:
    """Per language, in item order: the member stack's prediction where there is one, else the base's."""
    out = {}
    for lang, items in data.items():
        own = {p.id: p for p in member.get(lang, [])}
        kept = {p.id: p for p in base[lang]}
        out[lang] = [own.get(it.id, kept[it.id]) for it in items]
    return out


class Spend(BaseModel):
    """What the model calls of some items cost, from their raw records."""

    model_config = ConfigDict(extra="forbid")

    calls: int = Field(0, description="calls answered by a model (cache hits not counted)")
    cached: int = Field(0, description="calls answered from the response cache")
    tokens: int = Field(0, description="prompt + completion tokens, as the server reported them")
    failed: int = Field(0, description="calls that ended in an error (counted in calls too)")
    unsent: int = Field(0, description="requests never sent (a tripped circuit breaker): not calls")

    def add(self, other: Spend) -> Spend:
        """The sum of two spends."""
        return Spend(
            calls=self.calls + other.calls,
            cached=self.cached + other.cached,
            tokens=self.tokens + other.tokens,
            failed=self.failed + other.failed,
            unsent=self.unsent + other.unsent,
        )

    @property
    def answered(self) -> bool:
        """Whether some call for the item was answered (by the model or its cache)."""
        return self.calls + self.cached > self.failed


def raw_sizes(raw_files: list[Path]) -> dict[Path, int]:
    """Each raw record file's size now: where the records of the calls still to come will start.

    A last line a kill cut is dropped first, as `RawLog` drops it when it opens the file:
    taken after, the size would lie past where the next record starts.
    """
    from mushroom.data.jsonl import mend_cut_line

    for path in raw_files:
        mend_cut_line(path, drop=True)
    return {path: path.stat().st_size for path in raw_files}


def spend_by_item(raw_files: list[Path], since: dict[Path, int] | None = None) -> dict[str, Spend]:
    """Model calls and tokens per item id, from raw record files (`raw/<lang>.raw.jsonl`).

    A server that reports no usage counts 0 tokens for its calls; the calls still count.
    With `since` (`raw_sizes` taken earlier), only the records written after it count: one
    run's calls (raw files are appended to, never rewritten).
    """
    from mushroom.backends.rawlog import RawRecord

    out: dict[str, Spend] = {}
    for path in raw_files:
        start, at = (since or {}).get(path, 0), 0
        with path.open("rb") as raw:
            for number, data in enumerate(raw, start=1):
                at += len(data)
                if at <= start or not data.strip():  # written before `since`, or blank
                    continue
                try:
                    rec = RawRecord.model_validate_json(data)
                except ValueError as exc:
                    raise MushroomError(f"{path}:{number}: not a raw record ({exc})") from exc
                usage = rec.usage
                tokens = usage.get(
                    "total_tokens", usage.get("prompt_tokens", 0) + usage.get("completion_tokens", 0)
                )
                failed = int(rec.error is not None)
                if rec.error is not None and rec.error.startswith(NOT_SENT):
                    one = Spend(unsent=1)
                elif rec.cached:
                    one = Spend(cached=1)
                else:
                    one = Spend(calls=1, tokens=tokens, failed=failed)
                key = rec.id or ""
                out[key] = out.get(key, Spend()).add(one)
    return out
