import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mushroom.parsing.json_repair import extract_json
from mushroom.parsing.locate import SpanLocator, digit_runs
from mushroom.parsing.parser import (
    COUNT_KEYS,
    ParseStats,
    SpanClaim,
    coerce_bool,
    coerce_claims,
    coerce_probability,
    parse_response,
    read_claims,
)

ANSWER = "Petra van Stoveren won a silver medal in the 2008 Summer Olympics in Beijing, China."


@pytest.mark.parametrize(
    "raw",
    [
        '{"incorrect_spans": [{"text": "silver", "probability": 0.9}]}',
        'Sure!\n```json\n{"incorrect_spans": [{"text": "silver", "probability": 0.9}]}\n```\nDone.',
        '{"incorrect_spans": [{"text": "silver", "probability": 0.9},]}',
        "{'incorrect_spans': [{'text': 'silver', 'probability': 0.9}]}",
        '[{"text": "silver", "probability": 0.9}]',
        '{"incorrect_spans": [{"text": "silver", "probability": 0.9}, {"text": "20',
        '{"hallucinated_spans": [{"span": "silver", "prob": "90%"}]}',
        "The wrong parts: {\u201cincorrect_spans\u201d: [{\u201ctext\u201d: \u201csilver\u201d, \u201cprobability\u201d: 0.9}]}",
    ],
)
def test_json_is_found_and_repaired(raw):
    result = parse_response(ANSWER, raw)
    assert result.parsed
    assert [(s.start, s.end, s.prob) for s in result.spans] == [(25, 31, 0.9)]


def test_unparseable_and_empty_outputs_yield_no_spans():
    for raw in ["", None, "I cannot help with that.", "{{{{", "[1, 2, 3]", '{"incorrect_spans": "none"}']:
        result = parse_response(ANSWER, raw)
        assert result.spans == []
    assert not parse_response(ANSWER, "no json").parsed
    assert parse_response(ANSWER, '{"incorrect_spans": []}').parsed


def test_location_methods_in_order_of_tolerance():
    raw = (
        '{"incorrect_spans": [{"text": "silver"}, {"text": "SUMMER olympics"}, '
        '{"text": "Beijing,   China"}, {"text": "Stovaren"}, {"text": "Tokyo"}]}'
    )
    result = parse_response(ANSWER, raw)
    assert [(s.text, s.method) for s in result.spans] == [
        ("silver", "exact"),
        ("Summer Olympics", "casefold"),
        ("Beijing, China", "normalized"),
        ("Stoveren", "fuzzy"),
    ]
    assert result.lost == ["Tokyo"]


def test_repeated_texts_take_successive_occurrences():
    answer = "He won in 1990, lost in 1992 and won in 1990 again."
    result = parse_response(answer, '["1990", "1992", "1990"]')
    assert [(s.start, s.end) for s in result.spans] == [(10, 14), (24, 28), (40, 44)]


@pytest.mark.parametrize(
    ("answer", "text", "places"),
    [
        ("paris, then Paris", "Paris", [(0, 5), (12, 17)]),  # the first copy differs in case
        ("Paris is\nbig. Paris is big.", "Paris is big", [(0, 12), (14, 26)]),  # in whitespace
        ("في ١٩٩٠ ثم 1990", "1990", [(3, 7), (11, 15)]),  # in its digits' script
        ("北京。他去过北京两次。", "北京", [(0, 2), (6, 8)]),  # no spaces: every copy is a whole word
    ],
)
def test_a_text_listed_twice_marks_both_copies_when_one_differs_a_little(answer, text, places):
    """The exact copy was found twice, before any step of tolerance looked for the other one."""
    result = parse_response(answer, json.dumps([text, text]))
    assert sorted((s.start, s.end) for s in result.spans) == places


@pytest.mark.parametrize(
    ("answer", "text", "places"),
    [
        ("Bischofsheim war bis 1972 ein Stadtteil.", "bis", [(17, 20), (17, 20)]),  # not "Bis" of a name
        ("قبل أن يصبح رئيسًا للبرلمان", "أن", [(4, 6), (4, 6)]),  # not "ان" at a word's end
        (
            "Ludhiana, capital de Punjab, del estado del norte de India.",
            "de",
            [(18, 20), (50, 52)],
        ),  # not "del"
        ("मान सम्मान मान", "मान", [(0, 3), (11, 14)]),  # not after a virama, inside "सम्मान"
        ("राम रामायण राम", "राम", [(0, 3), (11, 14)]),  # not before a vowel sign, in "रामायण"
        ("خواهم رفت و می\u200cخواهم بمانم و خواهم دید", "خواهم", [(0, 5), (29, 34)]),  # ZWNJ joins
    ],
)
def test_a_text_listed_again_never_takes_a_piece_of_another_word(answer, text, places):
    """The second copy was looked for at every step of tolerance, inside words too (a review)."""
    result = parse_response(answer, json.dumps([text, text]))
    assert sorted((s.start, s.end) for s in result.spans) == places


@pytest.mark.parametrize(
    ("answer", "texts", "places"),
    [
        ("The start of art.", ["art"], [(13, 16)]),  # the word, not the end of "start"
        ("وزراء فيت نام الشمالية في 1965", ["وزراء", "في"], [(0, 5), (23, 25)]),  # not in "فيت"
        ("art in the start", ["the", "art"], [(7, 10), (13, 16)]),  # in order: after "the"
    ],
)
def test_a_text_takes_a_whole_word_after_the_previous_span_before_a_piece_of_one(answer, texts, places):
    """A text listed once took its first copy, inside a word or not (an audit)."""
    result = parse_response(answer, json.dumps(texts))
    assert [(s.start, s.end) for s in result.spans] == places


