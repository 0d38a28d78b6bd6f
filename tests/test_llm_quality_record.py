"""The recorded LLM run in benchmarks/records/llm_quality replays to the live run's counters.

The record is what a reader of the README's LLM table can check without a model: every
request and reply of a live run with the model of record, gzipped. Replaying the English
items of the `llm` system through the run service must give back, counter for counter, what
the parser counted live; a change to the parser or the vote that moves them shows up here.
"""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from mushroom.backends.rawlog import RawRecord
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.runs.reporter import PlainReporter
from mushroom.runs.service import RunService

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "benchmarks" / "records" / "llm_quality"


def manifest() -> dict:
    return json.loads((RECORD / "manifest.json").read_text())


def test_the_record_names_its_model_and_holds_every_request():
    m = manifest()
    assert m["model"] and m["where"] and m["command"].startswith("python benchmarks/llm_quality.py")
    with gzip.open(RECORD / "llm.raw.jsonl.gz", "rt", encoding="utf-8") as f:
        records = [RawRecord.model_validate_json(line) for line in f if line.strip()]
    live = m["systems"]["llm"]["counters"]["all"]
    # a sitting stopped mid-item leaves that item's earlier lines, and the resumed one adds its
    # own (from the response cache): one distinct request per (key, temperature) is counted live
    assert len({(r.key, r.temperature) for r in records}) == live["llm.requests"]
    assert {r.model for r in records} == {m["model"]}
    assert all(r.messages for r in records)  # the prompt as sent is kept with each reply


def test_replaying_english_gives_the_live_counters(tmp_path):
    m = manifest()
    responses = tmp_path / "llm.raw.jsonl"
    with gzip.open(RECORD / "llm.raw.jsonl.gz", "rt", encoding="utf-8") as f:
        responses.write_text(f.read(), encoding="utf-8")
    options = dict(m["systems"]["llm"]["options"])
    options["backend"] = {"kind": "replay", "responses": str(responses)}
    det = build("llm", options)
    count = dict(part.partition(":")[::2] for part in m["langs_spec"].split(","))["en"]
    items = load_split("val", ["en"])["en"][: int(count or m["limit"])]
    service = RunService(tmp_path / "run", {"test": "replay"}, PlainReporter(io.StringIO()), quiet=True)
    out = service.detect_split(det, "val", tmp_path / "run" / "val", ["en"], data={"en": items})
    got = out.stats["en"]
    # counters added after the record was made (what shares of bad replies are of) are not in it,
    # and which items fail follows a newer reading (a reply naming only text not in the answer
    # is no vote): every counter of the replies themselves is the live run's
    assert got["llm.replies"] == got["llm.requests"]  # one sample each, none failed
    live = m["systems"]["llm"]["counters"]["en"]
    assert _without(got, NEWER | POLICY) == _without(live, POLICY)
    # every request is accounted for by the parser: read, repaired or counted as unreadable
    assert got["llm.requests"] == 3 * len(items)
    assert live.get("items.failed", 0) == 0  # every English item had a reply that was not cut off
    # now echoes fail, and each such item is counted as failing for that reason alone
    assert got["items.failed"] == got["llm.failed_named_elsewhere"] == 27


NEWER = {"llm.replies", "chain.replies", "pyes.answers", "llm.lost_replies", "llm.failed_named_elsewhere"}
POLICY = {"items.failed", "items.ok"}


def _without(counters: dict, names: set) -> dict:
    return {k: v for k, v in counters.items() if k not in names}


def test_the_pyes_row_names_its_model_and_replays_english_to_the_live_counters(tmp_path):
    m = manifest()
    pyes = m["systems"]["pyes"]
    assert pyes["model"] == "gemma3-270m" and "transformers" in pyes["where"]
    responses = tmp_path / "pyes.raw.jsonl"
    with gzip.open(RECORD / "pyes.raw.jsonl.gz", "rt", encoding="utf-8") as f:
        responses.write_text(f.read(), encoding="utf-8")
    records = [RawRecord.model_validate_json(line) for line in responses.read_text().splitlines() if line]
    assert {r.model for r in records} == {"gemma3-270m"} and {r.call for r in records} == {"loglikelihood"}
    assert len({r.key for r in records}) == pyes["counters"]["all"]["pyes.requests"]
    options = {**pyes["options"], "models": [{"kind": "replay", "responses": str(responses)}]}
    det = build("pyes", options)
    count = dict(part.partition(":")[::2] for part in m["langs_spec"].split(","))["en"]
    items = load_split("val", ["en"])["en"][: int(count or m["limit"])]
    service = RunService(tmp_path / "run", {"test": "replay"}, PlainReporter(io.StringIO()), quiet=True)
    out = service.detect_split(det, "val", tmp_path / "run" / "val", ["en"], data={"en": items})
    got = out.stats["en"]
    assert got["pyes.answers"] == got["pyes.requests"] // 2  # P(yes) and P(no): two calls an answer
    assert _without(got, NEWER) == pyes["counters"]["en"]
    assert got["pyes.unusable"] == 0  # every piece was scored: P(yes) and P(no)


