"""Reasoning blocks (`<think>...</think>`) taken off a reply before it is read.

Reasoning models (Qwen3, DeepSeek-R1 and their distils) write their thinking before the
answer, and their thinking quotes JSON drafts: read as is, the first claim-shaped draft won
over the answer written after it, and a generated context began with the model's musings.
A chat template may open the block itself, so a reply can hold only its closing tag.
"""

from __future__ import annotations

import re

_TAGS = "think|thinking|reasoning"
_OPEN = re.compile(rf"\s*<({_TAGS})>", re.I)
_CLOSE = re.compile(rf"</({_TAGS})>", re.I)
_ANY_OPEN = re.compile(rf"<({_TAGS})>", re.I)


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
    # one pass: each closing tag counts the quotes since the one before, and the opening tag
    # is looked for once; slicing and counting from the start at each tag was quadratic (a
    # reply stuck repeating "</think>" after a quote: 24 s for 80 KB, an audit)
    first_open: dict[str, int] = {}
    for opening in _ANY_OPEN.finditer(text):
        first_open.setdefault(opening.group(1).lower(), opening.start())
    quotes, counted = 0, 0
    for close in _CLOSE.finditer(text):
        if first_open.get(close.group(1).lower(), len(text)) < close.start():
            break  # a block opened mid-text: not the template's
        quotes += len(_QUOTE.findall(text, counted, close.start()))
        counted = close.start()
        if quotes % 2 == 0:  # not inside a JSON string ("text": "</think> closes")
            return text[close.end() :], True
    return text, False


_QUOTE = re.compile(r'(?<!\\)"')
"""A double quote not escaped by a backslash."""