@pytest.mark.parametrize(
    ("answer", "text"),
    [
        ("वह पुल पर खड़ा था", "पल"),
        ("मेरा नाम राम है", "मरा"),
        ("ឃើញ ពិត", "ពត"),
    ],  # "moment" is not "bridge"; Khmer
)
def test_a_devanagari_vowel_sign_is_part_of_the_word_it_spells(answer, text):
    """The normalized step dropped every combining mark, and so placed a word on another."""
    result = parse_response(answer, json.dumps([text]))
    assert result.spans == [] and result.counts()["lost"] == 1


def test_a_span_text_that_starts_with_a_vowel_sign_keeps_it():
    """A text cut inside a Devanagari word lost its first mark at the normalized step, so its
    span left the vowel sign out (a review: "ुल  पर" was placed on "ल पर")."""
    answer = "वह पुल पर खड़ा था"
    result = parse_response(answer, json.dumps(["ुल  पर"]))  # two spaces: the normalized step
    assert [answer[s.start : s.end] for s in result.spans] == ["ुल पर"]


def test_percentages_are_scaled_and_invalid_entries_counted():
    # 70 is in [10, 100]: a percentage (0.7) by the one scale rule, as "70" is; 7 is ambiguous
    # (a 1-10 scale?), so the span keeps the default probability and the fallback is counted
    entries = [{"text": "a", "probability": 70}, {"text": "b", "probability": 7}, {"text": ""}, 3, {"x": 1}]
    claims, invalid = coerce_claims({"incorrect_spans": entries})
    assert [c.probability for c in claims] == [0.7, 1.0] and invalid == 3


@pytest.mark.parametrize(
    ("answer", "span"),
    [
        ("他在2008年获得银牌。", "银牌"),
        ("فاز بالميدالية الفضية عام 1990", "الفضية"),
        ("उसने रजत पदक जीता", "रजत पदक"),
        ("Sie gewann die Silbermedaille in Peking.", "Peking"),
        ("Cafe\u0301 de Flore", "Café"),
    ],
)
def test_all_scripts(answer, span):
    result = parse_response(answer, f'{{"incorrect_spans": [{{"text": "{span}", "probability": 0.7}}]}}')
    assert len(result.spans) == 1
    s = result.spans[0]
    assert 0 <= s.start < s.end <= len(answer)
    assert answer[s.start : s.end].replace("e\u0301", "é") == span


def test_an_exact_match_never_ends_between_a_letter_and_its_accent():
    """An exact "Cafe" in a decomposed "Cafe\u0301" ended before the accent; the normalised
    match ("Café") took it: one claim, two different spans, and a report showed a lone accent."""
    answer = "Cafe\u0301 de Flore"
    found = parse_response(answer, '{"incorrect_spans": ["Cafe"]}').spans
    assert [(s.start, s.end, s.method) for s in found] == [(0, 5, "exact")]


@settings(max_examples=200, deadline=None)
@given(
    answer=st.text(max_size=80), raw=st.text(max_size=200), spans=st.lists(st.text(max_size=12), max_size=5)
)
def test_never_raises_and_never_leaves_the_answer(answer, raw, spans):
    for text in (raw, json.dumps({"incorrect_spans": [{"text": s, "probability": 0.5} for s in spans]})):
        result = parse_response(answer, text)
        for s in result.spans:
            assert 0 <= s.start < s.end <= len(answer)


def test_extract_json_reports_repairs():
    value, repairs = extract_json("{'a': True,}")
    assert value == {"a": True} and "single_quotes" in repairs


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0.0),
        (0.8, 0.8),
        ("0.8", 0.8),
        (" .8 ", 0.8),
        (1, 1.0),
        ("1", 1.0),
        (80, 0.8),
        ("80", 0.8),
        (10.5, 0.105),
        ("1.5%", 0.015),
        (100, 1.0),
        ("80%", 0.8),
        ("1%", 0.01),
        ("0.5 %", 0.005),
        ("0,8", 0.8),
        ("8e-1", 0.8),
        ("\u0660.\u0668", 0.8),  # Arabic-Indic digits
        ("\u0668\u0660\u066a", 0.8),  # with the Arabic percent sign
    ],
)
def test_one_probability_scale_for_numbers_and_strings(value, expected):
    assert coerce_probability(value) == pytest.approx(expected)
    claim = SpanClaim(text="x", probability=value)
    assert claim.probability == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [-0.1, "-0.1", 100.5, "101", "150%", 10**400, "1e400", float("nan"), float("inf"), "NaN", "Infinity"]
    + [1.5, "1.9", 5, 9.99, 10, "10"]  # above 1, up to 10: a 1-10 scale, an overshoot or a percentage
    + [True, False, None, [0.5], {"p": 0.5}, "high", "", "0.5.5", "½"],
)
def test_invalid_probabilities_fall_back_to_the_default_and_are_counted(value):
    assert coerce_probability(value) is None
    with pytest.raises(ValidationError):
        SpanClaim(text="x", probability=value)
    found = read_claims({"incorrect_spans": [{"text": "silver", "probability": value}]}, 0.6)
    assert [c.probability for c in found.claims] == [0.6]
    assert found.bad_probabilities == 1 and found.invalid_entries == 0
    result = parse_response(
        ANSWER, json.dumps({"incorrect_spans": [{"text": "silver", "probability": value}]})
    )
    assert result.counts()["bad_probabilities"] == 1 and [s.prob for s in result.spans] == [1.0]


