"""`compare`, `sweep` and `report` on runs made on part of the items, and on broken runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import GOLD_ROWS, VAL_DIR, cli, limited_run
from conftest import ROOT, VAL_EN, write_lines
from official_oracle import official_scores


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
    extra = ["--svg", tmp_path / "s.svg"] if command == "sweep" else ["--contexts", "none"]
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
    # beside a run of every item (here the gold itself): compared on the 5 both predicted
    full = tmp_path / "full"
    full.mkdir()
    write_lines(full / "mushroom.en-val.v2.jsonl", GOLD_ROWS)
    code, out, err = cli(capsys, "compare", full, run, "--eval-dir", tmp_path / "eval")
    assert code == 0, err
    assert f"compared on the 5 items every run predicted, of 50: the run in {run} was made with" in err
    row = next(line for line in out.splitlines() if line.startswith("│ run ") and " en " in line)
    assert "│ 5 │" in row and "-" in row.split("│")[6]  # 5 items, a loss against gold
    code, out, err = cli(capsys, "sweep", run, "--svg", tmp_path / "s.svg")
    assert code == 0, err
    assert f"sweeping en: the run in {run} was made with" in err and "swept 5 of 50 gold items" in err
    # the plot says what it is of and what its axes are (a visual review found neither)
    plot = (tmp_path / "s.svg").read_text()
    assert "(en; 5 items)</text>" in plot and ">hard-label threshold<" in plot and ">best " in plot
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


def test_a_stack_fitted_on_the_labelled_test_split_is_in_sample_on_test():
    """`test-labeled` holds the `test` items with their labels: a stack fitted on it and
    applied to `test` was said to be out of sample, the split names differing."""
    from mushroom.data.runfolder import in_sample_languages

    assert in_sample_languages("test-labeled: en (154)", ["en"], "test", ["en", "de"]) == ["en"]
    assert in_sample_languages("test: en (154)", ["en"], "test-labeled", ["en"]) == ["en"]
    assert in_sample_languages("test-labeled: en (154)", ["en"], "val", ["en"]) == []
    assert in_sample_languages("", [], "val", ["en"]) == ["en"]  # an old stack: fitted on val


def test_a_stack_applied_to_the_split_it_was_fitted_on_is_called_in_sample_wherever_it_is_scored(
    tmp_path, capsys
):
    """`stack apply --split val` warned once; compare then showed its in-sample gain beside
    cross-validated runs as if alike."""
    stack = tmp_path / "stack-val"
    (stack / "predictions").mkdir(parents=True)
    write_lines(stack / "predictions" / "mushroom.en-val.v2.jsonl", GOLD_ROWS)
    config = {
        "job": "stack-apply",
        "split": "val",
        "stack": {"fitted_on": "val: en (50)", "languages": ["en"]},
    }
    (stack / "config.json").write_text(json.dumps({"config": config, "config_hash": "0"}))
    other = tmp_path / "other"
    other.mkdir()
    write_lines(other / "mushroom.en-val.v2.jsonl", GOLD_ROWS)
    said = "stack-val: a stack applied to the val items it was fitted on (en): its scores there are in-sample"
    code, _, err = cli(capsys, "compare", other, stack, "--eval-dir", tmp_path / "e")
    assert code == 0 and said in " ".join(err.split()), err
    code, _, err = cli(capsys, "score", VAL_EN, stack)
    assert code == 0 and said in " ".join(err.split()), err
    # applied to a language it was not fitted on: out of sample, so nothing to say
    config["stack"]["languages"] = ["de"]
    (stack / "config.json").write_text(json.dumps({"config": config, "config_hash": "0"}))
    code, _, err = cli(capsys, "compare", other, stack, "--eval-dir", tmp_path / "e")
    assert code == 0 and "in-sample" not in err, err
    config["stack"]["languages"] = ["en"]
    # fitted on val, applied to test: nothing to say; nor of a run that is no stack's
    config["split"] = "test"
    (stack / "config.json").write_text(json.dumps({"config": config, "config_hash": "0"}))
    code, _, err = cli(capsys, "compare", other, stack, "--eval-dir", tmp_path / "e")
    assert code == 0 and "in-sample" not in err, err


def test_compare_refuses_an_eval_dir_named_dash(tmp_path, capsys, monkeypatch):
    """`compare RUN --eval-dir -` made a folder named '-' and wrote the tables into it."""
    run = limited_run(tmp_path, capsys)
    monkeypatch.chdir(tmp_path)  # '-' is looked for where the command runs
    code, _, err = cli(capsys, "compare", run, "--eval-dir", "-")
    assert code == 2 and "--eval-dir -: this writes files, not to stdout" in " ".join(err.split()), err
    assert not Path("-").exists()
