"""How the gold soft labels sit on words, the gaps between them and the text's edges.

Usage: python benchmarks/gold_shape.py [--langs en,fr]
Over every labelled val item, prints how often a gap between two words (the characters
between them: space, comma, newline) has the gold value of the lower of the two words,
less or more than it, and how often the characters before the first word and after the
last are 0: the figures `mushroom.combine.stack.decoding.pool_words` quotes for shaping the stack's
soft labels this way.
"""

import argparse
from collections import Counter

import numpy as np
from _args import val_langs

from mushroom.data.spans import soft_to_vector
from mushroom.data.splits import load_split
from mushroom.text.tokenize import tokenize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--langs", type=val_langs, default=None, help="val languages, e.g. en,fr (default: all)"
    )
    args = parser.parse_args()
    data = load_split("val", args.langs)
    gaps: Counter[str] = Counter()
    marked: Counter[str] = Counter()  # gaps between two words both marked
    edges: Counter[str] = Counter()
    for items in data.values():
        for item in items:
            text = item.model_output_text
            gold = soft_to_vector(item.soft_labels or [], len(text))
            toks = tokenize(text)
            if not toks:
                continue
            values = [gold[t.start : t.end].max() for t in toks]
            for (a, b), left, right in zip(zip(toks, toks[1:]), values, values[1:]):
                if b.start <= a.end:
                    continue
                value, lower = gold[a.end : b.start].max(), min(left, right)
                kind = "equal" if np.isclose(value, lower) else "below" if value < lower else "above"
                gaps[kind] += 1
                if lower > 0:
                    marked[kind] += 1
            outside = np.concatenate([gold[: toks[0].start], gold[toks[-1].end :]])
            if len(outside):
                edges["zero" if not outside.any() else "not zero"] += 1
    n_items = sum(len(v) for v in data.values())
    total = sum(gaps.values())
    print(f"{n_items} val items ({len(data)} languages), {total} gaps between words")
    both = sum(marked.values())
    for key, relation in (("equal", "equal to"), ("below", "below"), ("above", "above")):
        print(
            f"  gap's gold {relation} the lower word's: {gaps[key]:6d} ({gaps[key] / total:.3f}); "
            f"between two marked words {marked[key]:6d} of {both} ({marked[key] / both:.3f})"
        )
    total = sum(edges.values())
    print(f"{total} items with characters before the first word or after the last")
    for key in ("zero", "not zero"):
        print(f"  gold there {key}: {edges[key]:6d} ({edges[key] / total:.3f})")


if __name__ == "__main__":
    main()
