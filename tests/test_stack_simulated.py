"""The stack uses a strong member and shrugs off a useless one: simulated members, out of fold.

No capable LLM runs on these machines, so an LLM member's worth to the stack cannot be shown
with a real model here. These members are built from the gold labels inside the test: a
"strong" one is gold with a share of its characters flipped, a "random" one is noise. They
live in this file only and are never reported as a detector's result.

The base is the real lexical detector, run through the CLI on real val items; each stack is
fitted by cross-validation, and its out-of-fold predictions are scored per item as the
official scorer does, so the comparison is paired over the same items.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import write_lines
from typer.testing import CliRunner

from mushroom.cli.app import app
from mushroom.combine.stack import fit_stack, parse_members
from mushroom.data.predictions import prediction_from_vectors, submission_name
from mushroom.data.records import Item
from mushroom.data.splits import load_split
from mushroom.evaluation.metrics import item_iou
from mushroom.evaluation.stats import paired_test

pytestmark = pytest.mark.slow

LANGS = ["de", "it", "sv"]


def _gold(item: Item) -> np.ndarray:
    vec = np.zeros(len(item.model_output_text))
    for start, end in item.hard_labels:
        vec[start:end] = 1.0
    return vec


def _strong(item: Item, rng: np.random.Generator, flip: float) -> np.ndarray:
    """Gold with `flip` of the characters flipped, as a confident but imperfect detector."""
    gold = _gold(item)
    flipped = np.where(rng.random(gold.size) < flip, 1.0 - gold, gold)
    return np.clip(0.15 + 0.7 * flipped + rng.normal(0, 0.05, gold.size), 0, 1)


def _write_member(folder, data: dict[str, list[Item]], make) -> None:
    folder.mkdir(parents=True)
    for lang, items in data.items():
        rows = []
        for it in items:
            vec = make(it)
            rows.append(prediction_from_vectors(it.id, vec, vec > 0.5).submission_dict())
        write_lines(folder / submission_name(lang, "val"), rows)


def _oof_iou(fit, data: dict[str, list[Item]]) -> np.ndarray:
    scores = []
    for lang, items in sorted(data.items()):
        preds = {p.id: p for p in fit.oof[lang]}
        for it in items:
            pred = preds[it.id]
            scores.append(item_iou(it.hard_labels, pred.hard_labels, len(it.model_output_text)))
    return np.array(scores)


def _strong_and_random(root: Path, data, seed: int, suffix: str = "") -> None:
    """Writes a strong simulated member (gold, 10% of characters flipped) and a random one."""
    rng = np.random.default_rng(seed)
    _write_member(root / f"strong{suffix}", data, lambda it: _strong(it, rng, flip=0.1))
    _write_member(root / f"random{suffix}", data, lambda it: rng.uniform(0, 1, len(it.model_output_text)))


def _members(lexical_run: Path, *extra: str):
    """The lexical run and the simulated members named, written beside it."""
    return parse_members([f"lexical={lexical_run}", *(f"{n}={lexical_run.parent / n}" for n in extra)])


@pytest.fixture(scope="module")
def lexical_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sim") / "lexical"
    args = ["detect", "--split", "val", "--detector", "lexical", "--out", str(out), "--quiet"]
    for lang in LANGS:
        args += ["--lang", lang]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    return out


def test_the_stack_gains_from_a_strong_member_and_is_not_hurt_by_a_random_one(lexical_run):
    data = load_split("val", LANGS)
    root = lexical_run.parent
    _strong_and_random(root, data, 7)

    def oof(*extra: str) -> np.ndarray:
        return _oof_iou(fit_stack(_members(lexical_run, *extra), data, folds=5), data)

    base, strong, noise = oof(), oof("strong"), oof("random")
    gain = paired_test(strong, base)
    assert gain.mean_diff > 0.1 and gain.ci_low > 0, f"a strong member must help: {gain}"
    # the strong member alone is ~0.8 IoU; a stack that uses it lands close to it
    assert strong.mean() > 0.7, strong.mean()
    harm = paired_test(noise, base)
    print(f"base {base.mean():.4f} strong {strong.mean():.4f} random {noise.mean():.4f}; {gain}; {harm}")
    # within noise: the paired interval reaches zero, or the loss is under 0.02 IoU
    assert harm.ci_high >= 0 or harm.mean_diff > -0.02, f"a random member must not hurt: {harm}"
    assert abs(harm.mean_diff) < 0.03, f"a random member must leave the stack where it was: {harm}"


def test_gated_the_stack_keeps_a_strong_member_and_leaves_a_random_one_out(lexical_run):
    """As a stack treats llm, chain and pyes members: each may be left out, nested in the folds."""
    data = load_split("val", LANGS)
    root = lexical_run.parent
    _strong_and_random(root, data, 11, "-g")

    def fit(*extra: str):
        members = _members(lexical_run, *extra)
        return members, fit_stack(members, data, folds=5, gate=list(extra))

    _, base_fit = fit()
    base = _oof_iou(base_fit, data)
    members, strong_fit = fit("strong-g")
    decision = strong_fit.model.gate["strong-g"]
    assert decision["kept"] and decision["folds_kept"] == 5, decision
    gain = paired_test(_oof_iou(strong_fit, data), base)
    assert gain.mean_diff > 0.1 and gain.ci_low > 0, f"a strong member must help: {gain}"
    members, noise_fit = fit("random-g")
    harm = paired_test(_oof_iou(noise_fit, data), base)
    assert harm.ci_high >= 0 and abs(harm.mean_diff) < 0.02, f"a random member must not hurt: {harm}"
    assert not noise_fit.model.gate["random-g"]["kept"], noise_fit.model.gate  # worse out of fold: left out
    # left out, the stack is still applied with every member it was given, as the stack without it
    from mushroom.combine.stack import apply_stack

    assert noise_fit.model.members == ["lexical"]
    assert noise_fit.model.fitted_members == ["lexical", "random-g"]
    assert apply_stack(noise_fit.model, members, "val", data) == apply_stack(
        base_fit.model, members[:1], "val", data
    )
    from mushroom.combine.stack.stream import iter_apply_stack

    streamed = {}
    for chunk in iter_apply_stack(noise_fit.model, members, "val", data, chunk_items=7):
        streamed.setdefault(chunk.lang, []).extend(chunk.predictions)
    assert streamed == apply_stack(base_fit.model, members[:1], "val", data)


def test_two_gated_members_are_judged_each_on_its_own(lexical_run):
    """A good model-backed member is not dropped along with a bad one (llm and pyes together)."""
    data = load_split("val", LANGS)
    root = lexical_run.parent
    _strong_and_random(root, data, 13, "-2")
    names = ["lexical", "random-2", "strong-2"]
    members = _members(lexical_run, *names[1:])
    fit = fit_stack(members, data, folds=5, gate=names[1:])
    assert not fit.model.gate["random-2"]["kept"] and fit.model.gate["strong-2"]["kept"], fit.model.gate
    assert fit.model.members == ["lexical", "strong-2"] and fit.model.fitted_members == names
    assert _oof_iou(fit, data).mean() > 0.8  # the strong member's gain is kept
    assert "left random-2 out" in fit.model.gate_summary() and "kept strong-2" in fit.model.gate_summary()
