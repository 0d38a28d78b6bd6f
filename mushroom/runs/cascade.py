"""The main job as a cascade: the CPU stack on every item, model-backed members on the unsure ones.

Steps, each through the run service (so resume and failure rules are the main job's):

1. the CPU members have run on every test and val item (the caller ran them);
2. the base stack (CPU members only) is fitted on val by cross-validation, and applied to test;
3. each item's uncertainty is read off the base stack's output (out of fold on val, so no
   item's own label decides whether it is sent) and a budget picks the items to send
   (`mushroom.combine.cascade`);
4. the model-backed members run on the chosen items only: their ledgers keep every item
   they answered, so a re-run with a larger budget sends only the items it adds;
5. the member stack (all members) is fitted by cross-validation on the chosen val items,
   the same kind of items it is applied to on test, and applied to the chosen test items;
6. an item keeps the base stack's prediction unless it was sent.

Val numbers stay out of fold for both stacks. The run folder gets `cascade.jsonl` (a
`CascadeRecord` per item: rank, uncertainty, sent or not, why), `cascade/base/` (the base
stack's val and test predictions, for comparing) and `cascade/member-stack.json`.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mushroom.combine.cascade import (
    MIN_VAL_SENT,
    CascadeRecord,
    Spend,
    chosen_items,
    fit_folds,
    judge_member_stack,
    merge_predictions,
    plan_split,
    raw_sizes,
    spend_by_item,
)
from mushroom.combine.stack import Member, StackFit, StackModel, apply_stack, fit_stack
from mushroom.combine.stack.fit import by_lang_scores
from mushroom.data.contexts import context_file, graded_unusable, load_contexts
from mushroom.data.jsonl import write_jsonl
from mushroom.data.predictions import submission_name
from mushroom.data.records import Item, Prediction
from mushroom.data.runfolder import write_json
from mushroom.detectors import Detector
from mushroom.errors import MushroomError
from mushroom.evaluation.submission import write_predictions
from mushroom.runs.reporter import Table
from mushroom.runs.service import RunService
from mushroom.util.words import plural


@dataclass
class CascadeOutcome:
    """What the cascade leaves for the main job to write, score and summarise."""

    model: StackModel  # the base stack (its hard-label choices go in the summary)
    comparison: dict[str, dict[str, dict[str, float]]]
    val: dict[str, list[Prediction]]
    test: dict[str, list[Prediction]]
    records: list[CascadeRecord] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _write_split(
    folder: Path, split: str, preds: dict[str, list[Prediction]], data: dict[str, list[Item]]
) -> None:
    for lang, items in data.items():
        write_predictions(folder / submission_name(lang, split), preds[lang], items)


def _raw_files(out: Path, costly: list[str]) -> list[Path]:
    """The model-backed members' raw record files, test and val."""
    return [p for name in costly for p in (out / "members" / name).glob("**/raw/*.raw.jsonl")]


def _spend(out: Path, costly: list[str]) -> dict[str, Spend]:
    """Each item's model calls in the folder's raw records, every run and budget."""
    return spend_by_item(_raw_files(out, costly))


def _summary(
    records: list[CascadeRecord], by_item: dict[str, Spend], costly: list[str], budget: float, sent_now: int
) -> dict[str, Any]:
    """summary.json's `cascade`: where the items went and what the model calls cost."""

    def counts(split: str) -> dict[str, int]:
        rows = [r for r in records if r.split == split]
        return {
            "sent": sum(r.sent for r in rows),
            "kept": sum(not r.sent for r in rows),
            "failed": sum(r.failed for r in rows),
        }

    spend = Spend()
    for one in by_item.values():
        spend = spend.add(one)
    return {
        "cascade": {
            "budget": budget,
            "model_backed": costly,
            "val": counts("val"),
            "test": counts("test"),
            "sent_this_run": sent_now,
            # from the members' raw records: every call this folder's runs made, all budgets
            "model_calls_recorded": spend.calls,
            "model_calls_cached": spend.cached,
            "model_tokens_recorded": spend.tokens,
            "model_calls_failed": spend.failed,
            "model_calls_not_sent": spend.unsent,
            "records": "cascade.jsonl",
        }
    }


def _without(data: dict[str, list[Item]], failed: set[str], at_least: int) -> dict[str, list[Item]]:
    """Each language's items but the failed ones; a language left with fewer than `at_least` is dropped."""
    kept = {lang: [it for it in items if it.id not in failed] for lang, items in data.items()}
    return {lang: items for lang, items in kept.items() if len(items) >= at_least}


# Below this many val items a language's member stack is fitted on, its choices are noise.
FEW_FITTED = 10