def test_missing_probability_takes_the_default_uncounted():
    found = read_claims(["silver", {"text": "2008"}], 0.6)
    assert [c.probability for c in found.claims] == [0.6, 0.6] and found.bad_probabilities == 0


@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (1, True), (0, False), (1.0, True), ("1", True), ("0", False)]
    + [("true", True), (" FALSE ", False), ("Yes", True), ("no", False), ("supported", True)]
    + [("Unsupported", False), ("not supported", False), ("NOT_SUPPORTED", False), ("correct", True)]
    + [("incorrect", False), ("maybe", None), ("", None), (None, None), (2, None), ([True], None)]
    + [({"a": 1}, None), ("truee", None), (0.5, None)],
)
def test_coerce_bool(value, expected):
    assert coerce_bool(value) is expected


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (["wrong year", "wrong place"], "wrong year; wrong place"),
        ({"why": "wrong"}, '{"why": "wrong"}'),
        (3, "3"),
        (False, "False"),
        ([], None),
        (None, None),
        ("as is", "as is"),
    ],
)
def test_a_reason_of_any_type_keeps_its_span(reason, expected):
    raw = json.dumps({"incorrect_spans": [{"text": "silver", "probability": 0.9, "reason": reason}]})
    result = parse_response(ANSWER, raw)
    assert [(s.start, s.end) for s in result.spans] == [(25, 31)] and result.invalid_entries == 0
    assert read_claims(json.loads(raw)).claims[0].reason == expected


def test_wrong_types_for_the_text_are_invalid_entries_but_a_year_as_a_number_is_text():
    value = {"incorrect_spans": [{"text": 2008}, {"text": ["silver"]}, {"text": None}, {"text": True}]}
    found = read_claims(value)
    assert [c.text for c in found.claims] == ["2008"] and found.invalid_entries == 3
    # a bare number in the list is no span: [1, 2, 3] would mark every "2" of the answer
    assert read_claims({"incorrect_spans": [2008, 2]}).invalid_entries == 2


def test_keys_are_read_in_any_case_and_a_single_object_under_the_list_key_counts():
    result = parse_response(ANSWER, '{"Incorrect_Spans": {"Text": "silver", "Probability": "90%"}}')
    assert [(s.start, s.end, s.prob) for s in result.spans] == [(25, 31, 0.9)]


@pytest.mark.parametrize(
    ("raw", "spans", "unparseable"),
    [
        ('{"wrong_spans": ["silver"]}', [(25, 31)], 0),  # its one list, read as a repair
        ('{"answer": "silver"}', [], 1),  # no list, no span key: not "nothing wrong"
        ('{"good": ["x"], "bad": ["silver"]}', [], 1),  # which list is meant cannot be told
        ('{"supported_spans": ["silver"]}', [], 1),  # the opposite of wrong spans: not read as them
        ('{"Hallucinated": ["silver"]}', [(25, 31)], 0),
        # a negated key lists what is right (an audit)
        ('{"non_hallucinated_spans": ["silver"]}', [], 1),
        ('{"not-wrong": ["silver"]}', [], 1),
        ('{"nonhallucinated": ["silver"]}', [], 1),
        # no negation of the wrong-word: still the wrong spans (a review)
        ('{"errors_not_in_context": ["silver"]}', [(25, 31)], 0),
        ('{"nonexistent_facts_hallucinated": ["silver"]}', [(25, 31)], 0),
        ("{}", [], 0),  # an empty object says nothing is wrong
        ('{"incorrect_spans": null}', [], 0),  # so does a null list (a mutation audit)
    ],
)
def test_an_object_of_unknown_keys_is_never_read_as_nothing_wrong(raw, spans, unparseable):
    """A server ignoring the schema wrote such objects; they parsed as no spans, uncounted."""
    result = parse_response(ANSWER, raw)
    assert [(s.start, s.end) for s in result.spans] == spans
    assert result.counts()["unparseable"] == unparseable
    assert result.repairs == (["other_list_key"] if spans else [])


def test_a_string_where_the_list_belongs_is_unparseable():
    result = parse_response(ANSWER, '{"incorrect_spans": "silver"}')
    assert not result.parsed and result.counts()["unparseable"] == 1


@pytest.mark.parametrize(
    ("answer", "span", "found"),
    [
        ("He was born in 1867 in Berlin.", "born in 1867 in Berln", "born in 1867 in Berlin"),
        ("The Eiffel Tower was completed in 1889.", "Tower was completd", "Tower was completed"),
        (
            "It was completed in 1889 in Paris, France.",
            "completed in 1889 in Pars",
            "completed in 1889 in Paris",
        ),
        # inside a longer word every candidate cuts it: the nearest length wins, as before
        ("In Berlin. Later in Berlinstadt.", "Later in Berln", "Later in Berli"),
    ],
)
def test_a_fuzzy_match_ends_on_a_word_boundary_when_one_is_as_close(answer, span, found):
    # a misspelt last word is one edit from the whole word and from its first letters alike
    result = parse_response(answer, json.dumps([span]))
    assert [s.text for s in result.spans] == [found]


