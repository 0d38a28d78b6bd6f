"""Scorer throughput: mushroom's vectorised metrics vs a straightforward per-character loop.

Usage: python benchmarks/scorer_throughput.py [--repeat N]
Prints items per second for both on all val items with random predictions, and checks that
they give the same per-item values.
"""

import argparse
import time

import numpy as np
from _args import positive

from mushroom.data.splits import load_split
from mushroom.evaluation.metrics import item_cor, item_iou
from mushroom.evaluation.reference import reference_cor, reference_iou


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    cases = []
    for items in load_split("val").values():
        for it in items:
            n = len(it.model_output_text)
            pred = []
            for _ in range(int(rng.integers(0, 8))):
                a = int(rng.integers(0, n))
                pred.append((a, int(min(n, a + rng.integers(1, 40))), float(rng.random())))
            gold_soft = [(s.start, s.end, s.prob) for s in it.soft_labels]
            cases.append((it.hard_labels, gold_soft, [(s, e) for s, e, p in pred if p > 0.5], pred, n))
    chars = sum(c[-1] for c in cases)

    def run(iou_fn, cor_fn, fast):
        out = []
        for gh, gs, ph, ps, n in cases:
            out.append((iou_fn(gh, ph, n) if fast else iou_fn(gh, ph), cor_fn(gs, ps, n)))
        return out

    timings = {}
    results = {}
    for name, iou_fn, cor_fn, fast in (
        ("mushroom (numpy)", item_iou, item_cor, True),
        ("per-character reference", reference_iou, reference_cor, False),
    ):
        best = float("inf")
        for _ in range(args.repeat):
            start = time.perf_counter()
            results[name] = run(iou_fn, cor_fn, fast)
            best = min(best, time.perf_counter() - start)
        timings[name] = best
    a, b = results.values()
    max_diff = max(max(abs(x[0] - y[0]), abs(x[1] - y[1])) for x, y in zip(a, b))
    print(f"items: {len(cases)}, characters: {chars}")
    for name, secs in timings.items():
        print(
            f"{name:26s} {secs * 1000:8.1f} ms  {len(cases) / secs:10.0f} items/s  {chars / secs / 1e6:6.2f} Mchar/s"
        )
    ref, fast = timings["per-character reference"], timings["mushroom (numpy)"]
    print(f"speed-up: {ref / fast:.1f}x   max per-item difference: {max_diff:.2e}")


if __name__ == "__main__":
    main()