def _warn_member_stack(service: RunService, val_fit: dict[str, list[Item]]) -> None:
    """Says when the member stack's fit says little (whether it did worse: `member_stack_verdict`)."""
    few = sorted(lang for lang, items in val_fit.items() if len(items) < FEW_FITTED)
    if few:
        service.warn(
            f"the member stack is fitted on fewer than {FEW_FITTED} val items in {', '.join(few)}: "
            "its choices, whether to keep a member included, are noise there; a larger --llm-budget "
            "gives it more items"
        )


@dataclass
class _Plan:
    """Steps 2 and 3: the base stack, fitted and applied, and where each item goes."""

    fit: StackFit
    test: dict[str, list[Prediction]]
    records: list[CascadeRecord]


@dataclass
class CascadeJob:
    """What a cascade works on: the run, its members (`costly` the model-backed ones), the items."""

    service: RunService
    dets: dict[str, Detector]
    costly: list[str]
    out: Path
    test_data: dict[str, list[Item]]
    val_data: dict[str, list[Item]]
    budget: float


def _plan(job: CascadeJob) -> _Plan:
    cheap = [name for name in job.dets if name not in job.costly]
    if not cheap:  # the main job refuses this before it makes a folder
        raise MushroomError(
            f"the cascade needs a CPU member; every member ({', '.join(job.dets)}) calls a model"
        )
    base_members = [Member(name, job.out / "members" / name, allow_failures=True) for name in cheap]
    base_fit = fit_stack(base_members, job.val_data, "val")
    base_test = apply_stack(base_fit.model, base_members, "test", job.test_data, warn=job.service.warn)
    records = plan_split("val", job.val_data, base_fit.oof, job.budget, MIN_VAL_SENT)
    records += plan_split("test", job.test_data, base_test, job.budget, 0)
    return _Plan(base_fit, base_test, records)


PLAN_FILE = "cascade-plan.jsonl"


def plan_only_report(job: CascadeJob, own_sources: tuple[str, ...] | None = None) -> list[CascadeRecord]:
    """Steps 2 and 3 alone: the choice, written to cascade-plan.jsonl, and what it would send.

    `own_sources` are the context sources only the model-backed members read (--member-contexts,
    None when not given): the next step says to generate them.

    Nothing else in the folder changes: its predictions, stack.json and cascade.jsonl are those
    of the last run that went on to the end. So a plan at another budget costs no finished run
    its submission. The items are those the same command without --plan-only sends, since the
    choice reads only the CPU members' output.
    """
    service, costly, out, budget = job.service, job.costly, job.out, job.budget
    plan = _plan(job)
    write_jsonl(out / PLAN_FILE, plan.records)
    answered = {i for i, one in _spend(out, costly).items() if one.answered}
    rows = []
    for split, data in (("val", job.val_data), ("test", job.test_data)):
        for lang in data:
            mine = [r for r in plan.records if r.split == split and r.lang == lang]
            sent = [r for r in mine if r.sent]
            rows.append([split, lang, len(mine), len(sent), sum(r.id in answered for r in sent)])
    service.reporter.table(
        Table(
            f"the cascade's plan at budget {budget:g}: the items {', '.join(costly)} would see",
            columns=["split", "lang", "items", "to send", "answered before"],
            rows=rows,
        )
    )
    to_send = sum(row[3] for row in rows)
    new = to_send - sum(row[4] for row in rows)
    plan_file = out / PLAN_FILE
    if own_sources is None:
        step = (
            "the model-backed members read --contexts. For contexts generated for these items alone, "
            "make the plan with --member-contexts naming their sources, the generated one too (in a new "
            "--out: it is part of the folder's config); then `mushroom contexts --cascade PLAN --source NAME`"
        )
    elif not own_sources:
        step = (
            "the CPU members read every source of --member-contexts too: run this command again "
            "without --plan-only"
        )
    else:
        commands = " and ".join(
            f"`mushroom contexts --cascade {plan_file} --split {split} --source {name}{_backend_flags(job)}`"
            for name in own_sources
            for split in ("val", "test")
        )
        step = (
            f"generate contexts for those items alone with {commands}; then run this command again "
            "without --plan-only"
        )
    service.reporter.message(
        f"{plural(to_send, 'item')} would go to {', '.join(costly)} ({new} not answered before); "
        "nothing was sent. "
        f"The choice is in {plan_file}: {step}",
        lead="plan:",
    )
    service.release()
    return plan.records


