"""Locating span texts in the answer, in four steps of growing tolerance.

1. exact: the text as written;
2. casefold: case folded on both sides;
3. normalized: also whitespace runs, quotes, dashes, combining marks, compatibility forms
   (full- and half-width) and Arabic/Persian letter variants unified (the marks of Indic
   scripts are kept: a Devanagari vowel sign spells the word);
4. fuzzy: the substring fewest edits away (Levenshtein, searched over the whole answer), within
   a budget of edits proportional to the text's length.

Numbers are never moved: a fuzzy match is accepted only when the span text and the matched
answer text hold the same digit sequences, so "2014" is never placed on the answer's "2013"
(nor "in 199 people" on "in 1990 people"); such a span is lost (reported), not moved. Digits
compare by value across scripts ("٢٠١٣" == "2013", via unicodedata.digit). A thousands
separator (comma, dot, apostrophe, no-break, narrow or thin space, Arabic thousands sign)
followed by exactly three digits is not a break: "1,000" == "1000" == "1.000"; a plain space
is a break ("1 000" is ("1", "000"): too often two numbers side by side), and "1,5" is
("1", "5"), not "15". The normalized step also unifies digit scripts, so it can only pair
equal digits. Month names and written numbers are not compared.

Each normalised view keeps a map from its characters back to the answer's indices, so a
located span is always a valid [start, end) of the original answer. A text listed several
times takes successive occurrences, as models list spans in order of appearance. A text takes
a whole-word copy after the previous span (at any step of tolerance) before any copy there.
Listed again, it takes a whole-word copy it has not taken yet, then a whole-word copy it took,
and only then any copy: never a piece of another word when a whole one is there.
Words are as `_in_word` sees them: marks and the zero-width non-joiner continue a word; in
Chinese, with no spaces, every copy is whole.
"""

from __future__ import annotations

import re
import unicodedata
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import regex
from rapidfuzz.distance import Levenshtein

from mushroom.text.normalize import LETTER_VARIANTS

METHODS = ("exact", "casefold", "normalized", "fuzzy")
MAX_FUZZY_LEN = 1000
"""The longest span text the fuzzy step looks for, in characters (see `SpanLocator._fuzzy`)."""

_QUOTES = {ord(c): "'" for c in "\u2018\u2019\u201a\u201b\u2032\u00b4`"} | {
    ord(c): '"' for c in "\u201c\u201d\u201e\u201f\u00ab\u00bb\u2033"
}
_DASHES = {ord(c): "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"}
_GROUPED_DIGITS = re.compile("[0-9]+(?:[,.'\u00a0\u202f\u2009\u066c][0-9]{3}(?![0-9]))*")
_SEPARATORS = re.compile("[^0-9]")


def _ascii_digit(ch: str) -> str:
    """The ASCII digit for any Unicode digit ("٣" -> "3"), else the character itself."""
    value = unicodedata.digit(ch, None)
    return str(value) if value is not None else ch


def digit_runs(text: str) -> tuple[str, ...]:
    """The numbers written in `text` as ASCII digit strings, thousands separators removed.

    "In 1,990 and ٢٠١٣" -> ("1990", "2013"); "1.5" -> ("1", "5").
    """
    ascii_text = "".join(_ascii_digit(ch) for ch in text)
    return tuple(_SEPARATORS.sub("", m.group()) for m in _GROUPED_DIGITS.finditer(ascii_text))


@dataclass(frozen=True)
class LocatedSpan:
    """A span text found in the answer, and how it was found."""

    start: int
    end: int
    prob: float
    method: str
    text: str


@dataclass
class View:
    """A normalised copy of a text with, for each of its characters, the source index."""

    text: str
    index: list[int] = field(default_factory=list)


_UNSPACED = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}\p{Lao}\p{Khmer}\p{Myanmar}]")
"""Scripts written without spaces between words: no character of theirs is inside a word."""


def _in_word(ch: str) -> bool:
    """Whether `ch` continues a word on either side of it, for the whole-word rule.

    Marks are (a Devanagari vowel sign or virama: "मान" is not whole in "सम्मान"), and so
    is the zero-width non-joiner of Persian ("می‌خواهم" is one word); `str.isalnum` says
    neither. A Chinese character is not: with no spaces, every copy of "北京" counts as whole,
    where none did, and a text listed twice took the same copy twice (an audit).
    """
    if ch in "\u200c\u200d" or unicodedata.category(ch) in ("Mn", "Mc"):
        return True
    return ch.isalnum() and not _UNSPACED.match(ch)


def _cut_ends(text: str, start: int, end: int) -> int:
    """How many ends of text[start:end] fall inside a word (0, 1 or 2; see `_in_word`)."""
    return (start > 0 and _in_word(text[start - 1]) and _in_word(text[start])) + (
        end < len(text) and _in_word(text[end - 1]) and _in_word(text[end])
    )


