"""The `lexical` detector: content words of the answer that no context supports.

It needs no model, so the main job runs anywhere. Each context votes on each content word
of the answer (supported or not); the share of contexts that do not support a word is the
probability that its characters are hallucinated. Words the question already contains are
taken as given. Flagged words close to each other, separated only by function words and
punctuation, merge into one phrase-level span, because annotators mark phrases
("2008 Summer Olympics in Beijing"), not isolated words.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Annotated

import numpy as np
import regex
from pydantic import Field, model_validator
from rapidfuzz.distance import Levenshtein

from mushroom.data.contexts import is_fact_check, support_contexts
from mushroom.data.records import Context, Item
from mushroom.detectors.base import DetectorOptions, HardThreshold, VectorDetector
from mushroom.detectors.lexical_calibration import Calibration, load_calibration
from mushroom.detectors.lexical_channels import lexical_channels
from mushroom.errors import MushroomError
from mushroom.text.segment import CJK_ENDS, LATIN_ENDS, OTHER_ENDS
from mushroom.text.stopwords import stop_characters, stopwords
from mushroom.text.tokenize import DIGIT_GROUP, Token, tokenize, vocabulary
from mushroom.util.files import NAMES_A_FILE

# the sentence ends of every script the task has (a gap across a danda or "؟" was bridged),
# and the clause marks a bridge should not cross either
_SENTENCE_BREAK = regex.compile(rf"[{LATIN_ENDS}{CJK_ENDS}{OTHER_ENDS}．;:；：؛\n]|\s-\s")


COMMON_WEIGHT = 0.5  # lowercase words count half, in raw shares


class LexicalOptions(DetectorOptions):
    """Options of the lexical detector (defaults tuned on val, see benchmarks/)."""

    threshold: HardThreshold = Field(0.25, description="hard label: probability above this")
    min_prefix: int = Field(4, ge=2, description="shortest stem used for inflected-word matches")
    prefix_ratio: float = Field(0.75, gt=0.0, le=1.0, description="stem length as share of the word")
    use_question: bool = Field(True, description="words in the question count as supported")
    max_gap: int = Field(12, ge=0, description="longest gap (chars) bridged between flagged words")
    gap_weight: float = Field(1.0, ge=0.0, le=1.0, description="bridged gap prob = weight * min(neighbours)")
    min_word_len: int = Field(2, ge=1, description="shorter words are ignored (except numbers)")
    fuzzy_min_len: int = Field(
        5, ge=0, description="words this long match a context word within a small edit distance (0: off)"
    )
    stem_score: float = Field(0.1, ge=0.0, le=1.0, description="unsupport of a stem-only match")
    fuzzy_score: float = Field(0.3, ge=0.0, le=1.0, description="unsupport of a fuzzy-only match")
    calibration: str | None = Field(
        "default",
        description="calibration table: 'default' (fitted on val), a JSON path, or null for raw shares",
        json_schema_extra=NAMES_A_FILE,
    )
    source_weights: dict[str, Annotated[float, Field(ge=0.0, allow_inf_nan=False)]] = Field(
        default_factory=dict, description="vote weight per context source (default 1 each)"
    )
    common_weight: float = Field(
        COMMON_WEIGHT,
        ge=0.0,
        le=1.0,
        description="probability factor for lowercase words in cased scripts (raw shares: calibration=null)",
    )
    channels: bool = Field(True, description="write the evidence channels the stack reads")

    @model_validator(mode="after")
    def _weight_needs_raw_shares(self) -> LexicalOptions:
        # a calibration table gives each bucket its val rate: common_weight=0.0 changed not a byte
        if self.calibration is not None and self.common_weight != COMMON_WEIGHT:
            raise ValueError(
                f"common_weight {self.common_weight:g} applies to raw shares only; with a calibration "
                "table (the default) each word gets its bucket's rate on val: add -o calibration=null"
            )
        return self


# Prefixes kept per word. Every prefix of every word was kept: a context holding one 60k-character
# token (a base64 blob, a long URL) took 1.9 GB, and a longer one failed with MemoryError. A stem
# longer than this is looked up among the few words longer than it, with the same answer.
PREFIX_CAP = 64


@lru_cache(maxsize=4096)
def _prefixes(text: str, min_prefix: int) -> tuple[frozenset[str], tuple[str, ...]]:
    """The prefixes of the text's words up to PREFIX_CAP characters, and the words longer than that."""
    words, _ = vocabulary(text)
    short = frozenset(w[:k] for w in words for k in range(min_prefix, min(len(w), PREFIX_CAP) + 1))
    return short, tuple(w for w in words if len(w) > PREFIX_CAP)


