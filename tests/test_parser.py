import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mushroom.parsing.json_repair import extract_json
from mushroom.parsing.parser import coerce_claims, parse_response

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


def test_percentages_are_scaled_and_invalid_entries_counted():
    # 7 is in (1, 100]: a percentage (0.07) by the one scale rule, as "7" always was; it used
    # to be clamped to 1.0 as a number while the string "7" gave 0.07.
    claims, invalid = coerce_claims(
        {"incorrect_spans": [{"text": "a", "probability": 7}, {"text": ""}, 3, {"x": 1}]}
    )
    assert [c.probability for c in claims] == [0.07] and invalid == 3


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


@settings(max_examples=200, deadline=None)
@given(
    answer=st.text(max_size=80), raw=st.text(max_size=200), spans=st.lists(st.text(max_size=12), max_size=5)
)
def test_never_raises_and_never_leaves_the_answer(answer, raw, spans):
    import json

    for text in (raw, json.dumps({"incorrect_spans": [{"text": s, "probability": 0.5} for s in spans]})):
        result = parse_response(answer, text)
        for s in result.spans:
            assert 0 <= s.start < s.end <= len(answer)


def test_extract_json_reports_repairs():
    value, repairs = extract_json("{'a': True,}")
    assert value == {"a": True} and "single_quotes" in repairs
