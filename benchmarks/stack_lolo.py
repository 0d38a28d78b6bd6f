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
    (`--language-columns off`): IoU 0.5451, Cor 0.5727 against the default's 0.5438 and
    0.5788, so the main job keeps them.
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
        choices=("on", "off"),
        default="on",
        help="off: fit without the language one-hot and slope columns (a language-agnostic stack)",
    )
    args = parser.parse_args()
    if args.markdown and args.language_columns == "off":
        raise MushroomError("--markdown writes the results page's table: it is of the default stack only")
    val = val_members(args.members, args.work, "stack-lolo-")
    data, members = val.data, val.members
    rows = []
    start = time.perf_counter()
    for held in sorted(data):
        train = {lang: items for lang, items in data.items() if lang != held}
        if args.language_columns == "on":
            fit = fit_stack(members, train, folds=5)
            preds = apply_stack(fit.model, members, "val", {held: data[held]})[held]
        else:
            preds = agnostic_predictions(members, train, {held: data[held]})
        stack = score_predictions(data[held], preds)
        lexical_file = members[0].folder("val") / submission_name(held, "val")
        lexical_preds = load_predictions(lexical_file)
        lexical = score_predictions(data[held], [lexical_preds[it.id] for it in data[held]])
        rows.append((held, len(data[held]), stack, lexical))
        print(
            f"{held}: stack IoU {stack.mean_iou:.4f} Cor {stack.mean_cor:.4f}; "
            f"{members[0].name} IoU {lexical.mean_iou:.4f} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    header = f"| held-out language | items | stack IoU [95% CI] | stack Cor [95% CI] | {members[0].name} IoU | {members[0].name} Cor |"
    lines = [header, "|---|---|---|---|---|---|"]
    for lang, n, stack, lexical in rows:
        lines.append(
            f"| {lang} | {n} | {_ci(stack.iou)} | {_ci(stack.cor)} | {lexical.mean_iou:.4f} | {lexical.mean_cor:.4f} |"
        )
    mean = {k: np.mean([getattr(r[2], k) for r in rows]) for k in ("mean_iou", "mean_cor")}
    base = {k: np.mean([getattr(r[3], k) for r in rows]) for k in ("mean_iou", "mean_cor")}
    lines.append(
        f"| mean of languages | {sum(r[1] for r in rows)} | {mean['mean_iou']:.4f} | {mean['mean_cor']:.4f} "
        f"| {base['mean_iou']:.4f} | {base['mean_cor']:.4f} |"
    )
    table = "\n".join(lines)
    print(table)
    print(
        f"leave-one-language-out: stack IoU {mean['mean_iou']:.4f} Cor {mean['mean_cor']:.4f}; "
        f"{members[0].name} IoU {base['mean_iou']:.4f} Cor {base['mean_cor']:.4f}"
    )
    if args.markdown:
        Path(args.markdown).write_text(
            f"Written by `python benchmarks/stack_lolo.py --markdown {args.markdown}`.\n\n{table}\n",
            encoding="utf-8",
        )


if __name__ == "__main__":
    run_script(main)
