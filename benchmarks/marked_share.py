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

import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from mushroom.data import load_split
from mushroom.predictions import load_predictions
from mushroom.records import Item
from mushroom.spans import hard_to_mask


def share(items: list[Item], hard: dict[str, list]) -> float:
    """Mean over items of the share of answer characters marked (items with text only)."""
    shares = [
        hard_to_mask(hard.get(it.id, []), len(it.model_output_text)).mean()
        for it in items
        if it.model_output_text
    ]
    return float(np.mean(shares)) if shares else float("nan")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1].splitlines()[0])
    run = Path(sys.argv[1])
    test_files = sorted(run.glob("mushroom.*-tst.v1.jsonl"))
    if not test_files:
        sys.exit(f"{run}: no mushroom.<lang>-tst.v1.jsonl files (is it a main-job run folder?)")
    val_items = load_split("val")
    table = Table(title=f"share of answer characters marked ({run})")
    for col in ("lang", "val gold", "val predicted", "test predicted", "test - val predicted"):
        table.add_column(col, justify="right")
    for path in test_files:
        lang = path.name.split(".")[1].split("-")[0]
        test_items = load_split("test", [lang])[lang]
        lengths = {it.id: len(it.model_output_text) for it in test_items}
        test = share(test_items, {k: p.hard_labels for k, p in load_predictions(path, lengths).items()})
        row = [lang, "", "", f"{test:.3f}", ""]
        val_path = run / "val" / f"mushroom.{lang}-val.v2.jsonl"
        if lang in val_items and val_path.exists():
            items = val_items[lang]
            lengths = {it.id: len(it.model_output_text) for it in items}
            gold = share(items, {it.id: it.hard_labels or [] for it in items})
            pred = share(items, {k: p.hard_labels for k, p in load_predictions(val_path, lengths).items()})
            row[1:3] = [f"{gold:.3f}", f"{pred:.3f}"]
            row[4] = f"{test - pred:+.3f}"
        table.add_row(*row)
    Console().print(table)


if __name__ == "__main__":
    main()