def test_the_fuzzy_step_never_moves_a_year_onto_another_year():
    answer = "The company was founded in 2013 and moved to Berlin."
    raw = json.dumps(["2014", "2016", "2019", "2023", "founded in 2014", "in 2013 and moved"])
    result = parse_response(answer, raw)
    assert [s.text for s in result.spans] == ["in 2013 and moved"]
    assert result.lost == ["2014", "2016", "2019", "2023", "founded in 2014"]
    assert result.lost_numbers == 5


@pytest.mark.parametrize(
    ("answer", "span", "found"),
    [
        ("It cost 1,000 euros in total.", "cost 1000 euros", "cost 1,000 euros"),
        ("It cost 1000 euros in total.", "cost 1,000 euros", "cost 1000 euros"),
        ("It cost 1 000 euros in total.", "cost 1000 euros", None),  # a plain space is a break
        ("It cost 1.5 euros in total.", "cost 15 euros", None),
        ("It cost 1,5 euros in total.", "cost 15 euros", None),
        ("Population 1990 people.", "Population 199 people", None),  # a cut number is not moved
        ("Population 1990 people.", "Populatoin 1990 people", "Population 1990 people"),
        ("ولد في عام ٢٠١٣ في القاهرة", "عام 2013", "عام ٢٠١٣"),  # normalized: digits by value
        ("ولد في عام ٢٠١٣ في القاهرة", "عام 2014", None),
        ("He won on 12 May 2008.", "On 12 may 2008", "on 12 May 2008"),
        ("He won on 12 May 2008.", "on 13 May 2008", None),
        ("He scored 3 goals.", "scored 3 gaols", "scored 3 goals"),
        ("He scored 3 goals.", "scored 8 goals", None),
    ],
)
def test_numbers_are_matched_only_onto_the_same_numbers(answer, span, found):
    locator = SpanLocator(answer)
    located = locator.locate(span, 1.0)
    assert (located.text if located else None) == found
    if located:
        assert answer[located.start : located.end] == located.text


def test_digit_runs_unify_scripts_and_thousands_separators():
    assert digit_runs("in 1,990 and \u0662\u0660\u0661\u0663, 1.5, 1\u202f000, 12,34") == (
        "1990",
        "2013",
        "1",
        "5",
        "1000",
        "12",
        "34",
    )


@pytest.mark.parametrize("depth", [65, 1000, 20_000])
def test_deep_nesting_is_unparseable_not_a_crash(depth):
    for raw in ("[" * depth, "{" * depth, '{"a": ' * depth, "[" * depth + "]" * depth):
        result = parse_response(ANSWER, raw)
        assert not result.parsed and result.error is None
    assert extract_json("[" * depth) == (None, [])


def test_json_within_the_depth_bound_still_decodes():
    value, repairs = extract_json("[" * 60 + '"silver"' + "]" * 60)
    assert repairs == [] and value is not None


def test_huge_integers_decode_and_are_rejected_as_probabilities():
    raw = '{"incorrect_spans": [{"text": "silver", "probability": ' + "9" * 5000 + "}]}"
    result = parse_response(ANSWER, raw)
    assert result.parsed and result.bad_probabilities == 1 and [s.prob for s in result.spans] == [1.0]


def test_a_number_cut_at_the_end_falls_back_instead_of_reading_zero():
    raw = '{"incorrect_spans": [{"text": "silver", "probability": 0.'
    result = parse_response(ANSWER, raw)
    assert [s.prob for s in result.spans] == [1.0] and result.repairs == ["truncated"]


@pytest.mark.parametrize(
    "raw",
    [
        'As noted in [1], the answer is wrong: {"incorrect_spans": [{"text": "silver"}]}',
        'See [1] and {note}: {"incorrect_spans": ["silver"]} [end]',
        "[citation needed] {'incorrect_spans': ['silver']}",
        'Prose {x: 1} then ["silver"]',
        '[sic] {"incorrect_spans": [{"text": "silver", "probability": 0.9},',
    ],
)
def test_brackets_in_prose_before_the_json(raw):
    assert [s.text for s in parse_response(ANSWER, raw).spans] == ["silver"]


def test_broken_json_is_repaired_whole_not_read_from_an_inner_bracket():
    raw = '{"incorrect_spans": [{"text": "silver", "probability": 0.9,}, {"text": "2008"}]}'
    result = parse_response(ANSWER, raw)
    assert [s.text for s in result.spans] == ["silver", "2008"] and result.repairs == ["trailing_commas"]


def test_a_raw_line_break_in_one_string_loses_no_claim():
    """llama.cpp's SmolLM2 wrote a newline inside a span text: every claim used to be lost."""
    raw = '{"incorrect_spans": [{"text": "silver", "probability": 0.9}, {"text": "20\n08"}, {"text": "x\t"}]}'
    result = parse_response(ANSWER, raw)
    assert (
        result.parsed
        and [s.text for s in result.spans] == ["silver"]
        and result.repairs == ["control_characters"]
    )
    value, _ = extract_json('{"a": "escaped \\n, raw \n"}')  # an escaped one is not escaped twice
    assert value == {"a": "escaped \n, raw \n"}


def test_a_missing_comma_between_claims_is_put_back_outside_strings():
    raw = '{"incorrect_spans": [{"text": "silver"} {"text": "2008"}\n{"text": "a} {b"}]}'
    value, repairs = extract_json(raw)
    assert [c["text"] for c in value["incorrect_spans"]] == ["silver", "2008", "a} {b"]
    assert repairs == ["missing_commas"]


