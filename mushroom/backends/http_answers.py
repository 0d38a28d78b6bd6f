"""What a server's error answer means: busy, broken, out of quota, or the request's own fault.

Read from the status and the body, since servers differ in both: llama-cpp-python answers an
unknown `response_format` with HTTP 500, and a 429 may be a passing limit or an empty account.
The client (`openai_compat`) retries, falls back or gives up by these judgements.
"""

from __future__ import annotations

import re

from mushroom.errors import TOO_LONG

# A body that says the request itself is wrong; such an answer is final even with a 5xx code.
_INVALID = re.compile(
    r"validation|invalid|not supported|unsupported|unrecognized|not implemented|extra (inputs|fields)"
    r"|must be|is not one of|unexpected keyword|response_format|json_schema|one completion choice",
    re.IGNORECASE,
)
# A 429 that no wait cures: the account is out of quota or credit (OpenAI's insufficient_quota).
# Retried as "busy", every item spent its retries on it (~8 s each) and the run never stopped.
# (Not "billing": OpenAI's passing per-minute 429 points to the billing page too.)
_QUOTA = re.compile(r"insufficient_quota|exceeded your current quota", re.IGNORECASE)
OUT_OF_QUOTA = "(out of quota)"  # in the error of such a 429: judged once, on the whole body
# llama.cpp's llama-server refuses n > 1 (HTTP 500, "Only one completion choice is allowed")
ONE_CHOICE = re.compile(r"one completion choice|\bn\b.{0,40}(not supported|must be 1)", re.IGNORECASE)
# A body that blames the structured-output form; `auto` then tries the next form.
_FORMAT = re.compile(
    r"response_format|json_schema|json_object|guided|grammar|schema|structured", re.IGNORECASE
)

# A refusal of the request's length (llama.cpp, vLLM, OpenAI, TGI): one request's fault, not the
# server's, so it never trips the circuit breaker, and a re-run fails it again.
_TOO_LONG_BODY = re.compile(
    r"maximum context length|context length|context window|context_length_exceeded|exceeds? the "
    r"(available )?context|too many tokens|prompt is too long|input is too long|"
    r"tokens \+ `?max_new_tokens`? must be",
    re.IGNORECASE,
)


def too_long_error(status: int, text: str) -> str | None:
    """The error for a request refused for its length, or None for any other answer."""
    if status in (400, 413, 422) and _TOO_LONG_BODY.search(text):
        return f"HTTP {status}, the prompt is {TOO_LONG}: {text[:300]}"
    return None


def http_error(status: int, text: str) -> str:
    """`HTTP 500: body`; a 429 that says the account is out of quota is marked so for `is_busy`."""
    note = f" {OUT_OF_QUOTA}" if status == 429 and _QUOTA.search(text) else ""
    if status in (404, 405, 501):  # some other web server, or a URL that stops short of /v1
        note = " (this server has no such endpoint: is the URL an OpenAI-compatible server's, ending in /v1?)"
    return f"HTTP {status}{note}: {' '.join(text.split())[:300]}"


def is_busy(message: str) -> bool:
    """A give-up on 408 or 429: the server is busy, not broken (an account out of quota is neither)."""
    return bool(re.search(r"HTTP (408|429)\b", message)) and OUT_OF_QUOTA not in message


def is_final(status: int, body: str) -> bool:
    """True when sending the request again cannot help: it is invalid, or the account is out of quota."""
    return is_validation_error(status, body) or (status == 429 and bool(_QUOTA.search(body)))


def is_validation_error(status: int, body: str) -> bool:
    """True when an error answer means the request is wrong, not that the server is busy or down."""
    if status in (408, 409, 425, 429, 502, 503, 504):  # busy, or a proxy that lost the server
        return False
    return status < 500 or status == 501 or bool(_INVALID.search(body))


def is_format_rejection(status: int, body: str) -> bool:
    """True when the server refused the request because of its structured-output form."""
    return status in (400, 404, 415, 422, 500, 501) and bool(_FORMAT.search(body))
