"""The stack and the cascade on Ray Data (a local Ray, two CPUs) give the single-process run's predictions."""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, gold_model, llm_member_options
from fake_openai_server import FakeServer

from mushroom.data.contexts import DEFAULT_SOURCES, load_contexts
from mushroom.data.predictions import load_predictions, submission_name
from mushroom.data.splits import load_split
from mushroom.errors import MushroomError

ray = pytest.importorskip("ray")

LANGS = ["en", "de", "it", "sv", "fi", "es"]  # 299 val items
MEMBERS = {"lo": "threshold=0.2", "hi": "threshold=0.4"}


def _rows(split: str, langs: list[str]) -> list[dict]:
    """The split's items of these languages as Ray rows, each with its contexts (read once per language)."""
    from mushroom.runs.ray_data import item_row

    rows = []
    for lang, items in load_split(split, langs).items():
        contexts = load_contexts(split, lang, DEFAULT_SOURCES).by_id
        rows += [item_row(item, contexts.get(item.id, [])) for item in items]
    return rows


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def test_the_stack_on_ray_data_equals_the_single_process_run(tmp_path, capsys, local_ray):
    from mushroom.runs.ray_data import (
        MemberSpec,
        RayStack,
        items_dataset,
        prediction_rows,
        stack_on_ray,
    )

    lang_args = [arg for lang in LANGS for arg in ("--lang", lang)]
    # the single-process run: each member on val, a stack fitted on them, applied to val
    for name, option in MEMBERS.items():
        code, _, err = cli(
            capsys, "detect", "--split", "val", "-o", option, "--out", tmp_path / name, "--quiet", *lang_args
        )
        assert code == 0, err
    members = [f"{name}={tmp_path / name}" for name in MEMBERS]
    code, _, err = cli(
        capsys, "stack", "fit", *members, "--out", tmp_path / "stack.json", "--folds", "3", *lang_args
    )
    assert code == 0, err
    code, _, err = cli(
        capsys,
        "stack",
        "apply",
        tmp_path / "stack.json",
        *members,
        "--split",
        "val",
        "--out",
        tmp_path / "one",
        *lang_args,
    )
    assert code == 0, err
    expected = {lang: load_predictions(tmp_path / "one" / submission_name(lang, "val")) for lang in LANGS}
    # the same stack on Ray Data: members built from their runs' configs, two actors
    spec = RayStack.load(tmp_path / "stack.json", [MemberSpec.from_run(n, tmp_path / n) for n in MEMBERS])
    rows = _rows("val", LANGS)
    assert len(rows) == 299
    got = prediction_rows(stack_on_ray(items_dataset(rows), spec, batch_size=32, concurrency=2).take_all())
    assert sorted(got) == sorted(LANGS)
    for lang in LANGS:
        assert sorted(p.id for p in got[lang]) == sorted(expected[lang])
        for pred in got[lang]:
            assert pred.model_dump() == expected[lang][pred.id].model_dump(), pred.id
    assert any(p.hard_labels for preds in got.values() for p in preds)


def test_a_stack_given_other_members_is_refused_before_ray_runs(tmp_path):
    from mushroom.combine.stack import StackModel
    from mushroom.runs.ray_data import MemberSpec, RayStack

    fields = {
        name: info.get_default(call_default_factory=True)
        for name, info in StackModel.model_fields.items()
        if not info.is_required()
    }
    fields.update(members=["lo", "hi"], member_detectors={"lo": "lexical"})
    model = StackModel.model_construct(**fields)
    with pytest.raises(MushroomError, match=r"fitted on members \['lo', 'hi'\]; got \['hi', 'lo'\]"):
        RayStack(
            stack=model,
            members=[MemberSpec(name="hi", detector="lexical"), MemberSpec(name="lo", detector="lexical")],
        ).check()
    with pytest.raises(MushroomError, match="'lo' was fitted on the 'lexical' detector, not 'llm'"):
        RayStack(
            stack=model,
            members=[MemberSpec(name="lo", detector="llm"), MemberSpec(name="hi", detector="lexical")],
        ).check()


def test_a_stack_that_left_a_member_out_is_loaded_with_every_member_and_builds_the_kept_ones():
    from mushroom.combine.stack import StackModel
    from mushroom.runs.ray_data import MemberSpec, RayStack

    fields = {
        name: info.get_default(call_default_factory=True)
        for name, info in StackModel.model_fields.items()
        if not info.is_required()
    }
    fields.update(
        members=["lo"], fitted_members=["lo", "llm"], member_detectors={"lo": "lexical", "llm": "llm"}
    )
    model = StackModel.model_construct(**{**fields, "scorer": object()})
    given = [MemberSpec(name="lo", detector="lexical"), MemberSpec(name="llm", detector="llm")]
    spec = RayStack.of(model, given)
    assert [m.name for m in spec.members] == ["lo"]  # no worker builds the member left out
    with pytest.raises(MushroomError, match=r"fitted on members \['lo', 'llm'\]; got \['llm'\]"):
        RayStack.of(model, given[1:])


CASCADE_LANGS = ["it", "es"]  # 302 test items, 100 val


