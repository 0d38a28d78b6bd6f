"""Typed records for everything that crosses a file boundary.

Spans use Python string indices with an exclusive end, exactly as the Mu-SHROOM files do,
so a record can be written back and scored by the official scorer unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    field_validator,
    model_validator,
)

from mushroom.data.label_files import LABEL_KEYS, any_misspelled_label, official_hard_from_soft
from mushroom.data.languages import language_code
from mushroom.text.normalize import LONE_SURROGATE
from mushroom.util.names import valid_name


def _whole_text(value: str) -> str:
    # JSON lets "\ud800" stand alone, but it is half a character: no encoder or model can read
    # it (a semantic run failed such an item on every retry). Said at load, with its place.
    found = None if value.isascii() else LONE_SURROGATE.search(value)
    if found is not None:
        raise ValueError(
            f"character {found.start()} is a lone surrogate (\\u{ord(found.group()):04x}): half of a "
            "character (a broken \\u escape?), which UTF-8, tokenizers and models refuse"
        )
    return value


# An answer, question or context: a string of whole characters
Text = Annotated[str, AfterValidator(_whole_text)]

# strict: a JSON number only ("0.5" as a string or true would otherwise be coerced silently)
Probability = Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False, strict=True)]


class SoftSpan(BaseModel):
    """A span with the probability that its characters are hallucinated.

    Unknown keys are ignored, as the official scorer ignores them (real submissions carry a
    "text" key in each soft span); `mushroom check --strict` reports them.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    start: StrictInt
    end: StrictInt
    prob: Probability


HardSpan = tuple[StrictInt, StrictInt]


def hard_from_soft(soft: Sequence[SoftSpan]) -> list[tuple[int, int]]:
    """The hard labels the official scorer derives from soft ones: above 0.5, touching spans merged."""
    return official_hard_from_soft([(s.start, s.end, s.prob) for s in soft])


def soft_from_hard(hard: Sequence[Sequence[int]]) -> list[SoftSpan]:
    """The soft labels the official scorer derives from hard ones: 1.0 over each span.

    Overlapping spans are merged (the same 1.0 on the same characters): `(0, 10), (5, 15)`
    gave two soft spans that overlap, a line `mushroom check` refused though the user gave no
    soft labels. A span that is no span (end <= start) is kept as given, for its check.
    """
    merged: list[list[int]] = []
    for start, end in sorted((s, e) for s, e in hard if e > s):
        if merged and start < merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    odd = [(s, e) for s, e in hard if e <= s]
    return [SoftSpan(start=start, end=end, prob=1.0) for start, end in [*map(tuple, merged), *odd]]


