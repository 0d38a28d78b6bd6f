"""Leave one language out: the stack fitted on nine val languages, scored on the tenth.

Four test languages (ca, cs, eu, fa) have no val data: the main job applies to them a stack
fitted on the ten val languages, with the pooled choices it makes for a language it never
saw (no language column, the pooled threshold, floor and hard-label source). The k-fold
yardstick (benchmarks/stack_val.py) sees every language in training, so it cannot say how
that goes. Here each val language in turn plays the unseen one: the stack is fitted, with
its own cross-validated choices, on the other nine and applied to it exactly as to a test
language (`apply_stack`). Next to it: the lexical member alone, the floor the stack must beat.

    python benchmarks/stack_lolo.py [--members lexical,semantic] [--work DIR] [--markdown FILE] [--compare]

`--compare` also scores the stack with language columns alone and the one without them
alone, each paired with the first: why an unseen language takes the hard labels of the one
and the soft labels of the other.
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


SYSTEMS = {
    "default": "the main job's stack: hard labels of the stack without language columns",
    "columns": "the stack with language columns alone (before 2026-11-29)",
    "agnostic": "the stack without language columns alone",
}


def held_out_predictions(members: list, train: dict, held: dict) -> dict[str, list]:
    """The held-out language's predictions of each of `SYSTEMS`, from one fit.

    A language the stack never saw gets all-zero language columns, a point no training row
    has (each has one language set). The stack fits a second model without them
    (`StackModel.unseen_hard`), whose hard labels such a language takes; its soft labels stay
    the first model's. The fit holds all three systems.
    """
    model = fit_stack(members, train, folds=5).model
    (lang,) = held
    return {
        "default": apply_stack(model, members, "val", held)[lang],
        "columns": apply_stack(model.model_copy(update={"unseen_hard": None}), members, "val", held)[lang],
        "agnostic": apply_stack(model.unseen_hard, members, "val", held)[lang],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument(
        "--work", default=None, help="member runs (reused when present); default: a scratch folder"
    )
    parser.add_argument("--markdown", default=None, help="also write the table as Markdown to this file")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="also the stack with language columns alone and without them alone, and each paired "
        "against the first",
    )
    args = parser.parse_args()
    val = val_members(args.members, args.work, "stack-lolo-")
    data, members = val.data, val.members
    shown = list(SYSTEMS) if args.compare else ["default"]
    rows: dict[str, list] = {name: [] for name in shown}
    start = time.perf_counter()
    for held in sorted(data):
        train = {lang: items for lang, items in data.items() if lang != held}
        lexical_file = members[0].folder("val") / submission_name(held, "val")
        lexical_preds = load_predictions(lexical_file)
        lexical = score_predictions(data[held], [lexical_preds[it.id] for it in data[held]])
        found = held_out_predictions(members, train, {held: data[held]})
        for name in shown:
            stack = score_predictions(data[held], found[name])
            rows[name].append((held, len(data[held]), stack, lexical))
            print(
                f"{held} ({name}): stack IoU {stack.mean_iou:.4f} Cor {stack.mean_cor:.4f}; "
                f"{members[0].name} IoU {lexical.mean_iou:.4f} ({time.perf_counter() - start:.0f} s)",
                flush=True,
            )
    for name in shown:
        table, mean, base = _table(rows[name], members[0].name)
        if args.compare:
            print(f"{name}: {SYSTEMS[name]}")
        print(table)
        print(
            f"leave-one-language-out, {name}: stack IoU {mean['mean_iou']:.4f} Cor "
            f"{mean['mean_cor']:.4f}; {members[0].name} IoU {base['mean_iou']:.4f} Cor {base['mean_cor']:.4f}"
        )
        if args.markdown and name == "default":
            Path(args.markdown).write_text(
                f"Written by `python benchmarks/stack_lolo.py --markdown {args.markdown}`.\n\n{table}\n",
                encoding="utf-8",
            )
    if args.compare:
        for name in ("default", "agnostic"):
            _paired(rows[name], rows["columns"], f"{name} - columns")


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


def _paired(first: list, second: list, said: str) -> None:
    """First minus second, paired over the held-out items, as a mean over languages."""
    from mushroom.evaluation.stats import paired_test

    groups = np.concatenate([[r[0]] * r[1] for r in second])
    for metric, shown in (("iou", "IoU"), ("cor", "Cor")):
        a = np.concatenate([getattr(r[2], metric) for r in first])
        b = np.concatenate([getattr(r[2], metric) for r in second])
        t = paired_test(a, b, groups=groups)
        print(
            f"{said}, {shown} over {t.n} held-out items: {t.mean_diff:+.4f} "
            f"[{t.ci_low:+.4f}, {t.ci_high:+.4f}] p={t.p_value:.3f}"
        )


if __name__ == "__main__":
    run_script(main)
