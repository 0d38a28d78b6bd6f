"""Counted nouns and name suggestions, for every message that counts or names something.

Pure string helpers with no mushroom imports, so the errors module and every layer can use them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def close_match(name: str, names: Iterable[str], cutoff: float = 0.6, prefix: bool = False) -> str | None:
    """The one of `names` closest to a misspelt `name` (difflib's ratio >= `cutoff`), or None.

    With `prefix`, a name that starts with just one of them, or the start of just one, is
    matched too, both 3 characters or more: the long form of a short name ("validation" for
    "val") is far from it by difflib's ratio. Only for a hint: a caller that refuses a name
    on a close match (an unknown key that looks misspelt) keeps to the ratio.
    """
    import difflib

    names = list(names)
    match = difflib.get_close_matches(name, names, n=1, cutoff=cutoff)
    if match or not prefix:
        return match[0] if match else None
    key = name.lower()

    def starts_or_begins(n: str) -> bool:
        return min(len(n), len(key)) >= 3 and (key.startswith(n.lower()) or n.lower().startswith(key))

    starts = [n for n in names if starts_or_begins(n)]
    return starts[0] if len(starts) == 1 else None


def swapped_letters(a: str, b: str) -> bool:
    """Whether `a` is `b` with two neighbouring letters swapped ("lnag" for "lang").

    difflib's ratio scores such a slip low on a short word (0.75 for four letters), below the
    cutoff at which a misspelt key is refused.
    """
    if len(a) != len(b) or a == b:
        return False
    diff = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]


def plural(n: int, word: str, many: str | None = None) -> str:
    """A count with its noun in agreement: `1 item`, `2 items`, `0 items`.

    Every message that counts something goes through here, so "1 items" or "error(s)" never
    reach a user. The plural is `word + "s"` unless `many` is given ("entries"); for a noun
    phrase the last word takes the "s" ("prediction file" -> "prediction files").
    """
    return f"{n} {word if n == 1 else many or word + 's'}"


SHOWN_IDS = 5  # ids a message lists before "... (first 5 shown)"


def listed(ids: list[str], shown: int = SHOWN_IDS) -> str:
    """The first few ids, quoted, and how many were left out: `'a', 'b', ... (first 5 shown)`."""
    head = ", ".join(repr(i) for i in ids[:shown])
    return head + (f", ... (first {shown} shown)" if len(ids) > shown else "")


def no_prediction(ids: list[str], noun: str = "item", total: int | None = None) -> str:
    """One line for every id without a prediction: a count (of `total`) and the first few ids.

    One line, not one per item: a file that lost half of 1,000 items would otherwise bury
    every other problem under 500 lines with no line number to go to. The checker, the
    scorer, `compare` and the stack's member loading all say it this way.
    """
    count = plural(len(ids), noun) if total is None else f"{len(ids)} of {plural(total, noun)}"
    return f"no prediction for {count}: {listed(ids)}"


def suggest(name: str, choices: list[str] | tuple[str, ...] | Mapping[str, Any], label: str = "valid") -> str:
    """The tail of an "unknown name" message: a close match if any, then every valid name.

    `f"unknown detector {name!r}{suggest(name, available())}"` reads
    "unknown detector 'lexcal'; did you mean 'lexical'? valid: chain, lexical, llm"; `label`
    names the list where "valid" would not read well ("available", "its settings are").
    """
    names = sorted(choices)
    close = close_match(name, names, prefix=True)
    hint = f"; did you mean {close!r}?" if close else ";"
    return f"{hint} {label}: {', '.join(names) if names else '(none)'}"


def clipped(text: str, limit: int) -> str:
    """`text` as it is when it fits in `limit` characters, else cut to them, its end marked "..."."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str, limit: int = 200) -> str:
    """`text` on one line, at most `limit` characters, cut at a word's end with "...".

    A server's error body (a JSON object over several lines, a 429's long advice) printed as
    it came broke the failure table's rows, and cutting it at a fixed width left half a word.
    A single word longer than half the limit (a URL) is cut where it must be.
    """
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    head = flat[: limit - 3]
    space = head.rfind(" ")
    if space >= limit // 2:
        head = head[:space]
    return head.rstrip(" ,;:") + "..."
