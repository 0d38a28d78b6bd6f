"""Val scores (5-fold CV by item) of each member detector, their plain vote, and the stack.

Usage: python benchmarks/stack_val.py [--members lexical,semantic] [--work DIR] [--model blend,trees,logistic]
           [-o MEMBER.KEY=VALUE ...]
           [--cutoff-shrink K[,K...]] [--floor-shrink K[,K...]] [--source-shrink K[,K...]]
           [--empty-rule on,off] [--seeds 0,1,2]
Runs each member on val (files under --work, reused when present), fits the stack with
cross-validation by item and prints mean IoU/Cor per system and language, the CPU seconds
per item of each member, and how much the stack's score and each of its choices (cut-offs,
hard-label source per language, items the empty rule empties) move from fold to fold. With
several shrinkage weights (or the empty rule on and off),
one line per configuration follows (the table is the first configuration's); every choice
is nested inside the folds, so these lines are honest to compare, but picking the best of
them on val is itself a choice made on val.
"""

import argparse
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import get_args

import numpy as np
from _args import choice_list, nonnegative_list, whole_list
from rich.console import Console

from mushroom.cli.tables import systems_table
from mushroom.combine.stack import Member, StackConfig
from mushroom.combine.stack.features import StackData, load_stack_data
from mushroom.combine.stack.fit import StackFit, choose, prepare
from mushroom.combine.stack.model import ModelKind
from mushroom.data.contexts import DEFAULT_SOURCES
from mushroom.data.records import Item
from mushroom.data.splits import load_split
from mushroom.detectors import Detector, build
from mushroom.errors import MushroomError
from mushroom.util.options import nest_options, parse_options, split_names


def spread(values: list[float]) -> str:
    return f"{np.mean(values):.4f} (sd {np.std(values):.4f}, {min(values):.4f}-{max(values):.4f})"


def print_spread(fit: StackFit) -> None:
    folds = fit.folds
    print(
        f"stack (CV) per fold, mean over languages: IoU {spread([f['scores']['mean']['iou'] for f in folds])}"
    )
    print(f"{'':41s}Cor {spread([f['scores']['mean']['cor'] for f in folds])}")
    print("choices made on the other folds (per fold), then on all of val:")
    for lang in sorted(fit.model.thresholds):
        ts = [f["cutoffs"][lang][0] for f in folds]
        fs = [f["cutoffs"][lang][1] for f in folds]
        src = Counter(f["sources"][lang] for f in folds)
        emptied = [f.get("emptied", {}).get(lang, 0) for f in folds]
        ious = [f["scores"][lang]["iou"] for f in folds]
        print(
            f"  {lang}: threshold {np.mean(ts):.2f} (sd {np.std(ts):.2f}) -> {fit.model.thresholds[lang]:.2f}; "
            f"floor {np.mean(fs):.2f} (sd {np.std(fs):.2f}) -> {fit.model.floors[lang]:.2f}; "
            f"hard labels {dict(src)} -> {fit.model.hard_sources[lang]}; items emptied per fold "
            f"{emptied}; fold IoU {spread(ious)}"
        )


def run_script(main: Callable[[], None]) -> None:
    """Runs a benchmark's main: a mistake in its input is one line and an exit code, no traceback.

    As the CLI does (README, "Exit codes"): a MushroomError exits with its code (2 for input),
    Ctrl-C with 130. A bug still shows its traceback.
    """
    try:
        main()
    except MushroomError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None
    except KeyboardInterrupt:
        print("interrupted; member runs in --work resume where they stopped", file=sys.stderr)
        raise SystemExit(130) from None


def run_member(
    name: str,
    folder: Path,
    options: dict | None = None,
    detector: Detector | None = None,
    extra: dict | None = None,
) -> None:
    """Runs one member on val into `folder` (files already there are reused).

    The benchmarks share it, so a member run made by one is reused by another. `detector`
    is one built by the caller (with an encoder of its own, say); `extra` goes into the run's
    config, so that a folder made otherwise is refused rather than reused.
    """
    from mushroom.runs.service import RunService

    det = detector or build(name, options)
    config = {"benchmark": "stack_val", **det.describe(), "sources": list(DEFAULT_SOURCES), **(extra or {})}
    service = RunService(folder, config, quiet=True, folder_flag="--work")
    service.detect_split(det, "val", folder)
    if service.failures:
        raise SystemExit(f"{name}: {len(service.failures)} items failed; see {folder}")


@dataclass
class ValMembers:
    """The val split and its member runs, as the stack benchmarks read them."""

    work: Path
    data: dict[str, list[Item]]
    names: list[str]
    members: list[Member]
    scratch: tempfile.TemporaryDirectory | None  # held so the scratch runs live as long as this

    def stack_data(self) -> tuple[StackData, list[list[str]]]:
        """The stack's features of every val item, and each member's channel names."""
        stack_data, channels, _ = load_stack_data(self.members, "val", self.data, None, sorted(self.data))
        return stack_data, channels