def _has_prefix(text: str, min_prefix: int, stem: str) -> bool:
    """Whether some word of the text starts with `stem` (as long as min_prefix at least)."""
    short, long = _prefixes(text, min_prefix)
    return stem in short if len(stem) <= PREFIX_CAP else any(w.startswith(stem) for w in long)


@lru_cache(maxsize=4096)
def _by_length(text: str) -> dict[int, tuple[str, ...]]:
    words, _ = vocabulary(text)
    groups: dict[int, list[str]] = {}
    for word in words:
        groups.setdefault(len(word), []).append(word)
    return {k: tuple(v) for k, v in groups.items()}


class _Support:
    """Answers "does this text support this token?" for one context or the question."""

    def __init__(self, text: str, options: LexicalOptions):
        self.words, self.cjk = vocabulary(text)
        self.text = text
        self.options = options

    def word(self, tok: Token) -> float:
        """How unsupported a word is: 0 exact match, partial for stem or fuzzy, 1 none."""
        if tok.norm in self.words:
            return 0.0
        if tok.kind == "num":
            groups = DIGIT_GROUP.findall(tok.norm)
            return 0.0 if groups and all(g in self.words for g in groups) else 1.0
        stem_len = max(self.options.min_prefix, math.ceil(len(tok.norm) * self.options.prefix_ratio))
        if len(tok.norm) > stem_len and _has_prefix(self.text, self.options.min_prefix, tok.norm[:stem_len]):
            return self.options.stem_score
        return self.options.fuzzy_score if self._fuzzy(tok.norm) else 1.0

    def _fuzzy(self, word: str) -> bool:
        min_len = self.options.fuzzy_min_len
        if not min_len or len(word) < min_len:
            return False
        budget = 1 if len(word) < 8 else 2
        candidates = _by_length(self.text)
        for length in range(len(word) - budget, len(word) + budget + 1):
            for cand in candidates.get(length, ()):
                if Levenshtein.distance(word, cand, score_cutoff=budget) <= budget:
                    return True
        return False

    def cjk_char(self, prev: str | None, char: str, nxt: str | None) -> float:
        """0 when a character bigram (or a lone character) occurs in the text, else 1."""
        if prev is None and nxt is None:
            return 0.0 if char in self.cjk else 1.0
        found = (prev is not None and prev + char in self.cjk) or (nxt is not None and char + nxt in self.cjk)
        return 0.0 if found else 1.0


def _kind(tok: Token) -> str:
    if tok.kind in ("num", "cjk"):
        return tok.kind
    first = tok.text[0]
    if first.isupper():
        return "cap"
    if first.islower():
        return "low"
    return "word"  # scripts without case: Arabic, Devanagari, ...


def _level(share: float) -> str:
    if share <= 0.0:
        return "0"
    if share >= 1.0:
        return "all"
    if share < 1 / 3:
        return "lo"
    return "mid" if share < 2 / 3 else "hi"


# The main job runs the lexical member and then the semantic member, whose lexical part
# grades the same items with the same options again (every language: it is the semantic
# member's whole answer outside English). Remembering the evidence of the last few thousand
# items spares that second pass.
_EVIDENCE: OrderedDict[tuple, list[tuple[Token, float | None, str]]] = OrderedDict()
_EVIDENCE_SIZE = 4096