class Item(BaseModel):
    """One question and LLM answer; gold labels present only in labelled splits."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    lang: str
    model_input: Text
    model_output_text: Text
    model_id: str | None = None
    soft_labels: list[SoftSpan] | None = None
    hard_labels: list[HardSpan] | None = None
    model_output_tokens: list[str] | None = Field(
        None, description="the answering model's tokens, as the official files give them"
    )
    model_output_logits: list[float] | None = Field(
        None, description="the answering model's logit of each of its tokens"
    )

    @field_validator("lang")
    @classmethod
    def _lang_is_a_name(cls, value: str) -> str:
        # a language code names the run's files (mushroom.<lang>-items.jsonl, raw/<lang>...)
        return valid_name(value, "a language code")

    @field_validator("model_output_tokens", mode="before")
    @classmethod
    def _token_list(cls, value: Any) -> Any:
        # Optional evidence, never required: the official Catalan test file writes tokens and
        # logits as Python-style strings ("['▁Gordon', ...]"), which are not parsed (file text
        # is never evaluated); an item whose lists are malformed has no logit features.
        ok = isinstance(value, list) and all(isinstance(t, str) for t in value)
        return value if ok else None

    @field_validator("model_output_logits", mode="before")
    @classmethod
    def _logit_list(cls, value: Any) -> Any:
        ok = isinstance(value, list) and all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value
        )
        return value if ok else None

    @field_validator("lang")
    @classmethod
    def _lower_lang(cls, value: str) -> str:
        # Official files say "EN" in val/test but "zh" in train, other files "en-US": normalised once here.
        return language_code(value)

    @model_validator(mode="after")
    def _both_label_kinds(self) -> Item:
        # An item with one kind of gold label gets the other as the scorer reads it
        # (`read_scoring_file`): hard labels from soft ones above 0.5, soft ones at 1.0 over
        # the hard spans. Left None, `detect` scored such a file Cor 0 (or IoU 0) where
        # `score` said 1.0.
        if self.hard_labels is None and self.soft_labels is not None:
            self.hard_labels = hard_from_soft(self.soft_labels)
        elif self.soft_labels is None and self.hard_labels is not None:
            self.soft_labels = soft_from_hard(self.hard_labels)
        return self

    @property
    def text(self) -> str:
        return self.model_output_text

    @property
    def is_labelled(self) -> bool:
        return self.hard_labels is not None or self.soft_labels is not None


class Prediction(BaseModel):
    """A system's answer for one item, in the official submission format."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    soft_labels: list[SoftSpan] = Field(default_factory=list)
    hard_labels: list[HardSpan] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _no_misspelt_labels(cls, data: Any) -> Any:
        # other keys are kept (a run's extras), so `hard_label` was kept too, and the
        # prediction it was meant for scored as marking nothing
        # only when it has neither: a line with one label and a key like it (`soft_labels_raw`)
        # is a valid submission line, which the official scorer takes
        neither = isinstance(data, Mapping) and not any(key in data for key in LABEL_KEYS)
        hint = any_misspelled_label(data) if neither else ""
        if hint:
            raise ValueError(f"a key no prediction has{hint}")
        return data

    def given_labels(self) -> tuple[list[SoftSpan] | None, list[HardSpan] | None]:
        """The soft and hard labels as made; None for a kind not given but the other was.

        `mushroom.Prediction` derives such a kind from the other. Checks name what was
        given: a hard span past the text is `hard_labels.0`, not the soft span derived from
        it. A derived kind is inside the text when the given one is.
        """
        given = self.model_fields_set
        soft_derived = "hard_labels" in given and "soft_labels" not in given
        hard_derived = "soft_labels" in given and "hard_labels" not in given
        return (None if soft_derived else self.soft_labels), (None if hard_derived else self.hard_labels)

    def submission_dict(self) -> dict:
        """The three official fields only, with spans as plain lists."""
        return {
            "id": self.id,
            "soft_labels": [s.model_dump() for s in self.soft_labels],
            "hard_labels": [list(h) for h in self.hard_labels],
        }