def _marks_spell(mark: str) -> bool:
    """Whether `mark` is a letter of its word (the Indic and Southeast Asian scripts' own marks).

    Dropping an accent leaves the Latin or Arabic word ("é" is "e"); dropping a Devanagari vowel
    sign makes another word ("पुल", bridge, became "पल", moment, and was placed there). Judged by
    the mark's own block, not by the letter before it: a span text may start with a mark (a cut
    Devanagari word), and it lost that mark where the answer kept it.
    """
    return "\u0900" <= mark <= "\u109f" or "\u1780" <= mark <= "\u17ff"  # to Myanmar; Khmer


def make_view(text: str, level: int) -> View:
    """Level 1: casefold; level 2: casefold + whitespace/quotes/dashes/marks unified."""
    out: list[str] = []
    index: list[int] = []
    prev_space = True
    for i, ch in enumerate(text):
        if level >= 2:
            # Decompose compatibility forms too, then drop marks and invisible format
            # characters: "é" and "e" + U+0301 both become "e", full-width "Ｍ" and "，" become
            # "M" and ",", half-width "ﾍﾞ" and "ベ" both "ヘ"; a soft hyphen is dropped.
            # Quotes and dashes first: NFKD makes "´" a space and a mark, "″" two primes. Only
            # the width forms are decomposed so: "Ⅻ" would become "XII", and "XI" land on it.
            ch = ch.translate(_QUOTES).translate(_DASHES)
            form = "NFKD" if "\uff00" <= ch <= "\uffef" else "NFD"
            kept = []
            for c in unicodedata.normalize(form, ch):
                category = unicodedata.category(c)
                if category == "Cf" or (category == "Mn" and not _marks_spell(c)):
                    continue
                kept.append(c)
            ch = "".join(kept)
            ch = ch.translate(LETTER_VARIANTS)  # Arabic and Persian forms of one letter
            if not ch:
                continue
            ch = "".join(_ascii_digit(c) for c in ch)
            if ch.isspace():
                if prev_space:
                    continue
                ch = " "
            prev_space = ch == " "
        for piece in ch.casefold():
            out.append(piece)
            index.append(i)
    if level >= 2 and out and out[-1] == " ":
        out.pop()
        index.pop()
    return View("".join(out), index)


def _find_first(
    haystack: str, needle: str, starts: list[int], refused: Callable[[int], bool] | None = None
) -> int:
    """The first position of `needle` at or after one of `starts` (in turn) that is not `refused`."""
    for start in starts:
        pos = haystack.find(needle, start)
        while pos >= 0 and refused is not None and refused(pos):
            pos = haystack.find(needle, pos + 1)
        if pos >= 0:
            return pos
    return -1


def _in_answer(
    refused: Callable[[int, int], bool],
    to_answer: Callable[[View, int, int], tuple[int, int]],
    view: View,
    size: int,
) -> Callable[[int], bool]:
    """`refused` of answer spans, asked of a match at a position of a normalised view."""
    return lambda k: refused(*to_answer(view, k, size))


def _edits_by_end(needle: str, codes: np.ndarray, budget: int | None = None) -> np.ndarray:
    """For each end i of the text, the fewest edits turning some text[s:i] into `needle`.

    Sellers' approximate substring matching, one needle character per step over the whole
    text at once; insertions along the text are a running minimum (cost i - k from column k).
    A row's minimum never falls from one needle character to the next, so once it is over
    `budget` no end can be within it: the row is returned then, every value over the budget
    (a long span text that is not there cost needle x answer steps: 2 min for 100 KB, an audit).
    """
    offsets = np.arange(len(codes) + 1)
    row = np.zeros(len(codes) + 1, dtype=np.int64)  # the empty prefix matches anywhere for free
    tmp = np.empty_like(row)
    for j, ch in enumerate(needle, 1):
        tmp[0] = j
        np.minimum(row[:-1] + (codes != ord(ch)), row[1:] + 1, out=tmp[1:])
        row = np.minimum.accumulate(tmp - offsets) + offsets
        if budget is not None and j % 16 == 0 and row.min() > budget:
            break
    return row


