"""Fuzzing the parser's contract: no exception on any string, offsets inside the answer,
accounting that adds up.

Inputs are JSON-like on purpose (random text almost never reaches the claim reader): real
responses built from val gold spans, cut at every point; generated replies with wrong types in
every field, code fences, prose, single quotes, trailing commas, Python literals, NaN and
huge numbers, cut at random points; deep and ragged nesting; and any string at all,
surrogates included. The last-resort guard must never fire: a caught exception is a bug.
"""

import json
import math
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mushroom.data.splits import load_split
from mushroom.parsing.json_repair import MAX_DEPTH, extract_json
from mushroom.parsing.locate import METHODS
from mushroom.parsing.parser import (
    AMBIGUOUS_UP_TO,
    COUNT_KEYS,
    coerce_bool,
    coerce_claims,
    coerce_probability,
    parse_response,
    read_claims,
)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ANSWERS = [
    "Petra van Stoveren won a silver medal in the 2008 Summer Olympics in Beijing, China.",
    "Der Film wurde 1994 von Steven Spielberg gedreht und gewann 7 Oscars.",
    "他在2008年获得银牌,并于2013年退役。",
    "ولد في عام ٢٠١٣ في القاهرة، وكان عدد السكان 1,000,000 نسمة.",
    "उसने 1990 में रजत पदक जीता",
    "Cafe\u0301 de Flore opened in 1887 \u2014 \u201cthe\u201d place.",
    "",
]


def check(answer: str, raw: str | None):
    """Every property the parser promises, for one (answer, raw) pair; returns the result."""
    result = parse_response(answer, raw)
    assert result.error is None, result.error  # the guard fired: a real bug behind it
    for span in result.spans:
        assert 0 <= span.start < span.end <= len(answer)
        assert span.text == answer[span.start : span.end]
        assert span.method in METHODS
        assert math.isfinite(span.prob) and 0.0 <= span.prob <= 1.0
    counts = result.counts()
    assert tuple(counts) == COUNT_KEYS and all(isinstance(v, int) and v >= 0 for v in counts.values())
    assert counts["responses"] == 1
    assert counts["parsed"] + counts["repaired"] + counts["unparseable"] == 1
    assert sum(counts[f"located_{m}"] for m in METHODS) + counts["lost"] == counts["claims"]
    assert counts["claims"] == len(result.spans) + len(result.lost)
    assert counts["lost_numbers"] <= counts["lost"] and counts["bad_probabilities"] <= counts["claims"]
    assert counts["parsed"] + counts["repaired"] == int(result.parsed)
    assert not result.spans or result.parsed
    if raw is not None:
        value, repairs = extract_json(raw)
        assert isinstance(repairs, list)
        claims, invalid = coerce_claims(value)
        assert invalid >= 0 and all(c.text and 0.0 <= c.probability <= 1.0 for c in claims)
    return result


# --- generated JSON-like replies -------------------------------------------------------------

huge_ints = st.integers(20, 4000).map(lambda digits: -int("9" * digits) if digits % 2 else int("9" * digits))
numbers = st.one_of(
    st.integers(-1000, 1000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(0, 1),
    st.floats(1, 100),
    huge_ints,
)
numeric_strings = st.one_of(
    numbers.map(str),
    st.floats(0, 100).map(lambda x: f"{x:g}%"),
    st.sampled_from(["80", "80%", "0,8", " .5 ", "1e400", "NaN", "Infinity", "-0.1", "high", "٠.٨", ""]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, st.text(max_size=20), numeric_strings)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(
            st.one_of(
                st.sampled_from(["text", "probability", "reason", "span", "Prob"]), st.text(max_size=8)
            ),
            children,
            max_size=4,
        ),
    ),
    max_leaves=12,
)


@st.composite
def span_texts(draw, answer: str):
    """A text to locate: a piece of the answer, often edited, or anything else."""
    if answer and draw(st.booleans()):
        i = draw(st.integers(0, len(answer) - 1))
        j = draw(st.integers(i + 1, min(len(answer), i + 40)))
        text = answer[i:j]
        edit = draw(st.sampled_from(["none", "upper", "typo", "digit", "space"]))
        if edit == "upper":
            text = text.upper()
        elif edit == "typo" and len(text) > 2:
            k = draw(st.integers(0, len(text) - 1))
            text = text[:k] + draw(st.characters()) + text[k + 1 :]
        elif edit == "digit":
            text = "".join(str((int(c) + 1) % 10) if c.isascii() and c.isdigit() else c for c in text)
        elif edit == "space":
            text = "  ".join(text.split(" "))
        return text
    return draw(st.text(max_size=20))


