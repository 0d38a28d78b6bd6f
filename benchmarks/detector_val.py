"""Val scores per language of a detector (default: lexical) next to the mark-all baseline.

Usage: python benchmarks/detector_val.py [--detector lexical] [-o KEY=VALUE ...] [--contexts a,b]
Scores are computed in memory with the official metrics; the main job scores written files.
"""

import argparse
import json
import time

import numpy as np
from _args import val_langs

from mushroom.data.contexts import DEFAULT_SOURCES, load_contexts
from mushroom.data.predictions import mark_all
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.evaluation.score import score_predictions


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--detector", default="lexical")
    parser.add_argument("-o", "--option", action="append", default=[])
    parser.add_argument("--contexts", default=",".join(DEFAULT_SOURCES))
    parser.add_argument(
        "--langs", type=val_langs, default=None, help="comma-separated (default: all val languages)"
    )
    args = parser.parse_args()
    options = {}
    for pair in args.option:
        key, _, value = pair.partition("=")
        try:
            options[key] = json.loads(value)
        except json.JSONDecodeError:
            options[key] = value
    det = build(args.detector, options)
    sources = tuple(args.contexts.split(","))
    print(f"{args.detector} {json.dumps(det.options.model_dump())}")
    print(f"{'lang':4s} {'n':>3s} {'IoU':>7s} {'Cor':>7s} {'markall':>8s} {'ms/item':>8s}")
    rows = []
    for lang, items in load_split("val", args.langs).items():
        ctx = load_contexts("val", lang, sources)
        start = time.perf_counter()
        preds = det.detect(items, ctx.by_id)
        per_item = (time.perf_counter() - start) * 1000 / len(items)
        res = score_predictions(items, preds)
        base = score_predictions(items, mark_all(items))
        rows.append((res.mean_iou, res.mean_cor, base.mean_iou))
        flag = "" if res.mean_iou > base.mean_iou else "  <= mark-all"
        print(
            f"{lang:4s} {len(items):3d} {res.mean_iou:7.4f} {res.mean_cor:7.4f} {base.mean_iou:8.4f} {per_item:8.2f}{flag}"
        )
    m = np.mean(rows, axis=0)
    print(f"{'mean':4s} {'':3s} {m[0]:7.4f} {m[1]:7.4f} {m[2]:8.4f}")


if __name__ == "__main__":
    main()
