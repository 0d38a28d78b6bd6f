"""The error boundary every command shares: exit codes, one message, no traceback, options named."""

import json
import os
import stat
import subprocess
import sys

import pytest
import typer
from cli_helpers import GOLD_ROWS, VAL_DIR, cli
from conftest import ROOT, VAL_EN, write_lines
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


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["check", "{tmp}", "--items", VAL_EN], 2, "no .jsonl file in the folder"),  # a folder: a submission
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
        # an empty name is a name left out by mistake, not one to skip
        (["main-job", "--members", "lexical,,semantic", "--out", "{tmp}/m"], 2, "has an empty detector"),
        (["main-job", "--lang", "en,", "--out", "{tmp}/m"], 2, "has an empty language"),
    ],
)
def test_expected_failures_are_one_message_and_an_exit_code(tmp_path, capsys, args, code, needle):
    argv = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    got, out, err = cli(capsys, *argv)
    assert got == code, err
    assert needle in out + err


def _import_cut_by_ctrl_c() -> ImportError:
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as ki:
            raise ImportError("initialization failed") from ki
    except ImportError as exc:
        return exc


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
        (MushroomError("use pip install -e '.[vllm]'"), 2, "pip install -e '.[vllm]'"),
        (RunFailed("3 items failed"), 3, "3 items failed"),
        (KeyboardInterrupt(), 130, "interrupted"),
        # a Ctrl-C inside a compiled module's import (pybind11's "initialization failed")
        (_import_cut_by_ctrl_c(), 130, "interrupted"),
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
    assert res.returncode == 2 and "Traceback" in res.stderr and "no .jsonl file in the folder" in res.stderr
    res = subprocess.run([a for a in args if a != "--debug"], capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 2 and "Traceback" not in res.stderr


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


def test_backends_lists_every_kind_s_settings_with_real_defaults(capsys):
    """Only an error message listed a backend's settings: no page or command did (an audit)."""
    from mushroom.backends.config import OpenAIConfig

    code, out, _ = cli(capsys, "backends")
    assert code == 0 and "PydanticUndefined" not in out
    for kind in ("openai", "transformers", "vllm", "replay"):
        assert f"{kind}: " in out
    shown = {line.split(" = ")[0].strip() for line in out.splitlines() if " = " in line}
    assert set(OpenAIConfig.model_fields) - {"kind"} <= shown
    assert (
        "structured_output = 'auto'" in out
        and "pip install 'httpx>=0.25' 'tenacity>=8.3' (mushroom's 'openai' extra)" in out
    )


def test_bracketed_file_names_are_printed_as_they_are(tmp_path, capsys):
    pred = write_lines(tmp_path / "run[bold].jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS])
    code, out, _ = cli(capsys, "check", pred, "--items", VAL_EN)
    assert code == 0 and "run[bold].jsonl: OK" in out
    bad = write_lines(tmp_path / "x[red].jsonl", ["{oops"])
    code, _, err = cli(capsys, "check", bad, "--items", VAL_EN)
    assert code == 1 and "x[red].jsonl:1: invalid JSON" in err


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


def test_unknown_context_source_suggests_a_close_match():
    from mushroom.data.contexts import load_contexts

    with pytest.raises(MushroomError, match="did you mean 'perplexity-sonar-pro'"):
        load_contexts("val", "en", ("perplexty-sonar-pro",))


def test_the_long_form_of_a_short_name_is_matched(capsys):
    """ "validation" is far from "val" by difflib's ratio: no suggestion came."""
    from mushroom.util.words import close_match

    assert close_match("validation", ["test", "test-labeled", "train", "val"], prefix=True) == "val"
    assert close_match("validation", ["test", "val"]) is None  # a hint's rule only
    assert close_match("estonian", ["en", "es", "et"], prefix=True) is None  # 'es' is too short to say
    assert close_match("tes", ["test", "val"], prefix=True) == "test"
    assert close_match("te", ["test", "val"], prefix=True, cutoff=0.9) is None  # too short to start one
    code, _, err = cli(capsys, "detect", "--split", "validation", "--detector", "lexical")
    assert code == 2 and "unknown split 'validation'; did you mean 'val'?" in err, err
    # the data folder's name was told "did you mean 'test-labeled'?", the held-out split (an audit)
    for given, told in (
        ("test-unlabeled", "test-unlabeled/ is the folder of the 'test' split; give --split test"),
        ("val,test", "unknown split 'val,test': one split at a time"),
    ):
        code, _, err = cli(capsys, "detect", "--split", given, "--lang", "en", "--limit", "1")
        assert code == 2 and told in " ".join(err.split()), err


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
@app.command()
def slow():
    def hint():
        time.sleep(0.8)  # the second signal of `timeout -s INT` lands while this is being said
        return "3 of 50 items saved in runs/x; run the same command to resume"
    with interrupt_hint(hint):
        print("ready", flush=True)
        time.sleep(60)
@app.command()
def swallows():
    try:  # "ready" inside: a signal right after it must land in the try
        print("ready", flush=True)
        time.sleep(60)
    except KeyboardInterrupt:  # a library that catches the first Ctrl-C and goes on
        print("swallowed", flush=True)
    time.sleep(60)
@app.command()
def short():
    print("ready", flush=True)
    time.sleep(2)
    print("finished", flush=True)
raise SystemExit(run_cli(app))
"""


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("bare", "interrupted\n"),
        ("hinted", "interrupted; 3 of 50 items saved in runs/x; run the same command to resume\n"),
        ("slow", "interrupted; 3 of 50 items saved in runs/x; run the same command to resume\n"),
    ],
)
def test_ctrl_c_exits_130_with_one_line(tmp_path, command, expected):
    import signal
    import time

    proc = _sleepy(tmp_path, command, signal.SIG_DFL)  # SIG_DFL: a test runner may ignore it
    proc.send_signal(signal.SIGINT)
    if command == "slow":  # a second signal, to the command and its group, as timeout sends
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert err == expected


def _sleepy(tmp_path, command, handler):
    """The SLEEPY_APP command started with SIGINT set to `handler`, once it says it is ready."""
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
        preexec_fn=lambda: signal.signal(signal.SIGINT, handler),
    )
    assert proc.stdout.readline() == "ready\n"
    return proc


def test_a_ctrl_c_later_than_the_first_still_stops_the_command(tmp_path):
    """Repeats within 2 s are one Ctrl-C; one after that must still stop what swallowed the first."""
    import signal
    import time

    proc = _sleepy(tmp_path, "swallows", signal.SIG_DFL)
    proc.send_signal(signal.SIGINT)
    assert proc.stdout.readline() == "swallowed\n"
    time.sleep(2.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err == "interrupted\n", err


def test_a_command_started_with_sigint_ignored_is_not_stopped_by_one(tmp_path):
    """`mushroom ... &` in a script ignores SIGINT; the command's own handler undid that."""
    import signal

    proc = _sleepy(tmp_path, "short", signal.SIG_IGN)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and out == "finished\n", (out, err)


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
    # a TOML inline table, as a config writes it: the hint split it on commas, and failed as given
    code, _, err = cli(
        capsys, "detect", "--detector", "pyes", "-o", 'models=[{kind="openai",model="m"}]', "--out", out
    )
    assert code == 2 and """write it in JSON: -o 'models=[{"kind": "openai", "model": "m"}]'""" in err, err
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
    # every command's flags: compare's --partial and --answered showed <bool> (an audit)
    import typer.main

    from mushroom.cli.app import app

    def flags(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                yield from flags(sub, [*path, name])
        else:
            yield from ((path, p.opts) for p in command.params if getattr(p, "is_flag", False))

    shown = [(path, opts) for path, opts in flags(typer.main.get_command(app), []) if opts != ["--help"]]
    assert len(shown) > 10
    for path, opts in shown:
        code, out, _ = cli(capsys, *path, "--help")
        line = next(line for line in out.splitlines() if opts[0] in line)
        assert code == 0 and "<bool>" not in line, (path, line)


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


def test_option_mistakes_say_how_to_write_the_option(tmp_path, capsys):
    out = tmp_path / "run"
    not_calibration = tmp_path / "cal.json"
    not_calibration.write_text('{"a": 1}')
    pyes_models = ["-o", 'models=[{"kind": "replay", "responses": "r.jsonl"}]']
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
        (["--detector", "llm"], "needs `responses`, a JSONL file of recorded responses (--responses FILE"),
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
    # a file that is not a calibration said "invalid value: models: Field required", naming no file
    code, _, err = cli(
        capsys, "detect", "--detector", "pyes", *pyes_models, "-o", f"calibration={not_calibration}",
        "--lang", "en", "--out", out,
    )  # fmt: skip
    assert code == 1 and "cal.json: field 'models': Field required" in err and not out.exists()


@pytest.mark.parametrize("number", ["1e400", "1" * 400 + ".5"])
def test_a_number_too_large_for_a_float_is_a_problem_on_its_line(tmp_path, capsys, number):
    """It raised OverflowError: an internal error (exit 70) instead of the line's problem."""
    rows = [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS]
    lines = [json.dumps(row) for row in rows]
    lines[1] = f'{{"id": "{rows[1]["id"]}", "hard_labels": [[0, {number}]]}}'
    pred = write_lines(tmp_path / "p.jsonl", lines)
    code, _, err = cli(capsys, "score", VAL_EN, pred)
    said = " ".join(err.split())
    # a whole part past 64 bits fails the official reader before any float is made
    why = "a number too large for a float" if "e" in number else "official scorer's reader"
    assert code == 1 and "p.jsonl:2: invalid JSON: " in said and why in said, said


def test_small_mistakes_get_a_usage_error_that_names_them(tmp_path, capsys):
    """Each of these ran on (default members, SVG in a .png, a source counted twice) or said less."""
    out = tmp_path / "out"
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    pred = write_lines(tmp_path / "p.jsonl", [{"id": r["id"], "hard_labels": []} for r in GOLD_ROWS])
    run = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "2", "--out", run, "--quiet")
    assert code == 0, err
    for args, want, said in (
        (["main-job", "--detector", "stak", "--out", out], 2, "(did you mean 'stack'?); one of stack,"),
        (["main-job", "--members", "", "--out", out], 2, "--members is empty"),
        (["stack", "fit", run, "--model", "tree", "--out", out], 2, "--model 'tree' (did you mean 'trees'?)"),
        (["detect", "--contexts", "tavily-5,tavily-5", "--out", out], 2, "tavily-5 named twice"),
        (["sweep", run, "--svg", tmp_path / "s.png"], 2, "give a file name ending in .svg"),
        # an option of one value given twice: the last one won, unsaid
        (
            ["detect", "--split", "val", "--split", "test", "--out", out],
            2,
            "--split is given twice (val, test)",
        ),
        (
            ["detect", "--detector", "lexical", "--detector=semantic", "--out", out],
            2,
            "--detector is given twice",
        ),
        (["score", pred, pred, "--json", out / "a", "--json", out / "b"], 2, "--json is given twice"),
        # named as typed: the option's other name said nothing the user wrote
        (["score", pred, pred, "--out", "a", "--out=b"], 2, "--out is given twice (a, b)"),
        (["score", pred, pred, "--output", "a", "--out", "b"], 2, "--output and --out name one option"),
        (["run", "--config", "configs/variants.toml"], 2, "takes the config file as its argument"),
        # a member's advice names the member, as main-job takes its options
        (
            ["main-job", "-o", "semantic.max_length=100000", "--lang", "en", "--out", out],
            2,
            "give -o semantic.max_length=512 or less",
        ),
        # the detector named as a word, as in `mushroom detectors`' list
        (
            ["detect", "semantic", "--out", out],
            2,
            "(semantic); the detector is an option: --detector semantic",
        ),
        (["check", pred, "--items", empty], 1, "empty.jsonl: no items"),
        (["contexts", "--source", "../x", "--context-dir", out], 2, "--source: a context source '../x'"),
        # a generated source named as a released one would be read in its place
        (["contexts", "--source", "deepseek-r1", "--limit", "1"], 2, "a released source of that name is in"),
    ):
        code, _, err = cli(capsys, *args)
        assert code == want and said in " ".join(err.split()), (args, err)
        assert not out.exists() and not (tmp_path / "s.png").exists()


def test_ctrl_c_while_the_command_line_is_imported_is_one_line_and_130():
    """At 0.3 s into `mushroom contexts` or `models pull`, a Ctrl-C printed a traceback."""
    code = (
        "import sys\n"
        "class Stop:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'mushroom.cli.app':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Stop())\n"
        "from mushroom.__main__ import main\n"
        "main()\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "interrupted while starting: nothing was done\n"


def test_the_english_embedding_grader_is_said_for_other_languages(tmp_path, capsys):
    """It graded Hindi and Chinese contexts irrelevant almost all, with no word of why."""
    replies = write_lines(tmp_path / "r.jsonl", [])
    args = [
        "contexts",
        "--split",
        "val",
        "--grade",
        "embedding",
        "--backend",
        "replay",
        "--responses",
        replies,
    ]
    args += ["--limit", "1", "--context-dir", tmp_path / "ctx", "--source", "gen"]
    _, _, err = cli(capsys, *args, "--lang", "hi")
    assert "all-MiniLM-L6-v2, an English encoder" in " ".join(err.split()), err
    _, _, err = cli(capsys, *args, "--lang", "en")
    assert "English encoder" not in err
    # a cascade plan that sends English items only grades English: no warning either
    plan = tmp_path / "plan.jsonl"
    row = {"lang": "en", "split": "val", "uncertainty": 0.5, "rank": 1, "of": 50, "reason": "r"}
    plan.write_text(json.dumps({**row, "id": "val-en-1", "sent": True}) + "\n")
    _, _, err = cli(capsys, *args, "--cascade", plan)
    assert "English encoder" not in err, err
    plan.write_text(json.dumps({**row, "id": "val-de-1", "lang": "de", "sent": True}) + "\n")
    _, _, err = cli(capsys, *args, "--cascade", plan)
    assert "English encoder" in " ".join(err.split()), err


@pytest.mark.parametrize("command", [["detect", "--split", "val", "--lang", "en", "--limit", "2"], ["score"]])
def test_a_reader_that_stops_reading_ends_no_command(tmp_path, command):
    """`mushroom detect | head -1`: rich's answer to the closed pipe was SystemExit(1), so the
    run stopped at its next line of output, its summary unwritten, with not a word."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line
    out = tmp_path / "run"
    if command == ["score"]:
        preds = tmp_path / "p.jsonl"
        write_lines(preds, [{"id": r["id"], "hard_labels": [], "soft_labels": []} for r in GOLD_ROWS])
        gold = tmp_path / "g.jsonl"
        write_lines(gold, GOLD_ROWS)
        args = ["score", gold, preds]
    else:
        args = [*command, "--out", out]
    try:
        res = subprocess.run(
            [sys.executable, "-m", "mushroom", *map(str, args)], stdout=write, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, timeout=300,
        )  # fmt: skip
    finally:
        os.close(write)
    assert res.returncode == 0, res.stderr
    assert "the output's reader stopped reading" in res.stderr and "Traceback" not in res.stderr
    if command != ["score"]:
        assert json.loads((out / "summary.json").read_text())["items_failed"] == 0


@pytest.mark.parametrize("args", [["--help"], ["score", "--help"]])
def test_help_read_by_a_reader_that_stops_exits_0(args):
    """`mushroom --help | head -1` exited 1: typer's own help console ends a closed pipe as rich does."""
    read, write = os.pipe()
    os.close(read)
    try:
        res = subprocess.run(
            [sys.executable, "-m", "mushroom", *args], stdout=write, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_a_run_label_with_colons_is_printed_as_it_is_not_as_an_emoji(capsys):
    from mushroom.cli.boundary import print_warning

    print_warning("0:a: ar, de left out")
    assert "0:a: ar, de left out" in " ".join(capsys.readouterr().err.split())


def test_a_loop_of_symbolic_links_is_a_usage_error_not_a_bug(tmp_path, capsys):
    """Path.resolve() raises RuntimeError on a loop: exit 70, "this is a bug in mushroom"."""
    (tmp_path / "loop2").symlink_to("loop1")
    (tmp_path / "loop1").symlink_to("loop2")
    loop = tmp_path / "loop1"
    for args in (["score", VAL_EN, loop], ["detect", "--lang", "en", "--limit", "1", "--out", loop]):
        code, _, err = cli(capsys, *args)
        assert code == 2 and f"{loop}: a loop of symbolic links" in " ".join(err.split()), err
        assert "bug" not in err


def test_a_file_that_refuses_its_atomic_replace_is_named_not_its_hidden_part_file():
    """'.mushroom.en-val.v2.jsonl.part: permission denied' named a file the user never made."""
    from mushroom.cli.boundary import exit_code_for

    exc = PermissionError(
        13, "Permission denied", "/r/predictions/.p.jsonl.part", None, "/r/predictions/p.jsonl"
    )
    assert exit_code_for(exc) == (2, "/r/predictions/p.jsonl: permission denied")
    assert exit_code_for(PermissionError(13, "Permission denied", "/r/x"))[1] == "/r/x: permission denied"


def test_a_ctrl_c_inside_an_import_at_start_is_exit_130_not_a_traceback(monkeypatch, capsys):
    import types

    import mushroom.__main__ as entry

    cut = types.ModuleType("mushroom.cli.app")

    def cut_import(name):
        raise _import_cut_by_ctrl_c()

    cut.__getattr__ = cut_import
    monkeypatch.setitem(sys.modules, "mushroom.cli.app", cut)
    with pytest.raises(SystemExit) as stopped:
        entry.main()
    assert stopped.value.code == 130
    assert "interrupted while starting: nothing was done" in capsys.readouterr().err
    # an import that fails for another reason is not taken for a Ctrl-C
    broken = types.ModuleType("mushroom.cli.app")

    def missing(name):
        raise ImportError("No module named 'scipy'")

    broken.__getattr__ = missing
    monkeypatch.setitem(sys.modules, "mushroom.cli.app", broken)
    with pytest.raises(ImportError, match="scipy"):
        entry.main()


def test_help_shows_the_defaults_written_in_brackets(capsys):
    """rich read "[default: ...]" in a help text as markup and dropped it: --contexts' default
    sources, which the docs send readers to the help for, were never shown."""
    from mushroom.data.contexts import DEFAULT_SOURCES

    _, shown, _ = cli(capsys, "detect", "--help")
    said = " ".join(shown.replace("│", " ").split())
    assert "no contexts [default: " + DEFAULT_SOURCES[0] in said, said
    _, shown, _ = cli(capsys, "contexts", "--help")
    assert "[default:" in " ".join(shown.replace("│", " ").split())


def test_a_terminal_that_is_not_utf8_gets_question_marks_not_an_internal_error(tmp_path):
    """Under a Latin-1 locale a table's "…" stopped `detect` with exit 70 ("a bug in mushroom")
    after its predictions were written and before its summary."""
    env = {**os.environ, "PYTHONIOENCODING": "latin-1", "COLUMNS": "40"}
    out = tmp_path / "run"
    args = ["detect", "--split", "val", "--lang", "ar", "--limit", "3", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "mushroom", *args], capture_output=True, env=env, timeout=300, cwd=ROOT
    )
    said = proc.stdout.decode("latin-1") + proc.stderr.decode("latin-1")
    assert proc.returncode == 0 and "internal error" not in said, said
    assert (out / "summary.json").is_file()


def test_version_prints_the_package_version(capsys):
    """`mushroom --version` was "No such option", though a bug report wants it first."""
    from mushroom.version import __version__

    code, out, err = cli(capsys, "--version")
    assert code == 0 and out.strip() == f"mushroom {__version__}", err


def test_debug_after_the_command_is_taken_as_before_it(capsys):
    """`mushroom score --debug ...` was "No such option: --debug"."""
    from mushroom.cli.boundary import _debug_first

    assert _debug_first(["score", "--debug", "g", "p"]) == ["--debug", "score", "g", "p"]
    assert _debug_first(["--debug", "score"]) == ["--debug", "score"]
    assert _debug_first(["score", "--", "--debug"]) == ["score", "--", "--debug"]  # a file so named
    assert _debug_first([]) == []
    assert _debug_first(["--debug", "score", "--debug", "g"]) == ["--debug", "score", "g"]


ENDING_APP = """
import atexit, time, typer
from mushroom.cli.boundary import after_command, run_cli
app = typer.Typer()
@app.command()
def done():
    print("done", flush=True)
def slow_end():  # the interpreter's shutdown, drawn out: imports unloaded, files closed
    print("ending", flush=True)
    time.sleep(1.5)
atexit.register(slow_end)
code = run_cli(app, [])
after_command()
raise SystemExit(code)
"""


def test_a_ctrl_c_as_a_finished_command_ends_leaves_its_exit_code_0(tmp_path):
    """A Ctrl-C in the tenths of a second after a run's last line made it exit 130, unsaid."""
    import signal

    script = tmp_path / "ending.py"
    script.write_text(ENDING_APP)
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert proc.stdout.readline() == "done\n" and proc.stdout.readline() == "ending\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and err == "", err


def test_a_full_disk_says_what_was_saved_and_to_free_space(tmp_path):
    """Only "error: No space left on device" was said: no where, no what to do (an audit)."""
    import errno

    from mushroom.cli.boundary import exit_code_for
    from mushroom.data.jsonl import JsonlWriter

    with interrupt_hint(lambda: "3 of 50 items saved in runs/x; run the same command to resume"):
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as exc:
            code, message = exit_code_for(exc)
    assert code == 2 and message == (
        "No space left on device (a full disk, a quota or a file-size limit): free space; "
        "3 of 50 items saved in runs/x; run the same command to resume"
    )

    class FullDisk:
        def close(self):
            raise OSError(errno.ENOSPC, "No space left on device")

    writer = JsonlWriter(tmp_path / "mushroom.en-val.v2.jsonl")
    writer.handle.close()
    writer.handle = FullDisk()  # closing flushes the buffer, which fails again
    writer.discard()  # the temporary file was left on the full disk
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["detect", "--detector", "lexical", "--lang", "it", "--limit", "3x"],
            "'--limit': '3x': Input should be",
        ),
        (["main-job", "--llm-budget=abc"], "'--llm-budget': 'abc': Input should be a valid number"),
        (
            ["detect", "--detector", "lexical", "--limit", ""],
            "'--limit': '': Input should be a valid integer",
        ),
        # `--limit=5` is the value of --prompt, as click reads it (a review)
        (["detect", "--limit", "3x", "--prompt", "--limit=5"], "'--limit': '3x': Input should be"),
    ],
)
def test_a_value_of_the_wrong_type_is_echoed_in_its_message(capsys, args, said):
    """Typer says what a value should be, not what was given: in a script of many flags, an unset
    variable or a shifted argument had to be found by eye."""
    code, _, err = cli(capsys, *args)
    assert code == 2 and said in " ".join(err.split()), err
