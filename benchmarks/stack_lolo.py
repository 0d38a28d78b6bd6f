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
from mushroom.evaluation.score import score_predictions  # noqa: E402


def _ci(values: np.ndarray) -> str:
    from mushroom.evaluation.stats import bootstrap_ci

    low, high = bootstrap_ci(values)
    return f"{values.mean():.4f} [{low:.2f}, {high:.2f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument(
        "--work", default=None, help="member runs (reused when present); default: a scratch folder"
    )
    parser.add_argument("--markdown", default=None, help="also write the table as Markdown to this file")
    args = parser.parse_args()
    val = val_members(args.members, args.work, "stack-lolo-")
    data, members = val.data, val.members
    rows = []
    start = time.perf_counter()
    for held in sorted(data):
        train = {lang: items for lang, items in data.items() if lang != held}
        fit = fit_stack(members, train, folds=5)
        preds = apply_stack(fit.model, members, "val", {held: data[held]})[held]
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
