"""Finding and repairing the JSON in a model's answer.

Model output is untrusted text: it is only ever parsed as JSON (never evaluated), and every
repair is a plain text transformation.

Handled: a leading reasoning block (`<think>...</think>`, see `reasoning`), code fences,
prose before and after, raw line breaks and tabs inside strings, trailing commas, missing
commas between objects, single quotes, curly quotes (double, and single where they delimit),
full-width `：，` (and brackets, and the ideographic space) between values, Python literals
(True/False/None), a
truncated tail (open strings, arrays and objects are closed; a number or literal cut at the
very end is dropped; an entry cut inside its text is dropped under its own repair name,
`truncated_entry`, so the parser counts it lost; one cut inside its reason keeps the rest),
and a bare list instead of an object.

Never raises on any string. The standard decoder recurses once per bracket, so text nested
deeper than `MAX_DEPTH` is not handed to it at all: no claim format needs more than a few
levels, and a reply nested a thousand deep is garbage (it would otherwise end in
RecursionError). Integers too long for Python's int conversion limit decode as floats (they
are then rejected as probabilities, not crashed on).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

from mushroom.parsing.reasoning import strip_reasoning

MAX_DEPTH = 64
"""Deepest bracket nesting handed to the JSON decoder."""

_MAX_INT_DIGITS = 4000  # below Python's default int conversion limit (4300 digits)
_MAX_STARTS = 8  # values stepped over per candidate ("see [1]") before the repairs

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)(?:```|$)", re.S)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_MISSING_COMMA = re.compile(r"}\s*{")
# a double-quoted string with its escapes; an unterminated one runs to the end of the text
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*(?:"|\\?\Z)', re.S)
_PY_LITERALS = {"True": "true", "False": "false", "None": "null"}
# the bare value (number or word) at the end of a truncated reply, and the tail that is
# certainly complete: a decimal with a fractional digit (at worst "0.9" of "0.95") or a literal;
# "0." / "0" (of "0.9") / "8" (of "80") / "tru" may be cut and are dropped
_LAST_SCALAR = re.compile(r'([:,\[])\s*([^\s,:\[\]{}"]+)\s*$')
_COMPLETE_SCALAR = re.compile(r"-?[0-9]+\.[0-9]+|true|false|null|True|False|None")


class _TooDeep(ValueError):
    """The text nests brackets deeper than MAX_DEPTH."""


def _parse_int(digits: str) -> int | float:
    return int(digits) if len(digits) <= _MAX_INT_DIGITS else float(digits)


_DECODER = json.JSONDecoder(parse_int=_parse_int)


def _strings_and_code(text: str) -> Iterator[tuple[bool, str]]:
    """Splits text into (is_string, piece): double-quoted JSON strings and everything else.

    An unterminated string runs to the end of the text.
    """
    pos = 0
    for match in _STRING.finditer(text):
        if match.start() > pos:
            yield False, text[pos : match.start()]
        yield True, match.group()
        pos = match.end()
    if pos < len(text):
        yield False, text[pos:]


def _outside_strings(fn: Callable[[str], str]) -> Callable[[str], str]:
    """A repair applied only outside double-quoted strings, so span texts stay as written."""

    def apply(text: str) -> str:
        return "".join(piece if is_string else fn(piece) for is_string, piece in _strings_and_code(text))

    return apply


def _first_value_depth(text: str) -> int:
    """The deepest bracket nesting (outside strings) of the first JSON value in `text`."""
    depth = deepest = 0
    for is_string, piece in _strings_and_code(text):
        if is_string:
            continue
        for ch in piece:
            if ch in "[{":
                depth += 1
                deepest = max(deepest, depth)
                if deepest > MAX_DEPTH:
                    return deepest
            elif ch in "]}":
                depth -= 1
                if depth <= 0:
                    return deepest
    return deepest


def decode_prefix(text: str) -> tuple[Any, int]:
    """The first JSON value at the start of `text` and where it ends; what follows is ignored.

    Raises:
        ValueError: no JSON value there (JSONDecodeError), or nested deeper than MAX_DEPTH.
    """
    if _first_value_depth(text) > MAX_DEPTH:
        raise _TooDeep(f"nested deeper than {MAX_DEPTH}")
    try:
        return _DECODER.raw_decode(text)
    except RecursionError as err:  # belt: the depth bound above should make this unreachable
        raise _TooDeep(str(err)) from None


def _looks_like_claims(value: Any) -> bool:
    """An object, or a list holding an object or a string: a shape a reply's claims can take.

    A list of numbers ("see [1]") in prose before the real JSON is not.
    """
    return isinstance(value, dict) or (
        isinstance(value, list) and (not value or any(isinstance(v, (dict, str)) for v in value))
    )


def _candidates(text: str) -> list[tuple[str, bool]]:
    """Substrings that may hold the JSON, most likely first, each from its first bracket.

    A reply that starts with a bracket is JSON itself (a code fence in it is a span's text);
    otherwise fenced blocks come before the whole text. Each comes with whether prose came
    before its first bracket.
    """
    found = [m.group(1) for m in _FENCE.finditer(text) if m.group(1).strip()]
    if text.lstrip()[:1] in ("{", "["):
        found.insert(0, text)
    else:
        found.append(text)
    out = []
    for chunk in found:
        starts = [i for i in (chunk.find("{"), chunk.find("[")) if i >= 0]
        if starts:
            out.append((chunk[min(starts) :], bool(chunk[: min(starts)].strip())))
    return out


def _single_to_double_quotes(text: str) -> str:
    """Rewrites 'strings' as "strings" outside double-quoted strings.

    Apostrophes inside words (it's, l'homme) are left alone.
    """
    out, in_double, in_single, escaped = [], False, False, False
    for i, ch in enumerate(text):
        if escaped:
            if ch == "'" and in_single:  # Python's \' is no JSON escape: the whole reply was lost
                out[-1] = ch
            else:
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


def _open_brackets(text: str) -> tuple[list[tuple[str, int]], int | None]:
    """The brackets left open at the end of `text` (closer, index), and where a string left open starts."""
    stack: list[tuple[str, int]] = []
    in_str, escaped, str_start = False, False, 0
    for i, ch in enumerate(text):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = in_str
        elif ch == '"':
            in_str = not in_str
            str_start = i
        elif not in_str and ch in "[{":
            stack.append(("]" if ch == "[" else "}", i))
        elif not in_str and ch in "]}" and stack:
            stack.pop()
    return stack, (str_start if in_str else None)


COMMENT_KEYS = frozenset({"reason", "explanation", "justification", "rationale", "note", "comment"})
"""Keys whose value explains an entry and does not make it: cut inside one, the entry is whole."""

_KEY_BEFORE = re.compile(r'"([^"\\]*)"\s*:\s*$')


def _cut_comment(text: str) -> str:
    """A reply cut inside an entry's comment (`"reason": "context says 18`) or a key, that part dropped.

    The prompts ask for the span text first and its reason last, so a reply cut off in the
    reason of its one span lost a span it had written whole (an audit).
    """
    stack, open_string = _open_brackets(text)
    if open_string is None or not stack or stack[-1][0] != "}":
        return text
    before = text[:open_string].rstrip()
    if before.endswith(","):  # the string is a key of an entry that has others: `{"text": "x", "rea`
        return before[:-1]
    key = _KEY_BEFORE.search(before)
    if key is None or key.group(1).strip().casefold() not in COMMENT_KEYS:
        return text
    return re.sub(r",\s*$", "", text[: key.start()])


def _drop_cut_entry(text: str) -> str:
    """A reply cut inside a listed string or a string of a listed object, that entry dropped whole.

    Its span text may be incomplete ("19" of "1990") and would be placed at the wrong spot.
    The repair has its own name so the entry counts as lost: a reply whose one entry was
    dropped so is no reply that found nothing wrong (a missing quote in `"text": "1901,` read
    as an empty list, an audit).
    """
    stack, open_string = _open_brackets(text)
    if open_string is None or not stack:
        return text
    # the entries' list: the reply itself, or the list of its object (`{"incorrect_spans": [`)
    in_entries = len(stack) == 1 or (len(stack) == 2 and stack[0][0] == "}")
    if stack[-1][0] == "]" and in_entries:  # a listed string: `["1901", "Henri Du`
        return text[:open_string]
    if len(stack) >= 2 and stack[-1][0] == "}" and stack[-2][0] == "]" and len(stack) <= 3:
        return text[: stack[-1][1]]  # a listed object: `[{"text": "19`
    return text  # a string inside an entry's own list or object: `"sources": ["Wikip`


def _close_truncated(text: str) -> str:
    """Closes every open bracket of a cut-off answer.

    A string cut at the end is dropped, never closed (an object cut inside one of its strings
    went first, `_drop_cut_entry`). A number or bare word at the very end may be cut too ("0"
    or "0." of "0.9", "8" of "80"): it is dropped, so the entry falls back to the default
    probability instead of claiming 0; a decimal with a fractional digit or a whole literal
    is kept.
    """
    stack, open_string = _open_brackets(text)
    if open_string is not None:
        text = text[:open_string]
    elif stack:
        last = _LAST_SCALAR.search(text)
        if last and not _COMPLETE_SCALAR.fullmatch(last.group(2)):
            text = text[: last.start(2)]
    text = text.rstrip()
    if stack and stack[-1][0] == "}":  # a key left without its value
        text = re.sub(r'([{,])\s*"[^"]*"\s*:?\s*$', r"\1", text)
    text = re.sub(r"[,:]\s*$", "", text)
    return text + "".join(closer for closer, _ in reversed(stack))


_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape_controls(text: str) -> str:
    """Raw control characters inside strings, escaped: strict JSON forbids them, models write them.

    Mostly line breaks and tabs; a NUL or another C0 character (a server's or model's glitch)
    lost the whole reply before.
    """
    return "".join(
        re.sub("[\x00-\x1f]", lambda m: _CONTROL.get(m.group(), f"\\u{ord(m.group()):04x}"), piece)
        if is_string
        else piece
        for is_string, piece in _strings_and_code(text)
    )


def _replace_literals(text: str) -> str:
    return re.sub(r"\b(True|False|None)\b", lambda m: _PY_LITERALS[m.group(1)], text)


# the ideographic space too: JSON's whitespace is ASCII only, and `{"text":\u3000"北京"}` was lost
_FULL_WIDTH = str.maketrans("：，｛｝［］＂\u3000", ':,{}[]" ')


_OPENS = "[{\\[,:]\\s*"
"""What comes before a quote that opens a string of a JSON or Python value."""
_CLOSES = "\\s*[:,}\\]]"
"""What comes after a quote that closes one."""


def _delimiting(quotes: str) -> re.Pattern[str]:
    """One of `quotes` where it opens or closes a string (after `{[,:`, before `:,}]`)."""
    return re.compile(f"{_OPENS}[{quotes}]|[{quotes}]{_CLOSES}")


_STRAIGHT_DELIMITER = _delimiting("\"'")
_SINGLE_DELIMITER = _delimiting("'")


def _curly_single_quotes(text: str) -> str:
    """‘ and ’ where they delimit (after `{[,:`, before `:,}]`), as `{‘text’: ‘北京’}` writes.

    Not every ’: inside a span text it is an apostrophe (‘O’Brien’ keeps its own). Not where a
    straight single quote delimits: in `{'text': 'the players’, coaches'}` the ’ is text (a
    review); an apostrophe in the prose after the claims ("that's all") is no delimiter.
    """
    if _SINGLE_DELIMITER.search(text):
        return text
    text = re.sub(f"({_OPENS})\u2018", '\\1"', text)
    return re.sub(f"\u2019({_CLOSES})", '"\\1', text)


_REPAIRS = (
    ("control_characters", _escape_controls),
    ("trailing_commas", _outside_strings(lambda t: _TRAILING_COMMA.sub(r"\1", t))),
    # `{...} {...}` in a list: the comma a model left out between two claims
    ("missing_commas", _outside_strings(lambda t: _MISSING_COMMA.sub("}, {", t))),
    # a model writing Chinese or Japanese may write JSON's punctuation full-width ("text"："柏林")
    ("fullwidth_punctuation", _outside_strings(lambda t: t.translate(_FULL_WIDTH))),
    # only curly quotes outside straight-quoted strings delimit: those inside are span text
    ("curly_quotes", _outside_strings(lambda t: t.replace("\u201c", '"').replace("\u201d", '"'))),
    ("curly_single_quotes", _outside_strings(_curly_single_quotes)),
    ("single_quotes", _single_to_double_quotes),
    ("python_literals", _outside_strings(_replace_literals)),
    ("truncated_comment", _cut_comment),
    ("truncated_entry", _drop_cut_entry),
    ("truncated", _close_truncated),
)


def _next_bracket(chunk: str, start: int) -> int | None:
    found = [i for i in (chunk.find("{", start), chunk.find("[", start)) if i >= 0]
    return min(found) if found else None


def _claim_choice(found: list[tuple[int, Any]], in_prose: bool) -> tuple[Any, bool]:
    """The claims among the values decoded as written, and whether another one disagrees.

    The first is taken, except a bare list in the prose before an object that holds a list: in
    `The answer names ["Paris", "Eiffel Tower"], which are right. {"incorrect_spans": [...]}`
    the list is prose (an audit); before `Summary: {"count": 2}` it is the claims (a review).
    Two objects of the same keys that differ are counted (`several_answers`): a model
    restating a prompt's example before its answer, or one going on past its answer.

    Args:
        found: (position in the chunk, value) of each claim-shaped value, in order.
        in_prose: the chunk came after prose in the reply (it starts at its first bracket).
    """
    objects = [value for _, value in found if isinstance(value, dict)]
    pos, value = found[0]
    # an object that holds a list, as the claims' object does: not `{"count": 2}` or one entry
    holders = [obj for obj in objects if any(isinstance(v, list) for v in obj.values())]
    if isinstance(value, list) and (pos > 0 or in_prose) and holders:
        value = holders[0]
    keys = set(value) if isinstance(value, dict) else set()
    return value, any(other != value and keys & set(other) for other in objects)


def _skip_non_claims(chunk: str, in_prose: bool = False) -> tuple[str | None, Any, bool]:
    """Decodes `chunk` as written, stepping over brackets that cannot hold the claims.

    Stepped over: a value that is not claim-shaped ("see [1]"), and a bracket that fails to
    decode before any quote (prose such as "{note}" or "[citation needed]"). A failure after
    a quote is broken JSON: it goes to the repairs, as its inner brackets hold only part of it.

    Returns:
        (rest, value, several): value is the claim-shaped value chosen (`_claim_choice`; rest
        is then None, and several says another one disagrees); otherwise rest is where the
        repairs should start (None when nothing is left) and value the first value decoded,
        if any, as a last resort.
    """
    first: Any = None
    claims: list[tuple[int, Any]] = []
    pos: int | None = 0

    def settle(rest: str | None) -> tuple[str | None, Any, bool]:
        """The claims found so far, chosen; without any, `rest` for the repairs."""
        return (None, *_claim_choice(claims, in_prose)) if claims else (rest, first, False)

    # an opening ‘ too, where no straight quote delimits (`{‘text’: ‘北京’}`): where one does,
    # `[‘sic’]` in the prose is prose (a review); a ’ alone is more often an apostrophe
    quotes = "[\"'\u201c\u201d]" if _STRAIGHT_DELIMITER.search(chunk) else "[\"'\u201c\u201d\u2018]"
    for _ in range(_MAX_STARTS):
        try:
            value, end = decode_prefix(chunk[pos:])
        except json.JSONDecodeError as err:
            if re.search(quotes, chunk[pos : pos + err.pos + 1]):
                return settle(chunk[pos:])
            pos = _next_bracket(chunk, pos + err.pos + 1)
        except ValueError:  # nested too deep
            return settle(chunk[pos:])
        else:
            if _looks_like_claims(value):
                claims.append((pos, value))
            else:
                first = value if first is None else first
            pos = _next_bracket(chunk, pos + end)
        if pos is None:
            break
    return settle(None if pos is None else chunk[pos:])


def extract_json(text: str) -> tuple[Any | None, list[str]]:
    """The JSON value a model meant to write, and the repairs it needed.

    Preference: a claim-shaped value as written (fenced blocks first), then a repaired one,
    then any value as written. Never raises: text with no recoverable JSON (or nested deeper
    than MAX_DEPTH) gives None.

    Returns:
        (value, repairs): value is None when nothing could be recovered; repairs lists what
        was fixed, for the run's statistics (empty when the value decoded as written).
    """
    text, _ = strip_reasoning(text)  # a draft in the thinking is not the answer
    to_repair: list[str] = []
    fallback: Any = None
    for candidate, in_prose in _candidates(text):
        rest, value, several = _skip_non_claims(candidate, in_prose)
        if rest is None and _looks_like_claims(value):
            return value, ["several_answers"] if several else []
        fallback = value if fallback is None else fallback
        if rest is not None:
            to_repair.append(rest)
    for candidate in to_repair:
        fixed, applied = candidate, []
        for name, repair in _REPAIRS:
            new = repair(fixed)
            if new == fixed:
                continue
            fixed = new
            applied.append(name)
            try:
                return decode_prefix(fixed)[0], applied
            except ValueError:
                continue
    return fallback, []
