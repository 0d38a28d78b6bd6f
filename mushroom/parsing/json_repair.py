"""Finding and repairing the JSON in a model's answer.

Model output is untrusted text: it is only ever parsed as JSON (never evaluated), and every
repair is a plain text transformation.

Handled: code fences, prose before and after, trailing commas, single quotes, curly quotes,
Python literals (True/False/None), a truncated tail (open strings, arrays and objects are
closed), and a bare list instead of an object.
"""

from __future__ import annotations

import json
import re
from typing import Any

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}


def _candidates(text: str) -> list[str]:
    """Substrings that may hold the JSON, most likely first."""
    found = [m.group(1) for m in _FENCE.finditer(text) if m.group(1).strip()]
    found.append(text)
    out = []
    for chunk in found:
        starts = [i for i in (chunk.find("{"), chunk.find("[")) if i >= 0]
        if starts:
            out.append(chunk[min(starts) :])
    return out


def _single_to_double_quotes(text: str) -> str:
    """Rewrites 'strings' as "strings" outside double-quoted strings.

    Apostrophes inside words (it's, l'homme) are left alone.
    """
    out, in_double, in_single, escaped = [], False, False, False
    for i, ch in enumerate(text):
        if escaped:
            out.append(ch)
            escaped = False
            continue
        if ch == "\\":
            out.append(ch)
            escaped = True
            continue
        if in_double:
            in_double = ch != '"'
            out.append(ch)
        elif in_single:
            if ch == "'" and not (i + 1 < len(text) and text[i + 1].isalpha() and text[i - 1].isalpha()):
                in_single = False
                out.append('"')
            elif ch == '"':
                out.append('\\"')
            else:
                out.append(ch)
        elif ch == '"':
            in_double = True
            out.append(ch)
        elif ch == "'" and not (0 < i < len(text) - 1 and text[i - 1].isalpha() and text[i + 1].isalpha()):
            in_single = True
            out.append('"')
        else:
            out.append(ch)
    return "".join(out)


def _close_truncated(text: str) -> str:
    """Closes every open bracket of a cut-off answer.

    An object cut inside one of its strings is dropped whole: its last span text is
    incomplete ("19" of "1990") and would be located at the wrong place.
    """
    stack: list[tuple[str, int]] = []
    in_str, escaped = False, False
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = in_str
        elif ch == '"':
            in_str = not in_str
        elif not in_str and ch in "[{":
            stack.append(("]" if ch == "[" else "}", i))
        elif not in_str and ch in "]}" and stack:
            stack.pop()
    if in_str:
        if stack and stack[-1][0] == "}" and len(stack) > 1:
            text = text[: stack[-1][1]]
            stack.pop()
        else:
            text += '"'
    text = text.rstrip()
    text = re.sub(r',\s*"[^"]*"\s*:?\s*$', "", text)  # a key left without its value
    text = re.sub(r"[,:]\s*$", "", text)
    return text + "".join(closer for closer, _ in reversed(stack))


def _replace_literals(text: str) -> str:
    return re.sub(r"\b(True|False|None)\b", lambda m: _PY_LITERALS[m.group(1)], text)


_REPAIRS = (
    ("trailing_commas", lambda t: _TRAILING_COMMA.sub(r"\1", t)),
    ("curly_quotes", lambda t: t.replace("\u201c", '"').replace("\u201d", '"')),
    ("single_quotes", _single_to_double_quotes),
    ("python_literals", _replace_literals),
    ("truncated", _close_truncated),
)


def _decode_prefix(text: str) -> Any:
    """The first JSON value at the start of `text`, ignoring whatever follows it."""
    return json.JSONDecoder().raw_decode(text)[0]


def extract_json(text: str) -> tuple[Any | None, list[str]]:
    """The JSON value a model meant to write, and the repairs it needed.

    Returns:
        (value, repairs): value is None when nothing could be recovered; repairs lists what
        was fixed, for the run's statistics.
    """
    for candidate in _candidates(text):
        try:
            return _decode_prefix(candidate), []
        except json.JSONDecodeError:
            pass
        fixed, applied = candidate, []
        for name, repair in _REPAIRS:
            new = repair(fixed)
            if new == fixed:
                continue
            fixed = new
            applied.append(name)
            try:
                return _decode_prefix(fixed), applied
            except json.JSONDecodeError:
                continue
    return None, []
