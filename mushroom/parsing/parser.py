"""The repair parser: raw model text -> validated span claims -> located character spans.

A contract with its own tests: it never raises on model output, never returns an offset
outside the answer, and counts everything it could not use.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from mushroom.parsing.json_repair import extract_json
from mushroom.parsing.locate import LocatedSpan, SpanLocator

_LIST_KEYS = ("incorrect_spans", "hallucinated_spans", "hallucinations", "spans", "errors", "incorrect")
_TEXT_KEYS = ("text", "span", "substring", "incorrect_span", "phrase")
_PROB_KEYS = ("probability", "prob", "confidence", "score")


class SpanClaim(BaseModel):
    """One span a model says is wrong."""

    text: str = Field(min_length=1)
    probability: float = 1.0
    reason: str | None = None

    @field_validator("probability", mode="before")
    @classmethod
    def _number(cls, value: Any) -> float:
        if isinstance(value, str):
            match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(%?)\s*", value)
            if not match:
                raise ValueError(f"not a probability: {value!r}")
            number = float(match.group(1))
            value = number / 100 if match.group(2) or number > 1 else number
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError("probability must be a number")
        return min(1.0, max(0.0, float(value)))


class SpanList(BaseModel):
    """The output format the prompts ask for."""

    incorrect_spans: list[SpanClaim]


def coerce_claims(value: Any, default_probability: float = 1.0) -> tuple[list[SpanClaim], int]:
    """Valid claims from a decoded JSON value, and how many entries were invalid."""
    if isinstance(value, dict):
        items = next((value[k] for k in _LIST_KEYS if isinstance(value.get(k), list)), None)
        if items is None:
            items = [value] if any(k in value for k in _TEXT_KEYS) else []
    elif isinstance(value, list):
        items = value
    else:
        return [], 1
    claims, invalid = [], 0
    for entry in items:
        if isinstance(entry, str):
            entry = {"text": entry}
        if not isinstance(entry, dict):
            invalid += 1
            continue
        text = next((entry[k] for k in _TEXT_KEYS if k in entry), None)
        prob = next((entry[k] for k in _PROB_KEYS if k in entry), default_probability)
        try:
            claims.append(SpanClaim(text=text, probability=prob, reason=entry.get("reason")))
        except ValidationError:
            invalid += 1
    return claims, invalid


@dataclass
class ParseResult:
    """What one response yielded, with the accounting the run reports."""

    spans: list[LocatedSpan] = field(default_factory=list)
    parsed: bool = False
    repairs: list[str] = field(default_factory=list)
    claims: int = 0
    invalid_entries: int = 0
    lost: list[str] = field(default_factory=list)

    @property
    def methods(self) -> Counter:
        return Counter(s.method for s in self.spans)


def parse_response(
    answer: str,
    raw: str | None,
    default_probability: float = 1.0,
    max_edit_ratio: float = 0.2,
) -> ParseResult:
    """Spans of `answer` that the model's raw text marks as wrong; never raises."""
    result = ParseResult()
    if not raw:
        return result
    value, repairs = extract_json(raw)
    result.repairs = repairs
    if value is None:
        return result
    claims, invalid = coerce_claims(value, default_probability)
    result.invalid_entries = invalid
    if not claims and invalid:
        return result
    result.parsed = True
    result.claims = len(claims)
    locator = SpanLocator(answer, max_edit_ratio=max_edit_ratio)
    for claim in claims:
        span = locator.locate(claim.text, claim.probability)
        if span is None:
            result.lost.append(claim.text)
        else:
            result.spans.append(span)
    return result


@dataclass
class ParseStats:
    """Totals over a run: responses parsed, spans located per method, spans lost."""

    responses: int = 0
    parsed: int = 0
    unparseable: int = 0
    errors: int = 0
    repaired: Counter = field(default_factory=Counter)
    claims: int = 0
    invalid_entries: int = 0
    located: Counter = field(default_factory=Counter)
    lost: int = 0

    def add(self, result: ParseResult) -> None:
        self.responses += 1
        if result.parsed:
            self.parsed += 1
        else:
            self.unparseable += 1
        self.repaired.update(result.repairs)
        self.claims += result.claims
        self.invalid_entries += result.invalid_entries
        self.located.update(result.methods)
        self.lost += len(result.lost)

    def merge(self, other: ParseStats) -> None:
        """Adds another run's totals (per-language stats into the detector's total)."""
        self.responses += other.responses
        self.parsed += other.parsed
        self.unparseable += other.unparseable
        self.errors += other.errors
        self.repaired.update(other.repaired)
        self.claims += other.claims
        self.invalid_entries += other.invalid_entries
        self.located.update(other.located)
        self.lost += other.lost

    def to_dict(self) -> dict[str, Any]:
        return {
            "responses": self.responses,
            "parsed": self.parsed,
            "unparseable": self.unparseable,
            "backend_errors": self.errors,
            "repairs": dict(self.repaired),
            "claims": self.claims,
            "invalid_entries": self.invalid_entries,
            "located": {m: self.located.get(m, 0) for m in ("exact", "casefold", "normalized", "fuzzy")},
            "lost": self.lost,
        }


def parse_counts(result: ParseResult) -> dict[str, int]:
    """Flat counters of one response for the run accounting (see the detector contract)."""
    counts = getattr(result, "counts", None)
    if callable(counts):
        return counts()
    out = {
        "responses": 1,
        "parsed": int(result.parsed and not result.repairs),
        "repaired": int(result.parsed and bool(result.repairs)),
        "unparseable": int(not result.parsed),
        "claims": result.claims,
        "invalid_entries": result.invalid_entries,
        "lost": len(result.lost),
    }
    for method, k in result.methods.items():
        out[f"located_{method}"] = k
    return out