@pytest.mark.slow
def test_the_cascade_on_ray_data_sends_the_items_and_makes_the_predictions_of_the_main_job(
    tmp_path, capsys, local_ray
):
    from mushroom.runs.ray_data import RayCascade, cascade_on_ray, items_dataset, prediction_rows

    out = tmp_path / "job"
    lang_args = [arg for lang in CASCADE_LANGS for arg in ("--lang", lang)]
    # the model names the gold spans, so the member stack is used and differs from the CPU stack
    with FakeServer({}, default_text=gold_model(*CASCADE_LANGS)) as server:
        code, _, err = cli(
            capsys,
            "main-job",
            "--members",
            "lexical,llm",
            *lang_args,
            "--llm-budget",
            "0.3",
            *llm_member_options(server.url),
            "--out",
            out,
            "--quiet",
        )
        assert code == 0, err
        by_job = len(server.calls)
        # the same cascade on Ray Data, over the job's test items: stacks and members from its folder
        cascade = RayCascade.from_run(out)
        assert cascade.model_backed() == ["llm"] and cascade.budget == 0.3
        rows = _rows("test", CASCADE_LANGS)
        assert len(rows) == 302
        run = cascade_on_ray(items_dataset(rows), cascade, batch_size=32, concurrency=2)
        got = run.predictions.take_all()
        by_ray = len(server.calls) - by_job

    records = [json.loads(line) for line in (out / "cascade.jsonl").read_text().splitlines()]
    records = {r["id"]: r for r in records if r["split"] == "test"}
    # the same items sent: 45 of it's 150, 46 of es's 152; the model saw those and no other
    sent = {row["id"] for row in got if row["sent"]}
    assert sent == {i for i, r in records.items() if r["sent"]}
    assert by_ray == len(sent) == 45 + 46
    assert {lang: (c.sent, c.of) for lang, c in run.cuts.items()} == {"es": (46, 152), "it": (45, 150)}
    for row in got:
        assert round(row["uncertainty"], 6) == records[row["id"]]["uncertainty"], row["id"]
    # the same predictions: the member stack's on the items sent, the CPU stack's on the others
    preds = prediction_rows(got)
    assert sorted(preds) == sorted(CASCADE_LANGS)
    changed = 0
    for lang in CASCADE_LANGS:
        expected = load_predictions(out / submission_name(lang, "test"))
        base = load_predictions(out / "cascade" / "base" / submission_name(lang, "test"))
        assert sorted(p.id for p in preds[lang]) == sorted(expected)
        for pred in preds[lang]:
            assert pred.model_dump() == expected[pred.id].model_dump(), pred.id
            if pred.id not in sent:
                assert pred.model_dump() == base[pred.id].model_dump(), pred.id
            changed += pred.model_dump() != base[pred.id].model_dump()
    assert changed > 0  # pass 2 made predictions of its own

    with pytest.raises(MushroomError, match="not the run folder of a cascade"):
        RayCascade.from_run(tmp_path)
    with pytest.raises(MushroomError, match="above 0 and at most 1"):
        RayCascade.from_run(out, budget=0.0)
    moved = cascade.with_options("llm", {"backend": {"base_url": "http://gpu-node:8000/v1"}})
    backend = moved.member.members[1].options["backend"]
    assert backend["base_url"] == "http://gpu-node:8000/v1" and backend["model"] == "m"


def test_a_member_that_cannot_run_is_named_before_any_ray_worker_starts():
    """A missing URL stopped each actor as it was built, inside an error of Ray's own."""
    from mushroom.combine.stack import StackModel
    from mushroom.runs.ray_data import MemberSpec, RayStack, stack_on_ray

    fields = {
        name: info.get_default(call_default_factory=True)
        for name, info in StackModel.model_fields.items()
        if not info.is_required()
    }
    fields.update(members=["lo", "llm"], member_detectors={"lo": "lexical", "llm": "llm"})
    model = StackModel.model_construct(**{**fields, "scorer": object()})
    no_url = {"backend": {"kind": "openai", "model": "m"}}
    spec = RayStack.of(
        model,
        [MemberSpec(name="lo", detector="lexical"), MemberSpec(name="llm", detector="llm", options=no_url)],
    )
    with pytest.raises(
        MushroomError, match=r"member 'llm': llm option backend: the openai backend needs `base_url`"
    ):
        stack_on_ray(None, spec)  # refused before the dataset is touched


def test_a_row_or_member_that_is_none_says_what_it_is_on_the_driver(tmp_path):
    """Python's own errors came out: "dictionary update sequence element #0 has length 1", and a
    folder that does not exist was called "not a run folder"."""
    from mushroom.runs.ray_data import MemberSpec, item_row

    item = {"id": "a", "lang": "EN", "model_input": "q", "model_output_text": "Paris"}
    with pytest.raises(MushroomError, match="item_row: an item is an Item or a dict of its fields, not str"):
        item_row("abc", [])
    with pytest.raises(MushroomError, match="item_row: contexts are a string, .* not int"):
        item_row(item, 3)
    assert item_row(item, None)["contexts"] == []  # a datasets row without contexts holds None
    with pytest.raises(MushroomError, match="nosuch: no such folder"):
        MemberSpec.from_run("lex", tmp_path / "nosuch")


def test_a_ray_row_takes_the_contexts_the_python_api_takes():
    """item_row refused a {"text": ...} dict without a source, which the API took."""
    from mushroom.runs.ray_data import item_row

    item = {"id": "a", "lang": "en", "model_input": "q", "model_output_text": "Paris"}
    row = item_row(item, ["one", {"text": "two"}, {"source": "wiki", "text": "three"}])
    assert [c["source"] for c in row["contexts"]] == ["context0", "context1", "wiki"]
    with pytest.raises(MushroomError, match=r"item_row: contexts\[0\] is a dict without 'text'"):
        item_row(item, [{"source": "wiki"}])
