import json
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT, write_lines
from fake_openai_server import FakeServer

from mushroom.backends import build_backend
from mushroom.backends.base import BackendConfig, GenerationRequest, Message
from mushroom.backends.cache import CachedBackend, ResponseCache
from mushroom.data import load_split
from mushroom.detectors import build
from mushroom.errors import MushroomError
from mushroom.parsing.parser import SpanList
from mushroom.rawlog import RawLog, RawRecord


def _req(key, text, temperature=0.0, n=1):
    return GenerationRequest(
        key=key, messages=[Message(role="user", content=text)], temperature=temperature, n=n
    )


def _openai(url, **kw):
    settings = {"timeout_s": 1.0, "max_retries": 3, **kw}
    return build_backend(BackendConfig(kind="openai", model="m", base_url=url, **settings))


def test_openai_backend_retries_429_5xx_and_timeouts(monkeypatch):
    monkeypatch.setenv("MUSHROOM_TEST_KEY", "sk-secret")
    script = {
        "A": [("status", 429), ("ok", "answer A")],
        "B": [("status", 503), ("status", 502), ("ok", "answer B")],
        "C": [("sleep", 1.5), ("ok", "answer C")],
        "D": [("status", 400)],
        "E": [("status", 500)],
    }
    with FakeServer(script) as server:
        backend = _openai(server.url, api_key_env="MUSHROOM_TEST_KEY", concurrency=3)
        seen = []
        out = backend.generate([_req(k, f"item {k}") for k in "ABCDE"], on_result=lambda i, g: seen.append(i))
        assert [g.texts for g in out[:3]] == [["answer A"], ["answer B"], ["answer C"]]
        assert out[3].error.startswith("HTTP 400")  # not retried
        assert "gave up after 4 attempts" in out[4].error
        assert sorted(seen) == [0, 1, 2, 3, 4]
        assert server.counts == {"A": 2, "B": 3, "C": 2, "D": 1, "E": 4}
        assert all(c["auth"] == "Bearer sk-secret" for c in server.calls)
        backend.close()


def test_openai_payload_carries_schema_logprobs_and_samples():
    with FakeServer({}) as server:
        backend = _openai(server.url)
        req = GenerationRequest(
            key="k",
            messages=[Message(role="user", content="x")],
            n=3,
            seed=7,
            json_schema=SpanList.model_json_schema(),
            top_logprobs=5,
        )
        out = backend.generate([req])
        body = server.calls[0]["body"]
        assert body["response_format"]["type"] == "json_schema" and body["seed"] == 7
        assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["n"] == 3
        assert len(out[0].texts) == 3 and out[0].usage["prompt_tokens"] == 10


def test_cache_never_repeats_a_call_and_resumes_after_a_kill(tmp_path):
    cache_path = tmp_path / "cache.jsonl"
    with FakeServer({"X3": [("status", 500)]}, default_text='{"incorrect_spans": []}') as server:
        requests = [_req(f"k{i}", f"item X{i}") for i in range(5)]
        backend = CachedBackend(_openai(server.url, max_retries=0), ResponseCache(cache_path))
        first = backend.generate(requests)
        assert [g.error is None for g in first] == [True, True, True, False, True]
        calls_after_first = len(server.calls)
        # simulate a kill mid-write: a truncated last line must not break the next run
        with cache_path.open("a") as f:
            f.write('{"key": "abc", "generation": {"te')
        server.script = {}
        again = CachedBackend(_openai(server.url), ResponseCache(cache_path))
        second = again.generate(requests)
        assert all(g.error is None for g in second)
        assert len(server.calls) == calls_after_first + 1  # only the failed request is made again
        assert again.hits == 4 and again.misses == 1
        keys = [json.loads(line)["key"] for line in cache_path.read_text().splitlines() if line.endswith("}")]
        assert len(keys) == len(set(keys)) == 5


def test_cache_key_depends_on_sampling_parameters(tmp_path):
    with FakeServer({}) as server:
        backend = CachedBackend(_openai(server.url), ResponseCache(tmp_path / "c.jsonl"))
        backend.generate([_req("a", "same"), _req("a", "same", temperature=0.5), _req("b", "same")])
        assert len(server.calls) == 2  # the key is the request, not the item id