def test_repairs_leave_string_contents_alone():
    value, repairs = extract_json('{"text": "True, ]", "b": True,}')
    assert value == {"text": "True, ]", "b": True} and repairs == ["trailing_commas", "python_literals"]


def test_counts_add_up_for_one_response():
    raw = (
        "```json\n{'incorrect_spans': [{'text': 'silver', 'probability': 'high'}, "
        "{'text': 'SUMMER olympics'}, {'text': 'Tokyo'}, {'text': 2009}, 7]}\n```"
    )
    result = parse_response(ANSWER, raw)
    counts = result.counts()
    assert counts == {
        "responses": 1,
        "parsed": 0,
        "repaired": 1,
        "unparseable": 0,
        "parser_errors": 0,
        "claims": 4,
        "invalid_entries": 1,
        "bad_probabilities": 1,
        "located_exact": 1,
        "located_casefold": 1,
        "located_normalized": 0,
        "located_fuzzy": 0,
        "lost": 2,
        "lost_numbers": 1,
    }
    assert tuple(counts) == COUNT_KEYS


def test_parse_stats_sum_the_counts():
    stats, other = ParseStats(), ParseStats()
    stats.add(parse_response(ANSWER, '{"incorrect_spans": [{"text": "silver"}]}'))
    stats.add(parse_response(ANSWER, "{'incorrect_spans': [{'text': 'Tokyo'}]}"))
    other.add(parse_response(ANSWER, "no json"))
    other.errors = 2
    stats.merge(other)
    data = stats.to_dict()
    assert (data["responses"], data["parsed"], data["repaired"], data["unparseable"]) == (3, 1, 1, 1)
    assert data["backend_errors"] == 2 and data["repairs"] == {"single_quotes": 1}
    assert data["located"] == {"exact": 1, "casefold": 0, "normalized": 0, "fuzzy": 0} and data["lost"] == 1
    assert stats.responses == 3 and stats.located["exact"] == 1 and stats.claims == 2


def test_a_parser_bug_is_counted_not_raised(monkeypatch, caplog):
    import mushroom.parsing.parser as parser

    def broken(text):
        raise RuntimeError("boom")

    monkeypatch.setattr(parser, "extract_json", broken)
    result = parse_response(ANSWER, '{"incorrect_spans": []}')
    assert not result.parsed and result.error == "RuntimeError: boom"
    assert result.counts()["unparseable"] == 1 and result.counts()["parser_errors"] == 1
    assert "parser error" in caplog.text


def test_whitespace_at_span_edges_is_not_part_of_the_span():
    result = parse_response(ANSWER, '["  silver ", " 2008\\n"]')
    assert [s.text for s in result.spans] == ["silver", "2008"]


def test_curly_quotes_inside_span_texts_survive_the_repair():
    answer = "She called it \u201cthe best\u201d film of 2001."
    raw = '{\u201cincorrect_spans\u201d: [{"text": "\u201cthe best\u201d"}, {"text": "2001"}]}'
    value, repairs = extract_json(raw)
    assert value["incorrect_spans"][0]["text"] == "\u201cthe best\u201d" and repairs == ["curly_quotes"]
    # placed on the quoted words, the quotes at its edges left out (no gold span has them)
    assert [s.text for s in parse_response(answer, raw).spans] == ["the best", "2001"]


@pytest.mark.parametrize(
    ("raw", "texts", "repair"),
    [
        ('{"incorrect_spans":\u3000[{"text":\u3000"北京"}]}', ["北京"], "fullwidth_punctuation"),
        (
            "{\u2018incorrect_spans\u2019: [{\u2018text\u2019: \u2018北京\u2019}]}",
            ["北京"],
            "curly_single_quotes",
        ),
        ("[{\u2018text\u2019: \u2018O\u2019Brien\u2019}]", ["O\u2019Brien"], "curly_single_quotes"),
    ],
)
def test_a_reply_in_ideographic_spaces_or_single_curly_quotes_is_read(raw, texts, repair):
    """Both lost the whole reply as unparseable (an audit of zh and ar replies)."""
    result = parse_response("北京和上海, O\u2019Brien", raw)
    assert [s.text for s in result.spans] == texts and result.repairs == [repair]


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (
            'Sources [\u2018Wikipedia\u2019] say: [{"text": "Paris", "prob": 0.9}]',
            [{"text": "Paris", "prob": 0.9}],
        ),
        (
            "{'text': 'the players\u2019, coaches', 'prob': 0.8}",
            {"text": "the players\u2019, coaches", "prob": 0.8},
        ),
        (
            "[{'text': 'the \u2018Iron Lady\u2019, Thatcher'}]",
            [{"text": "the \u2018Iron Lady\u2019, Thatcher"}],
        ),
        # a straight quote that delimits nothing leaves them delimiting (the second review)
        (
            "[{\u2018text\u2019: \u2018北京\u2019}]\n\nNote: the answer's capital is wrong.",
            [{"text": "北京"}],
        ),
        ("[\u2018O'Brien\u2019, \u2018北京\u2019]", ["O'Brien", "北京"]),
        ("{\u201cincorrect_spans\u201d: [\u2018北京\u2019]}", {"incorrect_spans": ["北京"]}),
        ("[{\u2018text\u2019: \u2018it's Paris\u2019}]", [{"text": "it's Paris"}]),
    ],
)
def test_single_curly_quotes_delimit_only_where_no_straight_quote_does(raw, value):
    """The first repair for them took `[‘sic’]` in the prose for the claims, and turned a ’ in
    a single-quoted span text into a quote (a review); the second gave up at any straight quote,
    an apostrophe in the prose after the claims too (a review)."""
    assert extract_json(raw)[0] == value


