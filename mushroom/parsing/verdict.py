"""A claim's verdict against a context, three-way: supported, contradicted or unverifiable.

"The context does not say" is a finding of its own: folded into "false" it marked a claim no
context refutes as a hallucination; folded into "true" it hid that nothing was checked. The
verify prompt (prompts/verify.md) asks for `"verdict": "supported" | "contradicted" |
"not_in_context"`; replies in the older two-way form (`"supported": true|false`) still read,
`false` as contradicted, which is what they meant to the painter before.

Accepted words, in any case and with `_`, `-` or spaces (`read_verdict`):
- supported: supported, true, yes, correct, entailed, entailment, 1;
- contradicted: contradicted, false, no, incorrect, unsupported, not supported, refuted, 0;
- unverifiable: not in context, unverifiable, cannot verify, not verifiable, unknown,
  not enough info, insufficient, neutral, not mentioned.
Anything else is None, so the caller counts it instead of guessing.
"""

from __future__ import annotations

from typing import Any, Literal

from mushroom.parsing.parser import coerce_bool

Verdict3 = Literal["supported", "contradicted", "unverifiable"]

VERDICT_KEYS = ("verdict", "label", "status")
_WORDS: dict[str, Verdict3] = {
    **dict.fromkeys(("supported", "true", "yes", "correct", "entailed", "entailment", "1"), "supported"),
    **dict.fromkeys(
        ("contradicted", "false", "no", "incorrect", "unsupported", "not supported", "refuted", "0"),
        "contradicted",
    ),
    **dict.fromkeys(
        (
            "not in context",
            "unverifiable",
            "cannot verify",
            "not verifiable",
            "unknown",
            "not enough info",
            "not enough information",
            "insufficient",
            "neutral",
            "not mentioned",
        ),
        "unverifiable",
    ),
}


def _word(value: Any) -> Verdict3 | None:
    """A verdict written as a word, a JSON boolean or 1/0; None when it is none of them."""
    if isinstance(value, str):
        word = " ".join(value.replace("_", " ").replace("-", " ").split()).casefold()
        return _WORDS.get(word)
    flag = coerce_bool(value)
    return None if flag is None else "supported" if flag else "contradicted"


def read_verdict(entry: dict[str, Any]) -> Verdict3 | None:
    """The verdict of one decoded verdict object; None when it states none that can be read.

    The three-way key (`verdict`, or `label`/`status`) is read first; without a readable
    one, the two-way `supported` key, where a model of the new prompt may also have written
    "not_in_context".
    """
    keyed = {str(k).strip().casefold(): v for k, v in entry.items()}
    for key in (*VERDICT_KEYS, "supported"):
        found = _word(keyed[key]) if key in keyed else None
        if found is not None:
            return found
    return None