@st.composite
def entries(draw, answer: str):
    """One claim entry, with a wrong type in any field."""
    entry = {}
    if draw(st.integers(0, 9)):
        key = draw(st.sampled_from(["text", "span", "substring", "TEXT", " text "]))
        entry[key] = (
            draw(st.one_of(span_texts(answer), json_values))
            if draw(st.integers(0, 3))
            else draw(span_texts(answer))
        )
    if draw(st.booleans()):
        key = draw(st.sampled_from(["probability", "prob", "confidence", "score"]))
        entry[key] = draw(st.one_of(numbers, numeric_strings, json_values))
    if draw(st.booleans()):
        entry["reason"] = draw(json_values)
    return draw(st.sampled_from([entry, entry.get("text", entry)])) if draw(st.integers(0, 5)) == 0 else entry


def _single_quotes(text: str) -> str:
    return text.replace('"', "'")


def _python_literals(text: str) -> str:
    return text.replace("true", "True").replace("false", "False").replace("null", "None")


def _trailing_commas(text: str) -> str:
    return text.replace("}", ",}").replace("]", ",]")


@st.composite
def replies(draw, answer: str):
    """A model-like reply: JSON (sometimes broken) with the dressing models put around it."""
    items = draw(st.lists(entries(answer), max_size=5))
    shape = draw(st.sampled_from(["object", "bare list", "other key", "any value", "single"]))
    if shape == "object":
        value = {"incorrect_spans": items}
    elif shape == "bare list":
        value = items
    elif shape == "other key":
        value = {draw(st.sampled_from(["hallucinated_spans", "spans", "Incorrect_Spans"])): items}
    elif shape == "single":
        value = {"incorrect_spans": items[0] if items else None}
    else:
        value = draw(json_values)
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), allow_nan=True)
    for damage in draw(st.lists(st.sampled_from(["quotes", "literals", "commas", "curly"]), max_size=2)):
        if damage == "quotes":
            text = _single_quotes(text)
        elif damage == "literals":
            text = _python_literals(text)
        elif damage == "commas":
            text = _trailing_commas(text)
        else:
            text = text.replace('"', "\u201c", 1).replace('"', "\u201d", 1)
    if draw(st.booleans()):
        text = text[: draw(st.integers(0, len(text)))]
    dressing = draw(
        st.sampled_from(["none", "fence", "fence-open", "prose", "prose-brackets", "think", "think-end"])
    )
    if dressing == "fence":
        text = f"```json\n{text}\n```"
    elif dressing == "fence-open":
        text = f"Here:\n```JSON\n{text}"
    elif dressing == "prose":
        text = f"{draw(st.text(max_size=30))}\n{text}\n{draw(st.text(max_size=30))}"
    elif dressing == "prose-brackets":
        text = f"See [1] and {{note}}: {text} [end]"
    elif dressing == "think":  # a reasoning model's block, closed or cut off
        text = f"<think>{draw(st.text(max_size=30))}{draw(st.sampled_from(['</think>', '']))}{text}"
    elif dressing == "think-end":  # the template opened the block
        text = f"{draw(st.text(max_size=30))}</think>{text}"
    return text


@FUZZ
@given(data=st.data(), answer=st.sampled_from(ANSWERS))
def test_json_like_replies(data, answer):
    check(answer, data.draw(replies(answer)))


@FUZZ
@given(answer=st.sampled_from(ANSWERS), value=json_values)
def test_any_decoded_value(answer, value):
    found = read_claims(value, 0.5)
    assert all(0.0 <= c.probability <= 1.0 for c in found.claims)
    assert found.bad_probabilities <= len(found.claims)
    check(answer, json.dumps(value, allow_nan=True))


