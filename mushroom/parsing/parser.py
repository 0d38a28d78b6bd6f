"""The repair parser: raw model text -> validated span claims -> located character spans.

A contract with its own tests (tests/test_parser.py, tests/test_parser_fuzz.py): it never
raises on any string, never returns an offset outside the answer, and counts everything it
could not use (`ParseResult.counts`).

Probability scale, one rule for JSON numbers and numeric strings alike (`coerce_probability`):
- a value in [0, 1] is a probability: 0.8 and "0.8" -> 0.8, 1 -> 1.0;
- a value in (10, 100] is a percentage: 80 and "80" -> 0.8;
- a value in (1, 10] is ambiguous, so invalid (below): a 1-10 scale ("5", "10"), a
  probability a small model overshot (SmolLM2 wrote 1.9 for a span gold marks), or a tiny
  percentage; read as a percentage, such a span fell below any threshold in silence;
- a string with a percent sign is a percentage whatever its size: "80%" -> 0.8, "1%" -> 0.01;
- a decimal comma is read as a point ("0,8" -> 0.8); digits of any script count;
- anything else is invalid: negative, above 100 (or above 100%), NaN, infinity, a boolean,
  null, a list, words ("high"). An invalid probability is not clamped: the entry keeps its
  span at the default probability and the fallback is counted (`bad_probabilities`).
An entry with no probability key takes the default probability, uncounted: prompts that ask
for no probability are normal.

String booleans (`coerce_bool`): true/yes/supported/correct/1 and false/no/unsupported/
not supported/incorrect/0, in any case and spacing, as JSON booleans, numbers or strings;
anything else is None (neither), so a caller can count it instead of guessing.

A `reason` of any JSON type is kept as text (list items joined with "; ", an object as JSON):
the span is never dropped for its reason.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from mushroom.parsing.json_repair import extract_json
from mushroom.parsing.locate import METHODS, LocatedSpan, SpanLocator

logger = logging.getLogger(__name__)

_LIST_KEYS = ("incorrect_spans", "hallucinated_spans", "hallucinations", "spans", "errors", "incorrect")
_TEXT_KEYS = ("text", "span", "substring", "incorrect_span", "phrase")
# an unknown key whose list is read as the wrong spans must say they are wrong
_WRONG_WORDS = ("incorrect", "wrong", "halluc", "error", "false", "unsupported", "fabricat", "inaccura")
# ... unless a negation comes just before the word: `non_hallucinated_spans` lists what is
# right (an audit), where `errors_not_in_context` and `nonexistent_facts` list what is wrong
_NEGATED = re.compile(f"(?:^|[^a-z])(?:non|not|no)[\\s_-]*(?:{'|'.join(_WRONG_WORDS)})")
_SURROGATE = re.compile("[\ud800-\udfff]")
_PROB_KEYS = ("probability", "prob", "confidence", "score")
# the Arabic decimal separator (U+066B) too: "٠٫٩" is 0.9
_NUMBER = re.compile(
    r"\s*([+-]?(?:\d+(?:[.,\u066b]\d*)?|[.,\u066b]\d+)(?:[eE][+-]?\d+)?)\s*([%\u066a\uff05]?)\s*"
)
AMBIGUOUS_UP_TO = 10.0  # numbers above 1 and up to this, without a percent sign, are no probability
_TRUE = frozenset({"true", "yes", "supported", "correct", "1"})
_FALSE = frozenset({"false", "no", "unsupported", "not supported", "incorrect", "0"})


def coerce_probability(value: Any) -> float | None:
    """A probability in [0, 1] by the module's one scale rule, or None when invalid.

    Numbers and numeric strings go through the same rule, so 80 and "80" both give 0.8.
    """
    percent = False
    if isinstance(value, str):
        match = _NUMBER.fullmatch(value)
        if not match:
            return None
        try:
            number = float(match.group(1).replace(",", ".").replace("\u066b", "."))
        except ValueError:
            return None
        percent = bool(match.group(2))
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    elif isinstance(value, int):
        if not 0 <= value <= 100:  # before float(): a huge int would overflow it
            return None
        number = float(value)
    else:
        number = value
    if not math.isfinite(number) or number < 0 or number > 100:
        return None
    if not percent and 1 < number <= AMBIGUOUS_UP_TO:
        return None
    return number / 100 if percent or number > 1 else number


def coerce_bool(value: Any) -> bool | None:
    """A yes/no verdict written as a JSON boolean, 1/0, or a word; None when it is neither.

    "supported": "false" must count as not supported, not as a truthy string.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return True if value == 1 else False if value == 0 else None
    if not isinstance(value, str):
        return None
    word = " ".join(value.replace("_", " ").replace("-", " ").split()).casefold()
    return True if word in _TRUE else False if word in _FALSE else None


