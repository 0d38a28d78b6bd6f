"""Every registered detector, through the CLI, on a few val items: the contract of detectors/base.py.

Each must: exit 0; write a checked prediction file; leave one ok ItemResult per item in the
ledger; sum its per-item counters into stats.json; and, when it calls a model, record every
call as a RawRecord that `--backend replay` answers from with the same predictions.
"""

import json
import subprocess
import sys

import pytest
from conftest import ROOT, write_lines
from tiny_models import tiny_bert_classifier, tiny_llama, word_tokenizer

from mushroom.backends.rawlog import RawRecord
from mushroom.data.splits import load_split
from mushroom.detectors import available
from mushroom.detectors.base import ItemResult
from mushroom.evaluation.check import check_file

ITEMS = load_split("val", ["en"])["en"][:3]
WORDS = ["[PAD]", "[UNK]", "</s>", "Yes", "No", "yes", "no", ":", "user", "assistant", "system", "the", "a"]


def _llm(tmp):
    rows = []
    for it in ITEMS:
        spans = [{"text": it.model_output_text[s:e], "probability": 0.9} for s, e in it.hard_labels]
        rows.append({"id": it.id, "response": json.dumps({"incorrect_spans": spans})})
    return [
        "-o",
        f"backend={json.dumps({'kind': 'replay', 'responses': str(write_lines(tmp / 'r.jsonl', rows))})}",
    ]


def _chain(tmp):
    rows = []
    for it in ITEMS:
        first = it.model_output_text.split(" ")[0]
        rows.append(
            {
                "id": f"{it.id}#decompose",
                "response": json.dumps({"claims": [{"claim": "c", "substring": first}]}),
            }
        )
        verdict = {"claim": 1, "supported": False, "incorrect_spans": [{"text": first, "probability": 0.8}]}
        rows.append({"id": f"{it.id}#verify", "response": json.dumps({"verdicts": [verdict]})})
    return [
        "-o",
        f"backend={json.dumps({'kind': 'replay', 'responses': str(write_lines(tmp / 'r.jsonl', rows))})}",
    ]


def _nli(tmp):
    folder = tmp / "nli-model"
    tiny_bert_classifier(len(WORDS), {0: "contradiction", 1: "entailment", 2: "neutral"}).save_pretrained(
        folder
    )
    word_tokenizer(WORDS, pre_tokenizer="whitespace", model_max_length=128).save_pretrained(folder)
    return ["-o", f"model={folder}"]


def _pyes(tmp):
    folder = tmp / "lm"
    tiny_llama(len(WORDS), 2048).save_pretrained(folder)
    word_tokenizer(WORDS, pre_tokenizer="whitespace").save_pretrained(folder)
    models = [{"kind": "transformers", "model": str(folder), "device": "cpu"}]
    return ["-o", f"models={json.dumps(models)}", "-o", "scoring=top_logprobs"]


SETUPS = {
    "lexical": lambda tmp: [],
    "semantic": lambda tmp: [],
    "llm": _llm,
    "chain": _chain,
    "nli": _nli,
    "pyes": _pyes,
}


def test_every_registered_detector_has_a_contract_setup():
    assert set(available()) == set(SETUPS)


def run_detect(out, name, options):
    cmd = [
        sys.executable,
        "-m",
        "mushroom",
        "detect",
        "--split",
        "val",
        "--lang",
        "en",
        "--limit",
        str(len(ITEMS)),
    ]
    cmd += ["--detector", name, "--out", str(out), "--quiet", *options]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_detector_contract_through_the_cli(tmp_path, name):
    out = tmp_path / "run"
    proc = run_detect(out, name, SETUPS[name](tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    folder = out / "predictions"
    pred_file = folder / "mushroom.en-val.v2.jsonl"
    assert check_file(pred_file, ITEMS).ok
    ledger = [
        ItemResult.model_validate_json(line)
        for line in (folder / "items" / "en.jsonl").read_text().splitlines()
    ]
    assert sorted(r.id for r in ledger) == sorted(it.id for it in ITEMS) and {r.status for r in ledger} == {
        "ok"
    }
    stats = json.loads((folder / "stats.json").read_text())
    assert stats["en"]["items.ok"] == len(ITEMS) and stats["all"]["items.ok"] == len(ITEMS)
    for key in {k for r in ledger for k in r.stats}:
        assert stats["all"][key] == sum(r.stats.get(key, 0) for r in ledger)
    summary = json.loads((out / "summary.json").read_text())
    assert (
        summary["items_failed"] == 0 and (out / "config.json").is_file() and (out / "versions.json").is_file()
    )
    raw_path = folder / "raw" / "en.raw.jsonl"
    if name in ("lexical", "semantic", "nli"):
        assert not raw_path.exists()
        return
    raw = [RawRecord.model_validate_json(line) for line in raw_path.read_text().splitlines()]
    assert raw and {r.id for r in raw} == {it.id for it in ITEMS} and all(r.error is None for r in raw)
    # a second run on the same folder sends nothing and changes nothing
    before = pred_file.read_bytes()
    proc = run_detect(out, name, SETUPS[name](tmp_path))
    assert proc.returncode == 0 and pred_file.read_bytes() == before
    assert len(raw_path.read_text().splitlines()) == len(raw)
    # the raw file replays: the same predictions with no model
    replay = {"kind": "replay", "responses": str(raw_path)}
    options = (
        ["-o", f"models={json.dumps([replay])}"]
        if name == "pyes"
        else ["-o", f"backend={json.dumps(replay)}"]
    )
    if name == "pyes":
        options += ["-o", "scoring=top_logprobs"]
    proc = run_detect(tmp_path / "replayed", name, options)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (tmp_path / "replayed" / "predictions" / "mushroom.en-val.v2.jsonl").read_bytes() == before
