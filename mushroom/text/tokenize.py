r"""Word tokens with exact character offsets, for all 14 Mu-SHROOM languages.

Words are runs of letters, combining marks and digits (marks matter: Devanagari vowel signs
are marks, and `\\w` would cut Hindi words apart). Han, Hiragana and Katakana characters
are tokens of their own because Chinese has no spaces; the lexical detector matches them
by character bigrams.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import regex

from mushroom.text.normalize import normalize_word

# the katakana-hiragana prolonged sound mark (ー, half-width ｰ) is of no script of its own
_CJK = r"\p{Han}\p{Hiragana}\p{Katakana}\u30fc\uff70\uff9e\uff9f"
_TOKEN_RE = regex.compile(
    rf"(?P<cjk>[{_CJK}])"
    r"|(?P<num>\p{Nd}+(?:[.,:/]\p{Nd}+)*)"
    # a word starts with a letter or digit: a lone joiner or variation selector between emoji
    # (U+200D in 👩‍🔬, U+FE0F in ❤️) is not a word, and was flagged as one. It stops at a CJK
    # character, a letter too: "Python语言是1991年..." was one word, and a wrong 柏林 in it unseen
    # Invisible format characters inside a word (a soft hyphen, a zero-width space or joiner)
    # keep it one word: "War\u00adsaw" was "War" and "saw"
    rf"|(?P<word>[\p{{L}}\p{{Nd}}](?:(?![{_CJK}])[\p{{L}}\p{{M}}\p{{Nd}}\u200c\u200d]"
    rf"|[\u00ad\u200b\u2060\ufeff](?=(?![{_CJK}])[\p{{L}}\p{{Nd}}]))*)"
)

_DIGIT = regex.compile(r"\d")
DIGIT_GROUP = regex.compile(r"\d+")
_NUMBER_SEPARATOR = regex.compile(r"[.,]")


@dataclass(frozen=True, slots=True)
class Token:
    """A token of the answer: where it is, its comparable form and its kind."""

    start: int
    end: int
    text: str
    norm: str
    kind: str  # "word", "num" or "cjk"


def canonical_number(text: str) -> str:
    """One form for the same number: thousands separators dropped, decimal comma as dot.

    `1,000` / `1.000` / `1000` all become `1000`; `3,5` and `3.5` become `3.5`; dates like
    `23.2.2013` keep their groups.
    """
    text = normalize_word(text)
    groups = _NUMBER_SEPARATOR.split(text)
    if len(groups) > 1 and all(len(g) == 3 for g in groups[1:]) and 1 <= len(groups[0]) <= 3:
        return "".join(groups)
    if len(groups) == 2:
        return f"{groups[0]}.{groups[1]}"
    return text.replace(",", ".")


def tokenize(text: str) -> list[Token]:
    """All tokens of a text, in order, with offsets into the original string."""
    return list(_tokens(text))


@lru_cache(maxsize=2048)
def _tokens(text: str) -> tuple[Token, ...]:
    # Cached: a context is tokenised for its vocabulary, its word pairs and its counts, and
    # the same contexts serve several detectors in one process.
    tokens: list[Token] = []
    for match in _TOKEN_RE.finditer(text):
        kind = match.lastgroup or "word"
        surface = match.group()
        if kind == "num":
            norm = canonical_number(surface)
        else:
            norm = normalize_word(surface)
            if kind == "word" and _DIGIT.search(norm):
                kind = "num"
        tokens.append(Token(match.start(), match.end(), surface, norm, kind))
    return tuple(tokens)


@lru_cache(maxsize=4096)
def vocabulary(text: str) -> tuple[frozenset[str], frozenset[str]]:
    """(normalised word and number forms, CJK character bigrams and unigrams) of a text."""
    words: set[str] = set()
    cjk: set[str] = set()
    prev: Token | None = None
    for tok in tokenize(text):
        if tok.kind == "cjk":
            cjk.add(tok.norm)
            if prev is not None and prev.kind == "cjk" and prev.end == tok.start:
                cjk.add(prev.norm + tok.norm)
        else:
            words.add(tok.norm)
            if tok.kind == "num":
                words.update(DIGIT_GROUP.findall(tok.norm))
        prev = tok
    return frozenset(words), frozenset(cjk)
