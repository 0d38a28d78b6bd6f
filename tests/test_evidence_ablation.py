"""The evidence columns `benchmarks/evidence_ablation.py` and `error_classes.py` measure.

They are benchmark code, not the default's, but a column that is silently all zeros (or
marks the wrong words) would make their recorded null results meaningless.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

from error_classes import char_classes  # noqa: E402
from evidence_ablation import conflict_columns, question_columns, run_columns  # noqa: E402

from mushroom.data.records import Context, Item  # noqa: E402
from mushroom.detectors.lexical import LexicalDetector, LexicalOptions  # noqa: E402


@pytest.fixture(scope="module")
def lexical():
    return LexicalDetector(LexicalOptions(channels=False, calibration=None))


def span(text: str, word: str) -> slice:
    start = text.index(word)
    return slice(start, start + len(word))


def test_conflict_marks_a_substituted_word_and_a_different_number(lexical):
    answer = "Paris hosted the Summer Olympics in 1984 with great success."
    item = Item(id="x", lang="en", model_input="When did Paris host the Olympics?", model_output_text=answer)
    context = Context(
        source="perplexity-sonar-pro", text="Paris hosted the Summer Olympics in 1924 and 2024."
    )
    cols = conflict_columns(item, [context], lexical)
    assert cols["cf_number"][span(answer, "1984")].min() == 1.0
    # "great" and "success" have no supported neighbour on both sides standing close in the context
    assert cols["cf_slot"][span(answer, "success")].max() == 0.0
    # a supported word is never a conflict
    assert cols["cf_number"][span(answer, "Paris")].max() == 0.0
    unchanged = Context(source="perplexity-sonar-pro", text="Paris hosted the Summer Olympics in 1984.")
    assert conflict_columns(item, [unchanged], lexical)["cf_number"].max() == 0.0


def test_conflict_slot_needs_both_anchors_close_in_a_context(lexical):
    answer = "The bridge was designed by Smith in Boston."
    item = Item(id="x", lang="en", model_input="Who designed the bridge?", model_output_text=answer)
    close = Context(source="deepseek-r1", text="The bridge was designed by Jones in Boston.")
    far = Context(
        source="deepseek-r1", text="It was designed by a firm. " + "Filler words here. " * 5 + "Boston."
    )
    assert conflict_columns(item, [close], lexical)["cf_slot"][span(answer, "Smith")].min() == 1.0
    assert conflict_columns(item, [far], lexical)["cf_slot"][span(answer, "Smith")].max() == 0.0


def test_question_columns_follow_the_question_words(lexical):
    answer = "Marie Curie discovered polonium. She also liked long walks in the countryside near Warsaw."
    item = Item(id="x", lang="en", model_input="What did Marie Curie discover?", model_output_text=answer)
    cols = question_columns(item, lexical)
    first, second = span(answer, "polonium"), span(answer, "countryside")
    assert cols["q_sentence_overlap"][first].min() > cols["q_sentence_overlap"][second].max()
    assert cols["q_distance"][span(answer, "Curie")].max() == 0.0
    assert cols["q_distance"][span(answer, "Warsaw")].min() > cols["q_distance"][first].max()


def test_char_classes_split_by_evidence():
    text = "a big cat."
    unsupported = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 0], dtype=float)
    content = np.array([0, 0, 1, 1, 1, 0, 1, 1, 1, 0], dtype=float)
    # supported 0, unsupported 1, function 2, other 3
    assert char_classes(text, unsupported, content).tolist() == [2, 3, 0, 0, 0, 3, 1, 1, 1, 3]


def test_run_length_is_longer_inside_a_copied_stretch():
    answer = "Die Stadt liegt am Rhein und hat 90000 Einwohner."
    item = Item(id="x", lang="de", model_input="Wo liegt die Stadt?", model_output_text=answer)
    context = Context(source="deepseek-r1", text="Die Stadt liegt am Rhein. Sie hat viele Einwohner.")
    run = run_columns(item, [context])["run_length"]
    assert run[span(answer, "Rhein")].min() > run[span(answer, "90000")].max()
    assert run[answer.index(" ")] == 0.0  # not on spaces