def test_replay_backend_matches_ids_temperatures_and_samples(tmp_path):
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            {"id": "a", "response": "t1", "temperature": 0.1},
            {"id": "a", "response": "t2", "temperature": 0.2},
            {"id": "b", "response": "s1"},
            {"id": "b", "response": "s2"},
        ],
    )
    backend = build_backend(BackendConfig(kind="replay", responses=str(path)))
    out = backend.generate([_req("a", "", 0.2), _req("a", "", 0.1), _req("b", "", 0.0, n=2), _req("c", "")])
    assert [g.texts for g in out[:3]] == [["t2"], ["t1"], ["s1", "s2"]]
    assert "no recorded response" in out[3].error


def test_missing_library_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'", name="vllm")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    sys.modules.pop("mushroom.backends.vllm_backend", None)
    with pytest.raises(MushroomError, match=r"pip install 'mushroom\[vllm\]'"):
        build_backend({"kind": "vllm", "model": "x"})


def test_import_mushroom_pulls_no_heavy_library():
    code = "import sys, mushroom, mushroom.cli, mushroom.detectors.llm; print([m for m in ('torch','vllm','transformers') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_llm_detector_over_openai_server_with_temperature_vote(tmp_path):
    items = load_split("val", ["en"])["en"][:3]
    first = items[0]  # "Petra van Stoveren won a silver medal in the 2008 Summer Olympics ..."
    script = {
        first.model_output_text: [
            ("ok", '{"incorrect_spans": [{"text": "silver", "probability": 0.9}]}'),
            ("ok", '{"incorrect_spans": [{"text": "silver", "probability": 0.8}, {"text": "2008"}]}'),
            ("ok", "not json at all"),
        ]
    }
    with FakeServer(script) as server:
        det = build(
            "llm",
            {
                "backend": {"kind": "openai", "model": "m", "base_url": server.url, "concurrency": 1},
                "temperatures": [0.05, 0.1, 0.2],
                "prompt": "single_zero_shot",
            },
        )
        det.workdir = tmp_path
        det.raw_log = RawLog(tmp_path / "en.raw.jsonl")
        results = []
        det.run(items, {}, results.append)
        by_id = {r.id: r for r in results}
        assert sorted(by_id) == sorted(it.id for it in items) and all(r.status == "ok" for r in results)
        assert by_id[first.id].prediction.hard_labels == [
            (25, 31)
        ]  # 2 of 3 runs mark "silver"; "2008" only 1
        assert by_id[items[1].id].prediction.hard_labels == []
        total = Counter()
        for r in results:
            total.update(r.stats)
        assert total["llm.requests"] == 9 and total["llm.unparseable"] == 1
        assert total["llm.requests"] == total["llm.parsed"] + total["llm.repaired"] + total["llm.unparseable"]
        raw = [
            RawRecord.model_validate_json(line)
            for line in (tmp_path / "en.raw.jsonl").read_text().splitlines()
        ]
        assert (
            len(raw) == 9
            and {r.stage for r in raw} == {"llm"}
            and {r.temperature for r in raw} == {0.05, 0.1, 0.2}
        )
        assert (
            det.describe()["prompt_name"] == "single_zero_shot" and len(det.describe()["prompt_sha256"]) == 64
        )


def test_detect_cli_replays_recorded_responses(tmp_path):
    items = load_split("val", ["en"])["en"]
    rows = []
    for it in items:
        spans = [{"text": it.model_output_text[s:e], "probability": 0.9} for s, e in it.hard_labels]
        rows.append({"id": it.id, "response": json.dumps({"incorrect_spans": spans})})
    rows[0]["response"] = "garbage"
    responses = write_lines(tmp_path / "responses.jsonl", rows)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mushroom",
            "detect",
            "--split",
            "val",
            "--lang",
            "en",
            "--backend",
            "replay",
            "--responses",
            str(responses),
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert any(line.split() == ["│", "unparseable", "│", "1", "│"] for line in proc.stdout.splitlines())
    scores = json.loads((out / "scores.json").read_text())["en"]
    assert scores["iou"] > 0.9
    stats = json.loads((out / "predictions" / "stats.json").read_text())
    assert (
        stats["all"]["llm.requests"] == 50 and stats["all"]["llm.parsed"] + stats["all"]["llm.repaired"] == 49
    )