# --- nesting ------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(
    depth=st.integers(1, 3000),
    opener=st.sampled_from(["[", "{", '{"a": ', '{"incorrect_spans": ', "[[{", "'[", '["x", ']),
    tail=st.text(alphabet='[]{}",:1a ', max_size=30),
    close=st.booleans(),
)
def test_deep_nesting(depth, opener, tail, close):
    closer = "".join({"[": "]", "{": "}"}.get(c, "") for c in reversed(opener)) * depth if close else ""
    raw = opener * depth + tail + closer
    result = check(ANSWERS[0], raw)
    if depth * opener.count("[") + depth * opener.count("{") > MAX_DEPTH + 4:
        assert not result.spans


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet="[]{}\",:\\ tx1.-eEnNaIuf'`\u201c\u201d<>/kh", max_size=300))
def test_ragged_json_punctuation(raw):
    check(ANSWERS[0], raw)


# --- truncation of real responses ------------------------------------------------------------------


@cache
def _real_items():
    """Val items with gold spans in several scripts, as a model's correct replies (short ones,
    as every cut of each is parsed)."""
    data = load_split("val")
    out = []
    for lang in ("en", "zh", "ar", "hi", "fi"):
        for item in data[lang]:
            spans = [
                {
                    "text": item.model_output_text[s:e],
                    "probability": round(0.5 + 0.1 * k, 2),
                    "reason": f'wrong {k}: "quoted", a \\ backslash, [brackets] {{braces}}',
                }
                for k, (s, e) in enumerate(item.hard_labels[:4])
            ]
            raw = json.dumps({"incorrect_spans": spans}, ensure_ascii=lang == "hi")
            if len(spans) >= 2 and len(raw) <= 600:
                out.append((item, raw))
                break
    return out


@pytest.mark.parametrize("index", range(5))
def test_every_truncation_of_a_real_response(index):
    item, raw = _real_items()[index]
    answer = item.model_output_text
    full = check(answer, raw)
    expected = {(s.start, s.end) for s in full.spans}
    assert full.counts()["parsed"] == 1 and expected == {tuple(h) for h in item.hard_labels[:4]}
    for cut in range(len(raw) + 1):
        result = check(answer, raw[:cut])
        # a cut reply yields a subset of the full reply's spans, never a span elsewhere
        assert {(s.start, s.end) for s in result.spans} <= expected, raw[:cut]
        fenced = check(answer, f"Sure!\n```json\n{raw[:cut]}")
        assert {(s.start, s.end) for s in fenced.spans} <= expected


# --- any string --------------------------------------------------------------------------------------


@FUZZ
@given(
    answer=st.text(st.characters(exclude_categories=()), max_size=60),
    raw=st.text(st.characters(exclude_categories=()), max_size=200),
)
def test_any_string_at_all(answer, raw):
    check(answer, raw)


@FUZZ
@given(answer=st.text(max_size=80), spans=st.lists(st.text(max_size=15), max_size=5))
def test_any_span_texts_in_any_answer(answer, spans):
    check(answer, json.dumps({"incorrect_spans": [{"text": s, "probability": 0.5} for s in spans]}))


# --- the scale rule and booleans as properties ----------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 100))
def test_probability_rule_is_the_same_for_numbers_and_strings(x):
    assert coerce_probability(f"{x!r}%") == pytest.approx(x / 100)
    if 1 < x <= AMBIGUOUS_UP_TO:  # a 1-10 scale, an overshoot or a percentage: invalid
        assert coerce_probability(x) is None and coerce_probability(repr(x)) is None
        return
    expected = x if x <= 1 else x / 100
    assert coerce_probability(x) == pytest.approx(expected)
    assert coerce_probability(repr(x)) == pytest.approx(expected)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.floats().filter(lambda x: not 0 <= x <= 100), st.integers().filter(lambda n: n < 0 or n > 100)
    )
)
def test_out_of_range_probabilities_are_invalid(x):
    assert coerce_probability(x) is None and coerce_probability(str(x)) is None


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_coerce_bool_never_raises(value):
    assert coerce_bool(value) in (True, False, None)


@FUZZ
@given(
    st.dictionaries(
        st.one_of(
            st.sampled_from(["verdict", "Verdict", "label", "status", "supported", "claim"]), st.text()
        ),
        st.one_of(
            st.sampled_from(
                ["supported", "contradicted", "not_in_context", "Not In Context", "false", "neutral"]
            ),
            json_values,
        ),
    )
)
def test_read_verdict_never_raises_and_gives_one_of_three_or_none(entry):
    from mushroom.parsing.verdict import read_verdict

    assert read_verdict(entry) in ("supported", "contradicted", "unverifiable", None)
