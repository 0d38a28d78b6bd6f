"""Benchmark scripts answer --help and refuse a wrong number with a usage line, not a traceback.

A user runs `python benchmarks/NAME.py --help` to learn what a script takes; four scripts ran
their whole benchmark instead. `--items 0`, `--seeds a` or `--sizes x` ended in a
ZeroDivisionError or ValueError traceback, some after minutes of member runs.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))

import _args  # noqa: E402

SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def run_script(name: str, args: list[str], monkeypatch) -> int:
    monkeypatch.setattr(sys, "argv", [str(BENCH / name), *args])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(str(BENCH / name), run_name="__main__")
    return stop.value.code


@pytest.mark.parametrize("name", SCRIPTS)
def test_help_prints_usage_and_runs_nothing(name, monkeypatch, capsys):
    assert run_script(name, ["--help"], monkeypatch) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:"), out[:200]
    assert "show this help message" in out


@pytest.mark.parametrize(
    ("name", "args", "says"),
    [
        ("api_overhead.py", ["--items", "0"], "a whole number, 1 or more"),
        ("scorer_throughput.py", ["--repeat", "0"], "a whole number, 1 or more"),
        ("segment_speed.py", ["--sizes", "x"], "whole numbers of 1 or more"),
        ("results_page.py", ["--seeds", "a"], "whole numbers separated by commas"),
        ("stack_val.py", ["--seeds", "0,-1"], "whole numbers separated by commas"),
        ("detector_val.py", ["--langs", "en,xx"], "not xx"),
        ("gold_shape.py", ["--langs", "english"], "val has the languages"),
        ("parser_oracle.py", ["--seed", "x"], "a whole number, 0 or more"),
        ("chain_cost.py", ["--lang", "en,fr"], "give one val language"),
        ("lexical_calibration.py", ["--thresholds", "0.3,half"], "numbers separated by commas"),
        ("server_throughput.py", ["--levels", "1,0"], "whole numbers of 1 or more"),
        ("marked_share.py", ["/no/such/run"], "no such folder"),
        ("stack_val.py", ["--cutoff-shrink", "abc"], "numbers of 0 or more"),
        ("stack_val.py", ["--floor-shrink", "-5"], "numbers of 0 or more"),
        ("stack_val.py", ["--empty-rule", "maybe"], "give on, off"),
        ("results_page.py", ["--model", "blend,forest"], "give blend, trees, logistic"),
        ("lexical_calibration.py", ["--folds", "1"], "a whole number, 2 or more"),
        ("long_replies.py", ["--scale", "0"], "a whole number, 1 or more"),
    ],
)
def test_wrong_argument_is_a_usage_error(name, args, says, monkeypatch, capsys):
    assert run_script(name, args, monkeypatch) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage:") and "error:" in err, err
    assert says in err


def test_types_accept_what_the_docs_show():
    assert _args.whole_list("0,1,2") == [0, 1, 2]
    assert _args.positive_list("1000,10000") == [1000, 10000]
    assert _args.number_list("0.2,0.25") == [0.2, 0.25]
    assert _args.val_langs("en, de") == ["en", "de"]
    assert _args.val_langs("EN,en-US,de") == ["en", "de"]  # as `mushroom --lang` reads codes, once each
    assert _args.choice_list("on", "off")("on,off") == ["on", "off"]
    assert _args.val_lang("fi") == "fi"
    assert _args.whole("0") == 0


def test_a_missing_data_folder_is_a_usage_line(monkeypatch):
    monkeypatch.setattr("mushroom.data.splits.DEFAULT_DATA_DIR", BENCH / "no-such-data")
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="split folder not found") as caught:
        _args.val_langs("en")
    assert "--items" not in str(caught.value)
