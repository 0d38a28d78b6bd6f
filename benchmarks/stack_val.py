"""Val scores (5-fold CV by item) of each member detector, their plain vote, and the stack.

Usage: python benchmarks/stack_val.py [--members lexical,semantic] [--work DIR]
Runs each member on val (files under --work, reused when present), fits the stack with
cross-validation by item and prints mean IoU/Cor per system and language, plus the CPU
seconds per item of each member.
"""

import argparse
import tempfile
import time
from pathlib import Path

from rich.console import Console

from mushroom.data import load_split
from mushroom.detectors import build
from mushroom.pipeline import detect_split
from mushroom.stack import Member, fit_stack
from mushroom.tables import comparison_table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("--work", default=None)
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="stack-val-"))
    data = load_split("val")
    n_items = sum(len(v) for v in data.values())
    members = []
    for name in args.members.split(","):
        reused = (work / name).exists()
        start = time.process_time()
        detect_split(build(name), "val", work / name, quiet=True)
        timing = (
            "files reused, not timed"
            if reused
            else (f"{1000 * (time.process_time() - start) / n_items:.1f} ms CPU per item ({n_items} items)")
        )
        print(f"{name}: {timing}")
        members.append(Member(name, work / name))
    fit = fit_stack(members, data, "val")
    Console(width=200).print(comparison_table("val, 5-fold CV by item", fit.comparison, decimals=4))
    print(f"{fit.model.hard_label_summary()}; threshold {fit.model.threshold}, floor {fit.model.floor}")


if __name__ == "__main__":
    main()
