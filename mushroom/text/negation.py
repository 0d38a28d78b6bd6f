"""Negation words per language, which annotators mark far more often than other function words.

A negation flips the claim it sits in: "is not the same as", "there isn't a character
named" are wrong as a whole when the plain claim was right, and the annotators of val mark
the negation itself. On val (English) a negation word's characters have a gold soft label
of 0.54 on average against 0.33 for the rest of the answer; in French 0.77 against 0.45.
The stopword lists put these words with "the" and "of", which annotators almost never
mark, so the stack sees them as a kind of their own. Over five fold draws of val
(`python benchmarks/stack_val.py --seeds 0,1,2,3,4`, every choice nested) the column raised
the stack's mean Cor in every draw, from 0.5944 to 0.5973 on their mean, and English Cor
from 0.5923 to 0.5948; IoU moved within noise (0.5712 to 0.5717).

Lists cover the 14 languages of the task's test split; words are compared in the
tokenizer's normalised form (lower case, Latin accents stripped). Chinese has no spaces
and the tokenizer splits it into characters, so its entries are single characters.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from mushroom.text.normalize import normalize_word
from mushroom.text.tokenize import Token, tokenize

_NEGATIONS = {
    "en": "not no never nor neither none nothing nobody nowhere cannot",
    "de": "nicht kein keine keinen keinem keiner keines nie niemals weder nichts niemand",
    "es": "no nunca ni ningún ninguna ninguno jamás tampoco nada nadie",
    "ca": "no mai ni ningú res tampoc",
    "fr": "ne n pas jamais aucun aucune non ni rien personne",
    "it": "non mai nessun nessuno nessuna né niente nulla",
    "fi": "ei en et emme ette eivät eikä",
    "sv": "inte ej aldrig ingen inget inga varken",
    "cs": "ne nikdy žádný žádná žádné nic nikdo",
    "eu": "ez inoiz ezer inor",
    "ar": "لا لم لن ليس ليست غير",
    "fa": "نه هیچ هرگز نیست",
    "hi": "नहीं न मत",
    "zh": "不 没 未 无 非 否",
}

# English contractions are split by the tokenizer into "isn" + "t", "can" + "t": both parts
# are marked when the word is followed by an apostrophe and "t".
_APOSTROPHES = ("'", "\u2019")


@lru_cache(maxsize=32)
def negation_words(lang: str) -> frozenset[str]:
    """Normalised negation words of a language (empty for a language without a list)."""
    return frozenset(normalize_word(w) for w in _NEGATIONS.get(lang.lower(), "").split())


def negation_mask(text: str, lang: str) -> np.ndarray:
    """1.0 on the characters of each negation word of the text, 0.0 elsewhere."""
    mask = np.zeros(len(text))
    words = negation_words(lang)
    english = lang.lower() == "en"
    tokens = tokenize(text)
    for tok, after in zip(tokens, [*tokens[1:], None]):
        if tok.norm in words:
            mask[tok.start : tok.end] = 1.0
        elif english and after is not None and _is_nt(text, tok.end, after):
            mask[tok.start : after.end] = 1.0
    return mask


def _is_nt(text: str, end: int, after: Token) -> bool:
    """Whether the token ending at `end` is followed by an apostrophe and the lone token "t"."""
    return after.start == end + 1 and text[end] in _APOSTROPHES and after.norm == "t"
