"""Requests/s through the openai backend at several concurrencies against a real server.

Starts llama-cpp-python's server with SmolLM2-135M on 127.0.0.1 (one thread unless told
otherwise), or uses --base-url, and sends the same small prompt N times at each concurrency.
Prints requests/s and the completion tokens/s seen by the client next to the server's own
rate: llama.cpp's `timings.predicted_per_second` where the server reports it, else the
completion tokens/s of single requests (usage / latency at concurrency 1).

    python benchmarks/server_throughput.py --requests 6 --max-tokens 32 --levels 1,2,4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path

from _args import positive, positive_list

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from real_models import LlamaServer, llama_server_missing, smollm2_gguf  # noqa: E402

from mushroom.backends.base import GenerationRequest, Message  # noqa: E402
from mushroom.backends.config import OpenAIConfig  # noqa: E402
from mushroom.backends.openai_compat import OpenAIBackend  # noqa: E402

PROMPT = "Name three rivers in Europe, one per line."


class TimedBackend(OpenAIBackend):
    """Keeps each request's latency and the server's `timings` block (llama.cpp's server)."""

    def __init__(self, config):
        super().__init__(config)
        self.server_rates: list[float] = []
        self.latencies: list[float] = []
        self._stats_lock = threading.Lock()

    def parse(self, data):
        timings = data.get("timings") or {}
        if isinstance(timings.get("predicted_per_second"), int | float):
            with self._stats_lock:
                self.server_rates.append(float(timings["predicted_per_second"]))
        return super().parse(data)

    def _one(self, req):
        t0 = time.perf_counter()
        gen = super()._one(req)
        with self._stats_lock:
            self.latencies.append(time.perf_counter() - t0)
        return gen


def measure(url: str, model: str, level: int, n: int, max_tokens: int) -> dict:
    backend = TimedBackend(
        OpenAIConfig(model=model, base_url=url, concurrency=level, structured_output="none", timeout_s=900)
    )
    requests = [
        GenerationRequest(key=str(i), messages=[Message(role="user", content=PROMPT)], max_tokens=max_tokens)
        for i in range(n)
    ]
    t0 = time.perf_counter()
    out = backend.generate(requests)
    wall = time.perf_counter() - t0
    backend.close()
    tokens = sum(g.usage.get("completion_tokens", 0) for g in out)
    single = [g.usage.get("completion_tokens", 0) / lat for g, lat in zip(out, backend.latencies) if lat > 0]
    return {
        "level": level,
        "n": n,
        "errors": sum(g.error is not None for g in out),
        "wall": wall,
        "req_s": n / wall,
        "tok_s": tokens / wall,
        "latency": statistics.mean(backend.latencies),
        "server": statistics.mean(backend.server_rates) if backend.server_rates else None,
        "per_request_tok_s": statistics.mean(single) if single else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", help="use this server instead of starting llama-cpp-python's")
    parser.add_argument("--model", default="smollm2", help="served model name (with --base-url)")
    parser.add_argument("--requests", type=positive, default=6)
    parser.add_argument("--max-tokens", type=positive, default=32)
    parser.add_argument("--levels", type=positive_list, default="1,2,4")
    parser.add_argument("--threads", type=positive, default=1, help="server threads (started server only)")
    args = parser.parse_args()
    levels = args.levels

    server = None
    if args.base_url:
        url, model = args.base_url, args.model
    else:
        path, why = smollm2_gguf()
        missing = llama_server_missing(path) if path is not None else ""
        if missing or path is None:
            sys.exit(f"cannot start a server: {missing or why}")
        server = LlamaServer(path)
        server.args[server.args.index("--n_threads") + 1] = str(args.threads)
        t0 = time.perf_counter()
        server.start()
        print(
            f"llama-cpp-python server with {path.name}, {args.threads} thread(s), up in "
            f"{time.perf_counter() - t0:.1f} s"
        )
        url, model = server.url, server.alias
    try:
        measure(url, model, 1, 1, args.max_tokens)  # warm-up: load, first prompt
        rows = [measure(url, model, level, args.requests, args.max_tokens) for level in levels]
    finally:
        if server is not None:
            server.stop()

    print(f"{args.requests} requests per level, same prompt, max_tokens {args.max_tokens}, temperature 0")
    print(
        f"{'conc':>4} {'errors':>6} {'wall s':>7} {'req/s':>6} {'tok/s':>6} {'lat s':>6} {'server tok/s':>13}"
    )
    base = rows[0]
    for r in rows:
        server_rate = r["server"] if r["server"] is not None else base["per_request_tok_s"]
        tag = "" if r["server"] is not None else " (usage/latency at conc 1)"
        print(
            f"{r['level']:>4} {r['errors']:>6} {r['wall']:>7.2f} {r['req_s']:>6.2f} {r['tok_s']:>6.1f} "
            f"{r['latency']:>6.2f} {server_rate:>13.1f}{tag}"
        )


if __name__ == "__main__":
    main()
