"""Negation words per language, which annotators mark far more often than other function words.

A negation flips the claim it sits in: "is not the same as", "there isn't a character
named" are wrong as a whole when the plain claim was right, and the annotators of val mark
the negation itself. The gold soft label on a negation word's characters against the rest
of the answer (val): English 0.55 against 0.33, French 0.77 against 0.44, Italian 0.70
against 0.53, Swedish 0.76 against 0.61; in Spanish, Finnish and German they are level
(0.18/0.20, 0.48/0.50, 0.46/0.44), which the stack's language features can learn. The
stopword lists put these words with "the" and "of", which annotators almost never mark, so
the stack sees them as a kind of their own. Over five fold draws of val (`python
benchmarks/stack_val.py --seeds 0,1,2,3,4`, every choice nested) the column raised the
stack's mean Cor in every draw, from 0.5944 to 0.5974 on their mean, and English Cor from
0.5923 to 0.5949; IoU moved within noise (0.5712 to 0.5720). Paired over items
(`python benchmarks/feature_ablation.py --drop is_negation`, three draws): Cor +0.0026
[95% CI +0.0008, +0.0049], English Cor +0.0026 [+0.0005, +0.0050].

Lists cover the 14 languages of the task's test split, as whole words. Latin-script words
are compared lower-cased with their accents (French "né", born, is not "ne"); Arabic and
Persian ones in the tokenizer's normalised form (letter variants and diacritics vary between
writers). Where negation is mostly a prefix (Persian "نمی‌", Czech "ne-", Arabic "ولا") the
list finds little. Chinese has no spaces and the tokenizer splits it into characters: its
entries are single characters, not marked where they start a common word that negates
nothing (e.g. 非常 "very", 非洲 "Africa", 未来 "future", 不同 "different").
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
    "fr": "ne n pas jamais aucun aucune non ni rien",
    "it": "non mai nessun nessuno nessuna né niente nulla",
    "fi": "ei en et emme ette eivät eikä",
    "sv": "inte ej aldrig ingen inget inga varken",
    "cs": "ne nikdy žádný žádná žádné nic nikdo",
    "eu": "ez inoiz ezer inor",
    "ar": "لا لم لن ليس ليست غير",
    "fa": "هیچ هرگز نیست",
    "hi": "नहीं न",
    "zh": "不 没 未 无 非 否",
}

_NORMALISED = frozenset({"ar", "fa"})  # compared in normalised form; others lower-cased

# Chinese words that start with a negation character but negate nothing.
_NOT_NEGATIONS = ("非常", "非洲", "未来", "不同", "不仅", "不断", "不过", "无论")  # 不仅 "not only" adds

# English contractions are split by the tokenizer into "isn" + "t", "can" + "t": both parts
# are marked when the word is followed by an apostrophe and "t".
_APOSTROPHES = ("'", "\u2019")


@lru_cache(maxsize=32)
def negation_words(lang: str) -> frozenset[str]:
    """A language's negation words in the form they are compared in (empty without a list)."""
    lang = lang.lower()
    return frozenset(_form(w, lang) for w in _NEGATIONS.get(lang, "").split())


def _form(word: str, lang: str) -> str:
    return normalize_word(word) if lang in _NORMALISED else word.lower()


def negation_mask(text: str, lang: str) -> np.ndarray:
    """1.0 on the characters of each negation word of the text, 0.0 elsewhere."""
    mask = np.zeros(len(text))
    lang = lang.lower()
    words = negation_words(lang)
    tokens = tokenize(text)
    for tok, after in zip(tokens, [*tokens[1:], None]):
        if _form(tok.text, lang) in words and not text.startswith(_NOT_NEGATIONS, tok.start):
            mask[tok.start : tok.end] = 1.0
        elif lang == "en" and after is not None and _is_nt(text, tok.end, after):
            mask[tok.start : after.end] = 1.0
    return mask


def _is_nt(text: str, end: int, after: Token) -> bool:
    """Whether the token ending at `end` is followed by an apostrophe and the lone token "t"."""
    return after.start == end + 1 and text[end] in _APOSTROPHES and after.text.lower() == "t"
