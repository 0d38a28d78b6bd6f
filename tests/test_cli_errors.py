"""Every command against broken and real-world-like files and typo'd options: exit codes,
messages that name the file/line/option, no tracebacks, no silent changes of numbers."""

import json
import os
import stat
import subprocess
import sys

import pytest
import typer
from conftest import ROOT, VAL_EN, write_lines
from official_oracle import official_scores
from pydantic import BaseModel, Field

from mushroom.cli.app import app
from mushroom.cli.boundary import run_cli
from mushroom.errors import MushroomError, RunFailed
from mushroom.util.interrupts import interrupt_hint
from mushroom.util.options import (
    check_option_names,
    field_default,
    parse_float_list,
    parse_options,
    validate_options,
)
from mushroom.util.words import suggest

VAL_DIR = ROOT / "data" / "mushroom" / "val"
GOLD_ROWS = [json.loads(line) for line in VAL_EN.read_text(encoding="utf-8").splitlines()]


def cli(capsys, *args):
    """Runs the CLI in-process through its error boundary: (exit code, stdout, stderr)."""
    code = run_cli(app, [str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def leaderboard_style(rows):
    """Predictions as some real submissions are: soft spans carry the span's text, plus extra keys."""
    out = []
    for r in rows:
        text = r["model_output_text"]
        out.append(
            {
                "id": r["id"],
                "lang": r["lang"],
                "model_output_text": text,
                "soft_labels": [{**s, "text": text[s["start"] : s["end"]]} for s in r["soft_labels"]],
                "hard_labels": r["hard_labels"],
            }
        )
    return out


# ---- 1. inputs as the official tools read them ------------------------------------------


def test_submission_with_text_keys_is_read_by_every_command(tmp_path, capsys):
    sub = write_lines(tmp_path / "sub.jsonl", leaderboard_style(GOLD_ROWS))
    code, out, _ = cli(capsys, "check", sub, "--items", VAL_EN)
    assert code == 0 and "OK (50 predictions" in out
    code, _, err = cli(capsys, "check", sub, "--items", VAL_EN, "--strict")
    assert code == 1
    assert "field 'text': unknown key in soft_labels span" in err
    assert "field 'model_output_text': unknown key in record" in err
    code, out, _ = cli(capsys, "score", VAL_EN, sub)
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n")
    ens = tmp_path / "ens.jsonl"
    code, out, err = cli(capsys, "ensemble", sub, sub, "--out", ens)  # ids say val/en: no --items needed
    assert code == 0, err
    code, _, err = cli(capsys, "check", ens, "--items", VAL_EN)
    assert code == 0, err
    # a file of another language: said once, not as every line "not among the items"
    code, _, err = cli(capsys, "ensemble", sub, VAL_DIR / "mushroom.de-val.v2.extra.jsonl", "--out", ens)
    assert code == 2 and "has no item in common with" in err and "not among" not in err, err


def test_bom_and_crlf_are_read_with_the_same_numbers(tmp_path, capsys):
    preds = [{"id": r["id"], "soft_labels": r["soft_labels"][:2]} for r in GOLD_ROWS]
    plain = write_lines(tmp_path / "plain.jsonl", preds)
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes().replace(b"\n", b"\r\n"))
    gold_bom = tmp_path / "mushroom.en-val.v2.jsonl"
    gold_bom.write_bytes(b"\xef\xbb\xbf" + VAL_EN.read_bytes().replace(b"\n", b"\r\n"))
    _, plain_out, _ = cli(capsys, "score", VAL_EN, plain)
    code, odd_out, _ = cli(capsys, "score", gold_bom, odd)
    assert code == 0 and odd_out == plain_out
    iou, cor = official_scores(VAL_EN, plain)
    assert plain_out == f"IoU: {iou:.8f}\nCor: {cor:.8f}\n"
    assert cli(capsys, "check", odd, "--items", gold_bom)[0] == 0


@pytest.mark.parametrize(
    ("span", "field"),
    [
        ({"soft_labels": [{"start": 116, "end": 10000, "prob": 0.9}]}, "soft_labels.0"),
        ({"soft_labels": [{"start": 9, "end": 4, "prob": 0.9}]}, "soft_labels.0"),
        ({"hard_labels": [[3, 2]]}, "hard_labels.0"),
        ({"hard_labels": [[-2, 3]]}, "hard_labels.0"),
    ],
)
@pytest.mark.parametrize("with_items", [True, False])
def test_ensemble_refuses_invalid_spans_naming_file_line_id_field(tmp_path, capsys, span, field, with_items):
    rows = [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS]
    rows[3] = {"id": rows[3]["id"], "hard_labels": [], **span}
    bad = write_lines(tmp_path / "bad.jsonl", rows)
    good = write_lines(tmp_path / "good.jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS])
    out = tmp_path / "ens.jsonl"
    extra = ["--items", VAL_EN] if with_items else []
    code, _, err = cli(capsys, "ensemble", good, bad, "--out", out, *extra)
    assert code == 1
    assert f"bad.jsonl:4: id '{GOLD_ROWS[3]['id']}': field '{field}'" in err
    assert not out.exists()


def test_ensemble_threshold_and_unknown_ids(tmp_path, capsys):
    pred = write_lines(tmp_path / "p.jsonl", [{"id": "mine-1", "hard_labels": [[0, 3]]}])
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl", "--threshold", "1.5")
    assert code == 2 and "--threshold" in err
    code, _, err = cli(capsys, "ensemble", pred, "--out", tmp_path / "o.jsonl")
    assert code == 2 and "pass --items" in err


def test_score_warns_about_what_the_official_scorer_accepts_silently(tmp_path, capsys):
    rows = [
        {"id": r["id"], "soft_labels": r["soft_labels"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS
    ]
    rows[0]["soft_labels"] = [{"start": 10, "end": 5, "prob": 0.7}, {"start": 20, "end": 30, "prob": 1.5}]
    rows[1]["hard_labels"] = [[8, 3]]
    pred = write_lines(tmp_path / "p.jsonl", rows)
    code, out, err = cli(capsys, "score", VAL_EN, pred)
    assert code == 0
    iou, cor = official_scores(VAL_EN, pred)
    assert out == f"IoU: {iou:.8f}\nCor: {cor:.8f}\n"  # the official numbers, unchanged
    assert "2 reversed spans" in err and "p.jsonl:1: id 'val-en-1': soft_labels.0 [10, 5)" in err
    assert "1 probability outside [0, 1] (ranked as given)" in err and "soft_labels.1.prob 1.5" in err


# ---- 2. one error boundary ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["check", "{tmp}", "--items", VAL_EN], 2, "is a folder"),
        (["check", "{tmp}/nope.jsonl", "--items", VAL_EN], 2, "no such file"),
        (["ensemble", VAL_EN, "--out", "{tmp}"], 2, "--out"),
        (["ensemble", VAL_EN, "--out", "{tmp}/o.jsonl", "--items", "{tmp}"], 2, "--items"),
        (["score", VAL_EN, VAL_EN, "--output", "{tmp}"], 2, "--output"),
        (["score", VAL_EN, VAL_EN, "--json", "{tmp}"], 2, "--json"),
        (["score", "{tmp}/missing.jsonl", VAL_EN], 2, "GOLD"),
        (["score", VAL_DIR, VAL_EN], 2, "GOLD is a folder, PRED a file"),
        (["compare", "{tmp}", "--baseline", "3"], 2, "--baseline 3"),
        (["compare", "{tmp}/nope"], 2, "no such folder"),
        (["report", "{tmp}/nope"], 2, "RUN_DIR"),
        (["score", "--bogus", VAL_EN, VAL_EN], 2, "No such option"),
        (["nosuchcommand"], 2, "No such command"),
    ],
)
def test_expected_failures_are_one_message_and_an_exit_code(tmp_path, capsys, args, code, needle):
    argv = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    got, out, err = cli(capsys, *argv)
    assert got == code, err
    assert needle in out + err


def _tiny_app(exc: BaseException | None = None, hint=None):
    tiny = typer.Typer()

    @tiny.command()
    def go() -> None:
        if hint is not None:
            with interrupt_hint(hint):
                raise KeyboardInterrupt
        raise exc

    @tiny.command()
    def other() -> None:
        pass

    return tiny


@pytest.mark.parametrize(
    ("exc", "code", "needle"),
    [
        (MushroomError("use pip install 'mushroom[vllm]'"), 2, "pip install 'mushroom[vllm]'"),
        (RunFailed("3 items failed"), 3, "3 items failed"),
        (KeyboardInterrupt(), 130, "interrupted"),
        (IsADirectoryError(21, "Is a directory", "out/x"), 2, "out/x: is a folder"),
        (PermissionError(13, "Permission denied", "/root/x"), 2, "/root/x: permission denied"),
        (ZeroDivisionError("boom"), 70, "this is a bug in mushroom"),
    ],
)
def test_exit_codes(capsys, exc, code, needle):
    assert run_cli(_tiny_app(exc), ["go"]) == code
    out, err = capsys.readouterr()
    assert needle in err and "Traceback" not in err


def test_interrupt_hint_says_what_was_saved(capsys):
    assert (
        run_cli(_tiny_app(hint=lambda: "12 of 50 items saved in runs/x; run it again to resume"), ["go"])
        == 130
    )
    err = capsys.readouterr().err
    assert "interrupted; 12 of 50 items saved in runs/x; run it again to resume" in err


def test_debug_shows_the_traceback(capsys):
    assert run_cli(_tiny_app(MushroomError("nope")), ["go"]) == 2
    assert "Traceback" not in capsys.readouterr().err
    os.environ["MUSHROOM_DEBUG"] = "1"
    try:
        assert run_cli(_tiny_app(MushroomError("nope")), ["go"]) == 2
    finally:
        del os.environ["MUSHROOM_DEBUG"]
    assert "Traceback" in capsys.readouterr().err


def test_debug_flag_through_the_real_command_line(tmp_path):
    args = [sys.executable, "-m", "mushroom", "--debug", "check", str(tmp_path), "--items", str(VAL_EN)]
    res = subprocess.run(args, capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" in res.stderr and "is a folder" in res.stderr
    res = subprocess.run([a for a in args if a != "--debug"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr


# ---- 3. names are checked ----------------------------------------------------------------


class _Opts(BaseModel):
    threshold: float = 0.5
    sources: list[str] = Field(default_factory=lambda: ["a", "b"])
    model: str


def test_option_names_values_and_suggestions():
    with pytest.raises(
        MushroomError, match=r"unknown option 'thresh'; did you mean 'threshold'\? valid: model"
    ):
        check_option_names({"thresh": 0.3}, _Opts)
    with pytest.raises(MushroomError, match=r"threshold: Input should be a valid number.*got 'abc'"):
        validate_options({"threshold": "abc", "model": "m"}, _Opts)
    assert suggest("perplexty-sonar-pro", ["perplexity-sonar-pro", "deepseek-r1"]).startswith(
        "; did you mean 'perplexity-sonar-pro'?"
    )
    assert suggest("zzz", ["a", "b"]) == "; valid: a, b"
    assert [field_default(_Opts.model_fields[k]) for k in ("threshold", "sources", "model")] == [
        "0.5",
        "['a', 'b']",
        "(required)",
    ]
    with pytest.raises(MushroomError, match=r"--temperatures: 'abc' is not a number"):
        parse_float_list("0.05,abc", "--temperatures")
    assert parse_float_list("0.05, 0.1", "--temperatures") == [0.05, 0.1]
    assert parse_float_list("0.05,0.1,", "--temperatures") == [0.05, 0.1]  # a trailing comma is fine
    for lost in ("0.1,,0.2", ","):  # a value typed away
        with pytest.raises(MushroomError, match="an empty value in the list"):
            parse_float_list(lost, "--temperatures")
    with pytest.raises(MushroomError, match="KEY=VALUE"):
        parse_options(["threshold"])
    with pytest.raises(MushroomError, match="given twice"):
        parse_options(["a=1", "a=2"])
    assert parse_options(["a=1", "b=x", 'c={"k": true}']) == {"a": 1, "b": "x", "c": {"k": True}}


def test_detectors_prints_real_defaults(capsys):
    code, out, _ = cli(capsys, "detectors")
    assert code == 0
    assert "PydanticUndefined" not in out and "lexical" in out
    assert "threshold = " in out


# ---- 4. markup-safe output ---------------------------------------------------------------


def test_bracketed_file_names_are_printed_as_they_are(tmp_path, capsys):
    pred = write_lines(tmp_path / "run[bold].jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS])
    code, out, _ = cli(capsys, "check", pred, "--items", VAL_EN)
    assert code == 0 and "run[bold].jsonl: OK" in out
    bad = write_lines(tmp_path / "x[red].jsonl", ["{oops"])
    code, _, err = cli(capsys, "check", bad, "--items", VAL_EN)
    assert code == 1 and "x[red].jsonl:1: invalid JSON" in err


# ---- 5. folder scoring says what it did --------------------------------------------------


def test_folder_scoring_needs_every_language_or_langs(tmp_path, capsys):
    (tmp_path / "mushroom.en-val.v2.jsonl").write_bytes(VAL_EN.read_bytes())
    (tmp_path / "mushroom.xx-val.v2.jsonl").write_text("")
    (tmp_path / "notes.jsonl").write_text("")
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path)
    assert code == 2 and "no prediction file for 9 of 10 languages" in err and "--langs en" in err
    code, out, err = cli(capsys, "score", VAL_DIR, tmp_path, "--langs", "en")
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n")
    assert "scoring 1 language: en (mushroom.en-val.v2.jsonl)" in err
    assert "not scored, no gold file: xx" in err and "notes.jsonl" in err
    (tmp_path / "mushroom.en-val.old.jsonl").write_bytes(VAL_EN.read_bytes())
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path, "--langs", "en")
    assert code == 2 and "two files for language 'en'" in err


# ---- 7. modes, JSON on stdout, narrow tables ---------------------------------------------


def test_files_are_written_with_the_umask(tmp_path, capsys):
    old = os.umask(0o022)
    try:
        ens = tmp_path / "ens.jsonl"
        json_path = tmp_path / "s.json"
        assert cli(capsys, "ensemble", VAL_EN, "--out", ens)[0] == 0
        assert (
            cli(capsys, "score", VAL_EN, VAL_EN, "--json", json_path, "--output", tmp_path / "o.txt")[0] == 0
        )
    finally:
        os.umask(old)
    for path in (ens, json_path, tmp_path / "o.txt"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_score_json_dash_prints_only_json(capsys):
    code, out, err = cli(capsys, "score", VAL_EN, VAL_EN, "--json", "-", "--per-lang", "--ci")
    assert code == 0
    assert json.loads(out)["n"] == 50
    assert "IoU: 1.00000000" in err


def test_compare_wraps_instead_of_cutting_at_80_columns(tmp_path):
    runs = []
    for name, keep in (("a-rather-long-run-name", 99), ("another-long-run-name", 1)):
        folder = tmp_path / name
        folder.mkdir()
        write_lines(
            folder / "mushroom.en-val.v2.jsonl",
            [{"id": r["id"], "hard_labels": r["hard_labels"][:keep]} for r in GOLD_ROWS],
        )
        runs.append(str(folder))
    env = {**os.environ, "COLUMNS": "80"}
    res = subprocess.run(
        [sys.executable, "-m", "mushroom", "compare", *runs, "--eval-dir", str(tmp_path / "e")],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert res.returncode == 0, res.stderr
    assert "…" not in res.stdout
    table = [line for line in res.stdout.splitlines() if line[:1] in "┏┃│┡├└"]
    assert table and max(len(line) for line in table) <= 80
    assert "[1.00, 1.00]" in res.stdout


@pytest.mark.parametrize("command", ["sweep", "report"])
def test_run_readers_check_spans_against_the_items(tmp_path, capsys, command):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS]
    rows[2]["hard_labels"] = [[0, 10000]]
    write_lines(run / "mushroom.en-val.v2.jsonl", rows)
    extra = ["--svg", tmp_path / "s.svg"] if command == "sweep" else ["--contexts", ""]
    code, _, err = cli(capsys, command, run, "--lang", "en", *extra)
    assert code == 1
    assert f"mushroom.en-val.v2.jsonl:3: id '{GOLD_ROWS[2]['id']}': field 'hard_labels.0'" in err
    assert "<= " + str(len(GOLD_ROWS[2]["model_output_text"])) in err


def test_compare_warns_about_quirks_the_scorer_accepts(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS]
    rows[0]["hard_labels"] = [[5, 2]]
    write_lines(run / "mushroom.en-val.v2.jsonl", rows)
    code, _, err = cli(capsys, "compare", run, "--eval-dir", tmp_path / "e")
    assert code == 0 and "1 reversed span (scored as empty)" in err


def test_unknown_context_source_suggests_a_close_match():
    from mushroom.data.contexts import load_contexts

    with pytest.raises(MushroomError, match="did you mean 'perplexity-sonar-pro'"):
        load_contexts("val", "en", ("perplexty-sonar-pro",))


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"PK\x03\x04rest-of-a-zip", "is a zip archive"),
        (json.dumps(GOLD_ROWS[:2]).encode(), "is a JSON array"),
        (json.dumps(GOLD_ROWS[0], indent=2).encode(), "is one JSON document spread over several lines"),
        ("\n".join(json.dumps(r) for r in GOLD_ROWS).encode("utf-16"), "is UTF-16"),
    ],
    ids=["zip", "array", "pretty", "utf16"],
)
def test_common_mixups_get_a_file_level_answer(tmp_path, capsys, content, needle):
    pred = tmp_path / "p.jsonl"
    pred.write_bytes(content)
    code, _, err = cli(capsys, "score", VAL_EN, pred)
    assert code == 1 and f"{pred}: {needle}" in err


def test_report_says_when_raw_lines_are_unreadable(tmp_path):
    from mushroom.evaluation.report import build_report

    run = tmp_path / "run"
    (run / "raw").mkdir(parents=True)
    write_lines(run / "mushroom.en-val.v2.jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS])
    write_lines(
        run / "raw" / "en.responses.jsonl", [{"id": "val-en-1", "response": "ok"}, '{"id": "val-en-2", "resp']
    )
    page = build_report(run, "val", ["en"], ()).html
    assert "1 unreadable line in raw/ files" in page and "en.responses.jsonl:2: invalid JSON" in page
    # a raw record shows what the model wrote, every sample of it, not the prompt it was sent
    prompt = [{"role": "user", "content": "OUTPUT: PROMPT-TEXT"}]
    record = {"id": "val-en-1", "key": "k", "texts": ["FIRST-SAMPLE", "SECOND-SAMPLE"], "messages": prompt}
    write_lines(run / "raw" / "en.raw.jsonl", [record])
    page = build_report(run, "val", ["en"], ()).html
    assert "[sample 1 of 2] FIRST-SAMPLE" in page and "[sample 2 of 2] SECOND-SAMPLE" in page
    assert "PROMPT-TEXT" not in page


@pytest.mark.parametrize(
    ("rows", "code", "needle"),
    [
        ([], 1, "no predictions in the file"),
        ([{"id": r["id"]} for r in GOLD_ROWS], 1, "neither hard_labels nor soft_labels given"),
        (
            [{"id": r["id"], "soft_labels": [{"start": 0, "end": 2, "prob": "0.5"}]} for r in GOLD_ROWS],
            1,
            "soft_labels.0.prob",
        ),
    ],
    ids=["empty", "ids-only", "string-prob"],
)
def test_ensemble_never_writes_what_it_did_not_read(tmp_path, capsys, rows, code, needle):
    pred = write_lines(tmp_path / "p.jsonl", rows)
    out = tmp_path / "o.jsonl"
    got, _, err = cli(capsys, "ensemble", pred, "--out", out)
    assert got == code and needle in err
    assert not out.exists()


def test_nested_option_defaults_show_what_differs():
    class Inner(BaseModel):
        kind: str
        size: int = 3

    class Outer(BaseModel):
        inner: Inner = Field(default_factory=lambda: Inner(kind="replay"))

    assert field_default(Outer.model_fields["inner"]) == "Inner(kind='replay')"


SLEEPY_APP = """
import sys, time, typer
from mushroom.cli.boundary import run_cli
from mushroom.util.interrupts import interrupt_hint
app = typer.Typer()
@app.command()
def bare():
    print("ready", flush=True)
    time.sleep(60)
@app.command()
def hinted():
    with interrupt_hint(lambda: "3 of 50 items saved in runs/x; run the same command to resume"):
        print("ready", flush=True)
        time.sleep(60)
raise SystemExit(run_cli(app))
"""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("bare", "interrupted\n"),
        ("hinted", "interrupted; 3 of 50 items saved in runs/x; run the same command to resume\n"),
    ],
)
def test_ctrl_c_exits_130_with_one_line(tmp_path, command, expected):
    import signal

    script = tmp_path / "sleepy.py"
    script.write_text(SLEEPY_APP)
    proc = subprocess.Popen(
        [sys.executable, str(script), command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a test runner may ignore it
    )
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == expected


# ---- 8. runs made on part of a split, and counted messages -------------------------------


def limited_run(tmp_path, capsys, name="run", *extra):
    """A lexical run on the first 5 English val items, as `detect --lang en --limit 5` makes it."""
    out = tmp_path / name
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", out, "--quiet", *extra
    )
    assert code == 0, err
    return out


def test_a_limited_run_is_scored_compared_and_swept_on_what_it_covers(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    pred = run / "predictions" / "mushroom.en-val.v2.jsonl"
    ids = {json.loads(line)["id"] for line in pred.read_text().splitlines()}
    gold5 = write_lines(tmp_path / "gold5.jsonl", [r for r in GOLD_ROWS if r["id"] in ids])
    iou, cor = official_scores(gold5, pred)  # the official scorer on the items the run made
    note = f"scored 5 of 50 gold items: the run in {run} was made with --limit 5 --lang en"
    for gold, preds in ((VAL_DIR, run / "predictions"), (VAL_EN, pred)):
        code, out, err = cli(capsys, "score", gold, preds)
        assert code == 0, err
        assert out.endswith(f"IoU: {iou:.8f}\nCor: {cor:.8f}\n") and note in err
    code, out, err = cli(capsys, "score", VAL_EN, pred, "--json", "-")
    assert code == 0 and json.loads(out)["n"] == 5 and json.loads(out)["n_gold"] == 50
    code, out, err = cli(capsys, "compare", run, run, "--eval-dir", tmp_path / "eval")
    assert code == 0, err
    assert "0:run: " + note in err and "1:run: " + note in err
    code, out, err = cli(capsys, "sweep", run, "--svg", tmp_path / "s.svg")
    assert code == 0, err
    assert f"sweeping en: the run in {run} was made with" in err and "swept 5 of 50 gold items" in err
    # the same file outside its run folder: nothing says it was limited, so every item is due
    loose = tmp_path / "loose" / pred.name
    loose.parent.mkdir()
    loose.write_bytes(pred.read_bytes())
    code, _, err = cli(capsys, "score", VAL_EN, loose)
    assert code == 1 and "no prediction for 45 gold ids" in err
    assert "(score --partial scores only the predicted items)" in err
    # ... unless the user says it covers part of the items (an ensemble of --limit runs)
    code, out, err = cli(capsys, "score", VAL_EN, loose, "--partial")
    assert code == 0 and "scored 5 of 50 gold items (--partial)" in err
    iou, cor = out.strip().splitlines()[-2:]
    assert iou.startswith("IoU: ") and cor.startswith("Cor: ")
    # the report shows the items the run predicted, not 45 unscored ones
    code, _, err = cli(capsys, "report", run, "--out", tmp_path / "r.html")
    assert code == 0, err
    page = (tmp_path / "r.html").read_text()
    assert "<td>en</td><td>5 of 50</td>" in page and 'id="shown">5<' in page and "IoU nan" not in page
    # a stack is fitted on every item: the member's --limit is named as the reason
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", tmp_path / "s.json")
    assert code == 1 and "was made with --limit 5 --lang en, and a stack needs every item" in err


def test_a_run_over_every_item_still_needs_every_item(tmp_path, capsys):
    run = tmp_path / "run"
    (run / "predictions").mkdir(parents=True)
    config = {"config": {"job": "detect", "split": "val", "langs": ["en"], "limit": None}, "config_hash": "x"}
    (run / "config.json").write_text(json.dumps(config))
    rows = [{"id": r["id"], "hard_labels": r["hard_labels"]} for r in GOLD_ROWS[:5]]
    write_lines(run / "predictions" / "mushroom.en-val.v2.jsonl", rows)
    code, _, err = cli(capsys, "score", VAL_DIR, run / "predictions")
    assert code == 1 and "no prediction for 45 gold ids" in err
    assert "not scored, no prediction file: ar" in err  # made with --lang en: no error for the others


def test_check_groups_missing_items_and_counts_what_it_found(tmp_path, capsys):
    rows = [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS[:3]] + ["not json"]
    pred = write_lines(tmp_path / "p.jsonl", rows)
    code, _, err = cli(capsys, "check", pred, "--items", VAL_EN)
    assert code == 1
    assert err.count("no prediction for") == 2  # one grouped line and the summary, not 47 lines
    missing = [r["id"] for r in GOLD_ROWS[3:8]]
    listed = ", ".join(repr(i) for i in missing)
    assert f"p.jsonl: field 'id': no prediction for 47 items: {listed}, ... (first 5 shown)" in err
    assert err.rstrip().endswith("p.jsonl: 1 error on 1 line (of 4 read); no prediction for 47 of 50 items")
    one = write_lines(tmp_path / "one.jsonl", [{"id": GOLD_ROWS[0]["id"], "hard_labels": []}])
    items = write_lines(tmp_path / "items.jsonl", GOLD_ROWS[:1])
    code, out, _ = cli(capsys, "check", one, "--items", items)
    assert code == 0 and "one.jsonl: OK (1 prediction, 0 warnings)" in out


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


def test_stack_apply_names_a_json_file_that_is_no_stack(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    config = run / "config.json"
    code, _, err = cli(
        capsys, "stack", "apply", config, f"lexical={run}", "--out", tmp_path / "o", "--split", "val"
    )
    assert code == 1
    assert f"{config}: not a stack.json (fit one with `mushroom stack fit`)" in err
    assert "Field required" not in err and not (tmp_path / "o").exists()


def test_stack_apply_with_the_wrong_members_leaves_no_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--split", "val", "--lang", "en", "--out", run, "--quiet")
    assert code == 0, err
    stack, out = tmp_path / "stack.json", tmp_path / "o"
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--lang", "en", "--out", stack)
    assert code == 0, err
    for members, message in (
        ([f"other={run}"], "fitted on members ['lex']; got ['other']"),
        ([f"lex={tmp_path / 'nowhere'}"], "no val prediction files"),
    ):
        code, _, err = cli(capsys, "stack", "apply", stack, *members, "--split", "val", "--out", out)
        assert code == 2 and message in err, err
        assert not out.exists()


def test_an_empty_items_file_is_an_input_error(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    ctx = write_lines(tmp_path / "ctx.jsonl", [{"id": "a", "context": "x"}])
    out = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--items", empty, "--contexts", ctx, "--out", out, "--quiet")
    assert code == 1 and f"{empty}: no items" in err and not out.exists()


def test_counts_agree_with_their_nouns(tmp_path, capsys):
    from mushroom.util.words import plural

    assert [plural(n, "item") for n in (0, 1, 2)] == ["0 items", "1 item", "2 items"]
    assert (
        plural(1, "prediction file") == "1 prediction file" and plural(3, "entry", "entries") == "3 entries"
    )
    one = write_lines(tmp_path / "one.jsonl", [{"id": GOLD_ROWS[0]["id"], "hard_labels": [[0, 3]]}])
    items = write_lines(tmp_path / "items.jsonl", GOLD_ROWS[:1])
    code, out, err = cli(capsys, "ensemble", one, "--out", tmp_path / "e.jsonl", "--items", items)
    assert code == 0 and "wrote 1 prediction from 1 run to" in out, err
    bad = write_lines(tmp_path / "bad.jsonl", [{"id": GOLD_ROWS[0]["id"], "hard_labels": [[0, 9999]]}])
    code, _, err = cli(capsys, "ensemble", bad, "--out", tmp_path / "e.jsonl", "--items", items)
    assert code == 1 and "1 problem in input" in err
    code, _, err = cli(capsys, "compare", tmp_path, "--baseline", "3")
    assert code == 2 and "--baseline 3: 1 run given" in err


def test_an_unlabelled_split_is_not_swept_or_fitted_on(tmp_path, capsys):
    # Scoring an item without gold treats it as "nothing hallucinated": a sweep on test said
    # "best IoU 1.0000" and a stack fitted on test saved threshold 0.05, both with exit 0.
    run = tmp_path / "lex"
    code, _, err = cli(
        capsys, "detect", "--split", "test", "--lang", "en", "--limit", "3", "--out", run, "--quiet"
    )
    assert code == 0, err
    code, out, err = cli(capsys, "sweep", run, "--split", "test", "--svg", tmp_path / "s.svg")
    assert (
        code == 2
        and "needs gold labels" in err
        and "split 'test' has items without them: en (" in err
        and "IoU" not in out
    )
    assert not (tmp_path / "s.svg").exists()
    stack = tmp_path / "stack.json"
    code, _, err = cli(
        capsys, "stack", "fit", f"lex={run}", "--split", "test", "--lang", "en", "--out", stack
    )
    assert code == 2 and "fitting a stack needs gold labels" in err and not stack.exists()
    code, _, err = cli(capsys, "stack", "fit", f"lex={run}", "--folds", "1", "--out", stack)
    assert code == 2 and "--folds" in err


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
    for args, message in (
        (["--lang", "xx"], "has no file for xx"),
        (["--lang", "eng"], "has no file for eng; did you mean 'en'?"),
        (["--lang", "en", "--contexts", "perplexty"], "no context file for source 'perplexty'"),
        (["--items", VAL_EN, "--split", "test"], "replaces --split test"),
        (["--backend", "openai", "--base-url", "notaurl", "--model", "m"], "is not an http(s) URL"),
        # backends are built when the first item needs one; what they would fail on is seen first
        (["--backend", "openai", "--model", "m"], "the openai backend needs `base_url`"),
        (["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1"], "needs `model` (--model)"),
        (["--backend", "replay"], "the replay backend (the default of LLM detectors) needs `responses`"),
        (["--responses", tmp_path / "none.jsonl"], "none.jsonl: no such file (the replay backend's"),
        (["--backend", "transformers", "--model", tmp_path / "m.gguf"], "m.gguf does not exist"),
        # a mistyped cache folder was made, and the next run (typed right) found no cache
        (["--responses", VAL_EN, "-o", f"cache_path={tmp_path / 'typo' / 'c.jsonl'}"], "typo does not exist"),
        (["--responses", VAL_EN, "-o", f"cache_path={tmp_path}"], "is a folder; name a .jsonl file"),
    ):
        code, _, err = cli(capsys, "detect", *args, "--out", out, "--quiet")
        assert code == 2 and message in " ".join(err.split()), (args, err)
        assert not out.exists(), args
    assert not (tmp_path / "typo").exists()
    code, _, err = cli(capsys, "main-job", "--no-val", "--out", out)
    assert code == 2 and "--no-val" in err and not out.exists()
    code, _, err = cli(capsys, "main-job", "--detector", "llm", "-o", "backend.kind=replay", "--out", out)
    assert code == 2 and "needs `responses`" in err and not out.exists()
    config = tmp_path / "c.toml"
    config.write_text('name = "c"\n[detector]\nname = "llm"\n[detector.options.backend]\nkind = "openai"\n')
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    assert code == 2 and "needs `base_url`" in err and not out.exists()
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


def test_an_ensemble_never_overwrites_its_input_and_names_a_file_with_other_items(tmp_path, capsys):
    a = limited_run(tmp_path, capsys, "a")
    b = limited_run(tmp_path, capsys, "b", "--option", "threshold=0.5")
    pa, pb = (r / "predictions" / "mushroom.en-val.v2.jsonl" for r in (a, b))
    before = pa.read_bytes()
    code, _, err = cli(capsys, "ensemble", pa, pb, "--out", pa)
    assert code == 2 and "is one of the inputs" in err and pa.read_bytes() == before
    short = tmp_path / "short.jsonl"
    short.write_text("".join(pb.read_text().splitlines(keepends=True)[:3]))
    code, _, err = cli(capsys, "ensemble", pa, short, "--out", tmp_path / "e.jsonl")
    assert code == 1 and f"{short}: field 'id': covers other items than {pa}: no prediction for" in err


def test_command_help_keeps_each_paragraph_on_one_line():
    # Typer printed a docstring's later paragraphs with their source line breaks, cutting a
    # sentence in the middle ("accepts" at the end of one line, "silently" on the next).
    helps = {c.name or c.callback.__name__: c.help for c in app.registered_commands}
    assert "what the official scorer accepts silently but that changes a number" in helps["score"]


def test_option_mistakes_say_how_to_write_them(tmp_path, capsys):
    out = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--detector", "pyes", "-o", "yes_words=yes,oui", "--out", out)
    assert code == 2 and """write a list in JSON: -o 'yes_words=["yes", "oui"]'""" in err
    code, _, err = cli(capsys, "detect", "--detector", "llm", "-o", "temperatures=[0.1,0.2", "--out", out)
    assert code == 2 and "write a list in JSON: -o 'temperatures=[0.1, 0.2]'" in err  # it said ["[0.1", 0.2]
    code, _, err = cli(capsys, "detect", "--detector", "pyes", "-o", "yes_words=[yes,oui]", "--out", out)
    assert (
        code == 2 and """write a list in JSON: -o 'yes_words=["yes", "oui"]'""" in err
    )  # it said [[yes,oui]]
    code, _, err = cli(capsys, "detect", "--detector", "llm", "-o", "temperatures=[0.1]", "--temperatures", "0.2",
                       "--out", out)  # fmt: skip
    assert code == 2 and "--temperatures and -o temperatures=… both given" in err and not out.exists()
    from mushroom.detectors import build

    # one temperature needs no brackets (it was "Input should be a valid list")
    assert build("llm", {"temperatures": 0.3}).options.temperatures == [0.3]
    # and -o temperatures=0.1,0.2 reads as --temperatures 0.1,0.2 does (it asked for brackets)
    assert build("llm", parse_options(["temperatures=0.1,0.2"])).options.temperatures == [0.1, 0.2]
    with pytest.raises(MushroomError, match="temperatures"):
        build("llm", {"temperatures": True})
    code, _, err = cli(capsys, "score", VAL_DIR, VAL_DIR, "--compare", VAL_EN)
    assert code == 2 and "GOLD is a folder, --compare a file" in err


def test_flags_show_no_value_in_help(capsys):
    # Typer wrote `--allow-failures <bool>`, which reads as if the flag took a value.
    code, out, _ = cli(capsys, "detect", "--help")
    assert code == 0 and "--allow-failures" in out and "--help" in out
    assert "<bool>" not in out  # nor after Typer's own --help
    for args in (["--help"], ["stack", "--help"], ["stack", "fit", "--help"]):
        code, out, _ = cli(capsys, *args)
        assert code == 0 and "--help" in out and "<bool>" not in out, args


def test_default_run_folders_of_the_same_second_are_kept_apart(tmp_path):
    from mushroom.data.runfolder import new_run_folder

    first = new_run_folder(tmp_path / "runs", "20261122-120000-lexical-val")
    second = new_run_folder(tmp_path / "runs", "20261122-120000-lexical-val")
    assert first.is_dir() and second.is_dir() and second.name == "20261122-120000-lexical-val-2"


def test_a_run_folder_is_scored_like_compare_and_sweep_take_it(tmp_path, capsys):
    run = limited_run(tmp_path, capsys)
    code, out, err = cli(capsys, "score", VAL_DIR, run)
    code2, out2, _ = cli(capsys, "score", VAL_DIR, run / "predictions")
    assert code == code2 == 0 and out.splitlines()[-2:] == out2.splitlines()[-2:], err


def test_help_defaults_are_not_cut_short_at_80_columns():
    for command in ("detect", "main-job", "report", "run"):
        res = subprocess.run(
            [sys.executable, "-m", "mushroom", command, "--help"],
            capture_output=True,
            text=True,
            env={**os.environ, "COLUMNS": "80"},
            cwd=ROOT,
        )
        assert res.returncode == 0 and "…" not in res.stdout, (command, res.stdout)


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
    code, _, err = cli(capsys, "detect", "-o", "source_weights.foo=2", "--contexts", "", "--out", out)
    assert code == 2 and "valid: (none)" in err and not out.exists()
    # a repeated temperature is the same request: the cache would answer it with the first
    args = ["--backend", "openai", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--out", out]
    code, _, err = cli(capsys, "detect", *args, "--temperatures", "0.1,0.1")
    assert code == 2 and "temperature 0.1 is given twice" in err and "samples" in err
    assert "Value error" not in err and not out.exists()
    code, _, err = cli(capsys, "detect", "-o", "source_weights.deepseek-r1=2", "--lang", "en", "--limit", "2",
                       "--out", out, "--quiet")  # fmt: skip
    assert code == 0, err


def test_option_mistakes_say_how_to_write_the_option(tmp_path, capsys):
    out = tmp_path / "run"
    for args, message in (
        (["--detector", "llm", "-o", "backend=openai"], "the openai backend needs `base_url`"),  # the kind
        (["--detector", "llm", "-o", "backend=3"], "give them as -o backend.kind=…"),
        (
            ["--detector", "llm", "-o", "backend=openai", "-o", "backend.model=m"],
            "give it one way, e.g. -o backend.kind=openai",
        ),
        (
            ["--detector", "llm", "-o", "backend.model=m", "-o", "backend=openai"],  # not a silent overwrite
            "given both as a value (-o backend=openai) and as a group",
        ),
        (["--detector", "llm", "-o", "base_url=http://x/v1"], "(a backend setting: -o backend.base_url=…)"),
        (["--detector", "nli"], "field 'model': required: give it as -o model=VALUE"),
        (
            ["--detector", "pyes", "--backend", "openai", "--model", "m"],
            "takes its models as a list: -o 'models=[",
        ),
        (["--detector", "llm"], "needs `responses` (--responses FILE)"),
        (["--detector", "llm", "-o", "seed=none"], "for no value write -o seed=null"),
        (["--responses", tmp_path], "a folder, not a JSONL file"),
        (  # the flag used to win without a word
            [
                "--backend",
                "openai",
                "--base-url",
                "http://127.0.0.1:9/v1",
                "--model",
                "m",
                "-o",
                "backend.model=x",
            ],
            "--model m and -o backend.model=x both given; give it once",
        ),
    ):
        code, _, err = cli(capsys, "detect", *args, "--lang", "en", "--out", out)
        assert code == 2 and message in err and not out.exists(), (args, err)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, _, err = cli(capsys, "detect", "--responses", empty, "--lang", "en", "--out", out)
    assert code == 1 and "empty.jsonl: no lines" in err and not out.exists()


def test_a_model_the_server_does_not_serve_stops_before_a_folder(tmp_path, capsys):
    """llama.cpp answers whatever --model says: a typo ran, and every record named the wrong model."""
    from fake_openai_server import FakeServer

    out = tmp_path / "run"
    with FakeServer({}) as server:
        base = ["detect", "--detector", "llm", "--backend", "openai", "--base-url", server.url]
        code, _, err = cli(capsys, *base, "--model", "nosuch", "--lang", "en", "--limit", "1", "--out", out)
        assert code == 2 and "serves only 'm', not 'nosuch', and would answer with it" in " ".join(
            err.split()
        )
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
    ]
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


def test_score_takes_a_variant_folder_and_names_the_variants_of_its_root(tmp_path, capsys):
    from mushroom.data.predictions import submission_name

    variant = tmp_path / "cfg" / "few-shot" / "val"
    variant.mkdir(parents=True)
    for gold in sorted(VAL_DIR.glob("mushroom.*-val.v2.extra.jsonl")):
        lang = gold.name.split(".")[1].split("-")[0]
        (variant / submission_name(lang, "val")).write_bytes(gold.read_bytes())  # gold as predictions
    code, out, err = cli(capsys, "score", VAL_DIR, tmp_path / "cfg" / "few-shot")
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n"), err
    code, _, err = cli(capsys, "score", VAL_DIR, tmp_path / "cfg")
    assert code == 2 and "it holds the variants few-shot: give one" in " ".join(err.split())


def test_check_against_the_wrong_items_file_says_so_once(capsys):
    de_items = VAL_DIR / "mushroom.de-val.v2.extra.jsonl"
    code, _, err = cli(capsys, "check", VAL_EN, "--items", de_items)
    flat = " ".join(err.split())
    assert code == 1 and "50 of 50 ids are not among the items of" in flat and "(language and split)?" in flat


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
    code, _, err = cli(capsys, "detect", "--items", items, "--contexts", "", "--out", run, "--quiet")
    assert code == 0, err
    code, _, err = cli(capsys, "report", run, "--out", tmp_path / "r.html")
    flat = " ".join(err.split())
    assert code == 2 and "made with --items, so it has no val files" in flat
    assert f"mushroom score ITEMS.jsonl {run / 'predictions' / 'mushroom.en-items.jsonl'}" in flat
    code, out, err = cli(capsys, "score", items, run)  # the run folder itself, against its items
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


def test_score_of_one_gold_file_against_a_run_folder_takes_the_runs_file_of_its_language(tmp_path, capsys):
    from mushroom.data.predictions import submission_name

    folder = tmp_path / "run" / "predictions"
    folder.mkdir(parents=True)
    for lang in ("en", "de"):  # gold as predictions: a perfect score for the right language only
        gold = VAL_DIR / f"mushroom.{lang}-val.v2.extra.jsonl"
        (folder / submission_name(lang, "val")).write_bytes(gold.read_bytes())
    code, out, err = cli(capsys, "score", VAL_EN, tmp_path / "run")
    assert code == 0 and out.endswith("IoU: 1.00000000\nCor: 1.00000000\n"), err


def test_a_run_in_a_folder_of_other_files_says_so_and_keeps_them(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (mine / ".DS_Store").write_text("")
    args = ("detect", "--lang", "en", "--limit", "1", "--out", mine, "--quiet")
    code, out, err = cli(capsys, *args)
    assert code == 0 and "holds files and no run (notes.txt): the run is written beside them" in " ".join(
        (out + err).split()
    )
    assert (mine / "notes.txt").read_text() == "mine" and (mine / "config.json").is_file()
    # a run folder that lost its config.json is no folder of other files
    (mine / "config.json").unlink()
    (mine / "notes.txt").unlink()
    code, out, err = cli(capsys, *args)
    assert code == 0 and "holds files" not in out + err, out + err


def test_score_names_the_item_of_a_bad_line_and_what_an_unlabelled_or_odd_file_is(tmp_path, capsys):
    rows = [json.loads(line) for line in VAL_EN.read_text().splitlines()]
    bad = [{k: r[k] for k in ("id", "soft_labels", "hard_labels")} for r in rows]
    bad[0]["hard_labels"] = "x"
    bad[1]["id"] = 7
    code, _, err = cli(capsys, "score", VAL_EN, write_lines(tmp_path / "bad.jsonl", bad))
    text = " ".join(err.split())
    assert code == 1 and f"bad.jsonl:1: id '{rows[0]['id']}': field 'hard_labels': must be a list" in text
    assert "bad.jsonl:2: field 'id': not a string (got int 7)" in text
    unlabelled = ROOT / "data" / "mushroom" / "test-unlabeled" / "mushroom.en-tst.v1.jsonl"
    code, _, err = cli(capsys, "score", unlabelled, unlabelled)
    assert code == 1 and "items without gold labels (an unlabelled split such as test) cannot be scored" in (
        " ".join(err.split())
    )


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