class ContextRecord(BaseModel):
    """Background text for one item, as in contexts/*.jsonl."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(min_length=1)
    context: Text


class GradeRecord(BaseModel):
    """One grade in a source's `.grades.jsonl`: was this item's context (a tier's, or generated) usable.

    A line of valid JSON that lacked `relevant` stopped `contexts` with "internal error:
    KeyError"; it is checked, with the file and line, before any call. A grading call that
    failed is never written, so `relevant` is a yes or a no. Other keys are the grader's
    evidence (its verdict, a similarity) and are kept as written.
    """

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1)
    grading: str = Field(min_length=1)
    relevant: StrictBool  # "false" passed as False, and the code, reading the raw row, took it as true
    tier: str | None = None
    similarity: float | None = None
    min_similarity: float | None = None


class Context(BaseModel):
    """A context attached to an item, with the source it came from."""

    source: str
    text: Text


def left_out(value: object) -> bool:
    """None, or a DataFrame's empty cell (NaN, pandas' NA): an optional key left out.

    `df.to_dict("records")` writes NaN where a row has no value; the Python API and
    `mushroom.score` read such a cell as the key not given, as a `datasets` row's None is.
    """
    if value is None or (isinstance(value, float) and value != value):
        return True
    return type(value).__name__ == "NAType"  # pandas.NA, without importing pandas


def given_contexts(value: object) -> list[tuple[str, object]]:
    """(source, text) of each context as a caller gives them, not yet validated.

    One context or a list of them: strings (named context0, context1, ... by place),
    `{source, text}` dicts (the source may be left out) or `Context` records. The Python API
    and the Ray rows take the same forms. A TypeError says what an entry is when it is none.
    """
    if value is None:
        return []
    if isinstance(value, str | Mapping | Context):
        value = [value]
    if getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None)):
        value = value.tolist()  # a numpy array or pandas Series: how a parquet list column comes
    if not isinstance(value, Sequence) or isinstance(value, bytes | bytearray):  # bytes read as ints
        raise TypeError(
            f"contexts are a string, a {{source, text}} dict or a list of them, not {type(value).__name__}"
        )
    out: list[tuple[str, object]] = []
    for j, entry in enumerate(value):
        if isinstance(entry, Context):
            out.append((entry.source, entry.text))
        elif isinstance(entry, str):
            out.append((f"context{j}", entry))
        elif isinstance(entry, Mapping):
            if "text" not in entry:
                keys = ", ".join(map(str, entry)) or "none"
                raise TypeError(f"contexts[{j}] is a dict without 'text' (its keys: {keys})")
            for key in ("text", "source"):  # said as a TypeError, as every other wrong kind is
                if (key == "text" or entry.get(key) is not None) and not isinstance(entry.get(key), str):
                    raise TypeError(
                        f"contexts[{j}]['{key}'] is of type {type(entry[key]).__name__}, not a string"
                    )
            out.append((entry.get("source") or f"context{j}", entry["text"]))
        else:
            raise TypeError(
                f"contexts[{j}] is of type {type(entry).__name__}; a context is a string or a "
                "{source, text} dict"
            )
    return out


class ChannelRecord(BaseModel):
    """Per-character evidence a detector saw for one item, beyond its final probabilities.

    Written next to the predictions (`raw/channels.<lang>.jsonl`) so that `stack` can learn
    from piece-level and word-level scores without running the detector again. Each channel
    is a list of spans with a value in [0, 1], like soft labels.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    channels: dict[str, list[SoftSpan]]


ErrorType = Literal[
    "context-misinterpretation",
    "incorrect-context",
    "semantic-equivalence-fp",
    "dependent-claim-missed",
    "other",
]
"""The error types an item can be tagged with for `compare --tags` and `report --tags`."""


class CascadeRecord(BaseModel):
    """Where one item went and why (a line of a run's cascade.jsonl).

    Here, not beside the cascade, because the HTML report (a lower layer) reads it too.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    lang: str
    split: str
    uncertainty: float = Field(ge=0.0, le=1.0, description="1 - the IoU the stack expects of its hard labels")
    rank: int = Field(ge=1, description="1 = the most uncertain item of its split and language")
    of: int = Field(ge=1, description="items of its split and language")
    sent: bool = Field(
        description="whether the budget sends it to the model-backed member(s); written before they "
        "run, so a stopped run's items may not have run yet (their ledgers say)"
    )
    failed: bool = Field(
        False, description="sent, but a model-backed member failed on it: it keeps the CPU stack's prediction"
    )
    reason: str


class MemberStackNote(BaseModel):
    """Whether a cascade kept its member stack, and why not (summary.json's cascade.member_stack)."""

    model_config = ConfigDict(extra="allow")

    used: bool
    why: str | None = None


class CascadeSummary(BaseModel):
    """The parts of summary.json's `cascade` that other commands read back."""

    model_config = ConfigDict(extra="allow")

    model_backed: list[str] = Field(default_factory=list)
    member_stack: MemberStackNote | None = None


class RunSummary(BaseModel):
    """The parts of a run's summary.json read back by the report and by Ray.

    Each job writes its own keys besides these (allowed); the readers took them with their own
    `json.loads(...)[key][key]`, each with its own idea of a damaged file.
    """

    model_config = ConfigDict(extra="allow")

    warnings: list[str] = Field(default_factory=list)
    cascade: CascadeSummary | None = None
