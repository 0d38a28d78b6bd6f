"""Reasoning blocks (`<think>...</think>`) taken off a reply before it is read.

Reasoning models (Qwen3, DeepSeek-R1 and their distils) write their thinking before the
answer, and their thinking quotes JSON drafts: read as is, the first claim-shaped draft won
over the answer written after it, and a generated context began with the model's musings.
A chat template may open the block itself, so a reply can hold only its closing tag.
"""

from __future__ import annotations

import re

_OPEN = re.compile(r"\s*<(think|thinking|reasoning)>", re.I)
_CLOSE = re.compile(r"</(think|thinking|reasoning)>", re.I)


def strip_reasoning(text: str) -> tuple[str, bool]:
    """The reply without its leading reasoning block, and whether there was one.

    Only a block at the start is taken off (or everything up to a closing tag when the
    template opened it), so a tag a model merely mentions mid-answer is left alone, as is
    a closing tag inside a JSON string (a span's text that quotes one). A block
    that never closes (cut off while thinking) leaves nothing: the answer was never written.
    """
    opened = _OPEN.match(text)
    if opened:
        close = re.compile(rf"</{opened.group(1)}>", re.I).search(text, opened.end())
        return (text[close.end() :] if close else ""), True
    for close in _CLOSE.finditer(text):
        before = text[: close.start()]
        if re.search(rf"<{close.group(1)}>", before, re.I):
            break  # a block opened mid-text: not the template's
        if _quotes(before) % 2 == 0:  # not inside a JSON string ("text": "</think> closes")
            return text[close.end() :], True
    return text, False


def _quotes(text: str) -> int:
    """Double quotes in `text` that are not escaped by a backslash."""
    return len(re.findall(r'(?<!\\)"', text))
