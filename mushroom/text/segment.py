"""Sentences and claim-sized clauses with exact character offsets, for all 14 languages.

The piece-level detectors (nli, pyes, semantic) judge one piece of the answer at a time and
paint the verdict back onto the piece's characters, so every piece must carry offsets into
the original text, not a cleaned-up copy. Sentence ends are `.!?` followed by a space (or
the end), CJK/fullwidth marks, the Devanagari danda, the Arabic question mark, and line
breaks; a dot does not end a sentence inside a number (`3.5`, `23.2.2013`), after a known
abbreviation (`Dr.`, `z. B.`, `etc.`) or after a single capital initial (`J. R. R.`).
Clauses cut a sentence further at `;`, `:`, commas and dashes (and their CJK forms) when
both sides are long enough to be a claim.
"""

from __future__ import annotations

from dataclasses import dataclass

import regex

# marks too: "दिन." was read as the one-letter "न", an initial, and so not a sentence's end
_LAST_WORD = regex.compile(r"([\p{L}\p{M}.\-]+)$")
_NEXT_CHAR = regex.compile(r"\s*(\S)")

# Lowercased, without the final dot. Kept short: a false "not an end" only merges two
# sentences, which costs less than cutting a name in two.
_ABBREVIATIONS = frozenset(
    """
    mr mrs ms dr prof st jr sr vs etc e.g i.e cf fig no nos vol pp ca approx inc ltd co corp
    jan feb mar apr jun jul aug sep sept oct nov dec mt ft
    z.b bzw usw ggf vgl sog evtl nr str hr fr dt
    sr sra srta dra núm pág aprox
    mme mlle mm av apr j.-c
    sig sigg dott ing pag
    ks esim mm jne yms
    bl.a t.ex osv mfl resp
    p.ej
    """.split()
)

# The marks that end a sentence, by how they are written; the lexical detector's gap bridge
# stops at the same ones.
LATIN_ENDS = ".!?…"  # then a space or the end
CJK_ENDS = "。！？｡"  # no space follows
OTHER_ENDS = "।॥؟۔"  # Devanagari danda, Arabic/Urdu marks
_SENTENCE_END = regex.compile(
    rf"(?P<mark>[{LATIN_ENDS}]+)(?P<close>[\"'”’»)\]]*)(?=\s|$)"
    # a full-width full stop ends one too (zh answers use it), but not between digits ("３．５")
    rf"|(?P<cjk>(?:[{CJK_ENDS}]|．(?!\p{{Nd}}))+[」』”’）)]*)"
    rf"|(?P<other>[{OTHER_ENDS}]+)"
    r"|(?P<nl>\n+)"
)
_CLAUSE_CUT = regex.compile(r"(?:[;:]|,|\s[-–—]\s|[，；：、،؛])")  # with the Arabic comma and semicolon
_WORD = regex.compile(r"[\p{L}\p{M}\p{Nd}]+")
_HAN = regex.compile(r"[\p{Han}\p{Hiragana}\p{Katakana}]")


@dataclass(frozen=True)
class Piece:
    """A piece of a text: `text[start:end] == piece.text`, without surrounding spaces."""

    start: int
    end: int
    text: str


def _size(text: str) -> int:
    """Words, with each Han/Kana character counted as half a word."""
    han = len(_HAN.findall(text))
    return len(_WORD.findall(_HAN.sub(" ", text))) + han // 2


def _trimmed(text: str, start: int, end: int) -> Piece | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Piece(start, end, text[start:end]) if end > start else None


def _last_word(text: str, end: int) -> regex.Match | None:
    """`_LAST_WORD` in `text[:end]`, searched in a window that grows only while the word fills it.

    Searching (and slicing) the whole text before every sentence end made splitting
    quadratic: 26 s for a 200,000-character context.
    """
    width = 64
    while True:
        pos = max(0, end - width)
        word = _LAST_WORD.search(text, pos, end)
        if word is None or word.start() > pos or pos == 0:
            return word
        width *= 2


def _is_false_end(text: str, match: regex.Match) -> bool:
    """A dot inside a number, after an abbreviation or after a capital initial."""
    mark = match.group("mark")
    if mark is None or mark != ".":
        return False
    word = _last_word(text, match.start())
    if word is None:
        return False
    token = word.group(1)
    if token.lower().strip(".") in _ABBREVIATIONS:
        return True
    if len(token) == 1:  # an initial or a spaced abbreviation: "J. R. R. Tolkien", "z. B."
        return True
    after = _NEXT_CHAR.match(text, match.end())
    # "... in the U.S. and" / "z. B. der": lowercase continuation after an abbreviation-like dot
    return after is not None and after.group(1).islower() and ("." in token or len(token) <= 2)


def sentences(text: str) -> list[Piece]:
    """The sentences of a text, each with its offsets (never empty, never overlapping)."""
    out: list[Piece] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        if _is_false_end(text, match):
            continue
        piece = _trimmed(text, start, match.end())
        if piece is not None:
            out.append(piece)
        start = match.end()
    tail = _trimmed(text, start, len(text))
    if tail is not None:
        out.append(tail)
    return out


def clauses(text: str, min_words: int = 4) -> list[Piece]:
    """Claim-sized pieces: sentences cut at clause punctuation where both sides are long.

    Args:
        text: the answer.
        min_words: a cut is made only if the pieces on both sides have at least this many
            words (a Han character counts half), so lists like "red, green and blue" stay whole.
    """
    out: list[Piece] = []
    for sent in sentences(text):
        cuts = [sent.start]
        for match in _CLAUSE_CUT.finditer(text, sent.start, sent.end):
            if regex.fullmatch(r"[,.:]", match.group()) and _inside_number(text, match.start()):
                continue
            left = text[cuts[-1] : match.start()]
            right = text[match.end() : sent.end]
            if _size(left) >= min_words and _size(right) >= min_words:
                cuts.append(match.end())
        cuts.append(sent.end)
        for a, b in zip(cuts, cuts[1:]):
            piece = _trimmed(text, a, b)
            if piece is not None:
                out.append(piece)
    return out


def _inside_number(text: str, pos: int) -> bool:
    return 0 < pos < len(text) - 1 and text[pos - 1].isdigit() and text[pos + 1].isdigit()


def piece_index(pieces: list[Piece], length: int) -> list[int]:
    """For each character, the index of the piece containing it (-1 for gaps between pieces)."""
    index = [-1] * length
    for k, piece in enumerate(pieces):
        index[piece.start : piece.end] = [k] * (piece.end - piece.start)
    return index
