import numpy as np
import pytest

from mushroom.data.contexts import load_contexts
from mushroom.data.records import Context, Item
from mushroom.data.spans import hard_to_mask
from mushroom.data.splits import load_split
from mushroom.detectors import available, build
from mushroom.errors import DataError, MushroomError


def _item(text, question="Who won the race?", lang="en"):
    return Item(id="x", lang=lang, model_input=question, model_output_text=text)


def _flagged(det, item, contexts):
    pred = det.detect([item], {"x": [Context(source=f"s{i}", text=c) for i, c in enumerate(contexts)]})[0]
    return [item.model_output_text[s:e] for s, e in pred.hard_labels], pred


def test_unsupported_names_and_numbers_are_flagged_supported_ones_not():
    det = build("lexical")
    item = _item("Petra van Staveren won gold in 1984 in Los Angeles.", "What did Petra van Staveren win?")
    flagged, _ = _flagged(det, item, ["Petra van Staveren won gold at the 1984 Olympics in Los Angeles."])
    assert flagged == []
    item = _item("Petra van Staveren won silver in 2008 in Beijing.", "What did Petra van Staveren win?")
    flagged, pred = _flagged(det, item, ["Petra van Staveren won gold at the 1984 Olympics in Los Angeles."])
    assert flagged == ["silver in 2008 in Beijing"]
    assert pred.soft_labels and all(0 < s.prob <= 1 for s in pred.soft_labels)


def test_contexts_vote_and_share_is_the_probability():
    det = build("lexical", {"threshold": 0.5, "calibration": None})
    item = _item("Bob won in 1990.", "Who won?")
    _, pred = _flagged(det, item, ["Bob won in 1990.", "Bob won in 1991."])
    vec = np.zeros(len(item.model_output_text))
    for s in pred.soft_labels:
        vec[s.start : s.end] = s.prob
    assert vec[11] == pytest.approx(0.5) and pred.hard_labels == []
    _, pred = _flagged(det, item, ["Bob won in 1992.", "Bob won in 1991."])
    assert pred.hard_labels == [(11, 15)]


def test_number_formats_and_accents_and_inflection_match():
    det = build("lexical")
    flagged, _ = _flagged(
        det, _item("It cost 1,000 euros in Montréal.", "How much?"), ["It cost 1000 Euros in Montreal."]
    )
    assert flagged == []
    raw = build("lexical", {"calibration": None})
    item = _item("Sie gewann Goldmedaillen.", "Was?", "de")
    assert _flagged(raw, item, ["Sie gewann eine Goldmedaille."])[0] == []
    # calibrated: a stem-only match is less suspicious than no match at all
    near = dict(det.token_probs(item, [Context(source="a", text="Sie gewann eine Goldmedaille.")]))
    far = dict(det.token_probs(item, [Context(source="a", text="Sie gewann eine Silbermedaille.")]))
    assert next(p for t, p in near.items() if t.text == "Goldmedaillen") < next(
        p for t, p in far.items() if t.text == "Goldmedaillen"
    )


def test_chinese_uses_character_bigrams():
    det = build("lexical")
    item = _item("他在北京获得银牌。", "他获得了什么？", "zh")
    flagged, _ = _flagged(det, item, ["他在洛杉矶获得金牌。"])
    assert "北京" in "".join(flagged) and "银" in "".join(flagged)
    flagged, _ = _flagged(det, item, ["他在北京获得银牌。"])
    assert flagged == []


def test_a_latin_word_or_number_in_chinese_stops_at_the_next_chinese_character():
    """ "Python语言是1991年..." was one token (Han characters are letters too): a wrong 柏林 inside
    it went unseen, and a right sentence was flagged whole."""
    det = build("lexical")
    item = _item("Python语言是1991年由Guido在柏林发明的。", "谁发明了Python？", "zh")
    flagged, _ = _flagged(det, item, ["Python语言是1991年由Guido在荷兰发明的。"])
    assert "".join(flagged) == "柏林", flagged
    flagged, _ = _flagged(
        det, _item("Python由Guido在荷兰发明。", "？", "zh"), ["Guido van Rossum在荷兰发明了Python语言。"]
    )
    assert flagged == []


def test_a_soft_hyphen_or_zero_width_space_inside_a_word_does_not_split_it():
    """Scraped text has them: "War\u00adsaw" was the words "War" and "saw", and "War" was flagged."""
    det = build("lexical")
    for answer, context in (("in War\u00adsaw.", "in Warsaw."), ("in Warsaw.", "in War\u200bsaw.")):
        flagged, _ = _flagged(
            det, _item(f"Marie Curie was born {answer}", "Where?", "en"), [f"Marie Curie was born {context}"]
        )
        assert flagged == [], (answer, flagged)


