"""Sentence splitting time against text length: it must grow with the text, not its square.

Usage: python benchmarks/segment_speed.py [--sizes 50000,200000,620000]
Builds texts of sentences with abbreviations, initials and numbers (what the splitter looks
behind each dot for) and prints the seconds `sentences()` takes and the sentences found.
Before the word before each dot was searched in a bounded window (the whole text was sliced
and searched at every dot), this text took 6.9 s at 50,000 characters and 116 s at 200,000
on 2 cores under load, against 0.024 s and 0.096 s after, with the same sentences.
"""

import argparse
import time

from _args import positive_list

from mushroom.text.segment import sentences

SENTENCE = "Dr. J. R. Smith of the U.S. Army paid 3.5 million dollars in 1950, e.g. for the bridge. "


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes", type=positive_list, default="50000,200000,620000", help="text lengths in characters"
    )
    args = parser.parse_args()
    for size in args.sizes:
        text = (SENTENCE * (size // len(SENTENCE) + 1))[:size]
        start = time.perf_counter()
        found = sentences(text)
        print(f"{size:>9,} characters: {time.perf_counter() - start:6.3f} s, {len(found):,} sentences")


if __name__ == "__main__":
    main()
