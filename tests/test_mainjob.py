import json
import subprocess
import zipfile

import pytest
from conftest import ROOT
from fake_openai_server import FakeServer
from rich.console import Console

from mushroom.cli.tables import RichReporter
from mushroom.combine.stack.decoding import word_hard_mask
from mushroom.data.predictions import prediction_vectors
from mushroom.data.records import Prediction
from mushroom.data.splits import load_split
from mushroom.errors import MushroomError
from mushroom.evaluation.check import check_file
from mushroom.runs.mainjob import run_main, run_main_stack


def test_main_job_on_a_slice_writes_checked_files_scores_and_resumes(tmp_path):
    out = tmp_path / "run"
    console = RichReporter(Console(file=open(tmp_path / "log.txt", "w"), width=120))
    run_main(out=out, langs=["en", "zh", "eu"], quiet=True, reporter=console)
    test = load_split("test", ["en", "zh", "eu"])
    for lang in ("en", "zh", "eu"):
        path = out / f"mushroom.{lang}-tst.v1.jsonl"
        assert check_file(path, test[lang]).ok
    with zipfile.ZipFile(out / "submission.zip") as bundle:
        assert sorted(bundle.namelist()) == [
            "mushroom.en-tst.v1.jsonl",
            "mushroom.eu-tst.v1.jsonl",
            "mushroom.zh-tst.v1.jsonl",
        ]
    scores = json.loads((out / "val" / "scores.json").read_text())
    assert set(scores["per_lang"]) == {"en", "zh"}  # eu has no val split
    assert scores["per_lang"]["en"]["iou"] > scores["mark_all"]["en"]["iou"]
    md = (out / "val" / "scores.md").read_text().splitlines()
    assert "| mark-all IoU |" in md[0] and md[-1].startswith("| **mean** | 100 |")
    en = next(line for line in md if line.startswith("| en |")).split(" | ")
    assert float(en[6]) == round(scores["mark_all"]["en"]["iou"], 4)  # the column holds the baseline
    config = json.loads((out / "config.json").read_text())
    assert (
        config["config"]["detector"] == "lexical" and config["config"]["options"]["calibration"] == "default"
    )
    versions = json.loads((out / "versions.json").read_text())
    assert versions["packages"]["numpy"]
    # resume per item: a missing file is rewritten from the ledger, lost items are redone
    before = {lang: (out / f"mushroom.{lang}-tst.v1.jsonl").read_bytes() for lang in ("en", "zh")}
    ledger = out / "items" / "en.jsonl"
    lines = ledger.read_text().splitlines()
    ledger.write_text("\n".join(lines[:-5]) + "\n" + lines[-5][:40])  # 5 items lost, a line cut by a kill
    (out / "mushroom.zh-tst.v1.jsonl").unlink()
    run_main(out=out, langs=["en", "zh", "eu"], quiet=True, reporter=console)
    after = ledger.read_text().splitlines()
    assert len(after) == len(lines)  # the 5 lost items again; the cut line was dropped
    for lang in ("en", "zh"):
        assert (out / f"mushroom.{lang}-tst.v1.jsonl").read_bytes() == before[lang]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items_failed"] == 0 and summary["stages"]["lexical:val"]["reused"] is True
    with pytest.raises(MushroomError, match="another config"):
        run_main(out=out, langs=["en", "zh", "eu"], options={"threshold": 0.3}, quiet=True, reporter=console)


def test_a_run_that_stopped_before_its_first_item_does_not_lock_its_folder(tmp_path):
    out = tmp_path / "run"
    console = RichReporter(Console(file=open(tmp_path / "log.txt", "w"), width=120))
    with pytest.raises(MushroomError, match="no context file"):
        run_main(out=out, langs=["en"], sources=("no-such-source",), quiet=True, reporter=console)
    run_main(out=out, langs=["en"], with_val=False, quiet=True, reporter=console)  # corrected config
    assert (out / "mushroom.en-tst.v1.jsonl").is_file()


