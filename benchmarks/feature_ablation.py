"""What one stack feature column is worth: the stack with and without it, paired per val item.

Usage: python benchmarks/feature_ablation.py --drop is_negation [--work DIR] [--seeds 0,1,2]
Loads the member runs of `benchmarks/stack_val.py` (under --work, run there when missing),
fits the stack by 5-fold CV with every choice nested, once with all features and once with
the named columns dropped, for each fold draw; averages each item's IoU and Cor over the
draws and prints the paired difference (all minus dropped) per language and overall, with
a bootstrap 95% interval and a sign-flip p-value over items (`mushroom.evaluation.stats`).
Fold draws share their items, so they narrow the noise of the folds, not of the items: the
interval over items is the honest one.
"""

import argparse

import numpy as np
from _args import whole_list
from rich.console import Console
from rich.table import Table
from stack_val import run_script, val_members

from mushroom.combine.stack.features import TEXT_FEATURES, StackData, feature_names
from mushroom.combine.stack.fit import choose, prepare
from mushroom.evaluation.score import score_predictions
from mushroom.evaluation.stats import paired_test


def item_scores(
    data: StackData, channels, members: list[str], seed: int, features: list[str] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(IoU, Cor) of each item, out of fold, in the order of `data.items`; `features` names the
    columns where they are not the loaded ones (one dropped, evidence added)."""
    fit = choose(prepare(data, channels, members, seed=seed), features=features)
    preds = {p.id: p for lang_preds in fit.oof.values() for p in lang_preds}
    result = score_predictions(data.items, [preds[it.id] for it in data.items])
    order = {item_id: k for k, item_id in enumerate(result.ids)}
    rows = [order[it.id] for it in data.items]
    return result.iou[rows], result.cor[rows]


def lang_mean(values: np.ndarray, langs: np.ndarray) -> float:
    """The mean over languages of the per-language mean (the task's headline average)."""
    return float(np.mean([values[langs == lang].mean() for lang in sorted(set(langs))]))


def print_paired(
    title: str, with_runs: list, without_runs: list, item_langs: list[str], means: bool = False
) -> np.ndarray:
    """The paired table (with minus without, IoU and Cor, per language and all) of per-item runs.

    Each run is (IoU per item, Cor per item) of one fold draw; items are averaged over draws,
    then compared pairwise. With `means`, each metric's mean without and with comes before its
    difference. Returns the items' languages as an array, for further summaries.
    """
    langs = np.array(item_langs)
    table = Table(title=f"{title}: difference per item, mean of {len(with_runs)} fold draws")
    columns = ["lang", "n"]
    for metric in ("IoU", "Cor"):
        columns += (
            [f"{metric} without", f"{metric} with", "diff [95% CI]"] if means else [f"{metric} diff [95% CI]"]
        )
        columns.append("p")
    for col in columns:
        table.add_column(col, justify="right")
    for lang in [*sorted(set(langs)), "all"]:
        sel = np.ones(len(langs), bool) if lang == "all" else langs == lang
        cells = [lang, str(int(sel.sum()))]
        for metric in (0, 1):
            a = np.mean([run[metric] for run in with_runs], axis=0)[sel]
            b = np.mean([run[metric] for run in without_runs], axis=0)[sel]
            # "all" is the mean over languages, as the task averages: each resampled within itself
            groups = langs if lang == "all" else None
            test = paired_test(a, b, groups=groups)
            mean = (lambda v: lang_mean(v, langs)) if lang == "all" else np.mean
            cells += [f"{mean(b):.4f}", f"{mean(a):.4f}"] if means else []
            cells += [
                f"{test.mean_diff:+.4f} [{test.ci_low:+.4f}, {test.ci_high:+.4f}]",
                f"{test.p_value:.3f}",
            ]
        table.add_row(*cells)
    Console(width=200 if means else 160).print(table)
    return langs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--drop", required=True, help="feature columns to drop, e.g. is_negation")
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("--work", default=None)
    parser.add_argument("--seeds", type=whole_list, default="0,1,2")
    args = parser.parse_args()
    # Without --work the member runs are removed when the script exits.
    val = val_members(args.members, args.work, "feature-ablation-")
    data, names = val.data, val.names
    full, channels = val.stack_data()
    columns = feature_names(names, channels, sorted(data))
    drop = args.drop.split(",")
    # The fit finds member and vote columns by position (`member_columns`), so only the text
    # columns after them can be dropped without moving those.
    unknown = [name for name in drop if name not in TEXT_FEATURES]
    if unknown:
        raise SystemExit(f"cannot drop {', '.join(unknown)}; droppable columns: {', '.join(TEXT_FEATURES)}")
    keep = [k for k, name in enumerate(columns) if name not in drop]
    dropped = StackData(full.items, [f[:, keep] for f in full.features])
    seeds = args.seeds
    with_col = [item_scores(full, channels, names, s) for s in seeds]
    kept = [columns[k] for k in keep]
    without = [item_scores(dropped, channels, names, s, kept) for s in seeds]
    print_paired(f"stack with minus without {args.drop}", with_col, without, [it.lang for it in full.items])


if __name__ == "__main__":
    run_script(main)
