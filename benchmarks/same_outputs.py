"""Are two run folders' outputs the same, byte for byte? (a refactor must not change numbers)

    python benchmarks/same_outputs.py RUN_A RUN_B
    python benchmarks/same_outputs.py RUN_A RUN_B --replies

Compares every prediction file, channel file and stack.json that RUN_A has (the per-item
ledgers, raw records and response caches, timings and summaries are bookkeeping and may differ;
`--replies` compares the replies) and prints the
count of identical files and the list of those that differ or are missing in RUN_B.
Channel files compare by content: gzip stores (`channels.<lang>.jsonl.gz`) decompressed, and
a plain `channels.<lang>.jsonl` of an older run against the store of a newer one.

`--replies` compares the model's replies instead: the texts (or scores) of each raw record
(`raw/*.raw.jsonl`) that both runs hold, by folder, model, stage, request key, temperature, seed
and continuation. It answers "does this device or version make the
model write the same thing", also for a run that was stopped part way (only shared keys count).
"""

import argparse
import gzip
import sys
from pathlib import Path

BOOKKEEPING = {"items", "summary.json", "stages.json", "config.json", "versions.json", "failures.jsonl"}
# the model-call logs and response caches (`raw/<lang>.raw.jsonl`, `raw/*.cache.jsonl`): a resumed
# run keeps its failed calls there too, so they differ by design (`--replies` compares the replies)
RAW_LOGS = (".raw.jsonl", ".cache.jsonl")


def outputs(root: Path) -> list[Path]:
    files = [
        p
        for p in root.rglob("*")
        if p.is_file() and (p.name.endswith((".jsonl", ".jsonl.gz")) or p.name == "stack.json")
    ]
    return sorted(
        p.relative_to(root)
        for p in files
        if not BOOKKEEPING & set(p.relative_to(root).parts) and not p.name.endswith(RAW_LOGS)
    )


def content(path: Path) -> bytes:
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def counterpart(path: Path) -> Path:
    """The file in RUN_B to compare with: a plain channel file may have become a gzip store."""
    if path.is_file() or not path.name.startswith("channels."):
        return path
    other = path.with_name(path.name + ".gz") if path.suffix == ".jsonl" else path.with_suffix("")
    return other if other.is_file() else path


Call = tuple[str, str, str, str, str, str, str]


def replies(root: Path) -> tuple[dict[Call, list[str]], int]:
    """Each raw record's texts (or score) by call, and the count of lines that were no record.

    A call is (folder, model, stage, key, temperature, seed, continuation): an item's requests
    share its key (one per temperature; pyes' pieces and models share their item's), and a
    config's variants write the same keys in folders of their own. A line a kill cut off is
    skipped and counted.
    """
    from pydantic import ValidationError

    from mushroom.backends.rawlog import RawRecord

    found, broken = {}, 0
    for path in sorted(root.rglob("*.raw.jsonl")):
        folder = str(path.parent.relative_to(root))
        for line in path.read_text(encoding="utf-8").splitlines():
            if not line.strip():
                continue
            try:
                r = RawRecord.model_validate_json(line)
            except ValidationError:
                broken += 1
                continue
            if r.error is None and (r.texts or r.logprob is not None):
                # the model's file name: the same model at another path on another machine is it
                call = (
                    folder,
                    Path(r.model).name,
                    r.stage,
                    r.key,
                    f"{r.temperature}",
                    f"{r.seed}",
                    r.continuation or "",
                )
                found[call] = r.texts or [f"logprob {r.logprob!r}"]
    return found, broken


def compare_replies(run_a: Path, run_b: Path) -> int:
    (a, broken_a), (b, broken_b) = replies(run_a), replies(run_b)
    shared = sorted(set(a) & set(b))
    differ = [k for k in shared if a[k] != b[k]]
    print(
        f"{len(shared) - len(differ)} of {len(shared)} shared replies identical "
        f"({len(a)} in {run_a}, {len(b)} in {run_b})"
    )
    if broken_a or broken_b:
        print(f"  skipped lines that are no raw record (cut by a kill?): {broken_a} in A, {broken_b} in B")
    for call in differ:
        folder, model, stage, key, temperature = call[:5]
        first = next((i for i, (x, y) in enumerate(zip(a[call], b[call])) if x != y), 0)
        at = next((i for i, (x, y) in enumerate(zip(a[call][first], b[call][first])) if x != y), None)
        where = f" (text {first + 1}, from character {at})" if at is not None else f" (text {first + 1})"
        print(f"  differs: {folder}: {model or '-'} {stage or '-'} {key} at temperature {temperature}{where}")
    return 0 if shared and not differ else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_a", type=Path)
    parser.add_argument("run_b", type=Path)
    parser.add_argument("--replies", action="store_true", help="compare the model's replies in raw/")
    args = parser.parse_args()
    for folder in (args.run_a, args.run_b):
        if not folder.is_dir():
            parser.error(f"{folder}: no such run folder")  # it compared nothing and said "0 different"
    if args.replies:
        return compare_replies(args.run_a, args.run_b)
    same, differ, missing = 0, [], []
    if not outputs(args.run_a):
        print(f"{args.run_a} holds no prediction, channel or stack file: nothing to compare")
        return 1
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