def test_hindi_and_arabic_words_keep_their_marks_and_match():
    det = build("lexical")
    flagged, _ = _flagged(det, _item("उसने स्वर्ण पदक जीता", "क्या?", "hi"), ["उसने स्वर्ण पदक जीता"])
    assert flagged == []
    flagged, _ = _flagged(
        det, _item("فاز بالميدالية الفضية عام ١٩٩٠", "ماذا؟", "ar"), ["فاز بالميدالية الذهبية عام 1984"]
    )
    assert "١٩٩٠" in " ".join(flagged) and "الفضية" in " ".join(flagged)


def test_joiners_and_variation_selectors_belong_to_words_never_make_one():
    from mushroom.text.tokenize import tokenize

    text = "She won in 1999 \U0001f469\u200d\U0001f52c. \u2764\ufe0f می\u200cخواهم ه\u200d"
    assert [t.text for t in tokenize(text)] == ["She", "won", "in", "1999", "می\u200cخواهم", "ه\u200d"]


def test_no_context_flags_nothing():
    det = build("lexical")
    assert _flagged(det, _item("Anything at all 1999."), [])[0] == []


def test_options_are_validated_and_unknown_keys_rejected():
    assert "lexical" in available()
    with pytest.raises(DataError, match="did you mean 'threshold'") as caught:
        build("lexical", {"treshold": 0.3})
    # an option is not a file: the heading must not send the user looking for a bad input file
    assert caught.value.exit_code == 2 and str(caught.value).startswith("1 problem in options:")
    with pytest.raises(MushroomError, match="unknown detector"):
        build("nope")


@pytest.mark.parametrize("lang", ["ar", "de", "en", "es", "fi", "fr", "hi", "it", "sv", "zh"])
def test_val_language_beats_mark_all(lang):
    from mushroom.data.predictions import mark_all
    from mushroom.evaluation.score import score_predictions

    items = load_split("val", [lang])[lang]
    ctx = load_contexts("val", lang)
    preds = build("lexical").detect(items, ctx.by_id)
    for item, pred in zip(items, preds):
        assert all(0 <= s < e <= len(item.model_output_text) for s, e in pred.hard_labels)
        assert hard_to_mask(pred.hard_labels, len(item.model_output_text)).sum() <= len(
            item.model_output_text
        )
    assert score_predictions(items, preds).mean_iou > score_predictions(items, mark_all(items)).mean_iou


def test_calibration_orders_buckets_and_refits(tmp_path):
    from mushroom.detectors.lexical import LexicalOptions, fit_calibration
    from mushroom.detectors.lexical_calibration import load_calibration, save_calibration

    table = load_calibration("default")
    # on val, an unsupported number is far more often a hallucination than a lowercase word
    assert table.prob("en", "num|all") > table.prob("en", "low|all") > 0
    # a language without val data falls back to the pooled estimate
    assert table.prob("eu", "num|all") == pytest.approx(table.pooled("num|all"))
    items = load_split("val", ["it"])["it"]
    refit = fit_calibration({"it": (items, load_contexts("val", "it").by_id)}, LexicalOptions())
    save_calibration(refit, tmp_path / "cal.json")
    det = build("lexical", {"calibration": str(tmp_path / "cal.json")})
    assert det.calibration.stats.keys() == {"it"}
    with pytest.raises(MushroomError, match="not found"):
        build("lexical", {"calibration": str(tmp_path / "missing.json")})


def _channels(text, question, contexts, lang="en"):
    det = build("lexical")
    item = _item(text, question, lang)
    results = []
    det.run([item], {"x": [Context(source=f"s{i}", text=c) for i, c in enumerate(contexts)]}, results.append)
    (result,) = results
    assert result.ok
    n = len(text)
    from mushroom.data.spans import soft_to_vector

    return {name: soft_to_vector(spans, n) for name, spans in result.channels.items()}


