import json
import subprocess
import zipfile

import pytest
from conftest import ROOT
from rich.console import Console

from mushroom.check import check_file
from mushroom.data import load_split
from mushroom.errors import MushroomError
from mushroom.mainjob import run_main


def test_main_job_on_a_slice_writes_checked_files_scores_and_resumes(tmp_path):
    out = tmp_path / "run"
    console = Console(file=open(tmp_path / "log.txt", "w"), width=120)
    run_main(out=out, langs=["en", "zh", "eu"], quiet=True, console=console)
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
    config = json.loads((out / "config.json").read_text())
    assert (
        config["config"]["detector"] == "lexical" and config["config"]["options"]["calibration"] == "default"
    )
    versions = json.loads((out / "versions.json").read_text())
    assert versions["packages"]["numpy"]
    # resume: a file already written is kept as it is, a missing one is redone
    kept = (out / "mushroom.en-tst.v1.jsonl").stat().st_mtime_ns
    (out / "mushroom.zh-tst.v1.jsonl").unlink()
    run_main(out=out, langs=["en", "zh", "eu"], quiet=True, console=console)
    assert (out / "mushroom.en-tst.v1.jsonl").stat().st_mtime_ns == kept
    assert check_file(out / "mushroom.zh-tst.v1.jsonl", test["zh"]).ok
    with pytest.raises(MushroomError, match="another config"):
        run_main(out=out, langs=["en", "zh", "eu"], options={"threshold": 0.3}, quiet=True, console=console)


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
