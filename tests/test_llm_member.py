"""An LLM as a stack member of the main job: run through the run service, fitted in the folds."""

from __future__ import annotations

import json

from cli_helpers import cli, llm_member_options
from fake_openai_server import FakeServer

# a model that finds nothing wrong: the plumbing, not the method, is what is checked here
NOTHING = '{"incorrect_spans": []}'


def test_the_main_job_takes_an_llm_member_with_its_backend_and_reuses_it(tmp_path, capsys):
    out = tmp_path / "job"
    args = [
        "main-job",
        "--members",
        "lexical,llm",
        "--lang",
        "it",
        *llm_member_options(),
        "--out",
        out,
        "--quiet",
    ]
    with FakeServer({}, default_text=NOTHING) as server:
        code, shown, err = cli(capsys, *args, "-o", f"llm.backend.base_url={server.url}")
        sent = len(server.calls)
    assert code == 0, err
    stack = json.loads((out / "stack.json").read_text())
    # a model that finds nothing adds nothing: the stack leaves it out (nested in the folds) and
    # is applied with both members, as given
    assert stack["fitted_members"] == ["lexical", "llm"] and stack["members"] == ["lexical"]
    assert list(stack["gate"]) == ["llm"] and not stack["gate"]["llm"]["kept"]
    assert stack["member_detectors"] == {"lexical": "lexical", "llm": "llm"}
    # every val and test item went to the model once, through the run service's folders
    val_raw = (out / "members" / "llm" / "val" / "raw" / "it.raw.jsonl").read_text().splitlines()
    test_raw = (out / "members" / "llm" / "raw" / "it.raw.jsonl").read_text().splitlines()
    assert len(val_raw) == 50 and sent == len(val_raw) + len(test_raw)
    assert (out / "mushroom.it-tst.v1.jsonl").is_file() and (out / "val" / "scores.json").is_file()
    # the same command on the finished folder sends nothing again (a new server, a new port)
    with FakeServer({}, default_text=NOTHING) as again:
        code, _, err = cli(capsys, *args, "-o", f"llm.backend.base_url={again.url}")
        assert code == 0, err
        assert len(again.calls) == 0


def test_members_go_with_the_stack_only_and_name_known_detectors(tmp_path, capsys):
    code, _, err = cli(
        capsys, "main-job", "--detector", "lexical", "--members", "lexical,llm", "--out", tmp_path / "a"
    )
    assert code == 2 and "--members" in err
    code, _, err = cli(capsys, "main-job", "--members", "lexical,lexcal", "--out", tmp_path / "b")
    assert code == 2 and "did you mean 'lexical'" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_member_without_its_backend_is_told_main_jobs_own_spelling(tmp_path, capsys):
    # the backend's message names detect's --base-url; main-job takes -o llm.backend.base_url=
    code, _, err = cli(
        capsys, "main-job", "--members", "lexical,llm", "--lang", "en", "-o", "llm.backend.kind=openai",
        "--out", tmp_path / "a",
    )  # fmt: skip
    assert code != 0 and "-o llm.backend.base_url=URL" in err and "base_url" in err
    assert not (tmp_path / "a").exists()
    # no backend at all: the default replay's message named detect's --responses and --backend
    code, _, err = cli(
        capsys, "main-job", "--members", "lexical,llm", "--lang", "en", "--out", tmp_path / "b"
    )
    said = " ".join(err.split())
    assert code == 2 and "member 'llm' needs a backend" in said, said
    assert "-o llm.backend.responses=FILE" in said and "--responses" not in said and "--backend" not in said
    assert not (tmp_path / "b").exists()