def test_channels_tell_a_rare_unsupported_word_from_a_common_one_and_a_wrong_pairing():
    """The stack's evidence beyond the probability: frequency, neighbours, word pairs, sentences."""
    from mushroom.detectors.lexical_channels import CHANNELS

    text = "She won a silver medal in sport for Vrzblatt skills."
    ch = _channels(text, "What did she win for her skills?", ["She won a gold medal. Silver is a metal."])
    assert set(ch) == set(CHANNELS)
    assert all(0.0 <= v.min() and v.max() <= 1.0 for v in ch.values())

    def at(name, word):
        return ch[name][text.index(word)]

    # "silver" and "medal" are in the context, but never next to each other: a wrong pairing
    assert at("unsupported", "silver") == 0.0 and at("bigram_miss", "silver") == 1.0
    assert at("exact", "medal") == 1.0 and at("bigram_miss", "medal") == 1.0  # "silver medal" is not
    same = _channels(
        "She won a gold medal.", "What did she win?", ["She won a gold medal. Silver is a metal."]
    )
    assert same["bigram_miss"].max() == 0.0 and same["unsupported"].max() == 0.0
    assert at("in_question", "skills") == 1.0 and at("in_question", "medal") == 0.0
    # both unsupported, but one is a common English word and the other no word at all
    assert at("unsupported", "sport") == at("unsupported", "Vrzblatt") == 1.0
    assert at("zipf", "sport") > 0.4 > at("zipf", "Vrzblatt") == 0.0
    assert at("rare_unsupported", "Vrzblatt") == 1.0 and at("rare_unsupported", "sport") == 0.0
    assert at("common_unsupported", "sport") == 1.0
    assert at("capital_unsupported", "Vrzblatt") == 1.0 and at("capital_unsupported", "sport") == 0.0
    # function words carry no word-level evidence, but share the sentence's and the answer's
    assert at("content", " a ") == 0.0 and at("unsupported", " for ") == 0.0
    assert at("sentence_unsupported", " for ") == at("item_unsupported", " for ") > 0.0


def test_channels_without_context_say_so():
    ch = _channels("Bob won in 1990.", "Who won?", [])
    assert ch["context_chars"].max() == 0.0 and ch["content"].max() == 0.0


def test_basque_gets_no_borrowed_frequencies():
    """wordfreq answers Basque with Spanish frequencies; the channel must say 'unknown' instead."""
    from mushroom.text.frequency import zipf

    assert zipf("casa", "es") > 4.0
    assert zipf("casa", "eu") == 0.0


def test_channels_can_be_switched_off_and_a_one_word_answer_has_no_missing_pair():
    det = build("lexical", {"channels": False})
    item = _item("Bob.", "Who?")
    results = []
    det.run([item], {"x": [Context(source="s", text="Bob is here.")]}, results.append)
    assert results[0].ok and results[0].channels == {}
    ch = _channels("Bob.", "Who?", ["Bob is here."])
    assert ch["exact"].max() == 1.0 and ch["bigram_miss"].max() == 0.0


def test_frequency_is_looked_up_on_the_word_as_written():
    """Accent-stripped forms are other words to wordfreq ("nino" is rarer than "niño")."""
    ch = _channels("El niño ganó.", "¿Quién ganó?", ["Otro texto."], lang="es")
    from mushroom.text.frequency import ZIPF_MAX, zipf

    assert ch["zipf"]["El niño ganó.".index("niño")] == pytest.approx(zipf("niño", "es") / ZIPF_MAX)
    assert zipf("niño", "es") > zipf("nino", "es")


def test_remembered_evidence_is_keyed_by_everything_it_depends_on():
    """The semantic member's lexical part reuses the lexical member's evidence, never another's."""
    item = _item("Petra van Staveren won silver in Beijing.", "What did Petra van Staveren win?")
    ctx = [Context(source="s", text="Petra van Staveren won a silver medal in Los Angeles.")]
    first = build("lexical").token_evidence(item, ctx)
    assert build("lexical", {"channels": False}).token_evidence(item, ctx) is first
    strict = build("lexical", {"use_question": False}).token_evidence(item, ctx)
    assert strict is not first
    assert [share for tok, share, _ in strict if tok.text == "Staveren"] == [0.0]
    other = [Context(source="s", text="Petra van Staveren won a silver medal in Beijing.")]
    beijing = {tok.text: share for tok, share, _ in build("lexical").token_evidence(item, other)}
    assert beijing["Beijing"] == 0.0
    assert {tok.text: share for tok, share, _ in first}["Beijing"] == 1.0