def test_the_arabic_decimal_separator_reads_as_a_point():
    assert coerce_probability("\u0660\u066b\u0669") == 0.9  # ٠٫٩


def test_a_fence_inside_a_json_reply_is_span_text():
    answer = "Run ```pip install flask``` first, then [1] import it."
    raw = json.dumps({"incorrect_spans": [{"text": "```pip install flask```", "reason": ["x", 2]}]})
    assert extract_json(raw)[0]["incorrect_spans"][0]["text"] == "```pip install flask```"
    # in the answer as written, after no previous span: taken so (backticks are no punctuation)
    assert [s.text for s in parse_response(answer, raw).spans] == ["```pip install flask```"]


@pytest.mark.parametrize(
    ("tail", "prob"),
    [("0.9", [0.9]), ("0.", [1.0]), ("0", [1.0]), ("8", [1.0]), ("0.75", [0.75]), ('"9', [])],
)
def test_a_probability_at_the_cut_is_kept_only_when_complete(tail, prob):
    # a cut inside a string drops its whole object, as for a cut span text, and counts it lost
    raw = '{"incorrect_spans": [{"text": "silver", "probability": ' + tail
    result = parse_response(ANSWER, raw)
    assert [s.prob for s in result.spans] == prob
    dropped = not prob
    assert result.repairs == ["truncated_entry"] * dropped + ["truncated"]
    assert result.counts()["unparseable"] == result.invalid_entries == dropped


@pytest.mark.parametrize(
    ("raw", "spans", "lost"),
    [
        # a missing quote, not a cut: the repairs dropped the one entry, and said nothing is wrong
        ('{"incorrect_spans": [{"text": "1901, "probability": 0.9}]}', [], 1),
        ("{'incorrect_spans': [{'text': '1901', 'reason': 'the builders' date'}]}", [], 1),
        ('{"incorrect_spans": [{"text": "1901", "probability": 0.9}, {"text": "Henri Du', ["1901"], 1),
        ('{"incorrect_spans": ["1901", "Henri Du', ["1901"], 1),
        # cut in the reason (the prompts ask for it last) or a key: the span is whole, and kept
        (
            '{"incorrect_spans": [{"text": "1901", "probability": 0.95, "reason": "context says 18',
            ["1901"],
            0,
        ),
        ('{"incorrect_spans": [{"text": "1901", "probability": 0.95, "rea', ["1901"], 0),
        ('{"incorrect_spans": [{"reason": "context says 18', [], 1),
        # cut in a list of the entry's own: no entry is lost (a review)
        ('{"incorrect_spans": [{"text": "1901", "sources": ["Wikip', ["1901"], 0),
        ('{"incorrect_spans": [{"text": "1901", "meta": {"src": "Wik', ["1901"], 0),
    ],
)
def test_an_entry_the_repairs_drop_is_counted_and_a_cut_reason_keeps_its_span(raw, spans, lost):
    """An entry dropped for a cut (or a missing quote) is lost, not "nothing wrong" (an audit)."""
    result = parse_response("The tower was built in 1901 by Henri Dupont.", raw)
    assert [s.text for s in result.spans] == spans and result.invalid_entries == lost
    assert result.counts()["unparseable"] == int(not spans)


def test_a_string_cut_at_the_end_is_dropped_not_closed():
    answer = "He won in 1990 and again in 1994."
    assert [s.text for s in parse_response(answer, '["1994", "19').spans] == ["1994"]
    assert parse_response(answer, '{"incorrect_spans": [{"text": "1994"}, {"text": "19').claims == 1


@pytest.mark.parametrize(
    "raw",
    [
        '<think>Draft: {"incorrect_spans": [{"text": "Paris"}]} no, wrong.</think>\n'
        '{"incorrect_spans": [{"text": "1889"}]}',
        '<THINKING>\nmaybe {"incorrect_spans": []}\n</THINKING>{"incorrect_spans": [{"text": "1889"}]}',
        # the chat template opened the block: only its end is in the reply
        'the year looks off {"incorrect_spans": [{"text": "Paris"}]}</think>{"incorrect_spans": [{"text": "1889"}]}',
    ],
)
def test_a_json_draft_in_the_reasoning_is_not_the_answer(raw):
    result = parse_response("The tower in Paris was finished in 1889.", raw)
    assert [s.text for s in result.spans] == ["1889"] and result.parsed and not result.repairs


