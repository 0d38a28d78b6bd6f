"""Values read from data files never pick where mushroom writes.

An items file whose `lang` was `../../../../tmp/x` made `detect --items` write `/tmp/x.jsonl`
and `/tmp/x-items.jsonl` (exit 0, one warning). Every hostile value is now refused where it
is read, naming its file, line and field (exit 1), and every writer that builds a file name
from such a value checks it again.
"""

from __future__ import annotations

import json
import os

import pytest
from cli_helpers import cli

import mushroom
from mushroom.backends.rawlog import raw_file
from mushroom.data.channels import channel_file
from mushroom.data.predictions import submission_name
from mushroom.util.names import UnsafeName, safe_name


def hostile(root):
    return [
        f"../../../../{root}/escape",
        f"{root}/escape",
        "a/b",
        "a\\b",
        "x\x00y",
        "..",
        ".",
        "",
        "l" * 300,
        "en/../../x",
    ]


def _tree(path):
    return sorted(str(p.relative_to(path)) for p in path.rglob("*"))


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.mark.parametrize("k", range(10))
def test_detect_refuses_an_items_file_whose_language_is_not_a_name(tmp_path, capsys, k):
    lang = hostile(tmp_path)[k]
    data = tmp_path / "data"
    data.mkdir()
    items = _write(
        data / "items.jsonl",
        [
            {"id": "ok-1", "lang": "en", "model_input": "Q?", "model_output_text": "Paris is big."},
            {"id": "bad-1", "lang": lang, "model_input": "Q?", "model_output_text": "Rome is old."},
        ],
    )
    ctx = _write(
        data / "ctx.jsonl", [{"id": "ok-1", "context": "Paris."}, {"id": "bad-1", "context": "Rome."}]
    )
    before = _tree(tmp_path)
    out = tmp_path / "run"
    code, _, err = cli(
        capsys, "detect", "--items", items, "--contexts", ctx, "--detector", "lexical", "--out", out
    )
    said = " ".join(err.split())
    assert code == 1, err
    assert f"{items}:2" in said and "field 'lang'" in said
    assert _tree(tmp_path) == before  # nothing written anywhere, not even the run folder
    assert not (tmp_path / "escape").exists() and not (tmp_path / "escape.jsonl").exists()


def test_a_split_file_with_a_hostile_language_stops_the_main_job(tmp_path, capsys, monkeypatch):
    root = tmp_path / "data"
    for split in ("val", "test-unlabeled"):
        (root / split).mkdir(parents=True)
    row = {"id": "val-en-1", "lang": "../../../escape", "model_input": "Q?", "model_output_text": "A."}
    _write(root / "val" / "mushroom.en-val.v2.jsonl", [{**row, "soft_labels": [], "hard_labels": []}])
    _write(root / "test-unlabeled" / "mushroom.en-tst.v1.jsonl", [{**row, "id": "tst-en-1"}])
    monkeypatch.setenv("MUSHROOM_DATA_DIR", str(root))
    import mushroom.data.splits as splits

    monkeypatch.setattr(splits, "DEFAULT_DATA_DIR", root)
    before = _tree(tmp_path)
    code, _, err = cli(capsys, "main-job", "--detector", "lexical", "--lang", "en", "--out", tmp_path / "job")
    assert code == 1, err
    assert "field 'lang'" in " ".join(err.split())
    assert _tree(tmp_path) == before


def test_the_api_refuses_a_hostile_language_before_any_work(tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises((TypeError, ValueError, mushroom.MushroomError)) as caught:
            mushroom.detect_batch(
                [{"answer": "Rome is old.", "contexts": ["Rome."], "lang": "../escape"}], method="lexical"
            )
    finally:
        os.chdir(cwd)
    assert "lang" in str(caught.value) or "language" in str(caught.value)
    assert _tree(tmp_path) == []


@pytest.mark.parametrize("k", range(10))
def test_every_writer_of_a_language_s_file_refuses_a_name_that_is_not_one(tmp_path, k):
    value = hostile(tmp_path)[k]
    for build in (
        lambda: submission_name(value, "items"),
        lambda: raw_file(tmp_path / "raw", value),
        lambda: channel_file(tmp_path / "raw", value),
    ):
        with pytest.raises(UnsafeName) as caught:
            build()
        assert caught.value.exit_code == 1
    assert safe_name("en", "language code") == "en" and safe_name("pt-BR", "x") == "pt-BR"


@pytest.mark.parametrize("value", ["CON", "nul", "Aux.jsonl", "com1", "LPT9.x"])
def test_a_name_windows_reads_as_a_device_is_refused(value):
    """A variant named CON made a folder no Windows user could open or delete."""
    with pytest.raises(UnsafeName, match="Windows reads it as a device"):
        safe_name(value, "a variant name")
    assert safe_name("console", "x") == "console" and safe_name("com", "x") == "com"


def test_names_given_on_the_command_line_or_in_a_run_config_never_leave_their_folder(tmp_path, capsys):
    """`compare --name ../../escape` wrote its tables two folders above --eval-dir."""
    from cli_helpers import limited_run

    run = limited_run(tmp_path, capsys)
    eval_dir = tmp_path / "deep" / "er" / "eval"
    code, _, err = cli(capsys, "compare", run, "--name", "../../escape", "--eval-dir", eval_dir)
    assert code == 2 and "cannot name a file" in err, err
    assert not (tmp_path / "deep" / "escape.md").exists() and not eval_dir.exists()
    config = tmp_path / "run.toml"
    config.write_text('name = "../x"\n[detector]\nname = "lexical"\n', encoding="utf-8")
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "r")
    assert code == 2 and "field 'name': a run name '../x' must be printable text" in err, err
    # a name with spaces names its run folder as before
    config.write_text('name = "my lexical run"\n[detector]\nname = "lexical"\n', encoding="utf-8")
    code, _, err = cli(capsys, "run", config, "--limit", "1", "--out", tmp_path / "r")
    assert code == 0, err
