"""SmolLM2-135M through the transformers backend: pull, load, generation speed, valid JSON share.

Usage: python benchmarks/transformers_smollm2.py [--limit 5] [--max-tokens 192] [--batch-size 5]
       [--prompt single_few_shot] [--show]

Prints: pull time cold (into a fresh temporary MUSHROOM_CACHE_DIR) and warm (the same call
again), backend load time from the GGUF (first load, which also saves a converted copy) and
from that copy, and for the `llm` detector's prompt (its default, few-shot; no context) on
the first English val items, generation seconds per item and the share of responses that are
valid JSON of the span schema, with the schema constraint (llguidance) and without it.
Then P(" Yes") / P(" No") by `loglikelihood` for the same items. CPU timings on a shared
machine vary by a factor of two from run to run; compare rows of one run.
"""

import argparse
import json
import math
import os
import tempfile
import time

from _args import positive
from pydantic import ValidationError

from mushroom.backends.base import BackendConfig, LoglikelihoodRequest, Message
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.parsing.parser import SpanList, parse_response


def valid_json(text: str) -> bool:
    try:
        SpanList.model_validate(json.loads(text))
    except (json.JSONDecodeError, ValidationError):
        return False
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--limit", type=positive, default=5)
    ap.add_argument("--max-tokens", type=positive, default=192)
    ap.add_argument("--prompt", default="single_few_shot", help="prompt file of the llm detector")
    ap.add_argument("--batch-size", type=positive, default=5)
    ap.add_argument("--show", action="store_true", help="print every response")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as cache:
        os.environ["MUSHROOM_CACHE_DIR"] = cache
        from mushroom.models import zoo

        t = time.perf_counter()
        zoo.pull("smollm2")
        cold = time.perf_counter() - t
        t = time.perf_counter()
        zoo.pull("smollm2")
        warm = time.perf_counter() - t
        print(f"pull smollm2: cold {cold:.1f} s, warm (verified cache hit) {warm:.2f} s")

        from mushroom.backends.hf import TransformersBackend

        config = BackendConfig(kind="transformers", model="smollm2", device="cpu", batch_size=args.batch_size)
        t = time.perf_counter()
        TransformersBackend(config)
        first = time.perf_counter() - t
        t = time.perf_counter()
        backend = TransformersBackend(config)
        print(
            f"load: first (GGUF, saves a converted copy) {first:.1f} s, later (converted) {time.perf_counter() - t:.1f} s"
        )

    items = load_split("val", ["en"])["en"][: args.limit]
    options = {"backend": {"kind": "transformers", "model": "smollm2"}, "max_tokens": args.max_tokens}
    detector = build("llm", {**options, "prompt": args.prompt, "cache": False})
    requests = detector.requests(items, {})
    prompt_tokens = sum(len(backend._prompt_ids(r.messages)) for r in requests) / len(requests)
    print(
        f"{len(items)} English val items, prompt {args.prompt} ({prompt_tokens:.0f} tokens, no context), "
        f"max_tokens {args.max_tokens}, batch size {args.batch_size}"
    )
    print(f"{'mode':<14} {'s/item':>7} {'valid JSON':>11} {'parsed':>7} {'tokens/item':>12} {'spans':>6}")
    for constrained in (True, False):
        backend.config = config.model_copy(update={"structured_output": constrained})
        t = time.perf_counter()
        gens = backend.generate(requests)
        per_item = (time.perf_counter() - t) / len(items)
        texts = [g.texts[0] for g in gens]
        valid = sum(valid_json(x) for x in texts)
        results = [parse_response(it.model_output_text, x, 1.0) for it, x in zip(items, texts)]
        parsed = sum(r.parsed for r in results)
        tokens = sum(g.usage.get("completion_tokens", 0) for g in gens) / len(items)
        spans = sum(len(r.spans) for r in results)
        name = "constrained" if constrained else "free"
        print(
            f"{name:<14} {per_item:>7.1f} {valid:>5}/{len(texts):<5} {parsed:>3}/{len(texts):<3} {tokens:>12.0f} {spans:>6}"
        )
        if args.show:
            for it, x in zip(items, texts):
                print(f"  [{it.id}] {x!r}")
    if backend.warnings:
        print("warnings:", *backend.warnings, sep="\n  ")

    scores = []
    for r in requests:
        msgs = [*r.messages[:-1], Message(role="user", content=r.messages[-1].content)]
        for label in (" Yes", " No", "Yes", "No"):
            scores.append(LoglikelihoodRequest(key=f"{r.key}|{label}", messages=msgs, continuation=label))
    t = time.perf_counter()
    out = backend.loglikelihood(scores)
    secs = time.perf_counter() - t
    finite = sum(o.logprob is not None and math.isfinite(o.logprob) for o in out)
    print(f"loglikelihood: {len(out)} scores in {secs:.1f} s, {finite} finite")
    for k in range(0, min(len(out), 8), 4):
        row = ", ".join(
            f"{s.continuation!r}: {o.logprob:.2f}" for s, o in zip(scores[k : k + 4], out[k : k + 4])
        )
        print(f"  {scores[k].key.split('|')[0]}: {row}")


if __name__ == "__main__":
    main()