class LexicalDetector(VectorDetector):
    """Lexical grounding: which words of the answer the contexts support.

    How, and why so, is in the module docstring.
    """

    name = "lexical"
    needs_contexts = True
    without_context = "flags nothing in them"
    Options = LexicalOptions
    options: LexicalOptions

    def __init__(self, options: LexicalOptions):
        super().__init__(options)
        self.calibration: Calibration | None = (
            load_calibration(options.calibration) if options.calibration else None
        )
        self._evidence_key = options.model_dump_json(exclude={"channels"})

    def check_ready(self, sources: Sequence[str] | None = None, out: Path | None = None) -> None:
        """Also refuses a weight for a source the run reads no support from: it would be unused."""
        super().check_ready(sources, out)
        if sources is None:
            return
        support = [name for name in sources if not is_fact_check(name)]
        unknown = sorted(set(self.options.source_weights) - set(support))
        if unknown:
            from mushroom.util.words import suggest

            why = (
                "is a fact-check source, which is never read as support"
                if is_fact_check(unknown[0])
                else "is not a context source of this run"
            )
            raise MushroomError(
                f"lexical option source_weights: {unknown[0]!r} {why}, so its weight would be unused"
                + suggest(unknown[0], support)
            )

    def token_evidence(self, item: Item, contexts: list[Context]) -> list[tuple[Token, float | None, str]]:
        """Each token with the weighted share of contexts not supporting it, and its bucket.

        The share is None for function words and when there is no context. The bucket names
        the token's kind and support level (e.g. `num|all`, `cap|mid`, `low|q`): the unit
        of the calibration table. Results are remembered per process (see `_EVIDENCE`).
        """
        contexts = support_contexts(contexts)
        key = (
            self._evidence_key,
            item.lang,
            item.model_input,
            item.model_output_text,
            tuple((c.source, c.text) for c in contexts),
        )
        hit = _EVIDENCE.get(key)
        if hit is not None:
            _EVIDENCE.move_to_end(key)
            return hit
        out = self._token_evidence(item, contexts)
        _EVIDENCE[key] = out
        if len(_EVIDENCE) > _EVIDENCE_SIZE:
            _EVIDENCE.popitem(last=False)
        return out

    def _token_evidence(self, item: Item, contexts: list[Context]) -> list[tuple[Token, float | None, str]]:
        """`token_evidence` on the support contexts alone."""
        opts = self.options
        lang = item.lang
        stop = stopwords(lang)
        stop_chars = stop_characters(lang)
        # a source weighted 0 is no support at all (all of them at 0 divided by zero below)
        contexts = [c for c in contexts if opts.source_weights.get(c.source, 1.0) > 0]
        supports = [_Support(c.text, opts) for c in contexts]
        weights = np.array([opts.source_weights.get(c.source, 1.0) for c in contexts])
        if contexts:  # only their ratios count: 9e307 each overflowed the sums into empty predictions
            # scaled by a power of two, which is exact: any other scale moved shares across the
            # 1/3 and 2/3 limits by a last bit, and changed predictions (a review)
            weights = np.ldexp(weights, -np.frexp(weights.max())[1])
        total = float(weights.sum()) if contexts else 1.0
        question = _Support(item.model_input, opts) if opts.use_question else None
        tokens = tokenize(item.model_output_text)
        out: list[tuple[Token, float | None, str]] = []
        for k, tok in enumerate(tokens):
            kind = _kind(tok)
            if tok.kind == "cjk":
                if tok.norm in stop_chars or not supports:
                    out.append((tok, None, "stop|-"))
                    continue
                prev = (
                    tokens[k - 1].norm
                    if k and tokens[k - 1].kind == "cjk" and tokens[k - 1].end == tok.start
                    else None
                )
                nxt = (
                    tokens[k + 1].norm
                    if k + 1 < len(tokens) and tokens[k + 1].kind == "cjk" and tokens[k + 1].start == tok.end
                    else None
                )
                if question is not None and question.cjk_char(prev, tok.norm, nxt) == 0.0:
                    out.append((tok, 0.0, f"{kind}|q"))
                    continue
                unsupported = sum(w * s.cjk_char(prev, tok.norm, nxt) for s, w in zip(supports, weights))
            else:
                if (
                    tok.kind == "word" and (tok.norm in stop or len(tok.norm) < opts.min_word_len)
                ) or not supports:
                    out.append((tok, None, "stop|-"))
                    continue
                if question is not None and question.word(tok) < 1.0:
                    out.append((tok, 0.0, f"{kind}|q"))
                    continue
                unsupported = sum(w * s.word(tok) for s, w in zip(supports, weights))
            share = unsupported / total
            out.append((tok, share, f"{kind}|{_level(share)}"))
        return out

    def token_probs(
        self,
        item: Item,
        contexts: list[Context],
        evidence: list[tuple[Token, float | None, str]] | None = None,
    ) -> list[tuple[Token, float | None]]:
        """Each token's hallucination probability (None: a function word, left at 0).

        With a calibration table the probability is the gold rate of the token's bucket in
        the item's language (shrunk towards all languages); without one it is the share of
        contexts not supporting the token, halved for lowercase words in cased scripts.
        `evidence` is `token_evidence`'s result when the caller has it already.
        """
        if evidence is None:
            evidence = self.token_evidence(item, contexts)
        table = self.calibration
        if table is not None:
            # Supported words stay at 0, tied with function words: annotators mark phrases,
            # function words included, so ranking supported words above them costs Cor.
            return [
                (tok, None if share is None else (table.prob(item.lang, bucket) if share > 0 else 0.0))
                for tok, share, bucket in evidence
            ]
        out: list[tuple[Token, float | None]] = []
        for tok, share, bucket in evidence:
            if share is not None and bucket.startswith("low|"):
                share *= self.options.common_weight
            out.append((tok, share))
        return out

    def item_vector(self, item: Item, contexts: list[Context]) -> np.ndarray:
        """Per-character hallucination probability; records the evidence channels as a side effect."""
        evidence = self.token_evidence(item, contexts)
        if self.options.channels:
            self.channels[item.id] = lexical_channels(item, contexts, evidence)
        text = item.model_output_text
        opts = self.options
        vec = np.zeros(len(text))
        scored = [(tok, p) for tok, p in self.token_probs(item, contexts, evidence) if p is not None]
        for tok, p in scored:
            vec[tok.start : tok.end] = p
        # Bridge only between words that are themselves flagged.
        for (a, pa), (b, pb) in zip(scored, scored[1:]):
            if pa <= 0 or pb <= 0:
                continue
            gap = text[a.end : b.start]
            if len(gap) <= opts.max_gap and not _SENTENCE_BREAK.search(gap):
                vec[a.end : b.start] = np.maximum(vec[a.end : b.start], opts.gap_weight * min(pa, pb))
        return vec


