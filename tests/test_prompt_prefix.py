"""Shipped prompts put what every item shares first, so a server's prefix cache can skip it.

llama.cpp reuses the longest common token prefix of the previous prompt in a slot, and vLLM's
prefix caching reuses cached blocks of any earlier prompt: both only help when the text that
is the same for every item (system message, instructions, examples, output format) comes
before the first item-specific value. `benchmarks/llm_quality.py --prefix-check N` measures
what this buys against a real server.
"""

from __future__ import annotations

import re

import pytest

from mushroom.detectors.prompts import PROMPT_DIR, load_prompt

_PLACEHOLDER = re.compile(r"\{\{\s*[a-z_]+\s*\}\}")
# Sent once or more per item: the instructions must come first. (pyes asks its Yes/No question
# after the item on purpose: the log-probability of "Yes" is read right after it; its prefix
# shared by an item's pieces is the context and question, which do come first.)
PER_ITEM_PROMPTS = [
    "single_zero_shot",
    "single_few_shot",
    "single_few_shot_plain",
    "decompose",
    "verify",
    "context_generation",
]


def _fixed_after_first_value(name: str) -> tuple[int, int]:
    template = load_prompt(name)
    text = (template.system or "") + "\n" + template.user
    first = _PLACEHOLDER.search(text)
    assert first is not None, name
    after = _PLACEHOLDER.sub("", text[first.start() :])
    return len(after), len(_PLACEHOLDER.sub("", text))


@pytest.mark.parametrize("name", PER_ITEM_PROMPTS)
def test_instructions_come_before_the_first_item_value(name):
    after, total = _fixed_after_first_value(name)
    # what follows the first value is field labels ("QUESTION:", "ANSWER:"), not instructions
    assert after <= max(80, total // 10), f"{name}: {after} of {total} fixed characters follow the item"


def test_every_shipped_prompt_is_checked_or_exempt():
    shipped = {p.stem for p in PROMPT_DIR.glob("*.md")} - {"README"}
    assert shipped - set(PER_ITEM_PROMPTS) == {"pyes", "context_grading"}


@pytest.mark.parametrize("name", ["single_few_shot", "verify"])
def test_two_items_share_the_whole_instruction_prefix(name):
    template = load_prompt(name)
    values = {k: f"{k} of item A" for k in template.placeholders}
    other = {k: f"{k} of item B" for k in template.placeholders}
    a = "".join(m.content for m in template.render(**values))
    b = "".join(m.content for m in template.render(**other))
    shared = next((k for k, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
    assert shared >= 0.6 * len(a), f"{name}: only {shared} of {len(a)} characters are shared"