def _closest_substring(
    needle: str, text: str, codes: np.ndarray, budget: int, min_len: int, after: int
) -> tuple[int, int] | None:
    """The substring of `text` fewest edits away from `needle`, if within `budget`.

    Ties go to edges of the same kind as the needle's (letter or digit versus punctuation or
    space: "Pariss" -> "Paris", not "Paris,"), then to one starting at or after `after` (spans
    are listed in order), then to one that cuts no word of the text in two (a misspelt last
    word, "in 1867 in Berln", is the answer's "Berlin", not "Berli": both are one edit away,
    and annotators mark whole words), then to the length nearest the needle's ("Inbe" ->
    "Inde", not "ine"), then to the first.
    """
    row = _edits_by_end(needle, codes, budget)
    row[0] = len(needle) + budget + 1  # no empty match
    best = int(row.min())
    if best > budget:
        return None
    first, last = _in_word(needle[0]), _in_word(needle[-1])
    choice: tuple[int, int, int, int, int, int] | None = None
    ends = np.flatnonzero(row == best)
    # a few ties after `after` and a few overall bound the work on repetitive text
    for stop in sorted(set(ends[ends > after][:4].tolist()) | set(ends[:4].tolist())):
        for pos in range(
            max(0, stop - len(needle) - best), min(stop - min_len, stop - len(needle) + best) + 1
        ):
            if Levenshtein.distance(needle, text[pos:stop], score_cutoff=best) > best:
                continue
            edges = (_in_word(text[pos]) != first) + (_in_word(text[stop - 1]) != last)
            cuts = _cut_ends(text, pos, stop)
            before = int(pos < after)  # never back over the spans already placed for a whole word
            key = (edges, before, cuts, abs(stop - pos - len(needle)), pos, stop)
            if choice is None or key < choice:
                choice = key
    return None if choice is None else (choice[4], choice[5])


# opening quote -> its closing one (straight, curly, German, guillemets, CJK corner brackets)
_WRAPPING = dict(
    zip("\"'\u201c\u201e\u2018\u00ab\u300c\u300e`", "\"'\u201d\u201c\u2019\u00bb\u300d\u300f`", strict=True)
)
_SENTENCE_END = ".,;:!?\u3002\uff0c\u3001\uff1b\uff1a\uff01\uff1f\u060c\u061b\u0964"


def _unwrapped(text: str) -> str:
    """`text` without the quotes wrapped around it and the sentence marks after it, stripped."""
    while len(text) >= 2 and _WRAPPING.get(text[0]) == text[-1]:
        text = text[1:-1].strip()
    return text.rstrip(_SENTENCE_END).strip()


def _word_edges(text: str, start: int, end: int) -> tuple[int, int]:
    """text[start:end] without the punctuation and spaces at its edges, unless it is nothing else.

    Annotators mark words: no gold span of val (1,550 in 10 languages) starts or ends on
    punctuation or a space, while a model quotes "Paris." or "(1901)" to the end of its
    sentence; the mark then cost IoU on every such span.
    """

    def edge(k: int) -> bool:
        return unicodedata.category(text[k])[0] in "PZ" or text[k].isspace()

    a, b = start, end
    while a < b and edge(a):
        a += 1
    while b > a and edge(b - 1):
        b -= 1
    return (a, b) if a < b else (start, end)


