"""`prompts/NAME.md` where mushroom runs is found before the shipped prompt of that name."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from mushroom.detectors import build
from mushroom.detectors.prompts import PROMPT_DIR, load_prompt
from mushroom.errors import MushroomError

MINE = "=== user ===\nMine: {{language}} {{context}} {{question}} {{answer}}\n"


def test_a_users_prompt_is_found_by_name_before_the_shipped_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = load_prompt("single_zero_shot")
    assert shipped.sha256 == hashlib.sha256((PROMPT_DIR / "single_zero_shot.md").read_bytes()).hexdigest()
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "single_zero_shot.md").write_text(MINE, encoding="utf-8")
    (tmp_path / "prompts" / "terse.md").write_text(MINE, encoding="utf-8")
    mine = load_prompt("single_zero_shot")
    assert mine.user.startswith("Mine:") and mine.sha256 == hashlib.sha256(MINE.encode()).hexdigest()
    assert load_prompt("terse.md").sha256 == mine.sha256
    # a run records the user's file: its name and the hash of its text
    det = build("llm", {"prompt": "terse", "backend": {"kind": "replay", "responses": "x.jsonl"}})
    assert det.describe()["prompt_name"] == "terse"
    assert det.describe()["prompt_sha256"] == mine.sha256


def test_a_name_that_is_not_a_plain_file_stem_finds_no_prompt_folder_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "secret.md").write_text(MINE, encoding="utf-8")
    with pytest.raises(MushroomError, match="not found.*single_zero_shot"):
        load_prompt("../secret")


def test_the_shipped_variants_config_uses_a_prompt_from_the_prompts_folder():
    from mushroom.data.splits import PROJECT_ROOT

    config = (PROJECT_ROOT / "configs" / "variants.toml").read_text(encoding="utf-8")
    assert 'prompt = "single_zero_shot_terse"' in config
    assert load_prompt("single_zero_shot_terse").name == "single_zero_shot_terse"
    assert not (PROMPT_DIR / "single_zero_shot_terse.md").exists()  # the user's, not shipped


def test_a_prompts_placeholders_are_checked_when_the_detector_is_built(tmp_path, capsys):
    """A typo'd placeholder was found per item, after the run folder was made, said backwards
    ("missing values ['anwser'], unknown values ['answer', ...]"); a prompt that left out
    {{language}} was refused though it needs no such value."""
    from cli_helpers import cli

    replay = {"kind": "replay", "responses": "x.jsonl"}

    def prompt(name, text):
        path = tmp_path / f"{name}.md"
        path.write_text(text, encoding="utf-8")
        return str(path)

    typo = prompt("typo", "=== user ===\n{{anwser}} {{context}}\n")
    with pytest.raises(
        MushroomError, match=r"\{\{anwser\}\} is no placeholder of this prompt .did you mean 'answer'"
    ):
        build("llm", {"prompt": typo, "backend": replay})
    capital = prompt("capital", "=== user ===\n{{Answer}}\n")
    with pytest.raises(MushroomError, match=r"\{\{Answer\}\} is no placeholder"):
        build("llm", {"prompt": capital, "backend": replay})
    blind = prompt("blind", "=== user ===\nIs this right? {{question}}\n")
    with pytest.raises(MushroomError, match=r"has no \{\{answer\}\}: the model would never see the answer"):
        build("llm", {"prompt": blind, "backend": replay})
    with pytest.raises(MushroomError, match=r"has no \{\{claims\}\}"):
        build("chain", {"verify_prompt": "decompose", "backend": replay})
    # a prompt that leaves out what it does not need renders
    terse = build(
        "llm", {"prompt": prompt("terse", "=== user ===\nFind errors: {{answer}}\n"), "backend": replay}
    )
    assert (
        terse.prompt.render(answer="A", question="Q", context="C", language="English")[0].content
        == "Find errors: A"
    )
    # and the command stops before a folder
    out = tmp_path / "run"
    code, _, err = cli(
        capsys,
        "detect",
        "--backend",
        "replay",
        "--responses",
        typo,
        "--prompt",
        typo,
        "--lang",
        "en",
        "--out",
        out,
    )
    assert code == 2 and "{{anwser}}" in err and not out.exists(), err


def test_a_name_or_path_not_found_says_which_folder_it_was_read_from(tmp_path, monkeypatch):
    """A config run from another folder: its prompts/ and relative paths are not the config's
    folder's, and neither message said where they had been looked for."""
    from mushroom.backends.config import ReplayConfig
    from mushroom.detectors.prompts import prompt_missing

    monkeypatch.chdir(tmp_path)
    assert f"looked up in {tmp_path / 'prompts'}" in prompt_missing("mine")
    with pytest.raises(MushroomError, match=f"a relative path is read from {tmp_path}"):
        ReplayConfig(responses="llm.raw.jsonl").check_ready()


