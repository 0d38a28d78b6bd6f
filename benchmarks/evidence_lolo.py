"""Leave one language out, with and without the extra evidence of `evidence_ablation.py`.

Usage: python benchmarks/evidence_lolo.py --evidence run [--work DIR]

As `stack_lolo.py`: each val language in turn is held out, the stack is fitted (its own
cross-validated choices) on the other nine and applied to it as to a test language (no
language column, pooled threshold, floor and hard-label source; the decoding of
`apply_stack`), once on the stack's own columns and once with the evidence columns appended.
It prints each held-out language's IoU and Cor both ways and the lexical member's, and the
mean over languages: the estimate for the four test languages without val data. Its
"without" columns reproduce the "columns" system of `stack_lolo.py --compare` (IoU 0.5418,
Cor 0.5784): the stack with language columns alone, as the main job's was before unseen
languages took the hard labels of the stack without them.

`--evidence run` (about 7 minutes on one core): with IoU 0.5496, Cor 0.5826; held-out fr
IoU 0.4504 -> 0.4740, above the lexical member's 0.4507; English 0.4041 -> 0.4068.
`--evidence relative`: with IoU 0.5582, Cor 0.5820.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from evidence_ablation import COLUMNS, PER_SOURCE, TRANSLATED, extra_columns  # noqa: E402
from stack_val import run_script, val_members  # noqa: E402

from mushroom.combine.stack.decoding import word_hard_mask  # noqa: E402
from mushroom.combine.stack.features import (  # noqa: E402
    StackData,
    feature_names,
    load_stack_data,
    member_columns,
)
from mushroom.combine.stack.fit import batch_probs, fit_stack_data  # noqa: E402
from mushroom.data.contexts import load_contexts  # noqa: E402
from mushroom.data.predictions import prediction_from_vectors  # noqa: E402
from mushroom.detectors.lexical import LexicalDetector, LexicalOptions  # noqa: E402
from mushroom.evaluation.score import score_predictions  # noqa: E402
from mushroom.util.options import split_names  # noqa: E402


def held_out_scores(
    train: StackData, held: StackData, channels, names: list[str], features: list[str] | None = None
) -> tuple[float, float]:
    """(IoU, Cor) on `held` of a stack fitted on `train`, decoded as `apply_stack` decodes;
    `features` names the columns when evidence columns are added."""
    model = fit_stack_data(train, channels, names, features=features).model
    hard_cols = {m: c + 1 for m, c in zip(names, member_columns(channels))}
    probs = batch_probs(held.items, held.features, model.scorer, model.word_pooling)
    preds = []
    for item, feats, raw in zip(held.items, held.features, probs):
        p = np.where(raw < model.floor, 0.0, raw)
        if model.hard_from == "stack":
            hard = word_hard_mask(item.model_output_text, p, model.threshold)
        else:
            hard = feats[:, hard_cols[model.hard_from]] > 0.5
        if model.empty_rule is not None and model.empty_rule.empties(len(item.model_output_text), raw):
            hard = np.zeros(len(item.model_output_text), dtype=bool)
        preds.append(prediction_from_vectors(item.id, p, hard))
    result = score_predictions(held.items, preds)
    return result.mean_iou, result.mean_cor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("--work", default=None, help="member runs (reused when present)")
    parser.add_argument("--evidence", required=True, help=f"comma list of kinds: {', '.join(COLUMNS)}")
    args = parser.parse_args()
    kinds = split_names(args.evidence, list(COLUMNS), "evidence kind")  # a typo was a KeyError
    wanted = [c for kind in kinds for c in COLUMNS[kind]]
    val = val_members(args.members, args.work, "evidence-lolo-")
    data, names, members = val.data, val.names, val.members
    lexical = LexicalDetector(LexicalOptions(channels=False))
    own = {lang: load_contexts("val", lang, PER_SOURCE).by_id for lang in data}
    translated = (
        {lang: load_contexts("val", lang, TRANSLATED).by_id for lang in data} if "translated" in kinds else {}
    )
    rows = []
    for held in sorted(data):
        langs = sorted(lang for lang in data if lang != held)
        train, channels, found = load_stack_data(
            members, "val", {lang: data[lang] for lang in langs}, None, langs
        )
        fitted = {m.name: by_lang for m, by_lang in zip(members, found)}
        test, _, _ = load_stack_data(members, "val", {held: data[held]}, channels, langs, fitted)
        columns = feature_names(names, channels, langs)

        plus = []
        for d in (train, test):
            extra = extra_columns(d, columns, kinds, wanted, own, translated, lexical)
            plus.append(StackData(d.items, [np.hstack([f, e]) for f, e in zip(d.features, extra)]))
        without = held_out_scores(train, test, channels, names)
        with_ = held_out_scores(plus[0], plus[1], channels, names, columns + wanted)
        lex_col = member_columns(channels)[0]
        lex = score_predictions(
            test.items,
            [
                prediction_from_vectors(it.id, f[:, lex_col], f[:, lex_col + 1] > 0.5)
                for it, f in zip(test.items, test.features)
            ],
        )
        rows.append((held, without, with_, (lex.mean_iou, lex.mean_cor)))
        print(
            f"{held}: without IoU {without[0]:.4f} Cor {without[1]:.4f}; with IoU {with_[0]:.4f} "
            f"Cor {with_[1]:.4f}; lexical IoU {lex.mean_iou:.4f} Cor {lex.mean_cor:.4f}",
            flush=True,
        )
    mean = [np.mean([r[k][m] for r in rows]) for k in (1, 2, 3) for m in (0, 1)]
    print(
        f"leave-one-language-out, mean over languages: without IoU {mean[0]:.4f} Cor {mean[1]:.4f}; "
        f"with {args.evidence} IoU {mean[2]:.4f} Cor {mean[3]:.4f}; lexical IoU {mean[4]:.4f} Cor {mean[5]:.4f}"
    )


if __name__ == "__main__":
    run_script(main)
