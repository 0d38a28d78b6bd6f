"""Write the results page's tables (docs/results/*.md) from a real cross-validated run on val.

Usage: python benchmarks/results_page.py [--seeds 0] [--model blend,logistic,trees] [--work DIR]
           [--out docs/results]
Runs the main job's members (lexical, semantic) on val, as benchmarks/stack_val.py does
(files under --work are reused), fits the stack with 5-fold cross-validation by item for
each stack model, and writes three Markdown snippets that docs/results.md includes:
`val_systems.md` (one row per system: mean IoU/Cor over languages, and English),
`val_languages.md` (one row per language) and `val_clause_weight.md` (the stack with and
without the semantic member's word level). With --seeds 0,1,2 on 2 cores it takes about
6 minutes when the member runs under --work are new, and about 4 when they are reused. Each snippet names the command that wrote it, so
the page never carries a number typed by hand. Two fold draws or more add the mean over the
draws in brackets, as the README's table did.
"""

import argparse
import sys
import time
from pathlib import Path
from typing import get_args

import numpy as np

from mushroom.combine.stack import Member, StackConfig
from mushroom.combine.stack.features import load_stack_data
from mushroom.combine.stack.fit import choose, prepare
from mushroom.combine.stack.model import ModelKind

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _args import choice_list, whole_list
from stack_val import run_member, run_script, val_members  # noqa: E402  (a sibling script, not a package)

STACK_NAMES = {
    "blend": "stack (default: their mean)",
    "logistic": "stack, logistic only",
    "trees": "stack, trees only",
}
Scores = dict[str, dict[str, dict[str, float]]]  # system -> lang -> metric


def cell(draws: list[float], bold: bool = False) -> str:
    """The first draw's value, and the mean over draws in brackets when the draws differ.

    The members and their vote do not depend on the fold draw, so they get no brackets.
    """
    text = f"{draws[0]:.4f}"
    if len(set(draws)) > 1:
        text += f" ({np.mean(draws):.4f})"
    return f"**{text}**" if bold else text


def systems_table(per_draw: list[Scores]) -> list[str]:
    lines = ["| system | IoU | Cor | English IoU | English Cor |", "|---|---|---|---|---|"]
    for system in per_draw[0]:
        bold = system == STACK_NAMES["blend"]
        name = f"**{system}**" if bold else system
        cells = [
            cell([d[system][lang][metric] for d in per_draw], bold)
            for lang in ("mean", "en")
            for metric in ("iou", "cor")
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines


def languages_table(first: Scores) -> list[str]:
    systems = list(first)
    lines = [
        "| language | " + " | ".join(systems) + " |",
        "|---|" + "---|" * len(systems),
    ]
    langs = [lang for lang in first[systems[0]] if lang != "mean"] + ["mean"]
    for lang in langs:
        cells = [f"{first[s][lang]['iou']:.3f} / {first[s][lang]['cor']:.3f}" for s in systems]
        lines.append(f"| {lang} | " + " | ".join(cells) + " |")
    return lines


def clause_weight_table(work: Path, data, members: list[Member], seeds: list[int]) -> list[str]:
    """The stack with the semantic member's word level (the default) and without it.

    `-o semantic.clause_weight=1.0` skips the word level to save time; this says what that
    costs on val (mean of the fold draws, empty rule off, as the choice was first measured).
    """
    lines = ["| semantic member | IoU | Cor | English IoU | English Cor |", "|---|---|---|---|---|"]
    run_member("semantic", work / "semantic-clause-only", {"clause_weight": 1.0})
    variants = {
        "word and clause level (the default)": members,
        "clause level only (`-o semantic.clause_weight=1.0`)": [
            members[0],
            Member("semantic", work / "semantic-clause-only"),
        ],
    }
    for label, variant in variants.items():
        stack_data, channels, _ = load_stack_data(variant, "val", data, None, sorted(data))
        names = [m.name for m in variant]
        cvs = [
            choose(
                prepare(stack_data, channels, names, seed=seed, model="blend"), StackConfig(empty_rule=False)
            ).comparison["stack (CV)"]
            for seed in seeds
        ]
        cells = [
            f"{np.mean([cv[lang][metric] for cv in cvs]):.4f}"
            for lang in ("mean", "en")
            for metric in ("iou", "cor")
        ]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", type=whole_list, default="0", help="fold draws, e.g. 0,1,2 (the first draw is shown)"
    )
    parser.add_argument(
        "--model",
        type=choice_list(*get_args(ModelKind)),
        default="blend,logistic,trees",
        help="stack models, the first is the default",
    )
    parser.add_argument("--work", default=None, help="folder for the member runs (reused when present)")
    parser.add_argument("--out", default="docs/results", type=Path)
    args = parser.parse_args()
    command = "python benchmarks/results_page.py" + "".join(
        f" --{k} {v}"
        for k, v in (("seeds", ",".join(map(str, args.seeds))), ("model", ",".join(args.model)))
        if v != parser.get_default(k)
    )
    val = val_members("lexical,semantic", args.work, "results-page-")
    data, members = val.data, val.members
    start = time.perf_counter()
    stack_data, channels = val.stack_data()
    kinds = args.model
    per_draw: list[Scores] = []
    for seed in args.seeds:
        scores: Scores = {}
        for kind in kinds:
            fit = choose(
                prepare(stack_data, channels, [m.name for m in members], seed=seed, model=kind), StackConfig()
            )
            if not scores:  # the members and their vote are the same for every stack model
                scores.update({k: v for k, v in fit.comparison.items() if k != "stack (CV)"})
            scores[STACK_NAMES[kind]] = fit.comparison["stack (CV)"]
        own = scores.pop("stack (CV, own hard labels)", None)  # the stack's own cut, before the source choice
        if own is not None:
            scores["stack (default), hard labels of its own threshold only"] = own
        per_draw.append(scores)
    clause = clause_weight_table(val.work, data, members, args.seeds)
    print(f"stack fits: {time.perf_counter() - start:.1f} s wall", file=sys.stderr)
    draws = f"fold draw {args.seeds[0]}" + (
        f", and in brackets the mean of {len(per_draw)} draws" if len(per_draw) > 1 else ""
    )
    note = f"<!-- written by `{command}`; do not edit by hand -->"
    args.out.mkdir(parents=True, exist_ok=True)
    systems = [note, "", f"Val, 5-fold CV by item ({draws}); written by `{command}`.", ""]
    (args.out / "val_systems.md").write_text("\n".join(systems + systems_table(per_draw)) + "\n")
    langs = [
        note,
        "",
        f"IoU / Cor per language, val, 5-fold CV by item (fold draw {args.seeds[0]}).",
        "",
    ]
    (args.out / "val_languages.md").write_text("\n".join(langs + languages_table(per_draw[0])) + "\n")
    clause_note = (
        f"Val, 5-fold CV by item, the stack's mean over {len(args.seeds)} fold draw(s), "
        "before the empty rule; the semantic member with and without its word level."
    )
    (args.out / "val_clause_weight.md").write_text("\n".join([note, "", clause_note, ""] + clause) + "\n")
    print("\n".join(systems_table(per_draw) + [""] + clause))


if __name__ == "__main__":
    run_script(main)
