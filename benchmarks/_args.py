"""Argument types the benchmark scripts share.

A wrong number on a benchmark's command line should end in argparse's usage line and one
sentence, as `mushroom`'s own commands do, not in a traceback minutes into a run (or, for
`--items 0`, in a division by zero after the model was loaded). The scripts run as
`python benchmarks/NAME.py`, so this module is imported as `_args` from their folder.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from mushroom.data.contexts import without_items_advice
from mushroom.data.languages import language_code
from mushroom.data.splits import split_files
from mushroom.errors import MushroomError


def _whole(part: str, text: str, least: int, what: str) -> int:
    try:
        value = int(part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give {what}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"{text!r}: give {what}")
    return value


def whole(text: str) -> int:
    """A whole number, 0 or more (a seed, a count that may be 0)."""
    return _whole(text, text, 0, "a whole number, 0 or more")


def positive(text: str) -> int:
    """A whole number, 1 or more (items, rounds, repeats, sizes)."""
    return _whole(text, text, 1, "a whole number, 1 or more")


def at_least_two(text: str) -> int:
    """A whole number, 2 or more (cross-validation folds: one fold fits on nothing)."""
    return _whole(text, text, 2, "a whole number, 2 or more")


def whole_list(text: str) -> list[int]:
    """Whole numbers separated by commas, e.g. fold draws 0,1,2."""
    return [
        _whole(part, text, 0, "whole numbers separated by commas, e.g. 0,1,2") for part in text.split(",")
    ]


def positive_list(text: str) -> list[int]:
    """Whole numbers of 1 or more separated by commas, e.g. sizes 1000,10000."""
    return [
        _whole(part, text, 1, "whole numbers of 1 or more separated by commas, e.g. 1,2,4")
        for part in text.split(",")
    ]


def number_list(text: str) -> list[float]:
    """Numbers separated by commas, e.g. thresholds 0.3,0.5."""
    try:
        return [float(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give numbers separated by commas, e.g. 0.3,0.5"
        ) from None


def nonnegative_list(text: str) -> list[float]:
    """Numbers of 0 or more separated by commas, e.g. shrinkages 20,50."""
    try:
        numbers = [float(part) for part in text.split(",")]
    except ValueError:
        numbers = [float("nan")]
    if any(not n >= 0 for n in numbers):  # `not >=` also refuses nan
        raise argparse.ArgumentTypeError(
            f"{text!r}: give numbers of 0 or more separated by commas, e.g. 20,50"
        )
    return numbers


def choice_list(*choices: str) -> Callable[[str], list[str]]:
    """A type: words of `choices` separated by commas (`on,off`), each checked before any run."""

    def parse(text: str) -> list[str]:
        words = [part.strip() for part in text.split(",")]
        if not words or any(word not in choices for word in words):
            raise argparse.ArgumentTypeError(
                f"{text!r}: give {', '.join(choices)}, or several joined by commas"
            )
        return words

    return parse


def val_langs(text: str) -> list[str]:
    """Val languages separated by commas, each one val has (a typo would score nothing).

    Codes are read as `mushroom --lang` reads them: `EN` and `en-US` are `en`.
    """
    try:
        have = split_files("val")
    except MushroomError as exc:  # no data folder: a usage line, not a traceback
        raise argparse.ArgumentTypeError(without_items_advice(str(exc))) from None
    # once each: `EN,en` ran English twice
    langs = list(dict.fromkeys(language_code(part.strip()) for part in text.split(",") if part.strip()))
    unknown = [lang for lang in langs if lang not in have]
    if not langs or unknown:
        raise argparse.ArgumentTypeError(
            f"{text!r}: val has the languages {', '.join(sorted(have))}"
            + (f"; not {', '.join(unknown)}" if unknown else "")
        )
    return langs


def val_lang(text: str) -> str:
    """One val language."""
    langs = val_langs(text)
    if len(langs) != 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give one val language, e.g. en")
    return langs[0]
