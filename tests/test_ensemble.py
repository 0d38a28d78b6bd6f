import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import write_lines

from mushroom.combine.ensemble import ensemble
from mushroom.data.predictions import SoftMode, load_predictions, prediction_vectors
from mushroom.data.records import Prediction, SoftSpan
from mushroom.data.splits import load_items
from mushroom.errors import MushroomError
from mushroom.evaluation.check import check_rows


def _pred(item_id, spans):
    return Prediction(
        id=item_id,
        soft_labels=[SoftSpan(start=s, end=e, prob=p) for s, e, p in spans],
        hard_labels=[(s, e) for s, e, p in spans if p > 0.5],
    )


def test_vote_share_and_threshold():
    runs = [
        {"a": _pred("a", [(0, 4, 0.9)])},
        {"a": _pred("a", [(2, 6, 0.8)])},
        {"a": _pred("a", [(2, 4, 0.6), (8, 9, 0.3)])},
    ]
    out = ensemble(runs, threshold=0.5)[0]
    soft, hard = prediction_vectors(out, 10)
    # hard votes: run 1 [0, 4), run 2 [2, 6), run 3 [2, 4) (its 0.3 span is not hard)
    assert np.allclose(soft[:7], [1 / 3, 1 / 3, 1, 1, 1 / 3, 1 / 3, 0], atol=1e-6)
    assert out.hard_labels == [(2, 4)]
    assert ensemble(runs, threshold=0.3)[0].hard_labels == [(0, 6)]
    mean = ensemble(runs, soft_mode=SoftMode.mean)[0]
    assert prediction_vectors(mean, 10)[0][8] == pytest.approx(0.1, abs=1e-6)
    # a share above 1 never happens: every hard label was empty, with no word
    with pytest.raises(MushroomError, match="threshold 1 marks nothing"):
        ensemble(runs, threshold=1.0)


def test_single_run_ensemble_is_identity_on_hard_labels():
    run = {"a": _pred("a", [(1, 3, 0.9), (5, 8, 0.7)])}
    assert ensemble([run])[0].hard_labels == [(1, 3), (5, 8)]


def test_runs_must_cover_the_same_items():
    with pytest.raises(MushroomError, match="run 2: field .id.: covers other items than run 1"):
        ensemble([{"a": _pred("a", [])}, {"b": _pred("b", [])}])


def test_ensemble_output_passes_the_checker(tmp_path, item_rows):
    items = load_items(write_lines(tmp_path / "i.jsonl", item_rows))
    runs = [
        {"t-1": _pred("t-1", [(0, 5, 0.9)]), "t-2": _pred("t-2", [])},
        {"t-1": _pred("t-1", [(13, 17, 0.4)]), "t-2": _pred("t-2", [(3, 8, 0.6)])},
    ]
    out = ensemble(runs, items, threshold=0.4, soft_mode=SoftMode.mean)
    report = check_rows(enumerate([p.submission_dict() for p in out], 1), items)
    assert report.ok, report.errors


def test_cli_ensemble_of_files(tmp_path, item_rows):
    items_path = write_lines(tmp_path / "items.jsonl", item_rows)
    a = write_lines(
        tmp_path / "a.jsonl", [{"id": "t-1", "hard_labels": [[0, 5]]}, {"id": "t-2", "hard_labels": []}]
    )
    b = write_lines(
        tmp_path / "b.jsonl",
        [
            {"id": "t-1", "soft_labels": [{"start": 0, "end": 2, "prob": 0.9}]},
            {"id": "t-2", "soft_labels": []},
        ],
    )
    out = tmp_path / "ens.jsonl"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "mushroom",
            "ensemble",
            str(a),
            str(b),
            "--threshold",
            "0.6",
            "--out",
            str(out),
            "--items",
            str(items_path),
        ],
        check=True,
        capture_output=True,
    )
    preds = load_predictions(out)
    assert preds["t-1"].hard_labels == [(0, 2)]
    assert preds["t-2"].hard_labels == []


