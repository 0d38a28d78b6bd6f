"""Leave one language out: the stack fitted on nine val languages, scored on the tenth.

Four test languages (ca, cs, eu, fa) have no val data: the main job applies to them a stack
fitted on the ten val languages, with the pooled choices it makes for a language it never
saw (no language column, the pooled threshold, floor and hard-label source). The k-fold
yardstick (benchmarks/stack_val.py) sees every language in training, so it cannot say how
that goes. Here each val language in turn plays the unseen one: the stack is fitted, with
its own cross-validated choices, on the other nine and applied to it exactly as to a test
language (`apply_stack`). Next to it: the lexical member alone, the floor the stack must beat.

    python benchmarks/stack_lolo.py [--members lexical,semantic] [--work DIR] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from stack_val import run_script, val_members  # noqa: E402

from mushroom.combine.stack import fit_stack  # noqa: E402
from mushroom.combine.stack.fit import apply_stack  # noqa: E402
from mushroom.data.predictions import load_predictions, submission_name  # noqa: E402
from mushroom.errors import MushroomError  # noqa: E402
from mushroom.evaluation.score import score_predictions  # noqa: E402


def _ci(values: np.ndarray) -> str:
    from mushroom.evaluation.stats import bootstrap_ci

    low, high = bootstrap_ci(values)
    return f"{values.mean():.4f} [{low:.2f}, {high:.2f}]"


def agnostic_predictions(members: list, train: dict, held: dict) -> list:
    """The held-out language's predictions from a stack fitted with no language columns.

    A language the stack never saw gets all-zero language columns, a point no training row
    has (each has one language set); fitted without them, every row is like it. Measured
    (`--language-columns both`): IoU 0.5545, Cor 0.5707 against the default's 0.5418 and
    0.5784; paired, IoU +0.0127 [+0.0014, +0.0234], Cor -0.0078 [-0.0125, -0.0032].
    """
    from mushroom.combine.stack.features import load_stack_data
    from mushroom.combine.stack.fit import fit_stack_data, stack_predictions

    names = [m.name for m in members]
    train_data, channels, found = load_stack_data(members, "val", train, None, [])
    # it stopped on "its logistic model has 49 features, the stack 67" (an audit)
    model = fit_stack_data(train_data, channels, names, folds=5, language_columns=False).model
    fitted = {m.name: by_lang for m, by_lang in zip(members, found)}
    test_data, _, _ = load_stack_data(members, "val", held, channels, [], fitted)
    return stack_predictions(model, test_data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument(
        "--work", default=None, help="member runs (reused when present); default: a scratch folder"
    )
    parser.add_argument("--markdown", default=None, help="also write the table as Markdown to this file")
    parser.add_argument(
        "--language-columns",
        choices=("on", "off", "both"),
        default="on",
        help="off: fit without the language one-hot and slope columns (a language-agnostic stack); "
        "both: each, and their paired difference on the held-out items",
    )
    args = parser.parse_args()
    if args.markdown and args.language_columns == "off":
        raise MushroomError("--markdown writes the results page's table: it is of the default stack only")
    val = val_members(args.members, args.work, "stack-lolo-")
    data, members = val.data, val.members
    modes = ["on", "off"] if args.language_columns == "both" else [args.language_columns]
    rows: dict[str, list] = {mode: [] for mode in modes}
    start = time.perf_counter()
    for held in sorted(data):
        train = {lang: items for lang, items in data.items() if lang != held}
        lexical_file = members[0].folder("val") / submission_name(held, "val")
        lexical_preds = load_predictions(lexical_file)
        lexical = score_predictions(data[held], [lexical_preds[it.id] for it in data[held]])
        for mode in modes:
            if mode == "on":
                fit = fit_stack(members, train, folds=5)
                preds = apply_stack(fit.model, members, "val", {held: data[held]})[held]
            else:
                preds = agnostic_predictions(members, train, {held: data[held]})
            stack = score_predictions(data[held], preds)
            rows[mode].append((held, len(data[held]), stack, lexical))
            print(
                f"{held} (language columns {mode}): stack IoU {stack.mean_iou:.4f} Cor {stack.mean_cor:.4f}; "
                f"{members[0].name} IoU {lexical.mean_iou:.4f} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    for mode in modes:
        table, mean, base = _table(rows[mode], members[0].name)
        if len(modes) > 1:
            print(f"language columns {mode}:")
        print(table)
        print(
            f"leave-one-language-out, language columns {mode}: stack IoU {mean['mean_iou']:.4f} Cor "
            f"{mean['mean_cor']:.4f}; {members[0].name} IoU {base['mean_iou']:.4f} Cor {base['mean_cor']:.4f}"
        )
        if args.markdown and mode == "on":
            Path(args.markdown).write_text(
                f"Written by `python benchmarks/stack_lolo.py --markdown {args.markdown}`.\n\n{table}\n",
                encoding="utf-8",
            )
    if len(modes) == 2:
        _paired(rows["off"], rows["on"])


def _table(rows: list, base_name: str) -> tuple[str, dict[str, float], dict[str, float]]:
    """The Markdown table of one mode's rows, and its means over languages (stack, base member)."""
    header = f"| held-out language | items | stack IoU [95% CI] | stack Cor [95% CI] | {base_name} IoU | {base_name} Cor |"
    lines = [header, "|---|---|---|---|---|---|"]
    for lang, n, stack, lexical in rows:
        lines.append(
            f"| {lang} | {n} | {_ci(stack.iou)} | {_ci(stack.cor)} | {lexical.mean_iou:.4f} | {lexical.mean_cor:.4f} |"
        )
    mean = {k: float(np.mean([getattr(r[2], k) for r in rows])) for k in ("mean_iou", "mean_cor")}
    base = {k: float(np.mean([getattr(r[3], k) for r in rows])) for k in ("mean_iou", "mean_cor")}
    lines.append(
        f"| mean of languages | {sum(r[1] for r in rows)} | {mean['mean_iou']:.4f} | {mean['mean_cor']:.4f} "
        f"| {base['mean_iou']:.4f} | {base['mean_cor']:.4f} |"
    )
    return "\n".join(lines), mean, base


def _paired(off: list, on: list) -> None:
    """Off minus on, paired over the held-out items, as a mean over languages (each held out once)."""
    from mushroom.evaluation.stats import paired_test

    groups = np.concatenate([[r[0]] * r[1] for r in on])
    for metric in ("iou", "cor"):
        a = np.concatenate([getattr(r[2], metric) for r in off])
        b = np.concatenate([getattr(r[2], metric) for r in on])
        t = paired_test(a, b, groups=groups)
        print(
            f"language columns off - on, {metric.replace('iou', 'IoU').replace('cor', 'Cor')} over "
            f"{t.n} held-out items: {t.mean_diff:+.4f} [{t.ci_low:+.4f}, {t.ci_high:+.4f}] p={t.p_value:.3f}"
        )


if __name__ == "__main__":
    run_script(main)
