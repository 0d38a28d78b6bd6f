"""What a failing server costs: wall time of real commands against loopback servers that fail.

Each case runs `python -m mushroom` as a user would, with the shipped retry settings (six
attempts a request, backoff capped at 30 s), against a scripted OpenAI-compatible server on
127.0.0.1 (tests/fake_openai_server.py):

- always 500 (vLLM out of memory): `detect` on 50 English val items, the main job
  `--detector llm --lang en --no-val` on the 154 English test items, and `run` of the four
  prompt variants of configs/variants.toml on 20 items (a backend each, one breaker trip),
  and the same against a URL nothing listens at;
- 50% flaky (each attempt fails at random with HTTP 500): `detect` on 50 items, then the
  same command again until every item is done.

    python benchmarks/failing_server.py
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _args import positive

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests")]

from fake_openai_server import FakeServer  # noqa: E402

OOM = '{"error": {"message": "CUDA out of memory. Tried to allocate 2.00 GiB"}}'
OK = '{"incorrect_spans": []}'


def run(args: list[str]) -> tuple[int, float]:
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "mushroom", *args, "--quiet"], capture_output=True, text=True, cwd=ROOT
    )
    return proc.returncode, time.perf_counter() - t0


def backend(url: str) -> list[str]:
    return ["--backend", "openai", "--base-url", url, "--model", "m", "--temperatures", "0.1"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=positive, default=50, help="val items for the detect cases")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="mushroom-failing-"))
    rows = []
    with FakeServer({"": [("status", 500, OOM)]}, retry_after=None) as server:
        out = work / "detect500"
        code, secs = run(
            ["detect", "--split", "val", "--lang", "en", "--limit", str(args.items)]
            + backend(server.url)
            + ["--out", str(out)]
        )
        failed = len((out / "failures.jsonl").read_text().splitlines())
        rows.append((f"always 500, detect {args.items} val items", code, secs, len(server.calls), failed))
        before = len(server.calls)
        out = work / "main500"
        code, secs = run(
            [
                "main-job",
                "--detector",
                "llm",
                "--lang",
                "en",
                "--no-val",
                "--out",
                str(out),
                "-o",
                "backend.kind=openai",
                "-o",
                f"backend.base_url={server.url}",
                "-o",
                "backend.model=m",
                "-o",
                "temperatures=[0.1]",
            ]
        )
        failed = sum(len(p.read_text().splitlines()) for p in out.rglob("failures.jsonl"))
        rows.append(
            (
                "always 500, main job --detector llm --lang en --no-val",
                code,
                secs,
                len(server.calls) - before,
                failed,
            )
        )
        # the four prompt variants of configs/variants.toml, each its own backend, one command
        before = len(server.calls)
        config = work / "variants.toml"
        config.write_text(
            (ROOT / "configs" / "variants.toml")
            .read_text()
            .replace('kind = "transformers"', f'kind = "openai"\nbase_url = "{server.url}"')
            .replace('model = "smollm2"', 'model = "m"')
            .replace('device = "cpu"\n', "")
        )
        out = work / "variants500"
        code, secs = run(["run", str(config), "--out", str(out), "--limit", "20"])
        failed = len((out / "failures.jsonl").read_text().splitlines())
        rows.append(("always 500, run configs/variants.toml (4 variants, 20 items)", code, secs,
                     len(server.calls) - before, failed))  # fmt: skip
        # the same against a URL nothing listens at
        dead = work / "variants-dead.toml"
        dead.write_text(config.read_text().replace(server.url, "http://127.0.0.1:9/v1"))
        out = work / "variants-dead"
        code, secs = run(["run", str(dead), "--out", str(out), "--limit", "20"])
        failed = len((out / "failures.jsonl").read_text().splitlines())
        rows.append(("dead URL, run configs/variants.toml (4 variants, 20 items)", code, secs, None, failed))
    rng = random.Random(0)
    steps = [("status", 500, OOM) if rng.random() < 0.5 else ("ok", OK) for _ in range(5000)]
    with FakeServer({"": steps}, retry_after=None) as server:
        out = work / "flaky"
        runs = []
        for _ in range(4):
            code, secs = run(
                ["detect", "--split", "val", "--lang", "en", "--limit", str(args.items)]
                + backend(server.url)
                + ["--out", str(out)]
            )
            runs.append((code, secs))
            if code == 0:
                break
        ledger = [
            json.loads(x) for x in (out / "predictions" / "items" / "en.jsonl").read_text().splitlines()
        ]
        done = sum(1 for s in {r["id"]: r["status"] for r in ledger}.values() if s == "ok")
        for k, (code, secs) in enumerate(runs, 1):
            rows.append((f"50% flaky, detect {args.items} val items, run {k}", code, secs, None, None))
    print(f"{'case':62} {'exit':>4} {'wall s':>7} {'sent':>5} {'failed':>6}")
    for case, code, secs, sent, failed in rows:
        print(
            f"{case:62} {code:>4} {secs:>7.1f} {'' if sent is None else sent:>5} "
            f"{'' if failed is None else failed:>6}"
        )
    print(f"flaky: {done} of {args.items} items done after {len(runs)} run(s)")


if __name__ == "__main__":
    main()
