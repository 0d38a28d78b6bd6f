"""The parts of an OpenAI-compatible chat completion that mushroom reads, as typed records.

A server's reply is untrusted input: a proxy, a half-compatible server or a bug can answer
200 with `{"choices": [null]}`, a list body or a logprob entry without its token. Read with
plain `dict.get`, such a body raised AttributeError or KeyError inside the backend, and the
batch's items failed with a Python error instead of a counted, recorded reply. Validated
here, a malformed body is one error on its request, said in words.

Fields the project does not read are ignored; the ones it reads are checked. `usage` is
read leniently (its integer entries), since a server that miscounts tokens still answered.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TopLogprob(_Lenient):
    """One of the most likely tokens at a position."""

    token: str
    logprob: float


class TokenLogprob(TopLogprob):
    """A generated token, its log-probability and the most likely alternatives."""

    top_logprobs: list[TopLogprob] | None = None


class ChoiceLogprobs(_Lenient):
    """A choice's per-token log-probabilities, when they were asked for."""

    content: list[TokenLogprob] | None = None


class ChatMessage(_Lenient):
    """The assistant's message; a list of content parts is refused, as it cannot be read as text."""

    content: str | None = None


class ChatChoice(_Lenient):
    """One sampled reply; a finish reason that is not a string counts as none given."""

    index: int = 0
    message: ChatMessage | None = None
    finish_reason: str | None = None
    logprobs: ChoiceLogprobs | None = None

    @field_validator("finish_reason", mode="before")
    @classmethod
    def _reason(cls, value: Any) -> str | None:
        return value if isinstance(value, str) else None


class ChatCompletion(_Lenient):
    """A chat completion response: its choices, and token counts where the server gave them."""

    choices: list[ChatChoice]
    usage: dict[str, int] = {}

    @field_validator("usage", mode="before")
    @classmethod
    def _usage(cls, value: Any) -> dict[str, int]:
        if not isinstance(value, dict):
            return {}
        return {str(k): v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def read_completion(data: Any) -> ChatCompletion | str:
    """The validated completion, or what is wrong with it in one line."""
    try:
        return ChatCompletion.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the body"
        return f"server answered 200 with a malformed completion: {where}: {first['msg']}"


def read_body(content: bytes) -> tuple[Any, str | None]:
    """The JSON of a 200 body, and what had to be mended to read it (None: nothing).

    A reply is kept where one can be read: a server that cuts a character's bytes at a token
    boundary sends invalid UTF-8, and a model can write a raw control character (a NUL) inside
    a JSON string. Read strictly, either lost the whole reply, and the first was said to be
    "not JSON", which sent users to check their URL. The bad bytes become U+FFFD, which the
    caller says. Raises ValueError for a body that is not JSON at all.
    """
    try:
        text, mended = content.decode("utf-8-sig"), None  # a byte order mark is no fault of the JSON
    except UnicodeDecodeError as exc:
        text = content.decode("utf-8-sig", errors="replace")
        at = exc.start + (3 if content.startswith(b"\xef\xbb\xbf") else 0)  # utf-8-sig counts past the BOM
        mended = f"bytes that are not UTF-8 (the first at offset {at} of the body), read as U+FFFD"
    return json.loads(text, strict=False), mended
