"""A server's 200 reply of the wrong shape is an error on its request, never a crash.

A proxy, a half-compatible server or a bug can answer `{"choices": [null]}`, a list body or a
logprob entry without its token. Read with plain `dict.get`, such bodies raised
AttributeError or KeyError inside the backend, so the batch's items failed with a Python
error instead of a recorded, counted reply.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, llm_args, openai_backend
from fake_openai_server import FakeServer

from mushroom.backends.openai_compat import OpenAIBackend

MALFORMED = [
    ({"choices": [None]}, "choices.0"),
    ([1, 2], "the body"),
    ({"choices": [{"message": "hi"}]}, "choices.0.message"),
    ({"choices": [{"message": {"content": [{"type": "text", "text": "a"}]}}]}, "choices.0.message.content"),
    ({"choices": [{"message": {"content": "a"}, "logprobs": {"content": [{"logprob": -1}]}}]}, "token"),
    ({"usage": {}}, "choices"),
]


@pytest.mark.parametrize(("body", "where"), MALFORMED)
def test_a_malformed_completion_is_an_error_naming_the_field(body, where):
    gen = OpenAIBackend.parse(body)
    assert gen.texts == [] and gen.error.startswith("server answered 200 with a malformed completion")
    assert where in gen.error


def test_odd_but_readable_fields_are_read():
    body = {
        "choices": [
            {"index": "1", "message": {"content": None}, "finish_reason": 3},
            {"index": 0, "message": {"content": "a"}, "finish_reason": "stop"},
        ],
        "usage": {"prompt_tokens": 3, "note": "x", "cached": True},
    }
    gen = OpenAIBackend.parse(body)
    assert gen.error is None and gen.texts == ["a", ""]
    assert gen.finish_reasons == ["stop", None] and gen.usage == {"prompt_tokens": 3}
    assert OpenAIBackend.parse({"choices": [{"message": {"content": "a"}}], "usage": [1]}).usage == {}


ECHO = {"tokens": ["a", " b", " c"], "token_logprobs": [None, -1.0, -2.0], "text_offset": [0, 1, 3]}


@pytest.mark.parametrize(
    "logprobs",
    [
        [1],
        {**ECHO, "tokens": ["a", ["x"], " c"]},
        {**ECHO, "token_logprobs": [None]},
        {**ECHO, "top_logprobs": [None, {" b": None, "x": -0.5}, "row"]},
    ],
    ids=["not-an-object", "token-not-text", "values-short", "null-top-values"],
)
def test_malformed_prompt_logprobs_are_an_error_or_read_without_a_crash(logprobs):
    data = {"choices": [{"logprobs": logprobs}]}
    score = OpenAIBackend.continuation_logprob(data, 1, 5)
    assert (score.error is None) == (logprobs is not None and "top_logprobs" in logprobs)
    if score.error is None:
        assert score.logprob == -3.0 and score.is_greedy is False  # " b" was not the top token
    OpenAIBackend.echo_rows_late(logprobs)  # says "cannot tell" or decides; never raises


def test_a_run_on_a_server_answering_malformed_bodies_fails_its_items_with_the_reason(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer({"": [("status", 200, '{"choices": [null]}')]}) as server:
        code, shown, err = cli(
            capsys, *llm_args(openai_backend(server.url), out), "-o", "backend.max_retries=0"
        )
    assert code == 3, shown + err
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert failures and all("malformed completion: choices.0" in f["error"] for f in failures)
    raw = [json.loads(line) for path in (out / "predictions" / "raw").glob("*.jsonl") for line in path.open()]
    assert raw and all("malformed completion" in (r.get("error") or "") for r in raw)


def test_a_reply_with_half_a_character_is_kept_and_parsed_not_a_failed_item(tmp_path, capsys):
    """JSON lets a server send "\\udc00" alone; the reply could not be written to the raw log,
    so every item failed with a UnicodeEncodeError and the reply was lost."""
    out = tmp_path / "run"
    with FakeServer({}, default_text='{"incorrect_spans": [], "note": "\udc00"}') as server:
        code, shown, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=2))
    assert code == 0, shown + err
    raw = [
        json.loads(line)
        for line in next((out / "predictions").rglob("en.raw.jsonl")).read_text().splitlines()
    ]
    assert len(raw) == 2 and all(r["texts"] == ['{"incorrect_spans": [], "note": "\ufffd"}'] for r in raw)
    stats = json.loads(next(out.rglob("stats.json")).read_text())
    assert "items.failed" not in json.dumps(stats), stats
