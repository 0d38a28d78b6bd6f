"""The lexical detector's evidence channels: what the stack learns from beyond one probability.

The lexical probability is a calibrated bucket rate (word kind x share of contexts not
supporting the word), which throws away what the stack can use: whether the word is rare
or common in its language, whether the words around it are supported too, whether the
word is in the contexts but never next to its neighbours ("won a silver medal" when the
context says "gold medal"), how many times the contexts repeat it, and how much of the
sentence and of the whole answer is unsupported. On val (5-fold CV, nested choices, mean of
three fold draws) the logistic stack scored IoU 0.535 / Cor 0.564 before these channels and
the logit features, 0.562 / 0.581 with them and the fact-check channels below
(`benchmarks/stack_val.py --model logistic --seeds 0,1,2`).

A fact-check context (`mushroom.data.contexts.is_fact_check`: a search model's verdict on the
answer, shipped for English) adds the `check_*` channels: answer words it puts right after
a negation ("in 1984, not 2008"), words it quotes from the answer, words it never uses
outside such corrections, and its verdict. They are 0 for items without one.

Every channel is a per-character vector in [0, 1] (channel files store that range), 0 on
function words and punctuation unless it describes a whole sentence or answer.
"""

from __future__ import annotations

import math
import re

import numpy as np

from mushroom.data.contexts import fact_checks, support_contexts
from mushroom.data.records import Context, Item
from mushroom.text.frequency import ZIPF_MAX, zipf
from mushroom.text.segment import sentences
from mushroom.text.tokenize import Token, tokenize

CHANNELS = (
    "unsupported",
    "content",
    "in_question",
    "exact",
    "bigram_miss",
    "context_count",
    "zipf",
    "rare_unsupported",
    "common_unsupported",
    "number_unsupported",
    "capital_unsupported",
    "near_unsupported",
    "sentence_unsupported",
    "item_unsupported",
    "context_chars",
    "checked",
    "check_negated",
    "check_negated_only",
    "check_negated_unsupported",
    "check_quoted",
    "check_unused",
    "check_verdict",
)

_RARE, _COMMON = 3.5, 4.5  # Zipf frequency: below is rare, at or above is common
_NEAR = 3  # content words on each side for `near_unsupported`
# A fact-check's corrections: the tokens after a negation cue ("... in 1984, not 2008"; "did
# not take place in the 1950s"), up to the end of the clause. Verdict words ("incorrect",
# "inaccuracies"), "rather", "instead" and "contrary to" are no cues: the correct facts
# follow them ("but rather Zoo Zajac"); "rather than" and "instead of" are. Fact-checks are
# English (the only ones shipped), so are the cues.
_NEGATION_CUES = frozenset("not no never isn wasn weren didn doesn aren".split())
_NEGATION_PAIRS = frozenset({("rather", "than"), ("instead", "of")})
_NEGATION_REACH = 10  # tokens after a cue
_CLAUSE_END = re.compile(r"[.;:!?\n\[\]()]")  # ends a correction's reach; [n] is a citation
_QUOTED = re.compile(r'"[^"\n]{1,300}"|“[^”\n]{1,300}”')
_BAD_VERDICT = re.compile(
    r"(?<!\bno )(?<!\bany )\b(incorrect|inaccura\w*|not (entirely |fully |completely )?(accurate|correct)|"
    r"wrong|errors?|mistakes?|false|misleading|cannot (be )?(confirm|verif)\w*|no (evidence|information))\b",
    re.IGNORECASE,
)
_GOOD_VERDICT = re.compile(
    r"\b(is|are|was|were) (indeed |generally |largely |mostly )?(accurate|correct)\b", re.IGNORECASE
)


def _context_grams(contexts: list[Context]) -> tuple[set[tuple[str, str]], dict[str, int]]:
    """Adjacent normalised token pairs of all contexts, and how often each token occurs."""
    pairs: set[tuple[str, str]] = set()
    counts: dict[str, int] = {}
    for ctx in contexts:
        norms = [t.norm for t in tokenize(ctx.text)]
        pairs.update(zip(norms, norms[1:]))
        for norm in norms:
            counts[norm] = counts.get(norm, 0) + 1
    return pairs, counts


