"""The repair parser against gold spans: oracle round trip and a perturbation suite.

Usage: python benchmarks/parser_oracle.py [--langs en,fr] [--seed 0]

Oracle: for every val item the gold span texts, in order, are written as a model's JSON
answer and parsed back; on items where each gold span is the first occurrence of its text
after the previous span, the parser must reproduce the gold hard labels exactly (IoU 1.0).
Perturbations: the same answers with case changes, extra whitespace, curly quotes, 1-3 typos,
prose around the JSON, a truncated tail, spans out of order, probabilities as percentages or
strings, reasons as lists, a digit changed in every span that has one, span texts in quotes
or with a full stop after them, a reply cut off inside its last reason; printed: the share of
gold spans recovered exactly, the mean IoU, the share of responses that needed a repair,
claims lost, claims lost for a number mismatch, and spans placed on different numbers (must
be 0) per perturbation, then parse time per response.

Run it from the repository root with the working tree's package: PYTHONPATH=. python ...
"""

import argparse
import json
import random
import time

import numpy as np
from _args import val_langs, whole

from mushroom.data.splits import load_split
from mushroom.evaluation.metrics import item_iou
from mushroom.parsing.locate import digit_runs
from mushroom.parsing.parser import ParseStats, parse_response


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


def bump_digit(span, rng):
    """The span with one of its digits changed, so it names a different number."""
    places = [i for i, ch in enumerate(span) if ch.isascii() and ch.isdigit()]
    if not places:
        return span
    i = rng.choice(places)
    return span[:i] + str((int(span[i]) + rng.randrange(1, 10)) % 10) + span[i + 1 :]


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
    "probability 90": lambda spans, rng: (spans, "percent"),
    'probability "90%"': lambda spans, rng: (spans, "percent string"),
    "reason as a list": lambda spans, rng: (spans, "list reason"),
    "a digit changed": lambda spans, rng: ([bump_digit(s, rng) for s in spans], None),
    "texts in quotes": lambda spans, rng: ([f'"{s}"' for s in spans], None),
    "a full stop after": lambda spans, rng: ([s + "." for s in spans], None),
    "cut in the last reason": lambda spans, rng: (spans, "cut reason"),
}


def render(spans, mode):
    prob = {"percent": 90, "percent string": "90%"}.get(mode, 0.9)
    entries = [{"text": s, "probability": prob} for s in spans]
    if mode == "list reason":
        for entry in entries:
            entry["reason"] = ["contradicts the source", 2]
    if mode == "cut reason":
        for entry in entries:
            entry["reason"] = "contradicts the source"
    text = json.dumps({"incorrect_spans": entries}, ensure_ascii=False)
    if mode == "curly":
        text = text.replace('"', "\u201c", 1)
        text = text.replace('": [', "\u201d: [", 1)
    if mode == "prose":
        text = f"Here is my analysis.\n```json\n{text}\n```\nLet me know if you need more."
    if mode == "truncated":
        text = text[:-3]
    if mode == "cut reason":  # cut off at max_tokens inside the last entry's reason
        text = text[: text.rfind("the source")]
    return text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--langs", type=val_langs, default=None, help="val languages, e.g. en,fr (default: all)"
    )
    parser.add_argument("--seed", type=whole, default=0, help="the perturbations' random seed")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    data = load_split("val", args.langs)
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
    print(
        f"{'perturbation':22s} {'found':>6s} {'exact':>6s} {'IoU':>7s} {'prob ok':>7s} {'repaired':>8s}"
        f" {'lost':>5s} {'lost#':>5s} {'moved#':>6s}"
    )
    seconds = responses = 0
    for name, perturb in PERTURBATIONS.items():
        found = exact_spans = total = prob_ok = moved = 0
        ious = []
        stats = ParseStats()
        for items in data.values():
            for it in items:
                if not it.hard_labels:
                    continue
                spans, mode = perturb(gold_texts(it), rng)
                start = time.perf_counter()
                res = parse_response(it.model_output_text, render(spans, mode))
                seconds += time.perf_counter() - start
                responses += 1
                stats.add(res)
                got = {(s.start, s.end) for s in res.spans}
                total += len(it.hard_labels)
                found += len(res.spans)
                prob_ok += sum(abs(s.prob - 0.9) < 1e-9 for s in res.spans)
                # a located span whose numbers are those of none of the texts asked for
                asked = {digit_runs(t) for t in spans}
                moved += sum(digit_runs(s.text) not in asked for s in res.spans)
                exact_spans += sum(tuple(h) in got for h in it.hard_labels)
                ious.append(item_iou(it.hard_labels, sorted(got), len(it.model_output_text)))
        counts = stats.counts
        print(
            f"{name:22s} {found / total:6.3f} {exact_spans / total:6.3f} {np.mean(ious):7.4f}"
            f" {prob_ok / max(1, found):7.3f} {counts['repaired'] / counts['responses']:8.3f}"
            f" {counts['lost']:5d} {counts['lost_numbers']:5d} {moved:6d}"
        )
    print()
    print(f"parse time: {1e6 * seconds / responses:.0f} us per response over {responses} responses")


if __name__ == "__main__":
    main()
