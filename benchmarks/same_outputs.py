"""Are two run folders' outputs the same, byte for byte? (a refactor must not change numbers)

    python benchmarks/same_outputs.py RUN_A RUN_B

Compares every prediction file, channel file and stack.json that RUN_A has (the per-item
ledgers, raw records, timings and summaries are bookkeeping and may differ) and prints the
count of identical files and the list of those that differ or are missing in RUN_B.
Channel files compare by content: gzip stores (`channels.<lang>.jsonl.gz`) decompressed, and
a plain `channels.<lang>.jsonl` of an older run against the store of a newer one.
"""

import argparse
import gzip
import sys
from pathlib import Path

BOOKKEEPING = {"items", "summary.json", "stages.json", "config.json", "versions.json", "failures.jsonl"}


def outputs(root: Path) -> list[Path]:
    files = [
        p
        for p in root.rglob("*")
        if p.is_file() and (p.name.endswith((".jsonl", ".jsonl.gz")) or p.name == "stack.json")
    ]
    return sorted(p.relative_to(root) for p in files if not BOOKKEEPING & set(p.relative_to(root).parts))


def content(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def counterpart(path: Path) -> Path:
    """The file in RUN_B to compare with: a plain channel file may have become a gzip store."""
    if path.is_file() or not path.name.startswith("channels."):
        return path
    other = path.with_name(path.name + ".gz") if path.suffix == ".jsonl" else path.with_suffix("")
    return other if other.is_file() else path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    args = parser.parse_args()
    same, differ, missing = 0, [], []
    for rel in outputs(args.run_a):
        other = counterpart(args.run_b / rel)
        if not other.is_file():
            missing.append(rel)
        elif content(other) == content(args.run_a / rel):
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
