"""A claim's verdict against a context, three-way: supported, contradicted or unverifiable.

"The context does not say" is a finding of its own: folded into "false" it marked a claim no
context refutes as a hallucination; folded into "true" it hid that nothing was checked. The
verify prompt (prompts/verify.md) asks for `"verdict": "supported" | "contradicted" |
"not_in_context"`; replies in the older two-way form (`"supported": true|false`) still read,
`false` as contradicted, which is what they meant to the painter before.

Accepted words, in any case, with `_`, `-` or spaces, and with the marks around them dropped
("Supported.", "**SUPPORTS**"; `read_verdict`):
- supported: supported, supports, true, yes, correct, entailed, entails, entailment, consistent,
  supported by the context, 1;
- contradicted: contradicted, contradicts, contradiction, contradictory, false, no, incorrect,
  unsupported, not supported, refuted, refutes, inconsistent, 0;
- unverifiable: not in (the) context, unverifiable, cannot verify, cannot be verified, not
  verifiable, unknown, not enough info(rmation), insufficient (information), neutral, not
  mentioned (in the context), not found in (the) context, not stated, partially or partly
  supported (a part the context does not confirm is a part not checked).
Anything else is None, so the caller counts it instead of guessing.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Literal

from mushroom.parsing.parser import coerce_bool

Verdict3 = Literal["supported", "contradicted", "unverifiable"]

VERDICT_KEYS = ("verdict", "label", "status")
TWO_WAY_KEYS = ("supported", "is_supported")
_WORDS: dict[str, Verdict3] = {
    **dict.fromkeys(
        ("supported", "supports", "true", "yes", "correct", "entailed", "entails", "entailment", "consistent",
         "supported by the context", "supported by context", "1"),
        "supported",
    ),
    **dict.fromkeys(
        ("contradicted", "contradicts", "contradiction", "contradictory", "false", "no", "incorrect",
         "unsupported", "not supported", "refuted", "refutes", "inconsistent", "0"),
        "contradicted",
    ),
    **dict.fromkeys(
        (
            "not in context",
            "not in the context",
            "unverifiable",
            "cannot verify",
            "cannot be verified",
            "not verifiable",
            "unknown",
            "not enough info",
            "not enough information",
            "insufficient",
            "insufficient information",
            "neutral",
            "not mentioned",
            "not mentioned in the context",
            "not found in the context",
            "not found in context",
            "not stated",
            "partially supported",
            "partly supported",
        ),
        "unverifiable",
    ),
}  # fmt: skip
_EDGES = "\"'.,;:!?()[]* \t\n"


def _plain(word: str) -> str:
    """The form a verdict word is looked up in.

    Casefolded, `_` and `-` as spaces, format characters and the marks around it dropped: a
    model writes "Supported.", "**SUPPORTS**", or a zero-width space after the word.
    """
    word = "".join(ch for ch in word if unicodedata.category(ch) != "Cf")
    return " ".join(word.replace("_", " ").replace("-", " ").split()).strip(_EDGES).casefold()


def _word(value: Any) -> Verdict3 | None:
    """A verdict written as a word, a JSON boolean or 1/0; None when it is none of them."""
    if isinstance(value, str):
        return _WORDS.get(_plain(value))
    flag = coerce_bool(value)
    return None if flag is None else "supported" if flag else "contradicted"


def read_verdict(entry: dict[str, Any]) -> Verdict3 | None:
    """The verdict of one decoded verdict object; None when it states none that can be read.

    The three-way key (`verdict`, or `label`/`status`) is read first; without a readable
    one, the two-way `supported` key, where a model of the new prompt may also have written
    "not_in_context".
    """
    keyed = {str(k).strip().casefold(): v for k, v in entry.items()}
    for key in (*VERDICT_KEYS, *TWO_WAY_KEYS):
        found = _word(keyed[key]) if key in keyed else None
        if found is not None:
            return found
    return None
