"""Where the stack's val errors lie: characters by kind of evidence, and the worst items.

Usage: python benchmarks/error_classes.py [--members lexical,semantic] [--work DIR] [--seed 0] [--worst 3]

The stack's out-of-fold hard labels (5-fold CV by item, every choice nested, one fold draw)
against gold, per language, with the characters of each answer in four classes by the
lexical member's evidence:

* `supported`: content words some context supports exactly (`lexical.unsupported` 0);
* `unsupported`: content words not exactly supported by every context;
* `function`: other letters and digits (function words, words too short to judge);
* `other`: spaces and punctuation.

For each class: characters, the share gold marks, the share the stack marks, and the false
negative and false positive characters. Then the `--worst` items of each language by IoU.
It says where better evidence would pay: if most errors are false positives on unsupported
words, new evidence must tell an unverified detail from a wrong one; if they are misses
on supported words, it must find errors the contexts repeat.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _args import whole
from stack_val import run_script, val_members  # noqa: E402

from mushroom.combine.stack.features import feature_names  # noqa: E402
from mushroom.combine.stack.fit import choose, prepare  # noqa: E402
from mushroom.data.predictions import prediction_vectors  # noqa: E402
from mushroom.data.spans import hard_to_mask  # noqa: E402
from mushroom.evaluation.score import score_predictions  # noqa: E402

CLASSES = ("supported", "unsupported", "function", "other")


def char_classes(text: str, unsupported: np.ndarray, content: np.ndarray) -> np.ndarray:
    """The class (index into `CLASSES`) of each character."""
    alnum = np.array([ch.isalnum() for ch in text], dtype=bool)
    cls = np.full(len(text), 3)
    cls[alnum] = 2
    cls[(content > 0) & (unsupported == 0)] = 0
    cls[(content > 0) & (unsupported > 0)] = 1
    return cls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("--work", default=None, help="member runs (reused when present)")
    parser.add_argument("--seed", type=whole, default=0)
    parser.add_argument("--worst", type=whole, default=3)
    args = parser.parse_args()
    val = val_members(args.members, args.work, "error-classes-")
    data, names = val.data, val.names
    full, channels = val.stack_data()
    columns = feature_names(names, channels, sorted(data))
    col_unsupported, col_content = columns.index("lexical.unsupported"), columns.index("lexical.content")
    fit = choose(prepare(full, channels, names, seed=args.seed))
    preds = {p.id: p for lang_preds in fit.oof.values() for p in lang_preds}
    # per language and class: characters, gold-marked, stack-marked, both
    counts: dict[str, np.ndarray] = {}
    for item, feats in zip(full.items, full.features):
        n = len(item.model_output_text)
        if not n:
            continue
        gold = hard_to_mask(item.hard_labels or [], n)
        _, marked = prediction_vectors(preds[item.id], n)
        cls = char_classes(item.model_output_text, feats[:, col_unsupported], feats[:, col_content])
        table = counts.setdefault(item.lang, np.zeros((len(CLASSES), 4), dtype=int))
        for k in range(len(CLASSES)):
            sel = cls == k
            table[k] += [sel.sum(), (gold & sel).sum(), (marked & sel).sum(), (gold & marked & sel).sum()]
    print(
        f"stack out of fold (draw {args.seed}): per class chars, gold share, stack share, FN chars, FP chars"
    )
    total = np.zeros((len(CLASSES), 4), dtype=int)
    for lang in sorted(counts):
        total += counts[lang]
        print(f"{lang}: " + _row(counts[lang]))
    print(f"all: {_row(total)}")
    result = score_predictions(full.items, [preds[it.id] for it in full.items])
    by_id = {it.id: it for it in full.items}
    print(f"worst {args.worst} items per language by IoU (gold chars, stack chars):")
    for lang in sorted(counts):
        rows = sorted(
            (iou, item_id) for item_id, iou in zip(result.ids, result.iou) if by_id[item_id].lang == lang
        )
        for iou, item_id in rows[: args.worst]:
            item = by_id[item_id]
            n = len(item.model_output_text)
            gold = hard_to_mask(item.hard_labels or [], n)
            _, marked = prediction_vectors(preds[item_id], n)
            print(f"  {item_id}: IoU {iou:.2f}; gold {int(gold.sum())}, stack {int(marked.sum())} of {n}")


def _row(table: np.ndarray) -> str:
    cells = []
    for name, (n, gold, marked, both) in zip(CLASSES, table):
        cells.append(
            f"{name} {n} gold {gold / max(n, 1):.2f} stack {marked / max(n, 1):.2f} "
            f"FN {gold - both} FP {marked - both}"
        )
    return "; ".join(cells)


if __name__ == "__main__":
    run_script(main)