def test_run_sh_runs_the_main_job(tmp_path):
    out = tmp_path / "sub"
    proc = subprocess.run(
        [str(ROOT / "run.sh"), "--out", str(out), "--lang", "it", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / "mushroom.it-tst.v1.jsonl").is_file() and (out / "submission.zip").is_file()
    assert "stack on val" in proc.stdout
    # how many test answers the empty rule emptied is said, and kept for a re-run that reuses the stage
    emptied = json.loads((out / "stages.json").read_text())["stack-apply"]["emptied"]
    rows = [json.loads(line) for line in (out / "mushroom.it-tst.v1.jsonl").read_text().splitlines()]
    # an emptied answer has no hard label, though its soft labels pass the stack's threshold
    stack = json.loads((out / "stack.json").read_text())
    threshold = stack["thresholds"].get("it", stack["threshold"])
    texts = {it.id: it.model_output_text for it in load_split("test", ["it"])["it"]}
    above = []
    for row in rows:
        text = texts[row["id"]]
        soft = prediction_vectors(Prediction.model_validate(row), len(text))[0]
        if not row["hard_labels"] and word_hard_mask(text, soft, threshold).any():
            above.append(row["id"])
    assert set(emptied) == {"it"} and emptied["it"] == len(above)
    said = f"the empty rule emptied the hard labels of {emptied['it']} of {len(rows)} test answers"
    assert said in " ".join(proc.stdout.split())


def test_a_member_that_beats_the_stack_out_of_fold_is_warned_about():
    from mushroom.combine.stack import stack_behind

    comparison = {
        "stack (CV)": {"mean": {"iou": 0.36, "cor": 0.5}},
        "lexical": {"mean": {"iou": 0.39, "cor": 0.4}},
        "semantic": {"mean": {"iou": 0.44, "cor": 0.5}},
    }
    [warning] = stack_behind(comparison, ["lexical", "semantic"])
    assert (
        "member 'semantic' alone (IoU 0.4400) beat the stack" in warning and "--detector semantic" in warning
    )
    [warning] = stack_behind(comparison, ["lexical", "semantic"], "its own predictions may serve better")
    assert warning.endswith("may not help; its own predictions may serve better")  # stack fit's wording
    comparison["stack (CV)"]["mean"]["iou"] = 0.57
    assert stack_behind(comparison, ["lexical", "semantic"]) == []
    # a lead that rounds away: "0.4888 beat the stack (0.4888)" was said (an audit)
    comparison["stack (CV)"]["mean"]["iou"], comparison["semantic"]["mean"]["iou"] = 0.4888003, 0.4888151
    assert stack_behind(comparison, ["lexical", "semantic"]) == []


def test_a_failed_member_is_the_users_choice_in_its_main_job_and_refused_by_another_stack(tmp_path):
    """--allow-failures lets the main job go on; a stack fitted later on that member must not.

    The member's own item ledger lists its failed items: a stack fitted by hand on the
    member's folder would learn them as "nothing flagged".
    """
    from mushroom.combine.stack import Member, fit_stack

    out = tmp_path / "run"
    console = RichReporter(Console(file=open(tmp_path / "log.txt", "w"), width=120))

    def job(base_url: str, allow_failures: bool = False) -> None:
        llm = {"backend": {"kind": "openai", "base_url": base_url, "model": "m"}}
        run_main_stack(
            out=out,
            members=("lexical", "llm"),
            options={"llm": llm},
            langs=["en"],
            quiet=True,
            reporter=console,
            allow_failures=allow_failures,
        )

    dead = "http://127.0.0.1:9/v1"
    job(dead, allow_failures=True)
    assert check_file(out / "mushroom.en-tst.v1.jsonl", load_split("test", ["en"])["en"]).ok
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items_failed"] == 154 + 50 and summary["allow_failures"] is True
    # the stack's val table is built on the member's empty predictions: scores.md says so, as a
    # detector's does of its own failed items (it said nothing)
    table = (out / "val" / "scores.md").read_text()
    assert "50 items failed in a member (llm: en 50" in table and "not the stack's alone" in table, table
    with pytest.raises(
        MushroomError,
        match=r"member 'llm': .*50 of its items are listed as failed in its run \(.*items/en.jsonl\)",
    ):
        fit_stack([Member("llm", out / "members" / "llm")], {"en": load_split("val", ["en"])["en"]})
    # the server still dead and no --allow-failures: the job stops, and the stack files of the
    # last invocation (built on empty llm predictions) go with its submission.zip
    with pytest.raises(MushroomError, match="items failed"):
        job(dead)
    assert not (out / "submission.zip").exists() and not (out / "mushroom.en-tst.v1.jsonl").exists()
    assert not (out / "val" / "mushroom.en-val.v2.jsonl").exists()
    # the server back: the same job retries them; the answers flag nothing (empty predictions),
    # and the failures.jsonl of the last invocation, rewritten only when the job finishes, is
    # no reason to stop its stack
    with FakeServer({}) as server:
        job(server.url)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items_failed"] == 0 and (out / "submission.zip").exists()
    assert fit_stack([Member("llm", out / "members" / "llm")], {"en": load_split("val", ["en"])["en"]})
