"""`mushroom main-job --config FILE`: the main job (and its cascade) from a file, flags overriding it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import cli
from fake_openai_server import FakeServer

from mushroom.errors import DataError
from mushroom.runs.config import MAIN_JOB, load_main_job_config, load_run_config, read_config_file

CONFIGS = Path(__file__).resolve().parent.parent / "configs"

GOOD = """
job = "main"
members = ["lexical", "llm"]
langs = ["IT"]
llm_budget = 0.3

[options.llm]
temperatures = [0.1]

[options.llm.backend]
kind = "openai"
model = "m"
base_url = "http://127.0.0.1:9/v1"  # nothing listens: the test gives the server's with -o
"""


def test_every_config_in_configs_loads_as_the_kind_it_says_it_is():
    main_jobs = []
    for path in sorted(CONFIGS.iterdir()):
        if path.suffix not in (".toml", ".yaml", ".yml"):
            continue
        if read_config_file(path).get("job") == MAIN_JOB:
            main_jobs.append(load_main_job_config(path))
        else:
            load_run_config(path)
    # the shipped cascade: an llm member on an OpenAI-compatible server, 30% of the items
    cascade = [cfg for cfg in main_jobs if cfg.llm_budget is not None]
    assert cascade and cascade[0].llm_budget == 0.3 and "llm" in cascade[0].members
    assert cascade[0].options["llm"]["backend"]["kind"] == "openai"


def _problems(path: Path, text: str) -> list[str]:
    path.write_text(text)
    with pytest.raises(DataError) as info:
        load_main_job_config(path)
    assert all(p.path == str(path) for p in info.value.problems)
    return [f"{p.field}: {p.message}" for p in info.value.problems]


def test_a_bad_config_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "job.toml"
    assert load_main_job_config(_write(path, GOOD)).langs == ["it"]
    assert _problems(path, GOOD.replace("llm_budget = 0.3", "llm_budgt = 0.3")) == [
        "llm_budgt: unknown key (did you mean 'llm_budget'?); valid: job, description, members, options, "
        "langs, contexts, member_contexts, llm_budget, allow_failures, skip_unavailable"
    ]
    [budget] = _problems(path, GOOD.replace("0.3", "1.5"))
    assert (
        budget.startswith("llm_budget: llm_budget 1.5: give the share") and "above 0 and at most 1" in budget
    )
    [member] = _problems(path, GOOD.replace('"lexical", "llm"', '"lexcal", "llm"'))
    assert member.startswith("members.0: unknown detector 'lexcal' (did you mean 'lexical'?)")
    [option] = _problems(path, GOOD.replace("temperatures", "temperature"))
    assert option.startswith("options.llm.temperature: unknown option (did you mean 'temperatures'?)")
    [kind] = _problems(path, GOOD.replace('kind = "openai"', 'kind = "opena"'))
    assert kind.startswith("options.llm.backend")
    [other] = _problems(path, GOOD + "\n[options.semantic]\nmax_length = 64\n")
    assert other == "options.semantic: 'semantic' is not a member; members: lexical, llm"
    # a misspelt member is named; its options are not "did you mean" the misspelling
    typo, options = _problems(path, GOOD.replace('"lexical", "llm"', '"lexical", "lm"'))
    assert typo.startswith("members.1: unknown detector 'lm' (did you mean 'llm'?)")
    assert options == "options.llm: 'llm' is not a member; members: lexical, lm"
    [lang] = _problems(path, GOOD.replace('"IT"', '"xx"'))
    assert lang.startswith("langs.0: unknown language 'xx'")
    [job] = _problems(path, GOOD.replace('job = "main"', ""))
    assert job.startswith('job: a main-job config says job = "main"')
    [run] = _problems(path, (CONFIGS / "variants.toml").read_text())
    assert "a run config, for `mushroom run`" in run
    # and the other way round: `mushroom run` on a main-job config says which command runs it
    with pytest.raises(DataError, match="run it with `mushroom main-job --config"):
        load_run_config(_write(path, GOOD))


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_main_job_refuses_a_bad_config_before_it_makes_a_folder(tmp_path, capsys):
    path = _write(tmp_path / "job.toml", GOOD.replace("0.3", "0"))
    code, _, err = cli(capsys, "main-job", "--config", path, "--out", tmp_path / "a")
    assert code == 2 and str(path) in err and "llm_budget" in err
    code, _, err = cli(
        capsys,
        "main-job",
        "--config",
        tmp_path / "job.toml",
        "--detector",
        "lexical",
        "--out",
        tmp_path / "b",
    )
    assert code == 2 and "does not go with --detector lexical" in err
    code, _, err = cli(capsys, "main-job", "--config", tmp_path / "none.toml", "--out", tmp_path / "c")
    assert code == 2 and "config not found" in err
    assert not any((tmp_path / name).exists() for name in "abc")


def test_the_files_contexts_are_checked_with_their_key_and_a_flag_wins_over_them(
    tmp_path, capsys, monkeypatch
):
    """--contexts on the command line never won over the file's: the flag was read as not given
    (typer's own click), and the file's sources ran."""
    path = _write(
        tmp_path / "job.toml", 'job = "main"\nmembers = ["lexical"]\nlangs = ["it"]\ncontexts = ["tavily5"]\n'
    )
    code, _, err = cli(capsys, "main-job", "--config", path, "--out", tmp_path / "a")
    said = " ".join(err.split())
    assert code == 2 and f"{path}:4: field 'contexts.0': no context file for source 'tavily5'" in said, said
    assert "available: deepseek-r1" in said and not (tmp_path / "a").exists()
    out = tmp_path / "b"
    code, _, err = cli(
        capsys, "main-job", "--config", path, "--contexts", "deepseek-r1", "--out", out, "--quiet"
    )
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["config"]["sources"] == ["deepseek-r1"]
    # a test-only language (ca) is not looked for in val, where the main job does not run it
    from mushroom.runs.config import check_config_sources

    check_config_sources(path, ["val", "test"], ["en", "ca"], ["perplexity-sonar-pro", "deepseek-r1"])
    # a run config's too
    run = _write(
        tmp_path / "run.toml",
        'name = "x"\nlangs = ["it"]\ncontexts = ["tavily5"]\n[detector]\nname = "lexical"\n',
    )
    with pytest.raises(DataError, match="field 'contexts.0': no context file for source 'tavily5'"):
        load_run_config(run)
    # `run` takes no --items: a source error gave that advice (an audit)
    run.write_text('name = "x"\nlangs = ["en"]\ncontexts = ["../x"]\n[detector]\nname = "lexical"\n')
    with pytest.raises(DataError) as caught:
        load_run_config(run)
    assert "field 'contexts.0'" in str(caught.value) and "--items" not in str(caught.value), caught.value
    # a split with no folder is said once, of the split, not of each context source
    run.write_text(
        'name = "x"\nsplits = ["test-labeled"]\nlangs = ["en"]\ncontexts = ["a", "b", "c"]\n'
        '[detector]\nname = "lexical"\n'
    )
    with pytest.raises(DataError) as caught:
        load_run_config(run)
    said = str(caught.value)
    assert said.count("split folder not found") == 1 and "field 'splits.0'" in said, said
    # a config that names no splits runs on val by default: its missing folder is no `splits.0`,
    # and `run` takes no --items (a review)
    run.write_text('name = "x"\nlangs = ["en"]\ncontexts = ["a"]\n[detector]\nname = "lexical"\n')
    monkeypatch.setattr("mushroom.data.splits.DEFAULT_DATA_DIR", tmp_path / "nodata")
    with pytest.raises(DataError) as caught:
        load_run_config(run)
    (problem,) = caught.value.problems
    assert problem.field is None and "split folder not found" in problem.message, problem
    assert "--items" not in problem.message and "MUSHROOM_DATA_DIR" in problem.message, problem


def test_advice_to_set_an_option_is_written_as_a_run_config_takes_it():
    """`run` advised "raise max_tokens (-o max_tokens=N)", and refused -o as an unknown option."""
    from mushroom.util.options import config_form

    said = config_form(
        "raise max_tokens (-o max_tokens=N) for the 3 cut off at it; or -o backend.timeout_s=60"
    )
    assert said == (
        "raise max_tokens (max_tokens = N under [detector.options] in the config) for the 3 cut off at it; "
        "or timeout_s = 60 under [detector.options.backend] in the config"
    )
    # a word is written as the TOML string it is: `structured_output = json_object` is refused
    said = config_form("give -o backend.structured_output=json_object, or none, in a new --out folder")
    line = said.split("give ")[1].split(" under")[0]
    assert line == 'structured_output = "json_object"', said
    import tomllib

    assert tomllib.loads(line) == {"structured_output": "json_object"}


def _sent(out: Path) -> set[tuple[str, str]]:
    rows = [json.loads(line) for line in (out / "cascade.jsonl").read_text().splitlines()]
    return {(r["split"], r["id"]) for r in rows if r["sent"]}


@pytest.mark.slow
def test_a_config_with_a_budget_runs_the_cascade_and_flags_override_it(tmp_path, capsys):
    config = _write(tmp_path / "job.toml", GOOD)
    out = tmp_path / "job"
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
        # the file's server is wrong: -o replaces its base_url and keeps its kind and model
        code, _, err = cli(
            capsys,
            "main-job",
            "--config",
            config,
            "-o",
            f"llm.backend.base_url={server.url}",
            "--out",
            out,
            "--quiet",
        )
        first = len(server.calls)
    assert code == 0, err
    # it has 50 val and 150 test items: the file's budget sends 15 and 45, one request each
    assert first == 15 + 45 and len(_sent(out)) == 60
    saved = json.loads((out / "config.json").read_text())["config"]
    assert saved["llm_budget"] == 0.3 and saved["langs"] == ["it"]
    assert [m["detector"] for m in saved["members"]] == ["lexical", "llm"]
    assert saved["members"][1]["options"]["backend"]["base_url"] == server.url
    assert saved["members"][1]["options"]["temperatures"] == [0.1]
    summary = json.loads((out / "summary.json").read_text())["cascade"]
    assert summary["budget"] == 0.3 and summary["val"] == {"sent": 15, "kept": 35, "failed": 0}

    # --llm-budget on the command line wins over the file's: the same folder, 10 + 30 more items
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as again:
        code, _, err = cli(
            capsys,
            "main-job",
            "--config",
            config,
            "--llm-budget",
            "0.5",
            "-o",
            f"llm.backend.base_url={again.url}",
            "--out",
            out,
            "--quiet",
        )
        second = len(again.calls)
    assert code == 0, err
    assert second == 10 + 30 and len(_sent(out)) == 100
    assert json.loads((out / "config.json").read_text())["config"]["llm_budget"] == 0.5


def test_a_quoted_boolean_and_a_budget_left_without_a_model_are_named(tmp_path, capsys):
    path = tmp_path / "job.toml"
    [problem] = _problems(path, GOOD.replace('job = "main"', 'job = "main"\nallow_failures = "no"'))
    assert problem.startswith("allow_failures: ")  # not read as False in silence
    code, _, err = cli(capsys, "main-job", "--config", _write(path, GOOD), "--members", "lexical")
    flat = " ".join(err.split())
    assert code == 2 and f"{path}: llm_budget = 0.3 limits the model-backed members" in flat
    assert "--llm-budget 1 to send every item" in flat


def test_a_yaml_syntax_error_is_one_problem_with_its_line():
    """PyYAML's own text is six lines with carets and '<unicode string>'."""
    pytest.importorskip("yaml")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bad.yaml"
        path.write_text("job: main\nmembers: [lexical\n", encoding="utf-8")
        with pytest.raises(DataError) as caught:
            read_config_file(path)
    (problem,) = caught.value.problems
    assert (
        problem.line == 3
        and problem.message == "cannot parse: expected ',' or ']', but got '<stream end>' (column 1)"
    )


def test_yaml_and_json_configs_say_what_toml_would(tmp_path):
    """A key given twice kept its last value in YAML (TOML refuses it); YAML 1.1's yes/no/on/off
    became booleans, so `langs: [no]` said "not a valid string" of something never written; a
    JSON file was parsed as TOML ("Invalid statement at line 1, column 1")."""
    pytest.importorskip("yaml")
    twice = tmp_path / "twice.yaml"
    twice.write_text("name: y\nlangs: [en]\nlimit: 2\nlimit: 3\ndetector:\n  name: lexical\n")
    with pytest.raises(DataError) as caught:
        load_run_config(twice)
    (problem,) = caught.value.problems
    assert problem.line == 4 and "key 'limit' is given twice (first on line 3)" in problem.message
    nested = tmp_path / "nested.yaml"
    nested.write_text(
        "name: y\ndetector:\n  name: lexical\n  options:\n    threshold: 0.3\n    threshold: 0.9\n"
    )
    with pytest.raises(DataError, match="key 'threshold' is given twice"):
        load_run_config(nested)
    # a merge key (`<<: *base`) is no key given twice; a key it brings may be set again
    merged = tmp_path / "merged.yaml"
    merged.write_text(
        "base: &base\n  name: lexical\n  options: {threshold: 0.3}\n"
        "name: y\nlangs: [en]\ndetector:\n  <<: *base\n  options: {threshold: 0.5}\n"
    )
    assert read_config_file(merged)["detector"] == {"name": "lexical", "options": {"threshold": 0.5}}
    # a value YAML cannot read is not said to be TOML's
    with pytest.raises(DataError) as caught:
        read_config_file(_write(tmp_path / "date.yaml", "x: 2024-13-45\n"))
    assert "TOML" not in caught.value.problems[0].message, caught.value.problems[0].message
    # only true and false are yes/no (YAML 1.2): what was written is shown
    norway = tmp_path / "norway.yaml"
    norway.write_text("name: y\nlangs: [no]\ndetector:\n  name: lexical\n  options:\n    threshold: yes\n")
    with pytest.raises(DataError) as caught:
        load_run_config(norway)
    said = " ".join(p.message for p in caught.value.problems)
    assert "'no'" in said and "'yes'" in said and "true" not in said.replace("true or false", ""), said
    assert read_config_file(_write(tmp_path / "b.yaml", "a: true\nb: False\n")) == {"a": True, "b": False}
    # JSON: read as JSON (it is YAML's too), a key twice refused as in the others
    data = {"name": "j", "langs": ["en"], "limit": 2, "detector": {"name": "lexical"}}
    assert load_run_config(_write(tmp_path / "ok.json", json.dumps(data))).limit == 2
    with pytest.raises(DataError, match="key 'limit' is given twice"):
        read_config_file(_write(tmp_path / "twice.json", '{"limit": 2, "limit": 3}'))
    with pytest.raises(DataError) as caught:
        read_config_file(_write(tmp_path / "bad.json", '{"limit": 2,}'))
    assert caught.value.problems[0].line == 1 and "cannot parse" in caught.value.problems[0].message
    # a file of another suffix is read as TOML, and says so when it is not
    with pytest.raises(DataError, match=r"read as TOML \(configs are \.toml, \.yaml or \.json\)"):
        read_config_file(_write(tmp_path / "cfg.txt", '{"limit": 2}'))


def test_a_run_config_names_all_its_mistakes_at_once(tmp_path):
    """A typo'd detector hid the languages' errors, and a bad variant the next one's."""
    bad = 'name = "x"\nsplits = ["val", "vall"]\nlangs = ["en", "xx"]\n[detector]\nname = "lexcal"\n'
    with pytest.raises(DataError) as err:
        load_run_config(_write(tmp_path / "a.toml", bad))
    assert [p.field for p in err.value.problems] == ["detector.name", "langs.1", "splits.1"]
    variants = (
        'name = "x"\nlangs = ["en"]\n[detector]\nname = "lexical"\n'
        '[[variants]]\nname = "a"\noptions = { threshold = 2 }\n'
        '[[variants]]\nname = "b"\noptions = { thresold = 0.3 }\n'
    )
    with pytest.raises(DataError) as err:
        load_run_config(_write(tmp_path / "b.toml", variants))
    assert {p.field for p in err.value.problems} == {
        "variants.a.options.threshold",
        "variants.b.options.thresold",
    }
    # a top-level mistake (an unknown key of a variant) hid the detector options' own
    hidden = variants.replace('name = "b"\n', 'name = "b"\nfoo = 1\n').replace(
        '"x"\n', '"x"\nlimit = "5"\n', 1
    )
    with pytest.raises(DataError) as err:
        load_run_config(_write(tmp_path / "c.toml", hidden))
    assert {p.field for p in err.value.problems} == {
        "limit",
        "variants.1.foo",
        "variants.a.options.threshold",
        "variants.b.options.thresold",
    }


def test_what_only_building_the_detector_finds_names_the_file_and_table(tmp_path):
    """A prompt file without {{answer}} stopped the run naming neither the config nor the file;
    "en" and "EN", a source twice, and variants "a" and "A" (one folder on macOS) ran."""
    prompt = _write(tmp_path / "mine.md", "Is this right? {{question}}")
    text = (
        'name = "x"\nlangs = ["en"]\n[detector]\nname = "llm"\n'
        '[[variants]]\nname = "plain"\n'
        f'[[variants]]\nname = "mine"\noptions = {{ prompt = "{prompt}" }}\n'
    )
    path = _write(tmp_path / "p.toml", text)
    with pytest.raises(DataError) as err:
        load_run_config(path)
    said = str(err.value)
    # said of the variant's prompt key, on its line (its inline table's)
    assert (
        f"{path}:9: field 'variants.mine.options.prompt': prompt 'mine' ({prompt}) has no {{{{answer}}}}"
        in said
    ), said
    twice = 'name = "x"\nlangs = ["en", "EN"]\ncontexts = ["gen", "gen"]\n[detector]\nname = "lexical"\n'
    twice += '[[variants]]\nname = "a"\n[[variants]]\nname = "A"\n'
    with pytest.raises(DataError) as err:
        load_run_config(_write(tmp_path / "t.toml", twice))
    said = str(err.value)
    assert "variant names must be unique (ignoring case" in said, said
    assert "field 'langs.1': language 'EN' is named twice" not in said  # told once the table is valid
    twice = twice.replace('[[variants]]\nname = "A"\n', "")
    with pytest.raises(DataError) as err:
        load_run_config(_write(tmp_path / "t.toml", twice))
    said = str(err.value)
    assert "field 'langs.1': language 'EN' is named twice" in said
    assert "field 'contexts': context source gen named twice" in said, said


def test_the_files_member_contexts_are_checked_with_their_key_unless_the_job_only_plans(tmp_path, capsys):
    """A source generated for the items a plan sends does not exist when the plan is made."""
    text = GOOD.replace("llm_budget = 0.3", 'llm_budget = 0.3\nmember_contexts = ["gen"]')
    path = _write(tmp_path / "job.toml", text)
    code, _, err = cli(capsys, "main-job", "--config", path, "--out", tmp_path / "a")
    said = " ".join(err.split())
    assert code == 2 and f"{path}: member_contexts: no context file for source 'gen'" in said, said
    assert not (tmp_path / "a").exists()
    out = tmp_path / "b"
    code, _, err = cli(capsys, "main-job", "--config", path, "--plan-only", "--out", out, "--quiet")
    assert code == 0, err
    assert json.loads((out / "config.json").read_text())["config"]["member_sources"] == ["gen"]
    assert (out / "cascade-plan.jsonl").is_file()
    # with no model-backed member, that is what is said, not the missing source
    lexical = _write(
        tmp_path / "lexical.toml",
        'job = "main"\nmembers = ["lexical"]\nlangs = ["it"]\nmember_contexts = ["deepseek-r1", "gne"]\n',
    )
    code, _, err = cli(capsys, "main-job", "--config", lexical, "--out", tmp_path / "c")
    said = " ".join(err.split())
    assert (
        code == 2 and f"{lexical}: member_contexts names the contexts of the model-backed members" in said
    ), said


def test_a_quoted_yes_no_option_of_a_detector_is_named_in_both_kinds_of_config(tmp_path):
    """`channels = "no"` was read as False by pydantic, in silence, where `allow_failures = "no"`
    at the top of the file was refused."""
    quoted = GOOD.replace("temperatures = [0.1]", 'temperatures = [0.1]\nstructured_output = "false"')
    assert _problems(tmp_path / "job.toml", quoted) == [
        "options.llm.structured_output: 'false' is text, not yes/no: write true or false (no quotes; "
        "YAML reads a bare no or off as text too)"
    ]
    run = _write(
        tmp_path / "run.toml",
        'name = "x"\nlangs = ["en"]\n[detector]\nname = "lexical"\n[detector.options]\nchannels = "no"\n',
    )
    with pytest.raises(DataError, match="field 'detector.options.channels': 'no' is text, not yes/no"):
        load_run_config(run)
    # a backend's yes/no settings too: `circuit_breaker = "no"` turned the breaker off, in silence
    breaker = GOOD.replace('model = "m"', 'model = "m"\ncircuit_breaker = "no"')
    (said,) = _problems(tmp_path / "job.toml", breaker)
    assert said.startswith(
        "options.llm.backend.circuit_breaker: Input should be a valid boolean (got 'no')"
    ), said
    _write(
        run,
        'name = "x"\nlangs = ["en"]\n[detector]\nname = "lexical"\n[detector.options]\nchannels = false\n',
    )
    assert load_run_config(run).detector.options == {"channels": False}


def test_a_negative_temperature_is_named_in_the_config_not_failed_at_every_request(tmp_path):
    """It passed the options, and every item then failed at its request (exit 3), with advice
    to run again that failed again."""
    bad = GOOD.replace("temperatures = [0.1]", "temperatures = [0.1, -1.0]")
    assert _problems(tmp_path / "job.toml", bad) == [
        "options.llm.temperatures.1: Input should be greater than or equal to 0 (got -1.0)"
    ]


def test_a_prompt_that_finds_no_file_is_named_with_its_key_and_the_close_name(tmp_path):
    """A mistyped prompt stopped the run with "prompt 'x' not found", naming neither the file
    nor the key, nor the name meant."""
    typo = GOOD.replace("temperatures = [0.1]", 'temperatures = [0.1]\nprompt = "single_zero_shoot"')
    [problem] = _problems(tmp_path / "job.toml", typo)
    assert problem.startswith(
        "options.llm.prompt: prompt 'single_zero_shoot' not found (did you mean 'single_zero_shot'?)"
    )
    run = _write(
        tmp_path / "run.toml",
        'name = "x"\nlangs = ["en"]\n[detector]\nname = "chain"\n[detector.options]\nverify_prompt = "verfy"\n'
        '[[variants]]\nname = "a"\noptions = {}\n[[variants]]\nname = "b"\noptions = { decompose_prompt = "no" }\n',
    )
    with pytest.raises(DataError) as info:
        load_run_config(run)
    fields = [p.field for p in info.value.problems]
    assert fields == ["detector.options.verify_prompt", "variants.b.options.decompose_prompt"], fields
    assert "did you mean 'verify'?" in str(info.value)


def test_empty_repeated_or_yes_no_values_where_a_list_or_number_belongs_are_named(tmp_path):
    """`splits = []` ran nothing and exited 0; `splits = ["val", "val"]` ran val twice;
    `limit = true` ran one item; `llm_budget = true` sent every item."""
    head = 'name = "c"\n'
    tail = '[detector]\nname = "lexical"\n'
    cases = {
        "splits = []": "field 'splits': List should have at least 1 item",
        'splits = ["val", "val"]': "field 'splits': a split is named twice: val",
        "limit = true": "field 'limit': give a number of items, not true",
        'limit = "3"': "field 'limit': '3' is text, not a number: write 3 without quotes",
        "langs = []": "field 'langs': List should have at least 1 item",
    }
    run = tmp_path / "run.toml"
    for line, said in cases.items():
        _write(run, head + line + "\n" + tail)
        with pytest.raises(DataError) as info:
            load_run_config(run)
        assert said in str(info.value), (line, str(info.value))
    _write(run, head + "limit = 2\n" + tail)
    assert load_run_config(run).limit == 2
    budget = GOOD.replace("llm_budget = 0.3", "llm_budget = true")
    assert _problems(tmp_path / "job.toml", budget) == [
        "llm_budget: a share of the items from 0 to 1 (0.3), not true or false"
    ]
    quoted = GOOD.replace("llm_budget = 0.3", 'llm_budget = "0.1"')  # taken, where run configs refuse it
    assert _problems(tmp_path / "job.toml", quoted) == [
        "llm_budget: a number from 0 to 1 (0.3, no quotes), not the string '0.1'"
    ]


def test_a_quoted_number_among_a_configs_detector_options_is_refused(tmp_path):
    """The top level refuses `limit = "5"`; a detector option took "0.5" as 0.5, silently."""
    text = 'name = "x"\n[detector]\nname = "llm"\noptions = { threshold = "0.5", temperatures = ["0.5"] }\n'
    with pytest.raises(DataError) as err:
        load_run_config(_write(tmp_path / "q.toml", text))
    said = str(err.value)
    assert "field 'detector.options.threshold': '0.5' is text, not a number" in said, said
    assert "field 'detector.options.temperatures.0': '0.5' is text, not a number" in said, said
    with pytest.raises(DataError) as err:  # pydantic's own refusal is said once, not twice
        load_run_config(_write(tmp_path / "q.toml", text.replace('"0.5",', '"abc",')))
    assert [p.field for p in err.value.problems].count("detector.options.threshold") == 1
    fine = text.replace('"0.5"', "0.5")
    assert load_run_config(_write(tmp_path / "q.toml", fine)).detector.options["threshold"] == 0.5


def test_a_variant_with_a_backend_of_another_kind_does_not_inherit_the_base_backends_settings(tmp_path):
    """A variant's openai backend was refused the base's transformers `device`, which it could
    not unset: a backend of another kind shares none of its settings."""
    run = _write(
        tmp_path / "v.toml",
        'name = "v"\nlangs = ["en"]\n[detector]\nname = "llm"\n'
        '[detector.options.backend]\nkind = "transformers"\nmodel = "m"\ndevice = "cpu"\n'
        '[[variants]]\nname = "local"\n[variants.options.backend]\nmodel = "m2"\n'
        '[[variants]]\nname = "served"\n[variants.options.backend]\nkind = "openai"\n'
        'base_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n',
    )
    cfg = load_run_config(run)
    (_, local), (_, served) = cfg.variant_options()
    assert local["backend"] == {"kind": "transformers", "model": "m2", "device": "cpu"}  # merged
    assert served["backend"] == {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "model": "m"}