def test_a_placeholder_in_single_braces_is_refused_when_the_detector_is_built(tmp_path, monkeypatch):
    """`{context}` was sent as it is: the model never saw the context, and the run said nothing."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    text = (
        '=== user ===\nContext: {context}\nAnswer: {{answer}} {{question}}\nReply {"incorrect_spans": []}\n'
    )
    (tmp_path / "prompts" / "mine.md").write_text(text, encoding="utf-8")
    backend = {"kind": "replay", "responses": "x.jsonl"}
    with pytest.raises(MushroomError, match=r"its context has single braces.*write \{\{context\}\}"):
        build("llm", {"prompt": "mine", "backend": backend})
    # unmatched braces are never meant: the context was not sent either
    lopsided = "=== user ===\nContext: {{context}\nAnswer: {{answer}} {{question}}\n"
    (tmp_path / "prompts" / "mine.md").write_text(lopsided, encoding="utf-8")
    with pytest.raises(MushroomError, match=r"its context has unmatched braces"):
        build("llm", {"prompt": "mine", "backend": backend})
    # beside a real {{answer}}, a {answer} in prose may be meant as it is
    prose = "=== user ===\nThe field {answer} holds {{answer}}. {{context}} {{question}}\n"
    (tmp_path / "prompts" / "mine.md").write_text(prose, encoding="utf-8")
    assert build("llm", {"prompt": "mine", "backend": backend}).describe()["prompt_name"] == "mine"


def test_a_missing_llm_prompt_offers_only_prompts_the_llm_detector_takes(tmp_path, monkeypatch):
    """It listed decompose, verify and pyes, which the llm detector then refused; a prompt of
    the user's own is offered whatever its name."""
    from mushroom.detectors.llm import LLMDetector, LLMOptions

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "verify_mine.md").write_text(MINE, encoding="utf-8")
    with pytest.raises(MushroomError) as caught:
        LLMDetector(LLMOptions(prompt="nosuch"))
    offered = str(caught.value).split("available: ")[1].split(" (")[0].split(", ")
    assert "single_few_shot" in offered and "verify_mine" in offered
    assert not {"decompose", "verify", "pyes", "context_grading"} & set(offered), offered