def test_a_fact_check_is_read_for_its_corrections_and_never_counted_as_support():
    det = build("lexical")
    answer = "Petra van Staveren won silver in 2008 in Beijing for the Dutch team."
    item = _item(answer, "What did Petra van Staveren win?")
    ctx = [
        Context(source="perplexity-sonar-pro", text="Petra van Staveren won gold in 1984 in Los Angeles."),
        Context(
            source="qa_perplexity-sonar-pro",
            text='The answer is incorrect. She won gold in 1984, not silver in 2008. The "Dutch team" '
            "is right: she swam for the Netherlands.",
        ),
    ]
    with_check = det.detect([item], {"x": ctx})[0]
    alone = build("lexical").detect([item], {"x": ctx[:1]})[0]
    assert with_check == alone  # the fact-check repeats "silver in 2008" and supports none of it
    ch = det.channels["x"]
    at = {word: answer.index(word) for word in ("silver", "2008", "Beijing", "Dutch")}
    assert ch["checked"].min() == 1.0 and ch["check_verdict"][0] == 1.0
    assert ch["check_negated"][at["silver"]] == ch["check_negated"][at["2008"]] == 1.0
    assert ch["check_negated"][at["Beijing"]] == 0.0 and ch["check_unused"][at["Beijing"]] == 1.0
    assert ch["check_negated_unsupported"][at["2008"]] > 0
    assert ch["check_quoted"][at["Dutch"]] == 1.0 and ch["check_quoted"][at["silver"]] == 0.0
    assert ch["check_negated"][at["Dutch"]] == 0.0  # the correction ended with its sentence
    verdict = Context(
        source="qa_perplexity-sonar-pro",
        text="The answer is incorrect, Petra won gold. She won gold rather than silver; but rather Dutch.",
    )
    det.detect([item], {"x": [ctx[0], verdict]})
    ch2 = det.channels["x"]
    assert ch2["check_negated"][answer.index("Petra")] == 0.0  # "incorrect" opens no correction
    assert ch2["check_negated"][at["silver"]] == 1.0  # "rather than" does
    assert ch2["check_negated"][at["Dutch"]] == 0.0  # "rather" alone does not
    praise = Context(source="qa_perplexity-sonar-pro", text="The answer contains no errors: it is correct.")
    det.detect([item], {"x": [ctx[0], praise]})
    assert det.channels["x"]["check_verdict"][0] == 0.0
    det.detect([item], {"x": ctx[:1]})
    assert not any(det.channels["x"][name].any() for name in ("checked", "check_negated", "check_verdict"))


def test_japanese_and_korean_words_have_no_frequency_without_mecab(monkeypatch):
    """wordfreq reads ja and ko through MeCab, which mushroom does not install: a `ja` item failed
    with "No module named 'MeCab'" (exit 3), and every re-run failed it again."""
    import importlib.util

    from mushroom.text import frequency

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "MeCab" else real(name, *a)
    )
    frequency.has_frequencies.cache_clear()
    frequency.zipf.cache_clear()
    try:
        assert not frequency.has_frequencies("ja") and not frequency.has_frequencies("ko")
        assert frequency.zipf("ベルリン", "ja") == 0.0
        assert frequency.has_frequencies("en")
    finally:
        frequency.has_frequencies.cache_clear()
        frequency.zipf.cache_clear()


def test_a_context_with_a_huge_token_keeps_few_prefixes_and_matches_stems_as_before():
    """Every prefix of every word was kept: one 60k-character token (a base64 blob) took 1.9 GB."""
    from mushroom.detectors.lexical import PREFIX_CAP, _has_prefix, _prefixes

    blob = "x" * 60_000
    text = f"Some words {blob} and supercalifragilistic"
    short, long = _prefixes(text, 3)
    assert len(short) < 4 * PREFIX_CAP and long == (blob,)
    assert _has_prefix(text, 3, "x" * 5000) and _has_prefix(text, 3, "x" * PREFIX_CAP)
    assert not _has_prefix(text, 3, "x" * 60_001) and not _has_prefix(text, 3, "x" * 100 + "y")
    assert _has_prefix(text, 3, "supercali") and not _has_prefix(text, 3, "superman")


@pytest.mark.parametrize(
    ("lang", "answer", "spans"),
    [
        ("en", "It was Berlin. Munich too", ["Berlin", "Munich"]),
        ("hi", "शहर बर्लिन है। म्यूनिख भी", ["शहर बर्लिन", "म्यूनिख"]),
        ("ar", "المدينة برلين؟ ميونخ", ["المدينة برلين", "ميونخ"]),
        ("fa", "شهر برلین؛ مونیخ", ["شهر برلین", "مونیخ"]),
        ("en", "It was Berlin… Munich too", ["Berlin", "Munich"]),  # the ellipsis character
        ("ja", "ベルリン｡ミュンヘン", ["ベルリン", "ミュンヘン"]),  # the half-width full stop
    ],
)
def test_a_gap_is_not_bridged_across_a_sentence_end_of_any_script(lang, answer, spans):
    """Unsupported words on both sides of a danda or "؟" were joined into one span (an audit)."""
    from mushroom.detectors.lexical import LexicalDetector, LexicalOptions

    det = LexicalDetector(LexicalOptions(calibration=None, channels=False))
    item = _item(answer, "?", lang)
    vec = det.item_vector(item, [Context(source="c", text="nothing relevant here")])
    runs, start = [], None
    for i, p in enumerate([*vec.tolist(), 0.0]):
        if p > 0 and start is None:
            start = i
        elif p <= 0 and start is not None:
            runs.append(answer[start:i])
            start = None
    assert runs == spans
