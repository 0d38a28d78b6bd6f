"""What the English fact-check says about the gold labels, beyond the lexical evidence.

Usage: python benchmarks/fact_check_channels.py
Runs the lexical detector on English val with the default contexts (their fact-check
source included) and, over the content words of the answers, prints the share of words the
gold hard labels mark, split by whether the other contexts support the word (unsupport
share above 0.5 or not) and by each binary `check_*` channel: the figures the comments in
`mushroom.detectors.lexical_channels` quote.
"""

import argparse

import numpy as np

from mushroom.data.contexts import DEFAULT_SOURCES, load_contexts
from mushroom.data.spans import hard_to_mask
from mushroom.data.splits import load_split
from mushroom.detectors import build


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()  # English only: no options
    items = load_split("val", ["en"])["en"]
    contexts = load_contexts("val", "en", DEFAULT_SOURCES).by_id
    det = build("lexical")
    rows = []
    for item in items:
        det.item_vector(item, contexts.get(item.id, []))
        ch = det.channels[item.id]
        gold = hard_to_mask(item.hard_labels or [], len(item.model_output_text))
        for tok, share, bucket in det.token_evidence(item, contexts.get(item.id, [])):
            if share is None or bucket.endswith("|q"):
                continue
            flags = [ch[name][tok.start] > 0 for name in ("check_negated", "check_quoted", "check_unused")]
            rows.append([gold[tok.start : tok.end].mean() > 0.5, share > 0.5, *flags])
    r = np.array(rows, dtype=bool)
    print(f"{len(r)} content words of {len(items)} English val answers; {r[:, 0].mean():.2f} marked by gold")
    for k, name in enumerate(("check_negated", "check_quoted", "check_unused"), start=2):
        for label, group in (("unsupported", r[:, 1]), ("supported", ~r[:, 1])):
            on, off = group & r[:, k], group & ~r[:, k]
            print(
                f"{name:14s} {label:11s}: marked {r[on, 0].mean():.2f} of {on.sum():3d} words with it, "
                f"{r[off, 0].mean():.2f} of {off.sum():3d} without"
            )


if __name__ == "__main__":
    main()