def fit_calibration(
    labelled: dict[str, tuple[list[Item], dict[str, list[Context]]]],
    options: LexicalOptions | None = None,
    smoothing: float = 20.0,
    fitted_on: str = "",
) -> Calibration:
    """Fits the bucket table on labelled items: mean gold soft probability per bucket.

    Args:
        labelled: lang -> (items with gold soft labels, contexts by item id).
        options: detector options for the evidence (calibration itself is ignored).
        smoothing: pseudo-count towards the pooled estimate.
        fitted_on: a note recorded in the table (which data it saw).
    """
    from mushroom.data.spans import soft_to_vector

    opts = (options or LexicalOptions()).model_copy(update={"calibration": None})
    det = LexicalDetector(opts)
    stats: dict[str, dict[str, list[float]]] = {}
    for lang, (items, contexts) in labelled.items():
        table = stats.setdefault(lang, {})
        for item in items:
            gold = soft_to_vector(item.soft_labels or [], len(item.model_output_text))
            for tok, _, bucket in det.token_evidence(item, contexts.get(item.id, [])):
                cell = table.setdefault(bucket, [0.0, 0])
                cell[0] += float(gold[tok.start : tok.end].mean())
                cell[1] += 1
    return Calibration(
        stats={lang: {b: (v[0], int(v[1])) for b, v in t.items()} for lang, t in stats.items()},
        smoothing=smoothing,
        fitted_on=fitted_on,
    )