class SpanLocator:
    """Locates span texts in one answer, remembering occurrences already taken."""

    def __init__(self, answer: str, max_edit_ratio: float = 0.2, min_fuzzy_len: int = 4):
        self.answer = answer
        self._views: dict[int, View] = {}
        self._codes: np.ndarray | None = None
        self.max_edit_ratio = max_edit_ratio
        self.min_fuzzy_len = min_fuzzy_len
        self._cursor: dict[str, int] = {}
        self._placed: dict[str, set[int]] = {}  # the answer indices each text's copies start at
        self._spent: dict[str, set[str]] = {}  # by text as written: its searches listed again that found none
        self._last_end = 0
        self.number_mismatches = 0
        """Fuzzy matches refused because their numbers differ from the span text's."""

    def view(self, level: int) -> View:
        """The answer's normalised view at `level`, built on first use (exact hits need none)."""
        if level not in self._views:
            self._views[level] = make_view(self.answer, level)
        return self._views[level]

    def _map(self, view: View, pos: int, length: int) -> tuple[int, int]:
        return view.index[pos], self._whole_end(view.index[pos + length - 1] + 1)

    def _whole_end(self, end: int) -> int:
        """`end` moved past the combining marks after it: no span ends inside a letter.

        An exact "Cafe" in a decomposed "Cafe\u0301" marked the e without its accent.
        """
        while end < len(self.answer) and unicodedata.category(self.answer[end]) in ("Mn", "Mc"):
            end += 1
        return end

    def locate(self, text: str, prob: float) -> LocatedSpan | None:
        """The next occurrence of `text` (after the previous one of the same text), or None.

        A text with quotes around it or a sentence mark after it (`"1901"`, `1901.`) is looked
        for as written after the previous span only, then without them: the fuzzy step took
        the spaces beside the word for the quotes (`"Henri Dupont"` marked " Henri Dupont ")
        or lost it (an audit), and a copy with the mark anywhere was taken before the bare
        text after the previous span ("Vista." ending an earlier sentence, a review). As
        written first, an answer that quotes the word keeps its quoted copy (a review).
        """
        # whitespace at a span's edges claims nothing: " 1967 " marks the year, not the spaces
        text = text.strip()
        if not text:
            return None
        bare = _unwrapped(text) or text
        if bare != text:
            found = self._locate(text, prob, anywhere=False)
            if found is not None:
                return found
        return self._locate(bare, prob)

    def _locate(self, text: str, prob: float, anywhere: bool = True) -> LocatedSpan | None:
        """`locate` of one form of the text; not `anywhere`: after the previous span only, not fuzzy."""
        key = make_view(text, 2).text
        # Spans are listed in order of appearance: look after the previous span first, then
        # after this text's previous occurrence, then anywhere.
        text_cursor = self._cursor.get(key, 0)
        starts = [max(self._last_end, text_cursor), text_cursor, 0][: 3 if anywhere else 1]
        placed = self._placed.get(key)
        found = None

        # A text takes a whole-word copy after the previous span before any copy there, at any
        # step of tolerance: "في" took the "في" of "فيت" before the word (an audit). Listed
        # again, it takes a whole-word copy it has not taken yet, then one it took, anywhere:
        # "paris ... Paris" listed twice took the exact copy twice (an audit), and "bis" the
        # "Bis" of "Bischofsheim" (a review). Only after the previous span the first time:
        # spans come in order, and a prefixed word ("الجامعة") is often the one meant.
        def cut(start: int, end: int) -> bool:
            return _cut_ends(self.answer, start, end) > 0

        if not placed:
            found = self._search(text, key, starts[:1], cut)
        else:
            # Each search ends at start 0, so one that fails fails again for this text: not
            # redone (a reply listing "a" a thousand times took a minute, an audit)
            spent = self._spent.setdefault(text, set())
            if "untaken" not in spent:
                found = self._search(text, key, starts, lambda a, b: a in placed or cut(a, b))
                spent.update(() if found else ("untaken",))
            if not found and "whole" not in spent:
                found = self._search(text, key, starts, cut)
                spent.update(() if found else ("whole",))
        found = found or self._search(text, key, starts)
        if not found and anywhere:
            found = self._fuzzy(key, starts[0])
        if not found:
            return None
        start, end, method = found
        self._cursor[key] = end
        self._placed.setdefault(key, set()).add(start)
        self._last_end = max(self._last_end, end)
        start, end = _word_edges(self.answer, start, end)
        return LocatedSpan(start, end, prob, method, self.answer[start:end])

    def _search(
        self, text: str, key: str, starts: list[int], refused: Callable[[int, int], bool] | None = None
    ) -> tuple[int, int, str] | None:
        """The first of the exact, casefold and normalized steps finding `text` after one of `starts`.

        Args:
            text: the span text, as the model wrote it.
            key: its normalized form.
            starts: answer indices to search from, in turn.
            refused: (start, end) of a copy in the answer that may not be taken.
        """
        size = len(text)
        exact = None if refused is None else (lambda k: refused(k, self._whole_end(k + size)))
        pos = _find_first(self.answer, text, starts, exact)
        if pos >= 0:
            return pos, self._whole_end(pos + len(text)), "exact"
        for level, method in ((1, "casefold"), (2, "normalized")):
            view = self.view(level)
            needle = make_view(text, level).text if level == 1 else key
            if not needle:
                continue
            in_view = None if refused is None else _in_answer(refused, self._map, view, len(needle))
            # view.index is non-decreasing: the first view position at or after a source index
            pos = _find_first(view.text, needle, [bisect_left(view.index, s) for s in starts], in_view)
            if pos >= 0:
                return *self._map(view, pos, len(needle)), method
        return None

    def _fuzzy(self, needle: str, prefer_after: int) -> tuple[int, int, str] | None:
        """The closest substring, preferring one at or after answer index `prefer_after`."""
        view = self.view(2)
        # a text longer than MAX_FUZZY_LEN and not found as written is lost (counted): the
        # closest substring of one costs needle x answer edits per candidate start (an audit:
        # 58 s for a 40 KB text), and a span that long is no span an annotator marks
        if not self.min_fuzzy_len <= len(needle) <= MAX_FUZZY_LEN or not view.text:
            return None
        if self._codes is None:
            self._codes = np.fromiter(map(ord, view.text), dtype=np.int64, count=len(view.text))
        budget = max(1, int(len(needle) * self.max_edit_ratio))
        after = bisect_left(view.index, prefer_after)
        found = _closest_substring(needle, view.text, self._codes, budget, self.min_fuzzy_len, after)
        if found is None:
            return None
        start, end = self._map(view, found[0], found[1] - found[0])
        if digit_runs(needle) != digit_runs(self.answer[start:end]):
            self.number_mismatches += 1
            return None
        return start, end, "fuzzy"
