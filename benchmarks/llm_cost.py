"""Cost per item of the llm detector: requests, prompt and completion characters, cache hits.

Usage: python benchmarks/llm_cost.py [--lang en]

An in-process backend answers every request with the gold spans as JSON (no model), so the
numbers are the detector's own overhead: how many requests it sends and how large its
prompts are for the single prompt and each temperature-ensemble size, and how many calls a
second run of the same config takes from the disk cache (all of them).
"""

import argparse
import json
import tempfile
from pathlib import Path

from _args import val_lang

from mushroom.backends.base import Backend, BackendConfig, Generation
from mushroom.backends.cache import CachedBackend, ResponseCache
from mushroom.data.contexts import load_contexts
from mushroom.data.splits import load_split
from mushroom.detectors import build


class OracleBackend(Backend):
    kind = "oracle"

    def __init__(self, answers):
        super().__init__(BackendConfig(kind="replay", model="oracle"))
        self.answers = answers
        self.requests = 0
        self.prompt_chars = 0
        self.completion_chars = 0

    def generate(self, requests, on_result=None):
        out = []
        for i, req in enumerate(requests):
            self.requests += 1
            self.prompt_chars += sum(len(m.content) for m in req.messages)
            texts = [self.answers[req.key]] * req.n
            self.completion_chars += sum(len(t) for t in texts)
            gen = Generation(texts=texts)
            out.append(gen)
            if on_result:
                on_result(i, gen)
        return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lang", type=val_lang, default="en")
    args = parser.parse_args()
    items = load_split("val", [args.lang])[args.lang]
    ctx = load_contexts("val", args.lang).by_id
    answers = {
        it.id: json.dumps(
            {
                "incorrect_spans": [
                    {"text": it.model_output_text[s:e], "probability": 0.9} for s, e in it.hard_labels
                ]
            }
        )
        for it in items
    }
    print(f"{len(items)} {args.lang} val items, contexts perplexity-sonar-pro + deepseek-r1")
    print(
        f"{'setup':34s} {'req/item':>8s} {'prompt ch/item':>14s} {'compl ch/item':>13s} {'2nd run hits':>12s}"
    )
    for prompt in ("single_zero_shot", "single_few_shot"):
        for temps in ([0.0], [0.05, 0.1, 0.2], [0.05, 0.1, 0.2, 0.3, 0.4]):
            with tempfile.TemporaryDirectory() as tmp:
                oracle = OracleBackend(answers)
                cache_path = Path(tmp) / "cache.jsonl"
                det = build("llm", {"prompt": prompt, "temperatures": temps})
                det._backend = CachedBackend(oracle, ResponseCache(cache_path))
                det.detect(items, ctx)
                requests, pc, cc = oracle.requests, oracle.prompt_chars, oracle.completion_chars
                again = build("llm", {"prompt": prompt, "temperatures": temps})
                again._backend = CachedBackend(oracle, ResponseCache(cache_path))
                again.detect(items, ctx)
                hits = again._backend.hits
            n = len(items)
            name = f"{prompt} x{len(temps)} temperature(s)"
            print(f"{name:34s} {requests / n:8.1f} {pc / n:14.0f} {cc / n:13.0f} {hits:>7d}/{requests}")


if __name__ == "__main__":
    main()