@pytest.mark.slow
def test_the_benchmark_replays_with_no_model(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/llm_quality.py",
            "--replay",
            "--systems",
            "llm,pyes,chain",  # every recorded system: the chain's counters were not compared
            "--work",
            str(tmp_path / "w"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # one German item's three replies were all cut off at max_tokens, and 50 items' replies
    # named only the prompt's examples (no vote since the record was made): said, not hidden
    assert (
        "note: items failed in the replay (llm: 51, the first with: the reply named only text" in proc.stderr
    )
    lines = proc.stdout.strip().splitlines()
    # the replies read the same; which items fail is said as the newer policy's
    assert (
        "replayed counters equal the live run's: yes (read under a newer policy: llm items.failed 1 -> 51"
        in proc.stdout
    )
    assert (
        lines[-1].startswith("llm IoU ") and "; stack IoU " in lines[-1] and "; stack+llm IoU " in lines[-1]
    )
    # the stack with a weak member is within noise of the stack without it: the paired interval
    # of IoU reaches zero (the stack leaves such a member out, nested in the folds)
    for name in ("llm", "pyes"):
        row = next(line for line in lines if line.startswith(f"stack+{name} - stack, IoU paired"))
        low, high = (float(v) for v in row.split("[")[1].split("]")[0].split(","))
        assert low <= 0 <= high, row


def _script():
    import importlib.util
    import sys

    # the script imports its sibling `_args`, as `python benchmarks/llm_quality.py` finds it
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("llm_quality", ROOT / "benchmarks" / "llm_quality.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_the_scripts_advice_names_its_own_options():
    """It told a user of the script to give `-o max_tokens=N` and a new folder: detect's words."""
    from mushroom.errors import CUT_OFF, retry_advice

    script = _script()
    advice = script.script_advice(retry_advice([f"{CUT_OFF} (64) before it named a span: raise max_tokens"]))
    assert "--max-tokens N" in advice and "with another --work folder" in advice, advice
    assert "-o " not in advice and "new folder" not in advice
    from mushroom.errors import SLOWER

    slow = script.script_advice(retry_advice([f"timed out after 60 s: {SLOWER}", "HTTP 500"]))
    assert "-o " not in slow, slow


def test_the_chains_counter_rows_are_its_stages_with_what_each_lost():
    """A `chain` row counted the stages' requests again (30 of 15 + 15) with zeros, and the
    claims and spans the answer did not hold showed nowhere."""
    counters = json.loads((RECORD / "manifest.json").read_text())["systems"]["chain"]["counters"]["all"]
    rows = [r.split() for r in _script().counter_rows("chain", counters)]
    assert [r[1] for r in rows] == ["decompose", "verify"]
    lost = {r[1]: int(r[-2]) for r in rows}
    assert lost == {
        "decompose": counters["chain.claims_not_in_answer"],
        "verify": counters["chain.spans_not_located"],
    }
    assert sum(int(r[2]) for r in rows) == counters["chain.requests"]


def test_the_policy_explains_only_the_llms_items_that_failed_for_it():
    """The check exempted items.failed for every system and cause: a chain that failed 5 more
    items read "yes" (a review)."""
    explains = _script().policy_explains
    old = {"all": {"items.failed": 1, "items.ok": 89}}
    new = {"all": {"items.failed": 51, "items.ok": 39, "llm.failed_named_elsewhere": 50}}
    assert explains(new, old)
    assert not explains({"all": {**new["all"], "llm.failed_named_elsewhere": 49}}, old)  # one unexplained
    assert not explains({"all": {"items.failed": 6, "items.ok": 84}}, old)  # none of them this policy's