def lexical_channels(
    item: Item, contexts: list[Context], evidence: list[tuple[Token, float | None, str]]
) -> dict[str, np.ndarray]:
    """The channels of one answer from its token evidence (see `LexicalDetector.token_evidence`)."""
    text = item.model_output_text
    n = len(text)
    ch = {name: np.zeros(n) for name in CHANNELS}
    kept = support_contexts(contexts)
    pairs, counts = _context_grams(kept)
    tokens = [tok for tok, _, _ in evidence]
    scored: list[tuple[Token, float]] = []  # content tokens with their unsupport (question = 0)
    for k, (tok, share, bucket) in enumerate(evidence):
        if share is None:
            continue
        span = slice(tok.start, tok.end)
        in_question = bucket.endswith("|q")
        # wordfreq normalises itself; the accent-stripped `norm` is another word ("niño" -> "nino")
        freq = zipf(tok.text.lower(), item.lang) if tok.kind != "cjk" else 0.0
        ch["unsupported"][span] = share
        ch["content"][span] = 1.0
        ch["in_question"][span] = float(in_question)
        ch["exact"][span] = float(share == 0.0)
        ch["context_count"][span] = min(math.log1p(counts.get(tok.norm, 0)) / 5.0, 1.0)
        ch["zipf"][span] = freq / ZIPF_MAX
        ch["rare_unsupported"][span] = share * (freq < _RARE)
        ch["common_unsupported"][span] = share * (freq >= _COMMON)
        ch["number_unsupported"][span] = share * (tok.kind == "num")
        ch["capital_unsupported"][span] = share * tok.text[:1].isupper()
        if share < 1.0 and pairs and not in_question and len(tokens) > 1:
            left = k > 0 and (tokens[k - 1].norm, tok.norm) in pairs
            right = k + 1 < len(tokens) and (tok.norm, tokens[k + 1].norm) in pairs
            ch["bigram_miss"][span] = float(not left and not right)
        scored.append((tok, share))
    if scored:
        shares = np.array([s for _, s in scored])
        ch["item_unsupported"][:] = shares.mean()
        for i, (tok, _) in enumerate(scored):
            ch["near_unsupported"][tok.start : tok.end] = shares[max(0, i - _NEAR) : i + _NEAR + 1].mean()
        # tokens are in text order: each sentence's are a slice, found by bisection (a mask
        # over all tokens per sentence was quadratic: 16 s for a 400 KB answer, an audit)
        starts = np.array([tok.start for tok, _ in scored])
        order = np.argsort(starts, kind="stable")
        starts, shares = starts[order], shares[order]
        for piece in sentences(text):
            lo, hi = np.searchsorted(starts, [piece.start, piece.end])
            if hi > lo:
                ch["sentence_unsupported"][piece.start : piece.end] = shares[lo:hi].mean()
    ch["context_chars"][:] = min(math.log1p(sum(len(c.text) for c in kept)) / 10.0, 1.0)
    checks = fact_checks(contexts)
    if checks:
        _check_channels(ch, scored, checks)
    return ch


def _check_channels(
    ch: dict[str, np.ndarray], content: list[tuple[Token, float]], checks: list[Context]
) -> None:
    """Fills the `check_*` channels of the answer's content tokens from its fact-checks."""
    negated: set[str] = set()
    used: set[str] = set()  # tokens outside any correction
    quoted: set[str] = set()
    bad = good = 0
    for check in checks:
        tokens = tokenize(check.text)
        reach = -1
        for i, tok in enumerate(tokens):
            if i and _CLAUSE_END.search(check.text, tokens[i - 1].end, tok.start):
                reach = -1
            if i <= reach:
                negated.add(tok.norm)
            else:
                used.add(tok.norm)
            if tok.norm in _NEGATION_CUES or (i and (tokens[i - 1].norm, tok.norm) in _NEGATION_PAIRS):
                reach = i + _NEGATION_REACH
        for match in _QUOTED.finditer(check.text):
            quoted.update(t.norm for t in tokenize(match.group(0)))
        head = check.text[:300]
        bad += bool(_BAD_VERDICT.search(head))
        good += bool(_GOOD_VERDICT.search(head))
    ch["checked"][:] = 1.0
    ch["check_verdict"][:] = 0.5 + 0.5 * (bad - good) / max(bad + good, 1)
    for tok, share in content:
        span = slice(tok.start, tok.end)
        ch["check_negated"][span] = float(tok.norm in negated)
        # Among words the contexts do not support, gold marks 4 in 5 of the corrected ones
        # on English val and 1 in 3 of the rest (benchmarks/fact_check_channels.py); the
        # product is for the stack's linear part, which cannot form it.
        ch["check_negated_unsupported"][span] = share * (tok.norm in negated)
        ch["check_negated_only"][span] = float(tok.norm in negated and tok.norm not in used)
        ch["check_quoted"][span] = float(tok.norm in quoted)
        ch["check_unused"][span] = float(tok.norm not in used)
