"""Time against size for replies and answers a broken model or upstream can write: linear, not square.

Usage: python benchmarks/long_replies.py [--scale 1]
Each case is timed at three sizes, each twice the last, and the ratio of the last two times is
printed: about 2 is linear, about 4 quadratic. The cases are those an audit found quadratic
(2026-11-29), with its times on 2 cores before the mends:
- reasoning: a stray quote, then `</think>` repeated (80 KB: 9.5-24 s before);
- absent span: a span text as long as the answer, not in it (100 KB: 122 s before);
- near span: a span text as long as the answer, one character in ten changed, cut to the
  longest text the fuzzy step searches (20 KB: 6.7 s before, then searched whole);
- repeated span: "a" listed k times against an answer where every "a" is inside a word
  (k = 200, 7 KB: 10.9 s before);
- sentences: the lexical detector's channels on an answer of many short sentences, through
  the CLI's path (`LexicalDetector` with channels; 400 KB: 15.6 s for the loop before).
`--scale 2` doubles every size.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

from _args import positive

from mushroom.data.records import Context, Item
from mushroom.detectors.lexical import LexicalDetector, LexicalOptions
from mushroom.parsing.parser import parse_response
from mushroom.parsing.reasoning import strip_reasoning


def _reasoning(n: int) -> Callable[[], object]:
    text = '"' + "</think>" * (n // 8)
    return lambda: strip_reasoning(text)


def _absent(n: int) -> Callable[[], object]:
    answer, reply = "lorem ipsum " * (n // 12), json.dumps(["zq" * (n // 2)])
    return lambda: parse_response(answer, reply)


def _near(n: int) -> Callable[[], object]:
    answer, reply = "abcdefghij" * (n // 10), json.dumps(["abcdefghiX" * (n // 10)])
    return lambda: parse_response(answer, reply)


def _repeated(n: int) -> Callable[[], object]:
    answer, reply = "banana " * (n // 7), json.dumps(["a"] * (n // 35))
    return lambda: parse_response(answer, reply)


def _sentences(n: int) -> Callable[[], object]:
    detector = LexicalDetector(LexicalOptions(calibration=None))
    item = Item(id="x", lang="en", model_input="?", model_output_text="Xo. " * (n // 4))
    contexts = [Context(source="c", text="nothing relevant here")]
    return lambda: detector.item_vector(item, contexts)


CASES: dict[str, tuple[Callable[[int], Callable[[], object]], int]] = {
    "reasoning": (_reasoning, 20_000),
    "absent span": (_absent, 25_000),
    "near span": (_near, 5_000),
    "repeated span": (_repeated, 7_000),
    "sentences": (_sentences, 50_000),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=positive, default=1, help="multiplies every size")
    args = parser.parse_args()
    print(f"{'case':<14} {'size':>9} {'s':>8} {'size':>9} {'s':>8} {'size':>9} {'s':>8}  last ratio")
    for name, (build, size) in CASES.items():
        sizes = [size * args.scale * 2**k for k in range(3)]
        times = []
        for n in sizes:
            run = build(n)
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        cells = " ".join(f"{n:>9,} {t:>8.3f}" for n, t in zip(sizes, times, strict=True))
        print(f"{name:<14} {cells}  {times[2] / max(times[1], 1e-9):.1f}")


if __name__ == "__main__":
    main()