def _backend_flags(job: CascadeJob) -> str:
    """The first model-backed member's backend as `mushroom contexts` flags, for the commands printed.

    Without them the command printed failed as printed: "the openai backend needs `base_url`".
    """
    from mushroom.detectors.base import backend_settings

    for name in job.costly:
        for _, _, setting in backend_settings(job.dets[name].options):
            flags = [f"--backend {setting.kind}"]
            for flag, value in (
                ("--model", setting.model),
                ("--base-url", getattr(setting, "base_url", None)),
                ("--responses", getattr(setting, "responses", None)),
            ):
                if value:
                    flags.append(f"{flag} {shlex.quote(str(value))}")
            return " " + " ".join(flags)
    return ""


def _warn_ungenerated(
    service: RunService,
    out: Path,
    sent: dict[str, dict[str, list[Item]]],
    own_sources: tuple[str, ...],
    backend: str = "",
) -> None:
    """Says which items sent lack a context in a source only the model-backed members read.

    Those sources are generated for the items a plan sends; a wider budget sends items no
    plan named, which went to the model with the other sources' contexts alone, unsaid.
    An item graded "no usable context" has none on purpose and is not counted.
    """
    for name in own_sources:
        lacking: dict[str, int] = {}
        for split, data in sent.items():
            for lang, items in data.items():
                path = context_file(split, lang, name)
                have = set(load_contexts(split, lang, (name,)).by_id) if path is not None else set()
                skip = graded_unusable(path) if path is not None else set()
                n = sum(1 for it in items if it.id not in have and it.id not in skip)
                if n:
                    lacking[split] = lacking.get(split, 0) + n
        if lacking:
            where = ", ".join(f"{n} {split}" for split, n in lacking.items())
            splits = " and ".join(f"--split {split}" for split in lacking)
            service.warn(
                # "generates them first" read as if nothing had been sent yet: they were, and
                # generating afterwards sent them again (an audit)
                f"context source {name!r} has no context for {where} items sent: this run sends them "
                f"with the other sources' alone. To give them {name!r}'s, `mushroom contexts --cascade "
                f"{out / 'cascade.jsonl'} --source {name}{backend}` with {splits} generates them, and "
                "this command run again sends those items a second time (to pay once, widen a budget "
                "with --plan-only first, as the guide does)"
            )


