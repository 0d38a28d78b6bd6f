"""The 14 Mu-SHROOM languages and what the text tools need to know about each."""

from __future__ import annotations

LANGUAGES: dict[str, str] = {
    "ar": "Arabic",
    "ca": "Catalan",
    "cs": "Czech",
    "de": "German",
    "en": "English",
    "es": "Spanish",
    "eu": "Basque",
    "fa": "Farsi",
    "fi": "Finnish",
    "fr": "French",
    "hi": "Hindi",
    "it": "Italian",
    "sv": "Swedish",
    "zh": "Chinese",
}

VAL_LANGUAGES = ("ar", "de", "en", "es", "fi", "fr", "hi", "it", "sv", "zh")
TEST_LANGUAGES = tuple(LANGUAGES)


def language_code(code: str) -> str:
    """A code in lower case; a regional tag of a language mushroom knows ("en-US", "zh_Hans") is it.

    One rule for items files, --lang and the Python API: "zh-Hans" in a file was a language of
    its own, whose answers got no Chinese word splitting and were marked whole.
    """
    code = code.strip().lower()
    base = code.replace("_", "-").split("-")[0]
    return base if base != code and base in LANGUAGES else code


def unknown_language_hint(code: str) -> str:
    """What an unknown language code may have meant: `" (English is 'en')"` for a name, else a close code."""
    from mushroom.errors import did_you_mean

    named = {name.lower(): known for known, name in LANGUAGES.items()}.get(code.lower())
    return f" ({LANGUAGES[named]} is {named!r})" if named else did_you_mean(code, LANGUAGES)


def language_name(code: str) -> str:
    """English name of a language code, or the code itself when unknown."""
    return LANGUAGES.get(code.lower(), code)