def test_a_reply_cut_off_while_thinking_has_no_answer_and_a_tag_mid_answer_stays():
    cut = parse_response("Paris in 1889.", '<think>I think {"incorrect_spans": [{"text": "Paris"}]}')
    assert not cut.parsed and cut.counts()["unparseable"] == 1
    from mushroom.parsing.reasoning import strip_reasoning

    text = 'Here: {"incorrect_spans": [{"text": "<think> tags"}]}'
    assert strip_reasoning(text) == (text, False)
    # nor is a closing tag inside a span's text (it cut the reply there, and lost the claim)
    quoting = parse_response(
        "The HTML tag </think> closes a block. Paris.",
        '{"incorrect_spans": [{"text": "</think> closes"}, {"text": "Paris"}]}',
    )
    assert [s.text for s in quoting.spans] == ["</think> closes", "Paris"]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # the three-way form the verify prompt asks for
        ({"claim": 1, "verdict": "supported"}, "supported"),
        ({"claim": 1, "verdict": "contradicted"}, "contradicted"),
        ({"claim": 1, "verdict": "not_in_context"}, "unverifiable"),
        ({"claim": 1, "verdict": "Not in context"}, "unverifiable"),
        ({"claim": 1, "Verdict": " NOT-IN-CONTEXT "}, "unverifiable"),
        ({"claim": 1, "label": "neutral"}, "unverifiable"),
        ({"claim": 1, "verdict": "unverifiable"}, "unverifiable"),
        # the old two-way replies still read: false is what the painter marked before
        ({"claim": 1, "supported": True}, "supported"),
        ({"claim": 1, "supported": False}, "contradicted"),
        ({"claim": 1, "supported": "false"}, "contradicted"),
        ({"claim": 1, "supported": "yes"}, "supported"),
        ({"claim": 1, "supported": 0}, "contradicted"),
        # a model of the new prompt writing the third word under the old key
        ({"claim": 1, "supported": "not_in_context"}, "unverifiable"),
        # an unreadable verdict word falls back to a readable `supported`
        ({"claim": 1, "verdict": "maybe", "supported": False}, "contradicted"),
        # as models write them (an audit): marks around the word, other forms of it
        ({"claim": 1, "verdict": "Supported."}, "supported"),
        ({"claim": 1, "verdict": "**SUPPORTS**"}, "supported"),
        ({"claim": 1, "verdict": "supported\u200b"}, "supported"),
        ({"claim": 1, "verdict": "entails"}, "supported"),
        ({"claim": 1, "verdict": "Contradiction"}, "contradicted"),
        ({"claim": 1, "verdict": "contradictory"}, "contradicted"),
        ({"claim": 1, "verdict": "refutes"}, "contradicted"),
        ({"claim": 1, "verdict": "not in the context"}, "unverifiable"),
        ({"claim": 1, "verdict": "partially supported"}, "unverifiable"),
        ({"claim": 1, "is_supported": False}, "contradicted"),
        # nothing that can be read: None, for the caller to count
        ({"claim": 1, "verdict": "maybe"}, None),
        ({"claim": 1, "supported": "perhaps"}, None),
        ({"claim": 1, "supported": None}, None),
        ({"claim": 1, "verdict": ["supported"]}, None),
        ({"claim": 1}, None),
        ({"claim": 1, "supported": 2}, None),
    ],
)
def test_read_verdict_three_way_and_old_two_way(entry, expected):
    from mushroom.parsing.verdict import read_verdict

    assert read_verdict(entry) == expected


@pytest.mark.parametrize(
    ("answer", "quoted", "found"),
    [
        ("ماری کوری در ورشو به دنیا آمد", "ماري كوري", "ماری کوری"),  # Persian ی/ک quoted in Arabic forms
        ("Ｍａｒｉｅ Curie was born", "Marie", "Ｍａｒｉｅ"),  # full-width letters
        ("ﾍﾞﾙﾘﾝで生まれた", "ベルリン", "ﾍﾞﾙﾘﾝ"),  # half-width kana
        ("他在柏林，后来", "柏林,", "柏林"),  # full-width comma found (too short to be fuzzy), then left out
        ("born in War\u00adsaw in 1867", "Warsaw", "War\u00adsaw"),  # a soft hyphen
    ],
)
def test_a_quote_written_in_another_form_of_the_same_letters_is_located(answer, quoted, found):
    """The detectors fold these forms; the parser's normalized step did not, and lost the span."""
    result = parse_response(
        answer, json.dumps({"incorrect_spans": [{"text": quoted}]}, ensure_ascii=False), 0.5
    )
    assert [answer[s.start : s.end] for s in result.spans] == [found], (result.spans, result.lost)


def test_json_punctuation_written_full_width_is_repaired():
    """A model writing Chinese wrote '"text"："柏林"': unparseable, the item's reply lost."""
    result = parse_response("他在柏林，后来", '{"incorrect_spans"：[{"text"："柏林"}]}', 0.5)
    assert result.parsed and [(s.start, s.end) for s in result.spans] == [(2, 4)]
    value, repairs = extract_json('{"incorrect_spans": [{"text": "柏林，后来"}]}')
    assert repairs == [] and value["incorrect_spans"][0]["text"] == "柏林，后来"  # inside a string: span text


def test_width_folding_keeps_quote_marks_and_never_lands_a_number_on_another():
    """NFKD before the quote table lost "I´m" for "I'm"; on all characters it put "XI" on "Ⅻ"."""
    assert SpanLocator("Yes, I´m sure").locate("I'm", 1).text == "I´m"
    assert SpanLocator("a 12″ TV").locate('12" TV', 1).text == "12″ TV"
    assert SpanLocator("Louis Ⅻ reigned").locate("Louis XI", 1) is None


def test_a_python_style_reply_with_an_escaped_apostrophe_keeps_every_span():
    """`\\'` is no JSON escape: the reply was unparseable and every span in it lost."""
    result = parse_response(
        "Sean O'Brien won in 1990.", "{'incorrect_spans': [{'text': 'O\\'Brien'}, {'text': '1990'}]}"
    )
    assert [s.text for s in result.spans] == ["O'Brien", "1990"] and result.counts()["unparseable"] == 0