def val_members(
    members: str, work: str | None, prefix: str, run: Callable[[str, Path], None] | None = None
) -> ValMembers:
    """Runs each member of the comma list on val under `work` (reused when there), or in scratch.

    Without `work` the runs go to a temporary folder removed when the result is dropped.
    `run(name, folder)` replaces `run_member` for a member made another way.
    """
    names = split_names(members, what="member")
    if len(set(names)) < len(names):
        raise MushroomError(f"--members {members}: a member is named twice")
    scratch = None if work else tempfile.TemporaryDirectory(prefix=prefix)
    folder = Path(work or scratch.name)
    data = load_split("val")
    for name in names:
        (run or run_member)(name, folder / name)
    return ValMembers(folder, data, names, [Member(name, folder / name) for name in names], scratch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("--work", default=None)
    parser.add_argument(
        "-o", "--option", action="append", default=[], help="MEMBER.KEY=VALUE, as for `mushroom main-job`"
    )
    for name in ("cutoff_shrink", "source_shrink", "floor_shrink"):
        flag = "--" + name.replace("_", "-")
        parser.add_argument(flag, type=nonnegative_list, default=str(getattr(StackConfig(), name)))
    parser.add_argument(
        "--empty-rule",
        type=choice_list("on", "off"),
        default="on",
        help="on, off, or on,off: the item-level empty rule",
    )
    parser.add_argument(
        "--model",
        type=choice_list(*get_args(ModelKind)),
        default="blend",
        help="blend, trees, logistic, or several: blend,logistic",
    )
    parser.add_argument(
        "--seeds", type=whole_list, default="0", help="fold draws, e.g. 0,1,2: config lines per draw and mean"
    )
    args = parser.parse_args()
    # Without --work the member runs are removed when the script exits.
    scratch = None if args.work else tempfile.TemporaryDirectory(prefix="stack-val-")
    work = Path(args.work or scratch.name)
    data = load_split("val")
    n_items = sum(len(v) for v in data.values())
    member_options = nest_options(parse_options(args.option))
    members = []
    for name in args.members.split(","):
        reused = (work / name).exists()
        start = time.process_time()
        run_member(name, work / name, member_options.get(name))
        timing = (
            "files reused, not timed"
            if reused
            else (f"{1000 * (time.process_time() - start) / n_items:.1f} ms CPU per item ({n_items} items)")
        )
        print(f"{name}: {timing}")
        members.append(Member(name, work / name))
    start = time.perf_counter()
    stack_data, channels, _ = load_stack_data(members, "val", data, None, sorted(data))
    configs = [
        StackConfig(cutoff_shrink=c, floor_shrink=f, source_shrink=s, empty_rule=e == "on")
        for c in args.cutoff_shrink
        for f in args.floor_shrink
        for s in args.source_shrink
        for e in args.empty_rule
    ]
    seeds = args.seeds
    kinds = args.model
    configs = [(kind, config) for kind in kinds for config in configs]
    results: dict[int, list[dict]] = {k: [] for k in range(len(configs))}
    for seed in seeds:
        preps = {
            kind: prepare(stack_data, channels, [m.name for m in members], seed=seed, model=kind)
            for kind in kinds
        }
        for k, (kind, config) in enumerate(configs):
            fit = choose(preps[kind], config)
            if k == 0 and seed == seeds[0]:
                print(f"stack fit: {time.perf_counter() - start:.1f} s wall")
                table = systems_table(
                    f"val, 5-fold CV by item (fold draw {seed})", fit.comparison, decimals=4
                )
                Console(width=200).print(table)
                print(
                    f"{fit.model.hard_label_summary()}; threshold {fit.model.threshold}, floor {fit.model.floor}"
                )
                print_spread(fit)
            cv = fit.comparison["stack (CV)"]
            results[k].append(cv)
            langs = " ".join(f"{lang} {v['iou']:.4f}" for lang, v in cv.items() if lang != "mean")
            print(
                f"draw {seed} {kind} config {config.model_dump()}: mean IoU {cv['mean']['iou']:.4f} "
                f"Cor {cv['mean']['cor']:.4f}; en IoU {cv['en']['iou']:.4f} Cor {cv['en']['cor']:.4f}; "
                f"IoU by language: {langs}"
            )
    if len(seeds) > 1:
        for k, (kind, config) in enumerate(configs):
            runs = results[k]
            langs = " ".join(
                f"{lang} {np.mean([r[lang]['iou'] for r in runs]):.4f}" for lang in runs[0] if lang != "mean"
            )
            print(
                f"mean of {len(seeds)} draws, {kind}, config {config.model_dump()}: "
                f"IoU {spread([r['mean']['iou'] for r in runs])}, Cor {spread([r['mean']['cor'] for r in runs])}; "
                f"en IoU {np.mean([r['en']['iou'] for r in runs]):.4f} Cor {np.mean([r['en']['cor'] for r in runs]):.4f}; "
                f"IoU by language: {langs}"
            )


if __name__ == "__main__":
    run_script(main)
