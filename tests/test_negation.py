import numpy as np
import pytest

from mushroom.combine.stack.features import feature_names, item_features
from mushroom.data.predictions import prediction_from_vectors
from mushroom.data.records import Item
from mushroom.text.negation import negation_mask


def marked(text: str, lang: str) -> str:
    return "".join(ch if v else "_" for ch, v in zip(text, negation_mask(text, lang)))


@pytest.mark.parametrize(
    ("text", "lang", "expected"),
    [
        # both halves of a contraction, with either apostrophe; not a name with an apostrophe
        ("It isn’t so, can't be, O'toole", "en", "___isn’t_____can't____________"),
        ("Nothing, not even no one.", "en", "Nothing__not______no_____"),
        ("Il n'est pas là", "fr", "___n_____pas___"),
        # Latin-script words are compared with their accents
        ("No es ningún problema", "es", "No____ningún_________"),
        ("ningun", "es", "______"),
        ("Er ist nicht hier", "de", "_______nicht_____"),
        ("他没有去,不是", "zh", "_没___不_"),
        # a character that starts a word negating nothing: 非常 "very", 未来 "future"
        ("非常好,未来不会", "zh", "______不_"),
        # "né" (born) is not "ne"; a stray apostrophe is no contraction
        ("Il est né, il n'est pas", "fr", "______________n_____pas"),
        ("don' t", "en", "______"),
        # Arabic compared in normalised form: a tatweel inside the word does not hide it
        ("هذا لـيس صحيحا", "ar", "____لـيس______"),
        ("यह नहीं है", "hi", "___नहीं___"),
    ],
)
def test_negation_words_are_marked_whole(text, lang, expected):
    assert marked(text, lang) == expected


def test_a_language_without_a_list_and_an_empty_text_mark_nothing():
    assert not negation_mask("It is not", "xx").any()
    assert negation_mask("", "en").shape == (0,)


def test_the_stack_sees_negations_as_their_own_feature_column():
    text = "It is not the capital."
    item = Item(id="x", lang="en", model_input="q", model_output_text=text)
    pred = prediction_from_vectors("x", np.zeros(len(text)), np.zeros(len(text), dtype=bool))
    feats = item_features(item, [(pred, {})], [[]], ["en"])
    names = feature_names(["m"], [[]], ["en"])
    assert feats.shape == (len(text), len(names))
    column = feats[:, names.index("is_negation")]
    assert "".join(ch for ch, v in zip(text, column) if v) == "not"
    # a function word like "the" stays a stopword, not a negation
    assert feats[text.index("the"), names.index("is_stopword")] == 1.0


def test_the_stack_fingerprint_covers_every_text_module_its_features_read():
    """A stack fitted before a word list changed must be refitted, not reused as unchanged."""
    import re

    from mushroom.combine.stack import features, fingerprint

    source = open(features.__file__, encoding="utf-8").read()
    used = {f"{name}.py" for name in re.findall(r"from mushroom\.text\.(\w+) import", source)}
    covered = {path.name for path in fingerprint._FEATURE_CODE}
    assert used and used <= covered, used - covered
