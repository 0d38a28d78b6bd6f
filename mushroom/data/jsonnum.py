"""Reads JSON numbers the way the official scorer does.

The official scorer loads files with `pandas.read_json(lines=True)`, whose bundled ujson
decoder parses floats with `precise_float=False`: it keeps at most 15 fraction digits and
builds the value as `int_part + frac * 10**-digits` in double arithmetic. The result can
differ from Python's correctly rounded `float()` in the last bits, and two different
strings such as 0.6666666666666667 and 0.6666666666666666 can become the same double. That
turns distinct probabilities into ties and changes Spearman ranks, so an exact scorer must
parse numbers the same way. Tests compare this function with pandas on random strings.

The same decoder reads the digits before the point (or exponent) into a 64-bit integer: a
number whose whole part is 2**64 or more, or below -2**63, fails the whole file ("Value is
too big!"), even where its value is a fine probability (2698690000000000000000e-22).
"""

from __future__ import annotations

import math

from mushroom.util.words import clipped

_MAX_DECIMALS = 15
_POW10_NEG = tuple(10.0**-k if k else 1.0 for k in range(_MAX_DECIMALS + 1))
_DIGITS = frozenset("0123456789")


def _fits_64_bits(text: str, whole: int, negative: bool) -> None:
    if whole >= 2**64 or (negative and whole > 2**63):
        raise ValueError(
            f"the number {clipped(text, 40)} has a whole part beyond 64 bits (from -2**63 to "
            "2**64 - 1), which the official scorer's reader cannot hold (pandas fails the whole "
            f"file: 'Value is too {'small' if negative else 'big!'}')"
        )


def ujson_int(text: str) -> int:
    """Parses a JSON integer, refusing one the official scorer's reader cannot hold."""
    value = int(text)
    _fits_64_bits(text, abs(value), value < 0)
    return value


def ujson_float(text: str) -> float:
    """Parses a JSON number with a fraction or exponent as pandas' ujson does by default."""
    n = len(text)
    i = 0
    sign = 1.0
    if n and text[0] == "-":
        sign = -1.0
        i = 1
    j = i
    while j < n and text[j] in _DIGITS:
        j += 1
    int_value = int(text[i:j]) if j > i else 0
    _fits_64_bits(text, int_value, sign < 0)
    frac = 0.0
    count = 0
    if j < n and text[j] == ".":
        j += 1
        while j < n and text[j] in _DIGITS:
            if count < _MAX_DECIMALS:
                frac = frac * 10.0 + (ord(text[j]) - 48)
                count += 1
            j += 1
    value = (float(int_value) + frac * _POW10_NEG[count]) * sign
    if j < n and text[j] in "eE":
        j += 1
        exp_sign = 1.0
        if j < n and text[j] in "+-":
            exp_sign = -1.0 if text[j] == "-" else 1.0
            j += 1
        exp = 0.0
        while j < n and text[j] in _DIGITS:
            exp = exp * 10.0 + (ord(text[j]) - 48)
            j += 1
        value = value * math.pow(10.0, exp * exp_sign)
    return value
