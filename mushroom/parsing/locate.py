"""Locating span texts in the answer, in four steps of growing tolerance.

1. exact: the text as written;
2. casefold: case folded on both sides;
3. normalized: also whitespace runs, quotes, dashes and combining marks unified;
4. fuzzy: the best partial alignment within a bounded number of edits.
Each normalised view keeps a map from its characters back to the answer's indices, so a
located span is always a valid [start, end) of the original answer. A text listed several
times takes successive occurrences, as models list spans in order of appearance.
"""

from __future__ import annotations

import unicodedata
from bisect import bisect_left
from dataclasses import dataclass, field

from rapidfuzz import fuzz
from rapidfuzz.distance import Levenshtein

METHODS = ("exact", "casefold", "normalized", "fuzzy")

_QUOTES = {ord(c): "'" for c in "\u2018\u2019\u201a\u201b\u2032\u00b4`"} | {
    ord(c): '"' for c in "\u201c\u201d\u201e\u201f\u00ab\u00bb\u2033"
}
_DASHES = {ord(c): "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"}


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


def make_view(text: str, level: int) -> View:
    """Level 1: casefold; level 2: casefold + whitespace/quotes/dashes/marks unified."""
    out: list[str] = []
    index: list[int] = []
    prev_space = True
    for i, ch in enumerate(text):
        if level >= 2:
            # Decompose, then drop marks: "é" and "e" + U+0301 both become "e".
            ch = "".join(c for c in unicodedata.normalize("NFD", ch) if unicodedata.category(c) != "Mn")
            if not ch:
                continue
            ch = ch.translate(_QUOTES).translate(_DASHES)
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


def _find_first(haystack: str, needle: str, starts: list[int]) -> int:
    for start in starts:
        pos = haystack.find(needle, start)
        if pos >= 0:
            return pos
    return -1


class SpanLocator:
    """Locates span texts in one answer, remembering occurrences already taken."""

    def __init__(self, answer: str, max_edit_ratio: float = 0.2, min_fuzzy_len: int = 4):
        self.answer = answer
        self.views = {1: make_view(answer, 1), 2: make_view(answer, 2)}
        self.max_edit_ratio = max_edit_ratio
        self.min_fuzzy_len = min_fuzzy_len
        self._cursor: dict[str, int] = {}
        self._last_end = 0

    def _map(self, view: View, pos: int, length: int) -> tuple[int, int]:
        start, end = view.index[pos], view.index[pos + length - 1] + 1
        # a span never ends between a letter and its combining marks
        while end < len(self.answer) and unicodedata.category(self.answer[end]) in ("Mn", "Mc"):
            end += 1
        return start, end

    def locate(self, text: str, prob: float) -> LocatedSpan | None:
        """The next occurrence of `text` (after the previous one of the same text), or None."""
        if not text or not text.strip():
            return None
        key = make_view(text, 2).text
        # Spans are listed in order of appearance: look after the previous span first, then
        # after this text's previous occurrence, then anywhere.
        text_cursor = self._cursor.get(key, 0)
        starts = [max(self._last_end, text_cursor), text_cursor, 0]
        found = None
        pos = _find_first(self.answer, text, starts)
        if pos >= 0:
            found = (pos, pos + len(text), "exact")
        for level, method in ((1, "casefold"), (2, "normalized")):
            if found:
                break
            view = self.views[level]
            needle = make_view(text, level).text if level == 1 else key
            if not needle:
                continue
            # view.index is non-decreasing: the first view position at or after a source index
            view_starts = [bisect_left(view.index, s) for s in starts]
            pos = _find_first(view.text, needle, view_starts)
            if pos >= 0:
                found = (*self._map(view, pos, len(needle)), method)
        if not found:
            found = self._fuzzy(key)
        if not found:
            return None
        start, end, method = found
        self._cursor[key] = end
        self._last_end = max(self._last_end, end) if method != "fuzzy" else self._last_end
        return LocatedSpan(start, end, prob, method, self.answer[start:end])

    def _fuzzy(self, needle: str) -> tuple[int, int, str] | None:
        view = self.views[2]
        if len(needle) < self.min_fuzzy_len or not view.text:
            return None
        align = fuzz.partial_ratio_alignment(needle, view.text)
        if align is None or align.dest_end <= align.dest_start:
            return None
        candidate = view.text[align.dest_start : align.dest_end]
        budget = max(1, int(len(needle) * self.max_edit_ratio))
        if Levenshtein.distance(needle, candidate, score_cutoff=budget) > budget:
            return None
        start, end = self._map(view, align.dest_start, align.dest_end - align.dest_start)
        return start, end, "fuzzy"
