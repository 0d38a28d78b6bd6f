"""How common a word is in its language (Zipf scale), from the `wordfreq` package.

An answer word that no context contains means different things by how common it is: a rare
word (a name, a date word, a technical term) missing from the contexts is usually a wrong
detail that annotators mark, while a common word ("sport", "combines") missing from a short
context is usually paraphrase or elaboration they leave alone. `wordfreq` (Apache-2.0 code;
its word lists are CC-BY-SA 4.0) ships frequency lists for 13 of the 14 Mu-SHROOM languages.
Basque has none (wordfreq would answer with Spanish, logging a warning) and Chinese needs `jieba`,
which the lexical detector does not use (it matches Chinese by character bigrams), so those
two get 0, the same value as a word wordfreq has never seen.
"""

from __future__ import annotations

from functools import lru_cache

_NO_LIST = frozenset({"eu", "zh"})
# wordfreq reads Japanese and Korean words through MeCab, a package mushroom does not install:
# a `ja` item failed with "No module named 'MeCab'", and a re-run failed it again
_NEEDS_MECAB = frozenset({"ja", "ko"})
ZIPF_MAX = 8.0  # wordfreq's scale tops out near 8 ("the" in English is 7.7)


@lru_cache(maxsize=64)
def has_frequencies(lang: str) -> bool:
    """Whether `lang` has a word list of its own (wordfreq answers others with a neighbour's)."""
    if lang in _NO_LIST:
        return False
    if lang in _NEEDS_MECAB:
        import importlib.util

        if importlib.util.find_spec("MeCab") is None:
            return False
    from wordfreq import available_languages

    return lang in available_languages()


@lru_cache(maxsize=200_000)
def zipf(word: str, lang: str) -> float:
    """The word's Zipf frequency (log10 of uses per billion words), 0 when unknown."""
    if not has_frequencies(lang):
        return 0.0
    from wordfreq import zipf_frequency  # imported on first use: loading a list takes ~0.3 s

    return float(zipf_frequency(word, lang))
