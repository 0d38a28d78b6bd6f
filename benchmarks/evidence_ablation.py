"""Would new evidence help the stack? Paired ablation on val, nested in the folds.

Usage: python benchmarks/evidence_ablation.py --evidence KIND[,KIND...] [--columns all]
           [--work DIR] [--seeds 0,1,2,3,4]

Each kind of evidence gives extra per-character columns, appended after the stack's own (so
member columns keep their place); the stack (5-fold CV by item, every choice nested) is
fitted with and without them for each fold draw, and the per-item IoU and Cor averaged over
draws are compared pairwise per language (bootstrap 95% interval and sign-flip p over items,
as `feature_ablation.py`). Both kinds run the lexical detector's matching
(`LexicalDetector.token_evidence`) against other contexts than the member's:

`translated`: the UCSC release ships, for every language and split, `translated:<source>`
contexts: the question translated to English and answered again, in English, by the same two
models. They are new samples, not translations of the default contexts (for val-de-10 one
says RTL, the other Sixx), and the main job does not load them. An answer in another
language shares with an English text its numbers, years and most Latin-script names, which
is where annotators mark most; in English they are two more contexts. Columns:
`tr_unsupported` (share of the translated contexts not supporting the word), the same on
numbers and on capitalised words, and `tr_both_unsupported` (its product with the lexical
member's own `unsupported` channel, for the linear part).

`per_source`: the lexical member's `unsupported` channel is the share of the default sources
(Sonar Pro's detailed answer, DeepSeek-R1's short one) not supporting a word, so 0.5 says
"one of them" without saying which. Columns: `src_<source>`, each source's verdict alone.

`conflict`: whether the contexts say something else where an unsupported word stands (a
substitution rather than a detail they never cover): `cf_slot` (its supported neighbours
stand close together in a context) and `cf_number` (contexts hold another number of the same
digit count); see `conflict_columns`.

`question`: how close a word stands to what the question asks (annotators mark the claim
that answers it more than the details around it); see `question_columns`.

`run`: the longest verbatim stretch around each character found in a context (Chinese is
matched by bigrams, which common ones pass anywhere); see `run_columns`.

`relative`: where a character's evidence stands among its own item's (Cor ranks characters
within an item; the stack's columns are absolute); see `relative_columns`.

Measured (`--work` shared, mean over languages; baseline IoU 0.5744 Cor 0.5992 over draws
0,1,2, 0.5757 / 0.5975 over 0-4), none goes into the default:
- `--evidence translated --seeds 0,1,2`, all four columns: IoU -0.0041 [-0.0099, +0.0012],
  Cor -0.0016 [-0.0061, +0.0024]; English Cor +0.0146 [+0.0001, +0.0354].
- `--evidence per_source --seeds 0,1,2`: IoU +0.0012 [-0.0015, +0.0043], Cor -0.0005
  [-0.0015, +0.0004].
- `--evidence conflict --seeds 0,1,2`: IoU +0.0020 [-0.0020, +0.0062], Cor -0.0016
  [-0.0034, +0.0001]; English IoU +0.0098 [-0.0003, +0.0237].
- `--evidence question --seeds 0,1,2`: IoU +0.0032 [-0.0012, +0.0079], Cor -0.0013
  [-0.0041, +0.0012]; fr IoU -0.0075 [-0.0147, +0.0004].
- all four together (`--evidence translated,per_source,conflict,question --seeds 0,1,2`):
  IoU -0.0020 [-0.0063, +0.0021], Cor -0.0004 [-0.0038, +0.0030].
- `--evidence run --seeds 0,1,2,3,4`: mean over languages IoU 0.5757 -> 0.5799, Cor 0.5975 ->
  0.5998; paired IoU +0.0043 [-0.0007, +0.0090] p 0.095, Cor +0.0024 [-0.0026, +0.0073];
  ar IoU +0.0324 [+0.0142, +0.0529]. Leave one language out (`evidence_lolo.py --evidence run`):
  IoU 0.5418 -> 0.5496, Cor 0.5784 -> 0.5826. The closest of the kinds, still within noise
  paired over items, and the best of eight tries: not in the default.
- `--evidence relative --seeds 0,1,2`: IoU +0.0039 [-0.0028, +0.0111] p 0.28, Cor -0.0019
  [-0.0049, +0.0012]; de IoU -0.0399 [-0.0847, -0.0038]. Ranking within the item is what Cor
  scores, yet these columns do not raise it. Left one language out (`evidence_lolo.py
  --evidence relative`): IoU 0.5418 -> 0.5582, Cor 0.5784 -> 0.5820. Not in the default.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _args import whole_list
from feature_ablation import item_scores, lang_mean, print_paired  # noqa: E402
from stack_val import run_script, val_members  # noqa: E402

from mushroom.combine.stack.features import StackData, feature_names  # noqa: E402
from mushroom.data.contexts import load_contexts, support_contexts  # noqa: E402
from mushroom.data.records import Item  # noqa: E402
from mushroom.detectors.lexical import LexicalDetector, LexicalOptions  # noqa: E402
from mushroom.text.segment import sentences  # noqa: E402
from mushroom.text.stopwords import stopwords  # noqa: E402
from mushroom.text.tokenize import tokenize  # noqa: E402

TRANSLATED = ("translated:perplexity-sonar-pro", "translated:deepseek-r1")
PER_SOURCE = ("perplexity-sonar-pro", "deepseek-r1")
COLUMNS = {
    "translated": (
        "tr_unsupported",
        "tr_number_unsupported",
        "tr_capital_unsupported",
        "tr_both_unsupported",
    ),
    "per_source": tuple(f"src_{source}" for source in PER_SOURCE),
    "conflict": ("cf_slot", "cf_number"),
    "question": ("q_sentence_overlap", "q_distance"),
    "run": ("run_length",),
    "relative": ("rel_rank", "rel_z", "rel_of_max"),
}
_RUN_CAP = 30  # characters: `run_length` is 1 at and beyond
_Q_REACH = 20  # content words: `q_distance` is 1 this far from any question word and beyond
_SLOT_ANCHOR = 4  # content tokens searched on each side of a word for a supported anchor
_SLOT_SPAN = 8  # the two anchors at most this many tokens apart in a context


def translated_columns(
    item: Item, contexts: list, lexical: LexicalDetector, own_unsupported: np.ndarray
) -> dict[str, np.ndarray]:
    """The `translated` columns of one item (zeros where it has no translated context)."""
    n = len(item.model_output_text)
    cols = {name: np.zeros(n) for name in COLUMNS["translated"]}
    if not contexts:
        return cols
    for tok, share, _ in lexical.token_evidence(item, contexts):
        if share is None:
            continue
        span = slice(tok.start, tok.end)
        cols["tr_unsupported"][span] = share
        cols["tr_number_unsupported"][span] = share * (tok.kind == "num")
        cols["tr_capital_unsupported"][span] = share * tok.text[:1].isupper()
    cols["tr_both_unsupported"] = cols["tr_unsupported"] * own_unsupported
    return cols


def per_source_columns(item: Item, contexts: list, lexical: LexicalDetector) -> dict[str, np.ndarray]:
    """Each default support source's own unsupport of the answer's content words."""
    n = len(item.model_output_text)
    cols = {}
    for source in PER_SOURCE:
        col = np.zeros(n)
        mine = [c for c in contexts if c.source == source]
        if mine:
            for tok, share, _ in lexical.token_evidence(item, mine):
                if share is not None:
                    col[tok.start : tok.end] = share
        cols[f"src_{source}"] = col
    return cols


def conflict_columns(item: Item, contexts: list, lexical: LexicalDetector) -> dict[str, np.ndarray]:
    """Whether the contexts say something else where an unsupported word stands.

    `cf_slot`: the nearest supported content words on either side of an unsupported one (in
    its sentence, up to `_SLOT_ANCHOR` content words away) also stand close together in one
    context, so the context fills the same slot with other words (a substitution, not an
    extra detail the context never covers). `cf_number`: the share of contexts holding a
    number of the same digit count that the answer does not hold.
    """
    n = len(item.model_output_text)
    cols = {name: np.zeros(n) for name in COLUMNS["conflict"]}
    kept = support_contexts(contexts)
    if not kept:
        return cols
    evidence = [(tok, share) for tok, share, _ in lexical.token_evidence(item, kept) if share is not None]
    answer_norms = {tok.norm for tok in tokenize(item.model_output_text)}
    places: list[dict[str, list[int]]] = []
    numbers: list[set[str]] = []
    for ctx in kept:
        where: dict[str, list[int]] = {}
        nums = set()
        for i, tok in enumerate(tokenize(ctx.text)):
            where.setdefault(tok.norm, []).append(i)
            if tok.kind == "num" and tok.norm not in answer_norms:
                nums.add(str(len(tok.norm)))
        places.append(where)
        numbers.append(nums)
    sentence_of = np.zeros(n, dtype=int)
    for k, piece in enumerate(sentences(item.model_output_text)):
        sentence_of[piece.start : piece.end] = k

    def anchor(k: int, step: int) -> str | None:
        for j in range(k + step, k + step * (_SLOT_ANCHOR + 1), step):
            if not 0 <= j < len(evidence):
                return None
            tok, share = evidence[j]
            if sentence_of[tok.start] != sentence_of[evidence[k][0].start]:
                return None
            if share == 0.0:
                return tok.norm
        return None

    for k, (tok, share) in enumerate(evidence):
        if share == 0.0:
            continue
        span = slice(tok.start, tok.end)
        left, right = anchor(k, -1), anchor(k, 1)
        if left and right:
            cols["cf_slot"][span] = float(
                any(
                    0 < j - i <= _SLOT_SPAN
                    for where in places
                    for i in where.get(left, ())
                    for j in where.get(right, ())
                )
            )
        if tok.kind == "num":
            cols["cf_number"][span] = np.mean([str(len(tok.norm)) in nums for nums in numbers])
    return cols


def question_columns(item: Item, lexical: LexicalDetector) -> dict[str, np.ndarray]:
    """How close a word stands to what the question asks.

    Most false positives are unsupported words gold leaves unmarked (see
    `error_classes.py`); annotators mark the claim that answers the question more than the
    details around it. `q_sentence_overlap`: the share of the question's content words found
    in the character's answer sentence; `q_distance`: content words between a word and the
    nearest answer word also in the question, over `_Q_REACH` (1 at and beyond it).
    """
    text = item.model_output_text
    n = len(text)
    cols = {name: np.zeros(n) for name in COLUMNS["question"]}
    stop = stopwords(item.lang)
    question = {t.norm for t in tokenize(item.model_input) if t.norm not in stop and len(t.norm) > 1}
    if not question or not n:
        return cols
    content = [t for t in tokenize(text) if t.norm not in stop and len(t.norm) > 1]
    for piece in sentences(text):
        inside = {t.norm for t in content if piece.start <= t.start < piece.end}
        cols["q_sentence_overlap"][piece.start : piece.end] = len(inside & question) / len(question)
    hits = [k for k, t in enumerate(content) if t.norm in question]
    for k, tok in enumerate(content):
        gap = min((abs(k - h) for h in hits), default=_Q_REACH)
        cols["q_distance"][tok.start : tok.end] = min(gap, _Q_REACH) / _Q_REACH
    return cols


def run_columns(item: Item, contexts: list) -> dict[str, np.ndarray]:
    """The longest stretch of the answer around each character found verbatim in a context.

    Chinese is matched by character bigrams, which common bigrams pass anywhere; a
    character inside a long copied stretch is supported in a way a lone bigram is not, and
    the stack over-marks Chinese most (`error_classes.py`). The same holds for any language
    at the character level. `run_length`: that stretch in characters over `_RUN_CAP`, on
    letters and digits (lower case).
    """
    # lower-cased character by character, so that positions stay those of the answer
    text = "".join(ch.lower() if len(ch.lower()) == 1 else ch for ch in item.model_output_text)
    n = len(text)
    best = np.zeros(n)
    for ctx in support_contexts(contexts):
        other = ctx.text.lower()
        i = 0
        while i < n:
            length = 0
            while i + length < n and text[i : i + length + 1] in other:
                length += 1
            if length:
                best[i : i + length] = np.maximum(best[i : i + length], length)
            i += 1
    alnum = np.array([ch.isalnum() for ch in text], dtype=float)
    return {"run_length": np.minimum(best, _RUN_CAP) / _RUN_CAP * alnum}


def relative_columns(mean: np.ndarray) -> dict[str, np.ndarray]:
    """Where each character's evidence stands among its own item's characters.

    Cor is Spearman within an item, so only the order of an item's characters counts, while
    the stack's columns are absolute (a word's evidence, not how it compares with its
    neighbours'). On the members' mean probability: `rel_rank` (its percentile in the item),
    `rel_z` (z-score in the item, clipped at 4 and scaled to [-1, 1]), `rel_of_max` (share of
    the item's highest).
    """
    n = len(mean)
    if not n:
        return {name: np.zeros(0) for name in COLUMNS["relative"]}
    ranks = np.argsort(np.argsort(mean, kind="stable"), kind="stable")  # ties keep text order
    z = (mean - mean.mean()) / (mean.std() + 1e-6)
    return {
        "rel_rank": ranks / max(n - 1, 1),
        "rel_z": np.clip(z, -4.0, 4.0) / 4.0,
        "rel_of_max": mean / (mean.max() + 1e-6),
    }


def extra_columns(
    stack_data: StackData,
    columns: list[str],
    kinds: list[str],
    wanted: list[str],
    own: dict[str, dict[str, list]],
    translated: dict[str, dict[str, list]],
    lexical: LexicalDetector,
) -> list[np.ndarray]:
    """The `wanted` columns of each item (characters x columns), in the order of its items.

    `own` and `translated` hold the default and the translated contexts by language and
    item id; `columns` names the stack's features (`feature_names`), where the lexical
    member's `unsupported` channel and the members' mean probability are looked up.
    """
    own_col, mean_col = columns.index("lexical.unsupported"), columns.index("mean_prob")
    extra = []
    for item, feats in zip(stack_data.items, stack_data.features):
        ctxs = own[item.lang].get(item.id, [])
        cols: dict[str, np.ndarray] = {}
        if "translated" in kinds:
            cols |= translated_columns(
                item, translated[item.lang].get(item.id, []), lexical, feats[:, own_col]
            )
        if "per_source" in kinds:
            cols |= per_source_columns(item, ctxs, lexical)
        if "conflict" in kinds:
            cols |= conflict_columns(item, ctxs, lexical)
        if "question" in kinds:
            cols |= question_columns(item, lexical)
        if "run" in kinds:
            cols |= run_columns(item, ctxs)
        if "relative" in kinds:
            cols |= relative_columns(feats[:, mean_col])
        extra.append(
            np.stack([cols[c] for c in wanted], axis=1) if len(feats) else np.zeros((0, len(wanted)))
        )
    return extra


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--members", default="lexical,semantic")
    parser.add_argument("--work", default=None, help="member runs (reused when present)")
    parser.add_argument("--seeds", type=whole_list, default="0,1,2,3,4")
    parser.add_argument("--evidence", required=True, help=f"comma list of kinds: {', '.join(COLUMNS)}")
    parser.add_argument("--columns", default="all", help="comma list of the kinds' columns, or all")
    args = parser.parse_args()
    kinds = args.evidence.split(",")
    unknown = [kind for kind in kinds if kind not in COLUMNS]
    if unknown:
        raise SystemExit(f"unknown evidence {', '.join(unknown)}; kinds: {', '.join(COLUMNS)}")
    val = val_members(args.members, args.work, "evidence-ablation-")
    data, names = val.data, val.names
    full, channels = val.stack_data()
    columns = feature_names(names, channels, sorted(data))
    every = [c for kind in kinds for c in COLUMNS[kind]]
    wanted = every if args.columns == "all" else args.columns.split(",")
    lexical = LexicalDetector(LexicalOptions(channels=False))
    own = {lang: load_contexts("val", lang, PER_SOURCE).by_id for lang in data}
    translated = (
        {lang: load_contexts("val", lang, TRANSLATED).by_id for lang in data} if "translated" in kinds else {}
    )
    extra = extra_columns(full, columns, kinds, wanted, own, translated, lexical)
    print(f"evidence {', '.join(kinds)}; columns {', '.join(wanted)}")
    added = StackData(full.items, [np.hstack([f, e]) for f, e in zip(full.features, extra)])
    seeds = args.seeds
    base = [item_scores(full, channels, names, s) for s in seeds]
    more = [item_scores(added, channels, names, s, columns + wanted) for s in seeds]
    langs = print_paired(
        f"stack with minus without {args.evidence} columns",
        more,
        base,
        [it.lang for it in full.items],
        means=True,
    )
    for label, runs in (("without", base), ("with", more)):
        ious, cors = ([lang_mean(run[m], langs) for run in runs] for m in (0, 1))
        print(
            f"{label}: mean over languages per draw IoU {' '.join(f'{v:.4f}' for v in ious)} "
            f"(mean {np.mean(ious):.4f}); Cor {' '.join(f'{v:.4f}' for v in cors)} (mean {np.mean(cors):.4f})"
        )


if __name__ == "__main__":
    run_script(main)