def run_cascade(
    job: CascadeJob,
    langs: list[str] | None,
    val_langs: list[str],
    member_sources: tuple[str, ...],
    stop_on_failures: Callable[[dict[str, Any]], None],
    own_sources: tuple[str, ...] = (),
) -> CascadeOutcome:
    """Steps 2 to 6 of the module docstring; the CPU members have run on every item.

    `member_sources` are the contexts the model-backed members read, `own_sources` those of them
    the CPU members do not read (generated for the items sent). `stop_on_failures` is the
    main job's check after detection (it clears stale files and raises RunFailed, with the
    summary given, when items failed and failures are not allowed).
    """
    service, dets, costly, out, budget = job.service, job.dets, job.costly, job.out, job.budget
    test_data, val_data = job.test_data, job.val_data
    for stage in ("stack-fit", "stack-apply"):  # their stack.json and test files are overwritten here
        service.forget_stage(stage)
    t0 = time.perf_counter()
    plan = _plan(job)
    base_fit, base_test, records = plan.fit, plan.test, plan.records
    write_json(out / "stack.json", base_fit.model.model_dump(mode="json"))
    _write_split(out / "cascade" / "base" / "val", "val", base_fit.oof, val_data)
    _write_split(out / "cascade" / "base", "test", base_test, test_data)
    write_jsonl(out / "cascade.jsonl", records)
    service.record_stage("cascade-base-stack", time.perf_counter() - t0, reused=False)
    val_sent, test_sent = chosen_items(val_data, records, "val"), chosen_items(test_data, records, "test")
    _warn_ungenerated(service, out, {"val": val_sent, "test": test_sent}, own_sources, _backend_flags(job))
    before = raw_sizes(_raw_files(out, costly))
    for name in costly:
        det = dets[name]
        service.detect_split(det, "test", out / "members" / name, langs, member_sources, data=test_sent)
        service.detect_split(
            det, "val", out / "members" / name / "val", val_langs, member_sources, data=val_sent
        )
    # items with a call this run made: not those answered from the response cache (a failed
    # item is run again on each re-run), nor those a tripped circuit breaker kept back
    sent_now = sum(s.calls > 0 for s in spend_by_item(_raw_files(out, costly), since=before).values())

    # An item a model-backed member failed on is marked so in the records, whether the run
    # stops here or goes on under --allow-failures; then it keeps the CPU stack's prediction:
    # its member evidence is missing, not "nothing wrong", so it is neither fitted on nor
    # given the member stack's output.
    costly_detectors = {dets[name].name for name in costly}
    failed = {f.id for f in service.failures if f.detector in costly_detectors}
    if failed:
        how = "keeps the CPU stack's prediction" if service.allow_failures else "the run stopped"
        note = f"{', '.join(costly)} failed on it: {how}"
        records = [
            r.model_copy(update={"failed": True, "reason": f"{r.reason}; {note}"})
            if r.sent and r.id in failed
            else r
            for r in records
        ]
        write_jsonl(out / "cascade.jsonl", records)
    by_item = _spend(out, costly)
    summary = _summary(records, by_item, costly, budget, sent_now)
    stop_on_failures(summary)
    val_fit = _without(val_sent, failed, MIN_VAL_SENT)
    test_ok = _without(test_sent, failed, 1)

    t0 = time.perf_counter()
    members = [Member(name, out / "members" / name, allow_failures=True) for name in dets]
    member_oof: dict[str, list[Prediction]] = {}
    member_test: dict[str, list[Prediction]] = {}
    answered: dict[str, dict[str, dict[str, float]]] = {}  # the two stacks on the val items answered
    (out / "cascade" / "member-stack.json").unlink(missing_ok=True)
    if val_fit:
        member_fit = fit_stack(members, val_fit, "val", folds=fit_folds(val_fit))
        member_oof = member_fit.oof
        if test_ok:
            member_test = apply_stack(member_fit.model, members, "test", test_ok, warn=service.warn)
        write_json(out / "cascade" / "member-stack.json", member_fit.model.model_dump(mode="json"))
        if member_fit.model.gate:
            service.reporter.message(f"member stack on the items sent: {member_fit.model.gate_summary()}")
        judged = judge_member_stack(val_fit, base_fit.oof, member_oof, member_fit.model.gate, costly)
        # of the val items sent that the model answered (those fitted on): "items sent" was
        # read as all of them, with failed items among them (an audit)
        answered["member stack, items answered (CV)"] = judged.member
        answered["CPU stack, items answered (CV)"] = judged.cpu
        _warn_member_stack(service, val_fit)
        summary["cascade"]["member_stack"] = {"used": judged.used, "why": judged.why}
        if not judged.used:
            service.warn(f"{judged.why}: every item sent keeps the CPU stack's prediction")
            member_oof, member_test = {}, {}
            # not kept: `RayCascade.from_run` would apply it (summary.json says why it is absent)
            (out / "cascade" / "member-stack.json").unlink(missing_ok=True)
            note = f"the member stack was not used ({judged.why}): keeps the CPU stack's prediction"
            records = [
                r.model_copy(update={"reason": f"{r.reason}; {note}"}) if r.sent and not r.failed else r
                for r in records
            ]
            write_jsonl(out / "cascade.jsonl", records)
    else:
        service.warn(
            f"{', '.join(costly)} answered fewer than {MIN_VAL_SENT} of the val items sent in every "
            "language: no member stack could be fitted, and every item keeps the CPU stack's prediction"
        )
        summary["cascade"]["member_stack"] = {"used": False, "why": "too few val items answered to fit one"}
    val_preds = merge_predictions(val_data, base_fit.oof, member_oof)
    test_preds = merge_predictions(test_data, base_test, member_test)
    service.record_stage("cascade-member-stack", time.perf_counter() - t0, reused=False)
    val_items = [it for items in val_data.values() for it in items]

    def flat(preds: dict[str, list[Prediction]], data: dict[str, list[Item]]) -> list[Prediction]:
        return [p for lang in data for p in preds[lang]]

    # "stack (CV)" is the cascade's final prediction, the row the main job's checks read
    comparison = {
        "stack (CV)": by_lang_scores(val_items, flat(val_preds, val_data)),
        "CPU stack alone (CV)": base_fit.comparison["stack (CV)"],
        **answered,
    }
    cheap = [name for name in dets if name not in costly]
    comparison.update({name: scores for name, scores in base_fit.comparison.items() if name in cheap})

    sent_ids = {r.id for r in records if r.sent}
    unused = sum(1 for i, one in by_item.items() if i not in sent_ids and one.answered)
    if unused:
        service.reporter.message(
            f"{plural(unused, 'item')} {', '.join(costly)} answered in an earlier run of this folder "
            f"{'is' if unused == 1 else 'are'} not sent at budget {budget:g}: they keep the CPU stack's "
            "prediction (their answers stay in the "
            "members' raw records)",
            lead="note:",
        )
    return CascadeOutcome(base_fit.model, comparison, val_preds, test_preds, records, summary)
