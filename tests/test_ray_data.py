"""The stack on Ray Data (a local Ray, two CPUs) gives the single-process run's predictions."""

from __future__ import annotations

import pytest
from cli_helpers import cli

from mushroom.data.contexts import DEFAULT_SOURCES, load_contexts
from mushroom.data.predictions import load_predictions, submission_name
from mushroom.data.splits import load_split
from mushroom.errors import MushroomError

ray = pytest.importorskip("ray")

LANGS = ["en", "de", "it", "sv", "fi", "es"]  # 299 val items
MEMBERS = {"lo": "threshold=0.2", "hi": "threshold=0.4"}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    yield
    ray.shutdown()


def test_the_stack_on_ray_data_equals_the_single_process_run(tmp_path, capsys, local_ray):
    from mushroom.runs.ray_data import (
        MemberSpec,
        RayStack,
        item_row,
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
    data = load_split("val", LANGS)
    rows = [
        item_row(item, load_contexts("val", lang, DEFAULT_SOURCES).by_id.get(item.id, []))
        for lang, items in data.items()
        for item in items
    ]
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

    fields = {name: info.default for name, info in StackModel.model_fields.items() if not info.is_required()}
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