def _lone_surrogates_out(text: str) -> str:
    """`text` with each lone surrogate (half an emoji, a reply that wrote one half of a pair) as U+FFFD.

    Pydantic refuses such a string, so the claim was dropped as invalid; with U+FFFD in its
    place the fuzzy step still places it.
    """
    return _SURROGATE.sub("\ufffd", text)


def _reason_text(value: Any) -> str | None:
    """Any JSON value as a reason string: the reason explains the span, never voids it."""
    if value is None:
        return value
    if isinstance(value, str):
        return _lone_surrogates_out(value)
    if isinstance(value, list):
        parts = [_reason_text(v) for v in value]
        return "; ".join(p for p in parts if p) or None
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


class SpanClaim(BaseModel):
    """One span a model says is wrong."""

    text: str = Field(min_length=1)
    # bounded in the schema a constrained backend decodes with: SmolLM2 wrote 1.9 and 5.67,
    # which the scale rule below finds ambiguous (the span keeps the default, counted)
    probability: float = Field(1.0, ge=0.0, le=1.0)
    reason: str | None = None

    @field_validator("probability", mode="before")
    @classmethod
    def _number(cls, value: Any) -> float:
        """Applies the module's one scale rule (`coerce_probability`) to numbers and strings.

        [0, 1] is a probability, (10, 100] or a "%" sign a percentage; anything else is
        rejected here. `read_claims` checks first and substitutes the default probability
        (counting it) so that a bad probability never drops the span.
        """
        number = coerce_probability(value)
        if number is None:
            raise ValueError(f"not a probability: {value!r}")
        return number

    @field_validator("text", mode="before")
    @classmethod
    def _mended(cls, value: Any) -> Any:
        """Lone surrogates become U+FFFD (see `_lone_surrogates_out`)."""
        return _lone_surrogates_out(value) if isinstance(value, str) else value

    @field_validator("reason", mode="before")
    @classmethod
    def _text(cls, value: Any) -> str | None:
        """A list, object or number becomes text (see `_reason_text`)."""
        return _reason_text(value)


class SpanList(BaseModel):
    """The output format the prompts ask for."""

    incorrect_spans: list[SpanClaim]


@dataclass
class ClaimsFound:
    """The usable claims of one decoded reply, and what was wrong with the rest."""

    claims: list[SpanClaim] = field(default_factory=list)
    invalid_entries: int = 0
    """Entries dropped: no usable text, or not an object or string at all."""
    bad_probabilities: int = 0
    """Claims kept at the default probability because theirs was invalid."""
    repairs: list[str] = field(default_factory=list)
    """What was read in a shape the prompts do not ask for (`other_list_key`)."""


def _entries(value: Any) -> tuple[list[Any], int, list[str]]:
    """The claim entries in a decoded reply, the invalid count if its shape is wrong, and repairs.

    An object with none of the known keys is not "no spans": a server that ignores the schema
    writes `{"wrong_spans": [...]}` or `{"answer": "..."}`. Its one list is read as the spans
    (a repair, counted) when its key says they are wrong (`_WRONG_WORDS`): under
    `supported_spans` or `correct` the same list means the opposite. Otherwise it is invalid,
    so the reply counts as unparseable. An empty object says nothing is wrong.
    """
    if isinstance(value, list):
        return value, 0, []
    if not isinstance(value, dict):
        return [], 1, []
    keyed = {str(k).strip().casefold(): v for k, v in value.items()}
    for key in _LIST_KEYS:
        if key in keyed:
            items = keyed[key]
            if isinstance(items, list):
                return items, 0, []
            if items is None:
                return [], 0, []
            if isinstance(items, dict):
                return [items], 0, []
            return [], 1, []
    if any(k in keyed for k in _TEXT_KEYS) or not keyed:
        return ([value] if keyed else []), 0, []
    lists = [(k, v) for k, v in keyed.items() if isinstance(v, list)]
    if len(lists) == 1 and any(w in lists[0][0] for w in _WRONG_WORDS) and not _NEGATED.search(lists[0][0]):
        return lists[0][1], 0, ["other_list_key"]
    return [], 1, []


