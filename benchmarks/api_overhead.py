"""What one `mushroom.detect` call costs beyond the detection: ms per call on val items.

Each call checks its arguments and finds its kept detector; with the lexical detector the
detection itself is about a millisecond, so the rest shows. Prints ms per call for
`detect` in a loop and for one `detect_batch` over the same items.

    PYTHONPATH=$PWD python3 benchmarks/api_overhead.py [--items 50] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from _args import positive

import mushroom

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=positive, default=50, help="English val items")
    parser.add_argument("--rounds", type=positive, default=4, help="times over the items")
    args = parser.parse_args()
    path = ROOT / "data" / "mushroom" / "val" / "mushroom.en-val.v2.extra.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()][: args.items]
    items = [
        {"answer": r["model_output_text"], "question": r["model_input"], "contexts": [r["model_input"]]}
        for r in rows
    ]
    mushroom.detect(items[0]["answer"], items[0]["contexts"])  # the detector is built once
    calls = items * args.rounds
    t0 = time.perf_counter()
    for it in calls:
        mushroom.detect(it["answer"], it["contexts"], it["question"])
    loop = (time.perf_counter() - t0) * 1000 / len(calls)
    t0 = time.perf_counter()
    mushroom.detect_batch(calls)
    batch = (time.perf_counter() - t0) * 1000 / len(calls)
    print(f"lexical, {len(calls)} calls on {len(items)} English val items")
    print(f"detect in a loop: {loop:.2f} ms/call")
    print(f"detect_batch:     {batch:.2f} ms/item")


if __name__ == "__main__":
    main()
