"""Normalisation so that the same word written differently compares equal.

Case, accents on Latin letters, Arabic diacritics and letter variants, full-width forms and
non-ASCII digits all vary between an answer and its context without changing the meaning.
Devanagari vowel signs are combining marks too, but removing them changes the word, so
marks are stripped only from Latin and Arabic letters.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Arabic and Persian forms of one letter, and characters invisible in a word, folded away
LETTER_VARIANTS = str.maketrans(
    {
        "أ": "ا",
        "إ": "ا",
        "آ": "ا",
        "ٱ": "ا",
        "ة": "ه",
        "ى": "ي",
        "ی": "ي",
        "ك": "ک",
        "ـ": None,
        "\u200c": None,
        "\u200d": None,
        # invisible in a word (a soft hyphen, a zero-width space or word joiner, a stray BOM):
        # scraped text has them, and "War\u00adsaw" did not match "Warsaw"
        "\u00ad": None,
        "\u200b": None,
        "\u2060": None,
        "\ufeff": None,
    }
)


def _digit_map() -> dict[int, str]:
    table: dict[int, str] = {}
    for block_start in (0x0660, 0x06F0, 0x0966, 0xFF10):
        for k in range(10):
            table[block_start + k] = str(k)
    return table


_DIGITS = _digit_map()


def _strip_marks(text: str) -> str:
    out = []
    base_is_strippable = False
    for ch in text:
        cat = unicodedata.category(ch)
        if cat == "Mn":
            if base_is_strippable:
                continue
            out.append(ch)
            continue
        name_ok = ch < "\u0250" or "\u0600" <= ch <= "\u06ff" or "\u1e00" <= ch <= "\u1eff"
        base_is_strippable = name_ok
        out.append(ch)
    return "".join(out)


@lru_cache(maxsize=200_000)
def normalize_word(word: str) -> str:
    """Comparable form of one word or number."""
    text = unicodedata.normalize("NFKD", word.translate(_DIGITS)).casefold()
    text = _strip_marks(text)
    text = unicodedata.normalize("NFC", text)
    return text.translate(LETTER_VARIANTS)


LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""Half of a UTF-16 pair: JSON's "\\ud800" escape lets one stand alone; UTF-8 cannot write it."""


def whole_characters(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD, the replacement character.

    A model reply is kept as it came, but one with half a character could not be written to
    the raw log or the cache: the item failed with a UnicodeEncodeError and the reply was lost.
    """
    if text.isascii():
        return text
    return LONE_SURROGATE.sub("\ufffd", text)