def test_a_run_records_where_each_prompt_came_from_and_warns_of_a_stand_in(tmp_path, monkeypatch, capsys):
    """A forgotten copy in prompts/ ran in place of the shipped prompt of its name, and the run
    recorded only that name (an audit): where it was read from is recorded, and warned of."""
    import gzip

    from cli_helpers import cli

    from mushroom.runs.confighash import config_hash

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    mine = tmp_path / "prompts" / "single_few_shot.md"
    mine.write_text((PROMPT_DIR / "single_few_shot.md").read_text(encoding="utf-8") + "\nBe brief.\n")
    replay = {"kind": "replay", "responses": "x.jsonl"}
    stands_in = build("llm", {"prompt": "single_few_shot", "backend": replay})
    assert stands_in.prompt.stands_in
    assert stands_in.describe()["prompt_files"] == {"prompt": str(mine.resolve())}
    shipped = build("llm", {"prompt": "single_zero_shot", "backend": replay})
    assert not shipped.prompt.stands_in and shipped.describe()["prompt_files"] == {"prompt": "shipped"}
    by_path = build("llm", {"prompt": str(mine), "backend": replay})  # asked for by its path: meant
    assert not by_path.prompt.stands_in
    # where it lies is for a reader: the same text read from a moved folder resumes the run
    moved = {**stands_in.describe(), "prompt_files": {"prompt": "/elsewhere/single_few_shot.md"}}
    assert config_hash(moved) == config_hash(stands_in.describe())
    chain = build("chain", {"backend": replay}).describe()["prompt_files"]
    assert chain == {"decompose_prompt": "shipped", "verify_prompt": "shipped"}

    records = (
        Path(__file__).resolve().parents[1] / "benchmarks" / "records" / "llm_quality" / "llm.raw.jsonl.gz"
    )
    (tmp_path / "llm.raw.jsonl").write_bytes(gzip.decompress(records.read_bytes()))
    args = ["--backend", "replay", "--responses", "llm.raw.jsonl", "--temperatures", "0.05,0.1,0.2"]
    code, _, err = cli(
        capsys, "detect", "--detector", "llm", *args, "-o", "max_tokens=384", "--prompt", "single_few_shot",
        "--lang", "en", "--limit", "1", "--allow-failures", "--out", tmp_path / "run", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert f"prompt 'single_few_shot' is your file {mine.resolve()}, not the shipped prompt" in err


def test_an_edited_pyes_prompt_does_not_resume_a_folder_of_the_old_one(tmp_path, monkeypatch):
    """pyes recorded its prompt by name alone: an edited prompts/pyes.md resumed a folder with the
    answers to the old question. Its text's sha256 is recorded now, as the llm detector's is."""
    from mushroom.runs.confighash import config_changes, unrecorded_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    text = (PROMPT_DIR / "pyes.md").read_text(encoding="utf-8")
    (tmp_path / "prompts" / "pyes.md").write_text(text, encoding="utf-8")
    options = {"models": [{"kind": "replay", "responses": "x.jsonl"}]}
    before = build("pyes", options).describe()
    (tmp_path / "prompts" / "pyes.md").write_text(text + "\nAnswer in one word.\n", encoding="utf-8")
    after = build("pyes", options).describe()
    assert [c.split(":")[0] for c in config_changes(before, after)] == ["file_sha256.prompt"]
    # a folder made before pyes recorded it resumes (its prompt cannot be checked), as for files
    old = {k: v for k, v in before.items() if k != "file_sha256"}
    assert unrecorded_files(old, after)
    # ... also one that recorded another file by content already (a replay file; a review)
    (tmp_path / "x.jsonl").write_text('{"id": "a", "logprob": -1.0}\n')
    with_file = build("pyes", options).describe()
    assert set(with_file["file_sha256"]) == {"models.0.responses", "prompt"}
    older = {
        **with_file,
        "file_sha256": {"models.0.responses": with_file["file_sha256"]["models.0.responses"]},
    }
    assert config_changes(older, with_file) == [] and unrecorded_files(older, with_file)


@pytest.mark.parametrize("kind", ["folder", "binary"])
def test_a_prompt_that_is_a_folder_or_not_text_is_a_usage_error(tmp_path, monkeypatch, capsys, kind):
    """A folder was "not found" (and listed among the prompts); a file that is not UTF-8 exited
    1 from `detect` and 2 from `run`."""
    from cli_helpers import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "prompts").mkdir()
    bad = tmp_path / "prompts" / "bad.md"
    if kind == "folder":
        bad.mkdir()
    else:
        bad.write_bytes(b"\xff\xfe\x00 {{answer}}")
    code, _, err = cli(
        capsys, "detect", "--detector", "llm", "--backend", "replay", "--responses", "x.jsonl",
        "--prompt", "prompts/bad.md", "--lang", "en", "--out", tmp_path / "run",
    )  # fmt: skip
    said = "is a folder; give a prompt file" if kind == "folder" else "prompts/bad.md: not valid UTF-8"
    assert code == 2 and said in err and not (tmp_path / "run").exists(), err
    # in a run config, by its line and key, as a prompt not found is
    (tmp_path / "c.toml").write_text(
        'name = "c"\nlangs = ["en"]\n[detector]\nname = "llm"\n'
        'options = { prompt = "prompts/bad.md", backend = { kind = "replay", responses = "x.jsonl" } }\n'
    )
    code, _, err = cli(capsys, "run", "c.toml", "--out", tmp_path / "run")
    assert code == 2 and "c.toml:5: field 'detector.options.prompt'" in err and said in err, err
    if kind == "folder":  # not offered as a prompt by name either
        with pytest.raises(MushroomError) as caught:
            load_prompt("nosuch")
        assert "bad" not in str(caught.value).split("available: ")[1].split(" (")[0].split(", ")


def test_a_backends_warning_names_the_variant_it_is_about(tmp_path, monkeypatch, capsys):
    """The replay's "another prompt" warning, the same words for two variants, was shown once,
    before the variant whose prompt did differ (an audit)."""
    import gzip

    from cli_helpers import cli

    monkeypatch.chdir(tmp_path)
    records = (
        Path(__file__).resolve().parents[1] / "benchmarks" / "records" / "llm_quality" / "llm.raw.jsonl.gz"
    )
    (tmp_path / "llm.raw.jsonl").write_bytes(gzip.decompress(records.read_bytes()))
    (tmp_path / "v.toml").write_text(
        'name = "v"\nsplits = ["val", "test"]\nlangs = ["en"]\n[detector]\nname = "llm"\n'
        "[detector.options]\ntemperatures = [0.05, 0.1, 0.2]\nmax_tokens = 384\n"
        '[detector.options.backend]\nkind = "replay"\nresponses = "llm.raw.jsonl"\n'
        '[[variants]]\nname = "zero"\noptions = { prompt = "single_zero_shot" }\n'
        '[[variants]]\nname = "few"\noptions = { prompt = "single_few_shot_plain" }\n'
    )
    code, _, err = cli(
        capsys,
        "run",
        "v.toml",
        "--limit",
        "1",
        "--allow-failures",
        "--out",
        "run",
        "--eval-dir",
        "e",
        "--quiet",
    )
    said = " ".join(err.split())
    assert code == 0, err
    for variant in ("zero", "few"):  # once each, and not of a split (it was said again of test)
        warning = (
            f"warning: {variant}: llm.raw.jsonl answers 'val-en-1' (and perhaps others) to another prompt"
        )
        assert said.count(warning) == 1, said
    assert "zero/test:" not in said and "zero/val:" not in said
