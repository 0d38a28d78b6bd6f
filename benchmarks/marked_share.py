"""How much of each answer a main-job run marks on test, next to val, with no test labels.

Usage: python benchmarks/marked_share.py RUN_DIR
Reads a `main-job` run folder (its `mushroom.<lang>-tst.v1.jsonl` files and
`val/mushroom.<lang>-val.v2.jsonl`) and prints, per language, the mean share of answer
characters the gold hard labels mark on val, the share the stack's out-of-fold predictions
mark on val, and the share its test file marks. A choice made on ~50 val items that does
not transfer often shows as a test share far from both val figures: with the hard-label
source chosen per language (`source_shrink` 20), Spanish test answers were 0.288 marked
against 0.139 gold and 0.189 predicted on val; with one pooled source, 0.177 against 0.163
predicted on val. Test shares can differ for honest reasons (other answers), so this
points at what to look at; it is no score.
"""

import argparse
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from mushroom.data.predictions import load_predictions
from mushroom.data.records import Item
from mushroom.data.spans import hard_to_mask
from mushroom.data.splits import load_split
from mushroom.errors import MushroomError


def share(items: list[Item], hard: dict[str, list]) -> tuple[float, int]:
    """Mean share of answer characters marked over the items `hard` has, and how many those are.

    Items with no prediction are left out rather than counted as unmarked, so a partial
    file does not read as a detector that marks nothing (the count column shows it).
    """
    shares = [
        hard_to_mask(hard[it.id], len(it.model_output_text)).mean()
        for it in items
        if it.model_output_text and it.id in hard
    ]
    return (float(np.mean(shares)) if shares else float("nan")), len(shares)


def predicted(path: Path, items: list[Item]) -> dict[str, list]:
    """Hard labels of a checked prediction file, by item id."""
    lengths = {it.id: len(it.model_output_text) for it in items}
    return {k: p.hard_labels for k, p in load_predictions(path, lengths).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a main-job run folder")
    run = parser.parse_args().run_dir
    if not run.is_dir():
        parser.error(f"{run}: no such folder")
    test_files = sorted(run.glob("mushroom.*-tst.v1.jsonl"))
    if not test_files:
        sys.exit(f"{run}: no mushroom.<lang>-tst.v1.jsonl files (is it a main-job run folder?)")
    val_items = load_split("val")
    table = Table(
        title=f"share of answer characters marked ({run})",
        caption="val columns are blank for languages without labelled val or without a val/ file in the run",
    )
    for col in ("lang", "val gold", "val predicted", "test predicted", "test items", "test - val predicted"):
        table.add_column(col, justify="right")
    partial = []
    for path in test_files:
        lang = path.name.split(".")[1].split("-")[0]
        test_items = load_split("test", [lang])[lang]
        test, n = share(test_items, predicted(path, test_items))
        total = sum(1 for it in test_items if it.model_output_text)
        if n < total:
            partial.append(f"{path.name}: {n} of {total} test items predicted")
        row = [lang, "", "", f"{test:.3f}", f"{n}/{total}", ""]
        val_path = run / "val" / f"mushroom.{lang}-val.v2.jsonl"
        if lang in val_items and val_path.exists():
            items = val_items[lang]
            gold, _ = share(items, {it.id: it.hard_labels or [] for it in items})
            pred, _ = share(items, predicted(val_path, items))
            row[1:3] = [f"{gold:.3f}", f"{pred:.3f}"]
            row[5] = f"{test - pred:+.3f}"
        table.add_row(*row)
    console = Console()
    console.print(table)
    for line in partial:
        console.print(f"[yellow]warning:[/] {line}; the share is over those only")


if __name__ == "__main__":
    try:
        main()
    except MushroomError as exc:
        sys.exit(f"error: {exc}")
