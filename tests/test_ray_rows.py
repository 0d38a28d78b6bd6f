"""Rows for the Ray Data recipe from what a user has at hand (no Ray needed to build them)."""

from __future__ import annotations

import json

import pytest
from conftest import VAL_EN

from mushroom.data.records import Context
from mushroom.data.splits import load_split
from mushroom.errors import MushroomError
from mushroom.runs.ray_data import _row_item, item_row


def test_an_official_row_and_plain_string_contexts_make_the_row_an_item_makes():
    """The guide's `item_row(item, contexts)` crashed on a JSONL row: 'dict' has no model_dump."""
    raw = json.loads(VAL_EN.read_text(encoding="utf-8").splitlines()[0])
    item = load_split("val", ["en"])["en"][0]
    contexts = [Context(source="context0", text="one"), Context(source="context1", text="two")]
    assert item_row(raw, ["one", "two"]) == item_row(item, contexts)
    assert item_row(raw, [{"source": "context0", "text": "one"}, "two"]) == item_row(item, contexts)
    back, back_contexts = _row_item(item_row(raw, ["one", "two"]))
    assert (back.id, back.lang, back.model_output_text) == (item.id, "en", item.model_output_text)
    assert back.model_output_logits == item.model_output_logits and back_contexts == contexts


def test_a_row_that_is_no_item_is_named_on_the_driver():
    with pytest.raises(MushroomError, match="not an item .*model_output_text: Field required"):
        item_row({"id": "x", "lang": "en", "model_input": "q"})
    with pytest.raises(
        MushroomError,
        match="item_row: contexts\\[1\\] is of type int; a context is a string or a \\{source, text\\} dict",
    ):
        item_row({"id": "x", "lang": "en", "model_input": "q", "model_output_text": "a"}, ["ok", 3])