def read_claims(value: Any, default_probability: float = 1.0) -> ClaimsFound:
    """Valid claims from a decoded JSON value, with the accounting of what was not usable.

    An entry's text may be a string or an integer (`{"text": 2008}`, a year written as a
    number); any other type makes the entry invalid. A bare number in the list (`[1, 2, 3]`)
    is counted invalid too: such a list is more often indices than years, and "2" would be
    found in any answer with a digit. A bad probability keeps the span at `default_probability`.
    """
    items, invalid, repairs = _entries(value)
    found = ClaimsFound(invalid_entries=invalid, repairs=repairs)
    for entry in items:
        if isinstance(entry, str):
            entry = {"text": entry}
        if not isinstance(entry, dict):
            found.invalid_entries += 1
            continue
        entry = {str(k).strip().casefold(): v for k, v in entry.items()}
        text = next((entry[k] for k in _TEXT_KEYS if k in entry), None)
        if isinstance(text, int) and not isinstance(text, bool):
            text = str(text)
        if not isinstance(text, str) or not text:
            found.invalid_entries += 1
            continue
        prob_key = next((k for k in _PROB_KEYS if k in entry), None)
        prob = default_probability if prob_key is None else coerce_probability(entry[prob_key])
        if prob is None:
            found.bad_probabilities += 1
            prob = default_probability
        try:
            found.claims.append(SpanClaim(text=text, probability=prob, reason=entry.get("reason")))
        except ValidationError:  # only an invalid default probability can get here
            found.invalid_entries += 1
    return found


def coerce_claims(value: Any, default_probability: float = 1.0) -> tuple[list[SpanClaim], int]:
    """Valid claims from a decoded JSON value, and how many entries were invalid.

    The short form of `read_claims`, which also counts bad probabilities.
    """
    found = read_claims(value, default_probability)
    return found.claims, found.invalid_entries


COUNT_KEYS = (
    "responses",
    "parsed",
    "repaired",
    "unparseable",
    "parser_errors",
    "claims",
    "invalid_entries",
    "bad_probabilities",
    *(f"located_{m}" for m in METHODS),
    "lost",
    "lost_numbers",
)
"""The per-response counters of `ParseResult.counts`, in report order."""


@dataclass
class ParseResult:
    """What one response yielded, with the accounting the run reports."""

    spans: list[LocatedSpan] = field(default_factory=list)
    parsed: bool = False
    """Claims were read, from JSON as written or after repairs (see `repairs`)."""
    repairs: list[str] = field(default_factory=list)
    claims: int = 0
    invalid_entries: int = 0
    bad_probabilities: int = 0
    lost: list[str] = field(default_factory=list)
    lost_numbers: int = 0
    """Of `lost`: texts whose only near match holds different numbers (never moved there)."""
    error: str | None = None
    """A parser bug caught by the last-resort guard; the response then counts as unparseable."""

    @property
    def methods(self) -> Counter:
        return Counter(s.method for s in self.spans)

    def counts(self) -> dict[str, int]:
        """Flat counters for this one response, to be summed over a run.

        Invariants: parsed + repaired + unparseable == responses == 1 (parser_errors is part
        of unparseable); the located_* counts + lost == claims (lost_numbers is part of lost).
        A reply whose JSON holds entries but none usable (`[{"text": ""}]`) is unparseable and
        its entries count in invalid_entries too: one counter says the reply gave nothing,
        the other why; an unusable reply must not pass for a model that found nothing wrong.
        """
        methods = self.methods
        return {
            "responses": 1,
            "parsed": int(self.parsed and not self.repairs),
            "repaired": int(self.parsed and bool(self.repairs)),
            "unparseable": int(not self.parsed),
            "parser_errors": int(self.error is not None),
            "claims": self.claims,
            "invalid_entries": self.invalid_entries,
            "bad_probabilities": self.bad_probabilities,
            **{f"located_{m}": methods.get(m, 0) for m in METHODS},
            "lost": len(self.lost),
            "lost_numbers": self.lost_numbers,
        }


