"""The repair parser against gold spans: oracle round trip and a perturbation suite.

Usage: python benchmarks/parser_oracle.py

Oracle: for every val item the gold span texts, in order, are written as a model's JSON
answer and parsed back; on items where each gold span is the first occurrence of its text
after the previous span, the parser must reproduce the gold hard labels exactly (IoU 1.0).
Perturbations: the same answers with case changes, extra whitespace, curly quotes, 1-3 typos,
prose around the JSON, a truncated tail, spans out of order; printed: the share of gold spans
recovered exactly and the mean IoU per perturbation.
"""

import json
import random

import numpy as np

from mushroom.data import load_split
from mushroom.parsing.parser import parse_response
from mushroom.scoring.metrics import item_iou


def gold_texts(item):
    return [item.model_output_text[s:e] for s, e in item.hard_labels]


def is_first_after_previous(item):
    text, cursor = item.model_output_text, 0
    for s, e in item.hard_labels:
        if text.find(text[s:e], cursor) != s:
            return False
        cursor = e
    return True


def typo(span, k, rng):
    chars = list(span)
    for _ in range(k):
        if len(chars) < 4:
            break
        i = rng.randrange(1, len(chars) - 1)
        chars[i] = rng.choice("abcdefghijklmnopqrstuvwxyz") if chars[i].isalpha() else chars[i]
    return "".join(chars)


PERTURBATIONS = {
    "none": lambda spans, rng: (spans, None),
    "upper case": lambda spans, rng: ([s.upper() for s in spans], None),
    "extra whitespace": lambda spans, rng: ([" " + s.replace(" ", "  ") + " " for s in spans], None),
    "curly quotes in JSON": lambda spans, rng: (spans, "curly"),
    "1 typo": lambda spans, rng: ([typo(s, 1, rng) for s in spans], None),
    "2 typos": lambda spans, rng: ([typo(s, 2, rng) for s in spans], None),
    "3 typos": lambda spans, rng: ([typo(s, 3, rng) for s in spans], None),
    "prose around": lambda spans, rng: (spans, "prose"),
    "truncated tail": lambda spans, rng: (spans, "truncated"),
    "out of order": lambda spans, rng: (spans[::-1], None),
}


def render(spans, mode):
    text = json.dumps(
        {"incorrect_spans": [{"text": s, "probability": 0.9} for s in spans]}, ensure_ascii=False
    )
    if mode == "curly":
        text = text.replace('"', "\u201c", 1)
        text = text.replace('": [', "\u201d: [", 1)
    if mode == "prose":
        text = f"Here is my analysis.\n```json\n{text}\n```\nLet me know if you need more."
    if mode == "truncated":
        text = text[:-3]
    return text


def main():
    rng = random.Random(0)
    data = load_split("val")
    print("oracle round trip (gold span texts in order -> parser -> hard labels)")
    print(
        f"{'lang':5s} {'items':>5s} {'eligible':>8s} {'exact':>6s} {'IoU':>7s} {'spans':>6s} {'not first-after-prev':>21s}"
    )
    for lang, items in data.items():
        eligible = exact = 0
        ious = []
        spans_total = sum(len(it.hard_labels) for it in items)
        for it in items:
            res = parse_response(it.model_output_text, render(gold_texts(it), None))
            hard = sorted((s.start, s.end) for s in res.spans)
            iou = item_iou(it.hard_labels, hard, len(it.model_output_text))
            ious.append(iou)
            if is_first_after_previous(it):
                eligible += 1
                exact += iou == 1.0
        print(
            f"{lang:5s} {len(items):5d} {eligible:8d} {exact:6d} {np.mean(ious):7.4f} {spans_total:6d} {len(items) - eligible:21d}"
        )
    print()
    print("perturbation suite (all val items with gold spans)")
    print(f"{'perturbation':22s} {'spans found':>11s} {'exact offsets':>13s} {'mean IoU':>9s}")
    for name, perturb in PERTURBATIONS.items():
        found = exact_spans = total = 0
        ious = []
        for items in data.values():
            for it in items:
                if not it.hard_labels:
                    continue
                spans, mode = perturb(gold_texts(it), rng)
                res = parse_response(it.model_output_text, render(spans, mode))
                got = {(s.start, s.end) for s in res.spans}
                total += len(it.hard_labels)
                found += len(res.spans)
                exact_spans += sum(tuple(h) in got for h in it.hard_labels)
                ious.append(item_iou(it.hard_labels, sorted(got), len(it.model_output_text)))
        print(f"{name:22s} {found / total:11.3f} {exact_spans / total:13.3f} {np.mean(ious):9.4f}")


if __name__ == "__main__":
    main()
