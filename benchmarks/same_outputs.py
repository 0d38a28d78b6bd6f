"""Are two run folders' outputs the same, byte for byte? (a refactor must not change numbers)

    python benchmarks/same_outputs.py RUN_A RUN_B

Compares every prediction file, channel file and stack.json that RUN_A has (the per-item
ledgers, raw records, timings and summaries are bookkeeping and may differ) and prints the
count of identical files and the list of those that differ or are missing in RUN_B.
"""

import argparse
import sys
from pathlib import Path

BOOKKEEPING = {"items", "summary.json", "stages.json", "config.json", "versions.json", "failures.jsonl"}


def outputs(root: Path) -> list[Path]:
    files = [p for p in root.rglob("*") if p.is_file() and (p.suffix == ".jsonl" or p.name == "stack.json")]
    return sorted(p.relative_to(root) for p in files if not BOOKKEEPING & set(p.relative_to(root).parts))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    args = parser.parse_args()
    same, differ, missing = 0, [], []
    for rel in outputs(args.run_a):
        other = args.run_b / rel
        if not other.is_file():
            missing.append(rel)
        elif other.read_bytes() == (args.run_a / rel).read_bytes():
            same += 1
        else:
            differ.append(rel)
    print(f"{same} identical, {len(differ)} different, {len(missing)} missing in {args.run_b}")
    for rel in differ:
        print(f"  differs: {rel}")
    for rel in missing:
        print(f"  missing: {rel}")
    return 0 if not differ and not missing else 1


if __name__ == "__main__":
    sys.exit(main())