def test_cli_ensemble_of_run_folders_picks_each_folders_file(tmp_path, item_rows, capsys, monkeypatch):
    from mushroom.cli.app import app
    from mushroom.cli.boundary import run_cli
    from mushroom.data.predictions import submission_name

    items_path = write_lines(tmp_path / "items.jsonl", item_rows)
    marked = [{"id": "t-1", "hard_labels": [[0, 5]]}, {"id": "t-2", "hard_labels": []}]
    clean = [{"id": "t-1", "hard_labels": []}, {"id": "t-2", "hard_labels": []}]
    # a detect run (predictions/), a main job (val/ beside its test files) and a plain folder
    for sub in ("detect/predictions", "main/val", "plain"):
        (tmp_path / sub).mkdir(parents=True)
    write_lines(tmp_path / "detect" / "predictions" / submission_name("en", "val"), marked)
    write_lines(tmp_path / "main" / "val" / submission_name("en", "val"), marked)
    write_lines(tmp_path / "main" / submission_name("en", "test"), clean)
    write_lines(tmp_path / "main" / "val" / submission_name("de", "val"), clean)
    write_lines(tmp_path / "plain" / submission_name("en", "val"), clean)
    out = tmp_path / "ens.jsonl"

    def run(*args, to=out):
        code = run_cli(app, ["ensemble", *map(str, args), "--out", str(to), "--items", str(items_path)])
        captured = capsys.readouterr()
        return code, " ".join((captured.out + captured.err).split())

    folders = [tmp_path / "detect", tmp_path / "main", tmp_path / "plain"]
    code, output = run(*folders, "--lang", "en", "--split", "val")
    assert code == 0, output
    assert load_predictions(out)["t-1"].hard_labels == [(0, 5)]  # two of three runs mark it
    # a folder holding two splits or two languages asks which one
    code, output = run(*folders, "--lang", "en")
    assert code == 2 and "give --split val or --split test" in output
    code, output = run(*folders, "--split", "val")
    assert code == 2 and "2 languages (de, en): give --lang" in output
    code, output = run(*folders, "--split", "val", "--lang", "fr")
    assert code == 2 and "language 'fr'" in output and "it holds en" in output
    # the same run twice votes twice (a way to weigh it), said; an --out inside an input run
    # would become one of its files
    code, output = run(
        *folders, tmp_path / "plain" / submission_name("en", "val"), "--lang", "en", "--split", "VAL"
    )
    assert code == 0 and "given twice (also as" in output and "it votes twice" in output
    # beside a loose file, only a prediction file's name would be read back as a run
    code, output = run(
        *folders, "--lang", "en", "--split", "val", to=tmp_path / "plain" / "votes" / "x.jsonl"
    )
    assert code == 0, output
    code, output = run(
        *folders, "--lang", "en", "--split", "val", to=tmp_path / "plain" / submission_name("de", "val")
    )
    assert code == 2 and "is named as the prediction files read from the input folder" in " ".join(
        output.split()
    )
    code, output = run(*folders, "--lang", "en,de", "--split", "val")
    assert code == 2 and "give one code" in output
    code, output = run(tmp_path / "detect", tmp_path / "nowhere")
    assert code == 2 and "no such file or folder" in output
    # a run whose failed items were written empty is no voter: a detect run (its folder or a
    # file of it), and a variant of a run config, whose run lists all variants' failures
    run_config = {"config": {"job": "detect", "split": "val"}, "config_hash": "x"}
    (tmp_path / "detect" / "config.json").write_text(json.dumps(run_config))
    write_lines(tmp_path / "detect" / "failures.jsonl", [{"id": "t-2", "split": "val", "error": "x"}])
    code, output = run(*folders, "--lang", "en", "--split", "val")
    assert code == 2 and "1 of its items is listed as failed in its run" in output
    # anywhere inside a run folder, the vote would be one more of the run's files
    code, output = run(
        tmp_path / "main",
        tmp_path / "plain",
        "--lang",
        "en",
        "--split",
        "val",
        to=tmp_path / "detect" / "votes" / "x.jsonl",
    )
    assert code == 0, output  # detect is no input here
    code, output = run(
        tmp_path / "detect" / "predictions" / submission_name("en", "val"),
        tmp_path / "plain",
        to=tmp_path / "detect" / "votes" / "x.jsonl",
    )
    assert code == 2 and "is inside the run folder" in output
    # a path from inside the failed run to another folder is not of that run
    monkeypatch.chdir(tmp_path / "detect")
    code, output = run(Path("../main"), Path("../plain"), "--lang", "en", "--split", "val")
    assert code == 0, output
    # a main job's member file sits four folders below the job's config.json and failures.jsonl
    job = tmp_path / "job"
    (job / "members" / "lex" / "val").mkdir(parents=True)
    (job / "config.json").write_text(json.dumps({"config": {"job": "main"}, "config_hash": "z"}))
    write_lines(job / "members" / "lex" / "val" / submission_name("en", "val"), clean)
    write_lines(job / "failures.jsonl", [{"id": "t-1", "split": "val", "error": "x"}])
    code, output = run(job / "members" / "lex", tmp_path / "main", "--lang", "en", "--split", "val")
    assert code == 2 and "1 of its items is listed as failed in its run" in output
    code, output = run(tmp_path / "detect" / "predictions" / submission_name("en", "val"), tmp_path / "plain")
    assert code == 2 and "1 of its items is listed as failed in its run" in output
    variants = tmp_path / "variants"
    (variants / "a" / "val").mkdir(parents=True)
    (variants / "config.json").write_text(json.dumps({"config": {"run_config": {}}, "config_hash": "y"}))
    write_lines(variants / "a" / "val" / submission_name("en", "val"), clean)
    write_lines(variants / "failures.jsonl", [{"id": "t-1", "split": "val", "error": "x"}])
    code, output = run(variants / "a", tmp_path / "main", "--lang", "en", "--split", "val")
    assert code == 2 and f"listed as failed in its run ({(variants / 'failures.jsonl').resolve()})" in output
    # each variant's item ledger says which of its own items failed (the last line per id
    # wins): a variant whose items all ended ok is no longer refused for a sibling's failure
    ledger = variants / "a" / "val" / "items" / "en.jsonl"
    ledger.parent.mkdir()
    write_lines(ledger, [{"id": "t-1", "status": "failed"}, {"id": "t-2", "status": "ok"}])
    code, output = run(variants / "a", tmp_path / "main", "--lang", "en", "--split", "val")
    assert code == 2 and f"1 of its items is listed as failed in its run ({ledger.resolve()})" in output
    # retried and ok, its prediction empty like the file's: the run's failures.jsonl (a
    # sibling variant's failure of the same id) is no reason to refuse it
    empty_ok = {
        "id": "t-1",
        "status": "ok",
        "prediction": {"id": "t-1", "soft_labels": [], "hard_labels": []},
    }
    write_lines(ledger, [{"id": "t-1", "status": "failed"}, {"id": "t-2", "status": "ok"}, empty_ok])
    code, output = run(variants / "a", tmp_path / "main", "--lang", "en", "--split", "val")
    assert code == 0, output
    # retried and ok with a span marked while the file still holds the empty prediction: a run
    # stopped after retrying the item and before rewriting its file
    marked_ok = {"id": "t-1", "status": "ok", "prediction": {"id": "t-1", "hard_labels": [[0, 5]]}}
    write_lines(ledger, [{"id": "t-1", "status": "failed"}, {"id": "t-2", "status": "ok"}, marked_ok])
    code, output = run(variants / "a", tmp_path / "main", "--lang", "en", "--split", "val")
    assert (
        code == 2
        and f"1 of its items is empty in it but marked in its item ledger ({ledger.resolve()})" in output
    )
    write_lines(variants / "a" / "val" / submission_name("en", "val"), marked)  # the file rewritten
    code, output = run(variants / "a", tmp_path / "main", "--lang", "en", "--split", "val")
    assert code == 0, output
    # the variants' parent folder names its variants instead of asking for --split
    code, output = run(variants, tmp_path / "main", "--lang", "en")
    assert code == 2 and "it holds the variants a of a run config" in output
    # --lang with files only would be ignored: refused instead
    code, output = run(tmp_path / "plain" / submission_name("en", "val"), "--lang", "en")
    assert code == 2 and "every input here is a file" in output


def test_a_span_past_its_answer_is_blamed_on_the_run_by_its_name():
    """The docstring promised `names` in errors; a span past the answer said 'run 2'."""
    from mushroom.combine.ensemble import ensemble
    from mushroom.data.records import Prediction
    from mushroom.errors import MushroomError

    good, bad = Prediction(id="x", hard_labels=[(0, 2)]), Prediction(id="x", hard_labels=[(0, 9)])
    with pytest.raises(MushroomError, match=r"^b\.jsonl, item 'x': hard_labels\.0 \[0, 9\) ends past"):
        ensemble([{"x": good}, {"x": bad}], {"x": 4}, names=["a.jsonl", "b.jsonl"])
