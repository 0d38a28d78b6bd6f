"""Every LLM stage end to end with a real model: SmolLM2-135M-Instruct, on 3 English val items.

Through the transformers backend (`--model smollm2`, the registry name) and through a real
OpenAI-compatible server (llama-cpp-python's, started here on 127.0.0.1). The model is tiny,
so what is asserted is the pipeline, not the quality: the accounting adds up per stage,
predictions are valid files, every call is a raw record, and a re-run sends nothing.
Marked `real_model`; skipped, saying why, only when the model (or the server package) cannot
be had.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT
from real_models import LlamaServer, llama_server_missing, smollm2_gguf

from mushroom.backends.rawlog import RawRecord
from mushroom.data.splits import load_split
from mushroom.evaluation.check import check_file

pytestmark = pytest.mark.real_model
N = 2
ITEMS = load_split("val", ["en"])["en"][:N]


@pytest.fixture(scope="module")
def smollm2():
    path, why = smollm2_gguf()
    if path is None:
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def server(smollm2):
    missing = llama_server_missing(smollm2)
    if missing:
        pytest.skip(missing)
    with LlamaServer(smollm2) as srv:
        yield srv


def mushroom(*args, timeout=900):
    proc = subprocess.run(
        [sys.executable, "-m", "mushroom", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )
    return proc


def backend_options(kind, server=None):
    if kind == "transformers":
        return {"kind": "transformers", "model": "smollm2", "device": "cpu"}
    return {"kind": "openai", "model": server.alias, "base_url": server.url}


# what a failed item of a weak model's replies says (no call failed)
MODEL_FAILURES = ("named only text that is not in the answer", "cut off", "could not be read", "was empty")

STAGE_OPTIONS = {
    "llm": ["-o", "max_tokens=160", "-o", "prompt=single_zero_shot", "-o", "max_context_chars=1500"],
    "chain": ["-o", "max_tokens=64", "-o", "max_context_chars=1500"],
    "pyes": ["-o", "max_context_chars=1500"],
}


def assert_accounting(name: str, stats: dict[str, int]) -> None:
    if name == "llm":
        parts = sum(stats.get(f"llm.{k}", 0) for k in ("parsed", "repaired", "unparseable", "backend_errors"))
        assert stats["llm.requests"] == N and parts == N, stats
        located = sum(v for k, v in stats.items() if k.startswith("llm.located_"))
        assert located + stats.get("llm.lost", 0) == stats.get("llm.claims", 0), stats
    elif name == "chain":
        for stage in ("decompose", "verify", "decompose.retry", "verify.retry"):
            parts = sum(
                stats.get(f"{stage}.{k}", 0)
                for k in ("ok", "invalid_json", "wrong_shape", "empty", "cut_empty", "backend_errors")
            )
            assert stats.get(f"{stage}.requests", 0) == parts, (stage, stats)
        assert stats["decompose.requests"] == N, stats
    elif name == "pyes":
        assert stats["pyes.requests"] == 2 * stats["pyes.pieces"] and stats["pyes.pieces"] >= N, stats
        assert stats.get("pyes.backend_errors", 0) == 0, stats


@pytest.mark.parametrize("kind", ["transformers", "server"])
@pytest.mark.parametrize("name", ["llm", "chain", "pyes"])
def test_detector_stage_with_a_real_model(tmp_path, request, smollm2, kind, name):
    server = request.getfixturevalue("server") if kind == "server" else None
    backend = backend_options(kind, server)
    key = "models" if name == "pyes" else "backend"
    value = [backend] if name == "pyes" else backend
    args = ["detect", "--split", "val", "--lang", "en", "--limit", str(N), "--detector", name, "--quiet"]
    # a 135M model may fail an item by its replies alone (one that names only text the answer
    # lacks, or is cut off): written empty and listed, what is checked is that each is said
    args += ["-o", f"{key}={json.dumps(value)}", *STAGE_OPTIONS[name], "--allow-failures"]
    out = tmp_path / "run"
    proc = mushroom(*args, "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    folder = out / "predictions"
    assert check_file(folder / "mushroom.en-val.v2.jsonl", ITEMS).ok
    stats = json.loads((folder / "stats.json").read_text())["all"]
    assert stats.get("items.ok", 0) + stats.get("items.failed", 0) == N, stats
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == stats.get("items.failed", 0)
    assert all(any(why in f["error"] for why in MODEL_FAILURES) for f in failures), failures
    assert_accounting(name, stats)
    raw = [
        RawRecord.model_validate_json(line)
        for line in (folder / "raw" / "en.raw.jsonl").read_text().splitlines()
    ]
    assert raw and all(r.error is None for r in raw) and {r.id for r in raw} == {it.id for it in ITEMS}
    calls = Counter(r.stage.split(".")[0] for r in raw)
    if name == "llm":
        assert calls == {"llm": N}
    # a re-run on the same folder sends nothing: a failed item is read again from the cache
    proc = mushroom(*args, "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = (folder / "raw" / "en.raw.jsonl").read_text().splitlines()
    assert all(RawRecord.model_validate_json(line).cached for line in lines[len(raw) :])
    assert len(lines) == len(raw) or stats.get("items.failed", 0)
    # a new folder sharing the response cache: every call is answered from the cache
    if name != "pyes":
        again = tmp_path / "again"
        cache = folder / "raw" / ("responses.cache.jsonl" if name == "llm" else "chain.cache.jsonl")
        if name == "llm":
            proc = mushroom(*args, "-o", f"cache_path={cache}", "--out", str(again))
            assert proc.returncode == 0, proc.stderr[-2000:]
            raw2 = [
                RawRecord.model_validate_json(line)
                for line in (again / "predictions" / "raw" / "en.raw.jsonl").read_text().splitlines()
            ]
            assert raw2 and all(r.cached for r in raw2)


@pytest.mark.parametrize("kind", ["transformers", "server"])
def test_context_stage_with_a_real_model(tmp_path, request, smollm2, kind):
    server = request.getfixturevalue("server") if kind == "server" else None
    backend = backend_options(kind, server)
    args = ["contexts", "--split", "val", "--lang", "en", "--limit", str(N), "--backend", backend["kind"]]
    args += [
        "--model",
        backend["model"],
        "--source",
        "gen",
        "--context-dir",
        str(tmp_path),
        "--max-tokens",
        "48",
    ]
    if server is not None:
        args += ["--base-url", server.url]
    proc = mushroom(*args)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = (tmp_path / "val.en.gen.jsonl").read_text().splitlines()
    assert len(lines) == N and all(json.loads(line)["context"].strip() for line in lines)
    raw_path = tmp_path / ".raw" / "val.en.gen.jsonl"
    raw = [RawRecord.model_validate_json(line) for line in raw_path.read_text().splitlines()]
    assert len(raw) == N and {r.stage for r in raw} == {"context"} and all(r.texts for r in raw)
    proc = mushroom(*args)  # done before: nothing generated, nothing sent
    assert proc.returncode == 0 and len(raw_path.read_text().splitlines()) == N