def test_a_claim_or_reason_with_half_an_emoji_is_placed_not_dropped():
    answer = "We met in Lyon \U0001f600 in 1990."
    result = parse_response(answer, r'{"incorrect_spans":[{"text":"Lyon \ud83d in 1990"}]}')
    assert [(s.start, s.end) for s in result.spans] == [(10, 24)] and result.invalid_entries == 0
    found = read_claims(
        {"spans": [{"text": "Lyon", "reason": ["a", "b \udc00"]}, {"text": "1990", "reason": "x \ud83d"}]}
    )
    assert [c.reason for c in found.claims] == ["a; b \ufffd", "x \ufffd"] and found.invalid_entries == 0


def test_a_span_text_too_long_to_search_fuzzily_is_counted_lost_and_a_near_one_found():
    """The fuzzy step cost text x answer edits per candidate start: 58 s for 40 KB (an audit)."""
    from mushroom.parsing.locate import MAX_FUZZY_LEN

    answer = "abcdefghij" * (MAX_FUZZY_LEN // 5)
    near = "abcdefghiX" * (MAX_FUZZY_LEN // 20)  # 10% of its characters changed, within the budget
    too_long = "abcdefghiX" * (MAX_FUZZY_LEN // 10 + 1)
    result = parse_response(answer, json.dumps([near, too_long]))
    assert [(s.start, s.end, s.method) for s in result.spans] == [(0, len(near), "fuzzy")]
    assert result.counts()["lost"] == 1


@pytest.mark.parametrize(
    ("raw", "spans", "repairs"),
    [
        # a list in the prose before the object is prose, not the claims (an audit)
        ('The answer names ["Paris", "Eiffel"], which are right. {"incorrect_spans": [{"text": "1901"}]}',
         ["1901"], []),
        # a reply that is a list is the claims, whatever follows it
        ('["1901"] then {"x": 1}', ["1901"], []),
        # two answers of the same shape: the first is taken, and the choice is counted
        ('Example 3\nOUTPUT: {"incorrect_spans": []}\nMine: {"incorrect_spans": [{"text": "Paris"}]}',
         [], ["several_answers"]),
        # a list in the prose before an object that holds no list is the claims (a review)
        ('The wrong spans:\n[{"text": "1901"}, {"text": "Paris"}]\nSummary: {"count": 2}', ["1901", "Paris"], []),
        ('Wrong: [{"text": "1901"}, {"text": "Paris"}]. Surest: {"text": "1901", "probability": 0.9}',
         ["1901", "Paris"], []),
        # an object of other keys after the answer is no second answer
        ('{"incorrect_spans": [{"text": "1901"}]} see [1] and {"note": 1}', ["1901"], []),
        ('{"incorrect_spans": [{"text": "1901"}]}\n{"incorrect_spans": [{"text": "1901"}]}', ["1901"], []),
    ],
)  # fmt: skip
def test_the_claims_are_the_object_after_prose_and_a_second_answer_is_counted(raw, spans, repairs):
    result = parse_response("The Eiffel Tower in Paris was built in 1901.", raw)
    assert [s.text for s in result.spans] == spans and result.repairs == repairs
    assert result.counts()["repaired"] == bool(repairs)


@pytest.mark.parametrize(
    ("text", "placed"),
    [
        ('"1901"', "1901"),
        ("'1901'", "1901"),
        ("\u201c1901\u201d", "1901"),
        ("\u00abParis\u00bb", "Paris"),
        ("1901.", "1901"),
        # the fuzzy step took the spaces beside the name for its quotes
        ('"Henri Dupont"', "Henri Dupont"),
        ('"Henri Dupond"', "Henri Dupont"),
        # in the answer as written too, the marks at its edges are left out: no gold span of
        # val starts or ends on punctuation or a space
        ("Paris.", "Paris"),
        ("Paris. Paris", "Paris. Paris"),
        # a span of nothing else keeps it
        (".", "."),
    ],
)
def test_a_span_text_in_quotes_or_with_a_full_stop_is_placed_on_its_words(text, placed):
    answer = "The Eiffel Tower was built in 1901 by Henri Dupont in Paris. Paris is nice."
    spans = parse_response(answer, json.dumps({"incorrect_spans": [text]})).spans
    assert [s.text for s in spans] == [placed]


def test_a_text_with_a_full_stop_takes_the_bare_copy_after_the_previous_span():
    """ "Vista." took the copy at the end of an earlier sentence over "Vista" after the previous
    span, where gold marks it (a review with a model naming the gold spans)."""
    answer = "He saw Vista. Then Index and Vista again."
    raw = json.dumps({"incorrect_spans": ["Index", "Vista."]})
    spans = parse_response(answer, raw).spans
    assert [(s.start, s.text) for s in spans] == [(19, "Index"), (29, "Vista")]


def test_an_answer_that_quotes_the_word_keeps_its_quoted_copy():
    """Looked for bare only, '"yes"' took the first, unquoted yes (a review)."""
    spans = parse_response(
        'He said yes, then wrote "yes" in the book.', json.dumps({"incorrect_spans": ['"yes"']})
    ).spans
    assert [(s.start, s.end) for s in spans] == [(25, 28)]


def test_a_span_listed_out_of_order_does_not_pull_the_next_one_back():
    """Spans come in order: one found before the furthest so far (listed late) moved the
    cursor back, and the next text took a copy before the furthest span (a mutation audit)."""
    answer = "Paris. Lyon met Rome; later Lyon again"
    locator = SpanLocator(answer)
    found = [locator.locate(text, 1.0) for text in ("Rome", "Paris", "Lyon")]
    assert [(s.start, s.text) for s in found] == [(16, "Rome"), (0, "Paris"), (28, "Lyon")]