def parse_response(
    answer: str,
    raw: str | None,
    default_probability: float = 1.0,
    max_edit_ratio: float = 0.2,
) -> ParseResult:
    """Spans of `answer` that the model's raw text marks as wrong; never raises.

    The parsing itself is written not to raise (bounded nesting, typed coercion); a last
    guard turns any remaining exception into an unparseable response with `error` set and a
    logged warning, so a parser bug is counted and shown, never a crashed run.
    """
    try:
        return _parse(answer, raw, default_probability, max_edit_ratio)
    except Exception as err:  # noqa: BLE001 - the contract: count it, never raise
        logger.warning("parser error on a %d-character response: %r", len(raw or ""), err)
        return ParseResult(error=f"{type(err).__name__}: {err}")


def _parse(answer: str, raw: str | None, default_probability: float, max_edit_ratio: float) -> ParseResult:
    result = ParseResult()
    if not raw:
        return result
    value, repairs = extract_json(raw)
    result.repairs = repairs
    if value is None:
        return result
    found = read_claims(value, default_probability)
    result.repairs = [*repairs, *found.repairs]
    # an entry the reply was cut off inside was dropped by the repairs: lost, so counted
    result.invalid_entries = found.invalid_entries + repairs.count("truncated_entry")
    result.bad_probabilities = found.bad_probabilities
    if not found.claims and result.invalid_entries:
        return result
    result.parsed = True
    result.claims = len(found.claims)
    locator = SpanLocator(answer, max_edit_ratio=max_edit_ratio)
    for claim in found.claims:
        span = locator.locate(claim.text, claim.probability)
        if span is None:
            result.lost.append(claim.text)
        else:
            result.spans.append(span)
    result.lost_numbers = locator.number_mismatches
    return result


@dataclass
class ParseStats:
    """Totals over a run: the sums of `ParseResult.counts`, repairs by name, backend errors."""

    counts: Counter = field(default_factory=Counter)
    repairs: Counter = field(default_factory=Counter)
    """How often each repair was needed (a response can need several)."""
    errors: int = 0
    """Backend errors: requests that gave no response to parse (set by the detector)."""

    def add(self, result: ParseResult) -> None:
        self.counts.update(result.counts())
        self.repairs.update(result.repairs)

    def merge(self, other: ParseStats) -> None:
        """Adds another run's totals (per-language stats into the detector's total)."""
        self.counts.update(other.counts)
        self.repairs.update(other.repairs)
        self.errors += other.errors

    @property
    def responses(self) -> int:
        return self.counts["responses"]

    @property
    def parsed(self) -> int:
        """Responses whose JSON decoded as written (see `repaired` for the others)."""
        return self.counts["parsed"]

    @property
    def repaired(self) -> int:
        return self.counts["repaired"]

    @property
    def unparseable(self) -> int:
        return self.counts["unparseable"]

    @property
    def claims(self) -> int:
        return self.counts["claims"]

    @property
    def invalid_entries(self) -> int:
        return self.counts["invalid_entries"]

    @property
    def bad_probabilities(self) -> int:
        return self.counts["bad_probabilities"]

    @property
    def located(self) -> Counter:
        return Counter({m: self.counts[f"located_{m}"] for m in METHODS})

    @property
    def lost(self) -> int:
        return self.counts["lost"]

    def to_dict(self) -> dict[str, Any]:
        """The flat counters (`COUNT_KEYS`), backend errors, repairs by name, spans per method."""
        return {
            **{key: self.counts[key] for key in COUNT_KEYS},
            "backend_errors": self.errors,
            "repairs": dict(self.repairs),
            "located": {m: self.counts[f"located_{m}"] for m in METHODS},
        }
