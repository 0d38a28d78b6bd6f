"""A server's 200 reply is read where it can be, and what had to be mended is said.

An audit with a misbehaving server: a body with bytes that are not UTF-8 (a character cut at
a token boundary) failed every item as "a body that is not JSON: is the URL the server's
API?"; a raw NUL inside the reply's JSON string lost the reply the same way; a reply naming
another model than the one asked for was never noticed.
"""

from __future__ import annotations

import json

from cli_helpers import cli, llm_args, openai_backend
from fake_openai_server import FakeServer

from mushroom.backends.openai_schema import read_body
from mushroom.backends.rawlog import RawRecord


def body_with(raw: bytes) -> bytes:
    """A chat completion whose reply holds `raw` inside its reason string, sent as it is."""
    content = json.dumps({"incorrect_spans": [], "reason": "PLACE"})
    reply = {"model": "m", "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
    return json.dumps(reply).encode().replace(b"PLACE", raw)


def raw_texts(out) -> list[str]:
    lines = (out / "predictions" / "raw" / "en.raw.jsonl").read_text(encoding="utf-8").splitlines()
    return [text for line in lines for text in RawRecord.model_validate_json(line).texts]


def test_a_reply_with_bytes_that_are_not_utf8_is_read_and_said_once(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer({"": [("raw", body_with(b"caf\xc3"))]}) as server:  # a character cut in two
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=3))
    said = " ".join(err.split())
    assert code == 0, said
    assert "not JSON" not in said
    assert said.count("bytes that are not UTF-8") == 1, said
    assert all("caf\ufffd" in text for text in raw_texts(out))
    assert len((out / "predictions" / "mushroom.en-val.v2.jsonl").read_text().splitlines()) == 3


def test_a_raw_nul_inside_a_reply_string_keeps_the_reply(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer({"": [("raw", body_with(b"a\x00b"))]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=2))
    assert code == 0, err
    assert "not JSON" not in err
    assert all("a\x00b" in text for text in raw_texts(out))


def test_a_body_that_is_not_json_is_still_refused():
    for body in (b"<html>login</html>", b"\xff\xfe<html>"):
        try:
            read_body(body)
        except ValueError:
            continue
        raise AssertionError(f"{body!r} was read as JSON")
    assert read_body(b'{"a": "\\u00e9"}') == ({"a": "\u00e9"}, None)


def test_a_reply_naming_another_model_is_warned_of_once(tmp_path, capsys):
    with FakeServer({}, reply_model="fallback-7b") as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), tmp_path / "a", limit=3))
    said = " ".join(err.split())
    assert code == 0, said
    assert said.count("answered as model 'fallback-7b', not 'm'") == 1, said
    # the same model in a server's own form (a path, as llama.cpp names it) is no other model
    with FakeServer({}, reply_model="/srv/models/m") as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), tmp_path / "b", limit=2))
    assert code == 0 and "answered as model" not in err, err


def test_a_body_with_a_byte_order_mark_is_read_and_a_cut_one_is_no_url_fault(tmp_path, capsys):
    out = tmp_path / "bom"
    with FakeServer({"": [("raw", b"\xef\xbb\xbf" + body_with(b"x"))]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=2))
    assert code == 0 and "not JSON" not in err, err
    out = tmp_path / "cut"
    with FakeServer({"": [("raw", body_with(b"x")[:40])]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=2))
    assert code == 3, err
    errors = [json.loads(line)["error"] for line in (out / "failures.jsonl").read_text().splitlines()]
    assert errors and all("answered 200 with JSON it could not read" in e for e in errors), errors
    assert not any("is the URL the server's API" in e for e in errors), errors


def test_a_dated_snapshot_or_another_case_of_the_model_is_no_other_model():
    """OpenAI answers gpt-4o-mini as gpt-4o-mini-2024-07-18; a server may lower the case."""
    from mushroom.backends.served import same_model

    assert same_model("gpt-4o-mini", "gpt-4o-mini-2024-07-18")
    assert same_model("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b-instruct")
    assert same_model("m", "/srv/models/m")
    assert not same_model("gpt-4o-mini", "gpt-4o") and not same_model("m", "fallback-7b")


def test_the_offset_of_a_bad_byte_counts_the_byte_order_mark():
    _, mended = read_body(b"\xef\xbb\xbf" + b'{"a": "\xc3"}')
    assert "the first at offset 10 of the body" in mended, mended  # 0-based, past the BOM
