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
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import regex
from pydantic import Field
from rapidfuzz.distance import Levenshtein

from mushroom.detectors.base import Detector, DetectorOptions
from mushroom.predictions import prediction_from_vectors
from mushroom.records import Context, Item, Prediction
from mushroom.text.stopwords import stop_characters, stopwords
from mushroom.text.tokenize import Token, tokenize, vocabulary

_SENTENCE_BREAK = regex.compile(r"[.!?;:\n。！？；]|\s-\s")


class LexicalOptions(DetectorOptions):
    """Options of the lexical detector (defaults tuned on val, see benchmarks/)."""

    threshold: float = Field(0.4, ge=0.0, le=1.0, description="hard label: probability above this")
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
    base_prob: float = Field(
        0.0, ge=0.0, le=1.0, description="floor for every content word: ranks words above function words"
    )
    source_weights: dict[str, float] = Field(
        default_factory=dict, description="vote weight per context source (default 1 each)"
    )
    coverage_power: float = Field(
        0.0, ge=0.0, description="scale probabilities by (share of supported content words) ** power"
    )
    common_weight: float = Field(
        0.5, ge=0.0, le=1.0, description="probability factor for lowercase words in cased scripts"
    )


@lru_cache(maxsize=4096)
def _prefixes(text: str, min_prefix: int) -> frozenset[str]:
    words, _ = vocabulary(text)
    return frozenset(w[:k] for w in words for k in range(min_prefix, len(w) + 1))


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
            groups = regex.findall(r"\d+", tok.norm)
            return 0.0 if groups and all(g in self.words for g in groups) else 1.0
        stem_len = max(self.options.min_prefix, math.ceil(len(tok.norm) * self.options.prefix_ratio))
        if len(tok.norm) > stem_len and tok.norm[:stem_len] in _prefixes(self.text, self.options.min_prefix):
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


class LexicalDetector(Detector):
    """Lexical grounding against the contexts; see the module docstring."""

    name = "lexical"
    Options = LexicalOptions
    options: LexicalOptions

    def token_probs(self, item: Item, contexts: list[Context]) -> list[tuple[Token, float | None]]:
        """Each token with the share of contexts not supporting it (None: not a content word)."""
        opts = self.options
        lang = item.lang
        stop = stopwords(lang)
        stop_chars = stop_characters(lang)
        kept = [c for c in contexts if c.text.strip()]
        supports = [_Support(c.text, opts) for c in kept]
        weights = np.array([opts.source_weights.get(c.source, 1.0) for c in kept])
        total = weights.sum() if kept else 1.0
        question = _Support(item.model_input, opts) if opts.use_question else None
        tokens = tokenize(item.model_output_text)
        out: list[tuple[Token, float | None]] = []
        for k, tok in enumerate(tokens):
            if not supports:
                out.append((tok, None))
                continue
            if tok.kind == "cjk":
                if tok.norm in stop_chars:
                    out.append((tok, None))
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
                    out.append((tok, 0.0))
                    continue
                unsupported = sum(w * s.cjk_char(prev, tok.norm, nxt) for s, w in zip(supports, weights))
            else:
                if tok.kind == "word" and (tok.norm in stop or len(tok.norm) < opts.min_word_len):
                    out.append((tok, None))
                    continue
                if question is not None and question.word(tok) < 1.0:
                    out.append((tok, 0.0))
                    continue
                unsupported = sum(w * s.word(tok) for s, w in zip(supports, weights))
                if tok.kind == "word" and tok.text[0].islower():
                    out.append((tok, opts.common_weight * unsupported / total))
                    continue
            out.append((tok, unsupported / total))
        return out

    def item_vector(self, item: Item, contexts: list[Context]) -> np.ndarray:
        """Per-character hallucination probability of one answer."""
        text = item.model_output_text
        opts = self.options
        vec = np.zeros(len(text))
        scored = [(tok, p) for tok, p in self.token_probs(item, contexts) if p is not None]
        if scored and self.options.coverage_power:
            coverage = sum(p == 0 for _, p in scored) / len(scored)
            factor = coverage**self.options.coverage_power
            scored = [(tok, p * factor) for tok, p in scored]
        for tok, p in scored:
            vec[tok.start : tok.end] = max(p, opts.base_prob)
        for (a, pa), (b, pb) in zip(scored, scored[1:]):
            if pa <= 0 or pb <= 0:
                continue
            gap = text[a.end : b.start]
            if len(gap) <= opts.max_gap and not _SENTENCE_BREAK.search(gap):
                vec[a.end : b.start] = np.maximum(vec[a.end : b.start], opts.gap_weight * min(pa, pb))
        return vec

    def detect(
        self,
        items: list[Item],
        contexts: dict[str, list[Context]],
        advance: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        out = []
        for item in items:
            vec = self.item_vector(item, contexts.get(item.id, []))
            out.append(prediction_from_vectors(item.id, vec, vec > self.options.threshold))
            if advance is not None:
                advance(1)
        return out
