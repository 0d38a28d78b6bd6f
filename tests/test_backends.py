import json
import subprocess
import sys
from collections import Counter

import pytest
from conftest import ROOT, write_lines
from fake_openai_server import FakeServer

from mushroom.backends import build_backend
from mushroom.backends.base import (
    RECOVERED,
    BackendConfig,
    Generation,
    GenerationRequest,
    LoglikelihoodRequest,
    Message,
    backend_warnings,
    retry_note,
)
from mushroom.backends.cache import CachedBackend, ResponseCache, request_key
from mushroom.backends.config import parse_backend_config
from mushroom.backends.rawlog import RawLog, RawRecord
from mushroom.data.splits import load_split
from mushroom.detectors import build
from mushroom.errors import MushroomError
from mushroom.parsing.parser import SpanList


def _req(key, text, temperature=0.0, n=1):
    return GenerationRequest(
        key=key, messages=[Message(role="user", content=text)], temperature=temperature, n=n
    )


def _openai(url, **kw):
    settings = {"timeout_s": 1.0, "max_retries": 3, **kw}
    return build_backend(BackendConfig(kind="openai", model="m", base_url=url, **settings))


def test_a_model_the_server_does_not_list_is_warned_about_once():
    """llama.cpp answers with its one model whatever the name: a typo ran under the wrong name."""
    from mushroom.backends.base import backend_warnings

    with FakeServer({}) as server:
        right = _openai(server.url)
        right.generate([_req("a", "x")])
        assert backend_warnings(right) == []
        wrong = build_backend(BackendConfig(kind="openai", model="nosuchmodel", base_url=server.url))
        with pytest.warns(RuntimeWarning, match="lists 'm', not 'nosuchmodel'"):
            wrong.generate([_req("a", "x")])
        wrong.generate([_req("b", "y")])
        assert len(backend_warnings(wrong)) == 1  # once per backend, not per call
        right.close()
        wrong.close()


def test_openai_backend_retries_429_5xx_and_lost_connections_but_not_validation_errors(monkeypatch):
    monkeypatch.setenv("MUSHROOM_TEST_KEY", "sk-secret")
    script = {
        "A": [("status", 429), ("ok", "answer A")],
        "B": [("status", 503), ("status", 502), ("ok", "answer B")],
        "C": [("sleep", 1.5), ("ok", "answer C")],
        "D": [("status", 400)],
        "E": [("status", 500)],
        "F": [("status", 500, '{"error": {"message": "1 validation error for Request: max_tokens"}}')],
    }
    with FakeServer(script) as server:
        backend = _openai(server.url, api_key_env="MUSHROOM_TEST_KEY", concurrency=3)
        seen = []
        out = backend.generate(
            [_req(k, f"item {k}") for k in "ABCDEF"], on_result=lambda i, g: seen.append(i)
        )
        assert [g.texts for g in out[:2]] == [["answer A"], ["answer B"]]
        # a read timeout is not resent: the server may still be running the abandoned request
        assert out[2].error.startswith("timeout after 1.0 s") and "not resent" in out[2].error
        assert out[3].error.startswith("HTTP 400")  # not retried
        assert "gave up after 4 attempts" in out[4].error
        assert out[5].error.startswith("HTTP 500") and "validation error" in out[5].error
        assert sorted(seen) == [0, 1, 2, 3, 4, 5]
        assert server.counts == {"A": 2, "B": 3, "C": 1, "D": 1, "E": 4, "F": 1}
        assert backend.retries_made == 1 + 2 + 3
        # a retry that saved its request is said too: a flaky server passed unseen
        assert backend.retry_tally() == {
            "HTTP 429": 1,
            "HTTP 503": 1,
            "HTTP 502": 1,
            "HTTP 500": 3,
            RECOVERED: 2,
        }
        assert retry_note(backend.retry_tally()) == (
            "6 failed attempts sent again (HTTP 500 x3, HTTP 429 x1, HTTP 502 x1, HTTP 503 x1); "
            "2 requests answered that way (a request that still failed is counted with its item)"
        )
        assert retry_note(Counter({"HTTP 500": 3})) is None  # they failed, and say so themselves
        assert all(c["auth"] == "Bearer sk-secret" for c in server.calls)
        backend.close()


def test_openai_backend_resends_after_a_timeout_only_when_asked():
    with FakeServer({"C": [("sleep", 1.5), ("ok", "answer C")]}) as server:
        backend = _openai(server.url, retry_timeouts=True)
        assert backend.generate([_req("C", "item C")])[0].texts == ["answer C"]
        assert server.counts == {"C": 2}


def test_network_errors_name_the_server_url():
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    refused = _openai(url, max_retries=0).generate([_req("A", "item A")])[0].error
    assert (
        refused.startswith("gave up after 1 attempt: connection error")
        and f"({url}/chat/completions)" in refused
    )
    with FakeServer({"C": [("sleep", 1.5), ("ok", "answer C")]}) as server:
        late = _openai(server.url).generate([_req("C", "item C")])[0].error
    assert late.startswith(f"timeout after 1.0 s waiting for {server.url}/chat/completions")


def test_after_a_request_finds_no_server_the_next_fail_at_once_until_a_pause_has_passed(monkeypatch):
    # a dead URL cost every item its retries (~9 s each, hours for a test split)
    import socket

    import mushroom.backends.openai_compat as openai_compat

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    backend = _openai(url, max_retries=1)
    assert backend.generate([_req("A", "item A")])[0].error.startswith("gave up after 2 attempts: connection")
    retries = backend.retries_made
    rest = backend.generate([_req("B", "item B"), _req("C", "item C")])
    assert all(g.error.startswith("not sent: an earlier request gave up after 2 attempts") for g in rest)
    assert backend.retries_made == retries  # nothing was tried
    # once the pause is over a request is sent again, and a server that is back answers it
    monkeypatch.setattr(openai_compat, "UNREACHABLE_PAUSE_S", 0.0)
    with FakeServer({}) as server:
        backend.client.base_url = server.url
        assert backend.generate([_req("D", "item D")])[0].texts == ['{"incorrect_spans": []}']
        monkeypatch.setattr(openai_compat, "UNREACHABLE_PAUSE_S", 30.0)
        assert backend.generate([_req("E", "item E")])[0].texts  # the answer cleared the mark
    # once a server has answered, an outage (a restart) fails only the requests made during it;
    # three requests in a row that find no server mean it is gone: the next are not sent
    backend.client.base_url = url
    later = backend.generate([_req(k, f"item {k}") for k in "FGHI"])
    assert [g.error.split(":")[0] for g in later] == ["gave up after 2 attempts"] * 3 + ["not sent"]
    backend.close()


def test_openai_payload_carries_schema_logprobs_and_samples():
    with FakeServer({}) as server:
        backend = _openai(server.url)
        req = GenerationRequest(
            key="k",
            messages=[Message(role="user", content="x")],
            n=3,
            seed=7,
            json_schema=SpanList.model_json_schema(),
            top_logprobs=5,
        )
        out = backend.generate([req])
        body = server.calls[0]["body"]
        assert body["response_format"]["type"] == "json_schema" and body["seed"] == 7
        assert body["logprobs"] is True and body["top_logprobs"] == 5 and body["n"] == 3
        assert len(out[0].texts) == 3 and out[0].usage["prompt_tokens"] == 10
        assert out[0].structured_output == "json_schema" and backend.form_confirmed


def test_a_server_that_ignores_n_is_asked_again_for_the_other_samples():
    """llama.cpp answers n=3 with one choice: samples=3 voted over one text while the record said 3."""
    from mushroom.backends.base import backend_warnings

    with FakeServer({}, ignore_n=True) as server:
        backend = _openai(server.url)
        req = GenerationRequest(key="k", messages=[Message(role="user", content="x")], n=3, seed=7)
        with pytest.warns(RuntimeWarning, match="answered n=3 with 1 sample"):
            out = backend.generate([req, req.model_copy(update={"key": "j"})])
        assert [len(g.texts) for g in out] == [3, 3] and not any(g.error for g in out)
        assert out[0].usage["completion_tokens"] == 15  # three requests' usage summed
        seeds = sorted(c["body"]["seed"] for c in server.calls)
        assert seeds == [7, 7, 8, 8, 9, 9]  # each extra sample with the next seed, not a repeat
        assert [c["body"]["n"] for c in server.calls].count(3) == 2
        assert len(backend_warnings(backend)) == 1
        backend.close()


def test_a_server_that_refuses_n_gets_one_request_per_sample():
    """llama-server answers n > 1 with HTTP 500 "Only one completion choice": every item failed."""
    with FakeServer({}, refuse_n=True) as server:
        backend = _openai(server.url)
        reqs = [
            GenerationRequest(key=k, messages=[Message(role="user", content=k)], n=2, seed=3) for k in "ab"
        ]
        with pytest.warns(RuntimeWarning, match="refuses n > 1"):
            out = backend.generate(reqs)
        assert [len(g.texts) for g in out] == [2, 2] and not any(g.error for g in out)
        ns = [c["body"]["n"] for c in server.calls]
        assert ns.count(2) == 1 and ns.count(1) == 4  # refused once, then one sample a request
        assert sorted(c["body"]["seed"] for c in server.calls if c["body"]["n"] == 1) == [3, 3, 4, 4]
        backend.close()


@pytest.mark.parametrize(
    "model, ids, served",
    [
        ("m", ["m"], True),
        ("SmolLM2.gguf", ["/models/SmolLM2.gguf"], True),  # llama.cpp lists the path
        ("llama3.2", ["llama3.2:latest"], True),  # Ollama's tag
        ("llama3.2:latest", ["llama3.2"], True),
        ("llama3.2:1b", ["llama3.2:latest"], False),
        ("smollm2", ["/models/SmolLM2.gguf"], False),
        ("gpt-5", [], False),
    ],
)
def test_which_names_a_server_s_model_list_serves(model, ids, served):
    from mushroom.backends.served import is_served

    assert is_served(model, ids) is served


def test_a_failed_extra_sample_fails_the_request():
    with FakeServer({"x": [("ok", "first"), ("status", 400)]}, ignore_n=True) as server:
        backend = _openai(server.url)
        with pytest.warns(RuntimeWarning, match="answered n=2 with 1 sample"):
            out = backend.generate([_req("k", "x", temperature=0.7, n=2)])
        assert out[0].error.startswith("HTTP 400") and "sample 2 of 2" in out[0].error
        backend.close()


def _schema_req(key):
    return GenerationRequest(
        key=key,
        messages=[Message(role="user", content=f"item {key}")],
        json_schema=SpanList.model_json_schema(),
    )


@pytest.mark.parametrize(
    "mode, check",
    [
        ("json_schema", lambda b: b["response_format"]["json_schema"]["schema"]["title"] == "SpanList"),
        (
            "json_object",
            lambda b: b["response_format"] == {"type": "json_object", "schema": SpanList.model_json_schema()},
        ),
        ("guided_json", lambda b: "response_format" not in b and b["guided_json"]["title"] == "SpanList"),
        ("none", lambda b: "response_format" not in b and "guided_json" not in b),
    ],
)
def test_each_structured_output_form_has_its_body(mode, check):
    with FakeServer({}) as server:
        out = _openai(server.url, structured_output=mode).generate([_schema_req("a")])
        assert check(server.calls[0]["body"]) and out[0].structured_output == mode


def test_auto_structured_output_falls_back_once_and_remembers_it():
    with FakeServer({}, reject_json_schema=True) as server:
        backend = _openai(server.url, structured_output="auto", concurrency=3)
        out = backend.generate([_schema_req(str(i)) for i in range(8)])
        assert all(g.error is None for g in out)
        assert {g.structured_output for g in out} == {"json_object"}
        kinds = [(c["body"].get("response_format") or {}).get("type") for c in server.calls]
        assert 1 <= kinds.count("json_schema") <= 3 and kinds.count("json_object") == 8
        assert backend.structured_form == "json_object" and backend.form_confirmed
        before = len(server.calls)
        backend.generate([_schema_req("again")])
        assert len(server.calls) == before + 1  # remembered for the rest of the run


def test_auto_falls_back_to_no_schema_when_every_form_is_rejected():
    with FakeServer({}, reject_json_schema=True, reject_json_object=True) as server:
        backend = _openai(server.url, structured_output="auto")
        out = backend.generate([_schema_req("x"), _schema_req("y")])
        assert [g.structured_output for g in out] == ["none", "none"] and out[0].texts
        kinds = [(c["body"].get("response_format") or {}).get("type") for c in server.calls]
        assert kinds == ["json_schema", "json_object", None, None]
        # unconstrained replies parse worse: the run says so, once, with the server's reason
        (said,) = [w for w in backend.warnings if "unconstrained" in w]
        assert "rejected every JSON-schema form" in said and "not supported" in said


def test_moving_from_json_schema_to_json_object_is_llama_cpps_usual_path_and_no_warning():
    with FakeServer({}, reject_json_schema=True) as server:
        backend = _openai(server.url, structured_output="auto")
        out = backend.generate([_schema_req("x")])
        assert out[0].structured_output == "json_object" and backend.warnings == []


def test_a_bare_bad_request_to_a_schema_request_names_the_structured_output_setting():
    """A 400 "Bad Request" names no form, so auto cannot fall back; a re-run failed the same way."""
    with FakeServer({"item": [("status", 400, '{"error": {"message": "Bad Request"}}')]}) as server:
        out = _openai(server.url, structured_output="auto").generate([_schema_req("a")])
    assert out[0].error.startswith("HTTP 400") and "-o backend.structured_output=json_object" in out[0].error


def test_explicit_json_schema_rejected_is_one_call_and_an_error():
    with FakeServer({}, reject_json_schema=True) as server:
        out = _openai(server.url, structured_output="json_schema").generate([_schema_req("a")])
        assert out[0].error.startswith("HTTP 500") and len(server.calls) == 1


def test_a_real_server_error_is_not_taken_for_a_format_rejection():
    with FakeServer({"item": [("status", 503), ("ok", "fine")]}) as server:
        backend = _openai(server.url, structured_output="auto")
        out = backend.generate([_schema_req("a")])
        assert out[0].texts == ["fine"] and out[0].structured_output == "json_schema"


@pytest.mark.parametrize(
    "kw, expected, source",
    [
        ({"slots": 2}, 2, "server /props total_slots"),
        ({"owned_by": "vllm"}, 32, "vLLM server"),
        ({}, 1, "default for a server that reports no slots"),
    ],
)
def test_auto_concurrency_reads_the_server(kw, expected, source):
    with FakeServer({"item": [("sleep", 0.2), ("ok", "x")]}, **kw) as server:
        backend = _openai(server.url, timeout_s=30.0)
        out = backend.generate([_req(str(i), f"item {i}") for i in range(6)])
        assert all(g.error is None for g in out)
        assert backend.concurrency == expected and backend.concurrency_source == source
        assert server.max_in_flight <= expected


def test_defaults_suit_a_one_slot_cpu_server():
    cfg = parse_backend_config({"kind": "openai", "model": "m", "base_url": "http://x/v1"})
    assert cfg.concurrency == "auto" and cfg.timeout_s >= 600 and cfg.retry_timeouts is False
    assert cfg.structured_output == "auto"


def _ll(key, continuation, text="Is it true?"):
    return LoglikelihoodRequest(
        key=key, messages=[Message(role="user", content=text)], continuation=continuation
    )


def test_loglikelihood_over_completions_sums_the_continuation_tokens():
    with FakeServer({}, token_logprob={"Yes": -0.25, "No": -2.0, " ": -0.5, "maybe": -3.0}) as server:
        backend = _openai(server.url)
        out = backend.loglikelihood([_ll("a", "Yes"), _ll("b", "No"), _ll("c", "Yes maybe")])
        assert [s.logprob for s in out] == [-0.25, -2.0, -0.25 - 0.5 - 3.0]
        assert all(s.error is None and s.is_greedy for s in out)
        scored = [c for c in server.calls if c["path"] == "/v1/completions"]
        body = scored[0]["body"]
        assert len(scored) == 3 and body["echo"] is True and body["logprobs"] == 1
        assert body["prompt"] == "user: Is it true?\n\nassistant:\nYes"
        assert backend.loglikelihood_template_used == "plain"  # the fake has no /apply-template


def test_loglikelihood_reports_a_server_that_cannot_score():
    with FakeServer({}, prompt_logprobs=False) as server:
        out = _openai(server.url).loglikelihood([_ll("a", "Yes"), _ll("b", "No")])
        assert all(s.logprob is None and "cannot score" in s.error and "logits_all" in s.error for s in out)
        assert len([c for c in server.calls if c["path"] == "/v1/completions"]) == 2  # not retried


def test_loglikelihood_reads_late_echo_rows_from_the_row_before():
    values = {"Yes": -0.25, "No": -2.0, " ": -0.5, "maybe": -3.0}
    with FakeServer({}, token_logprob=values, late_echo=True, late_missing=frozenset({"maybe"})) as server:
        backend = _openai(server.url)
        out = backend.loglikelihood([_ll("a", "Yes"), _ll("b", "No"), _ll("c", "Yes maybe")])
        assert [s.logprob for s in out[:2]] == [-0.25, -2.0] and backend._echo_late is True
        assert out[2].logprob is None and "'maybe' is not among" in out[2].error
        ks = [c["body"]["logprobs"] for c in server.calls if c["path"] == "/v1/completions"]
        assert ks == [1, 50, 50, 50]  # the first answer shows the late rows; asked again with top-50


def test_loglikelihood_refuses_a_continuation_inside_a_token():
    from mushroom.backends.openai_compat import OpenAIBackend

    data = {
        "choices": [
            {"logprobs": {"tokens": ["ab", "cd"], "token_logprobs": [None, -1.0], "text_offset": [0, 2]}}
        ]
    }
    assert OpenAIBackend.continuation_logprob(data, 2, 4).logprob == -1.0
    assert "token boundary" in OpenAIBackend.continuation_logprob(data, 1, 4).error
    assert "no prompt log-probabilities" in OpenAIBackend.continuation_logprob({"choices": [{}]}, 0, 1).error


def test_cache_never_repeats_a_call_and_resumes_after_a_kill(tmp_path):
    cache_path = tmp_path / "cache.jsonl"
    with FakeServer({"X3": [("status", 500)]}, default_text='{"incorrect_spans": []}') as server:
        requests = [_req(f"k{i}", f"item X{i}") for i in range(5)]
        backend = CachedBackend(_openai(server.url, max_retries=0), ResponseCache(cache_path))
        first = backend.generate(requests)
        assert [g.error is None for g in first] == [True, True, True, False, True]
        calls_after_first = len(server.calls)
        # simulate a kill mid-write: a truncated last line must not break the next run
        with cache_path.open("a") as f:
            f.write('{"key": "abc", "generation": {"te')
        server.script = {}
        again = CachedBackend(_openai(server.url), ResponseCache(cache_path))
        second = again.generate(requests)
        assert all(g.error is None for g in second)
        assert len(server.calls) == calls_after_first + 1  # only the failed request is made again
        assert again.hits == 4 and again.misses == 1
        keys = [json.loads(line)["key"] for line in cache_path.read_text().splitlines() if line.endswith("}")]
        assert len(keys) == len(set(keys)) == 5


def test_unreadable_cache_lines_are_asked_again_and_said(tmp_path):
    """A line cut mid-character (a kill during a non-ASCII reply's write) failed every item with
    a UnicodeDecodeError naming no file, and a re-run failed alike; a JSON array line did the same
    with a TypeError; an edited line was asked again with nothing said (a review)."""
    cache_path = tmp_path / "cache.jsonl"
    with FakeServer({}, default_text='{"incorrect_spans": []}') as server:
        requests = [_req(f"k{i}", f"item X{i}") for i in range(3)]
        CachedBackend(_openai(server.url), ResponseCache(cache_path)).generate(requests)
        lines = cache_path.read_bytes().splitlines(keepends=True)
        cut = '{"key": "zz", "generation": {"texts": ["Émile'.encode()[:-4]  # inside the É
        cache_path.write_bytes(lines[0] + b"[1, 2]\n" + lines[2] + cut)
        cache = ResponseCache(cache_path)
        assert (cache.corrupt_lines, cache.cut_line, len(cache.entries)) == (1, True, 2)
        again = CachedBackend(_openai(server.url), cache)
        said = r"cache.jsonl: its last line, cut by a kill mid-write, was dropped; 1 line could not be read"
        with pytest.warns(RuntimeWarning, match=said):
            out = again.generate(requests)
        assert all(g.error is None for g in out) and again.misses == 1
        # the cut line is gone: the next open says only the line kept inside (it said both again)
        later = ResponseCache(cache_path)
        assert (later.corrupt_lines, later.cut_line) == (1, False) and len(later.entries) == 3
        assert later.unreadable_warning().startswith(f"{cache_path}: 1 line could not be read (edited? kept")


def test_a_cached_answer_with_fewer_samples_than_asked_is_asked_again(tmp_path):
    """Cached from a server that ignored n, it kept voting over one sample after the fix."""
    cache = ResponseCache(tmp_path / "c.jsonl")
    req = _req("a", "x", temperature=0.7, n=3)
    with FakeServer({}) as server:
        backend = CachedBackend(_openai(server.url), cache)
        cache.put(request_key(backend.kind, "m", req), Generation(texts=["only one"]))
        out = backend.generate([req])
        assert len(out[0].texts) == 3 and not out[0].cached and len(server.calls) == 1
        again = CachedBackend(_openai(server.url), ResponseCache(tmp_path / "c.jsonl")).generate([req])
        assert again[0].cached and len(again[0].texts) == 3 and len(server.calls) == 1


def test_cache_key_depends_on_sampling_parameters(tmp_path):
    with FakeServer({}) as server:
        backend = CachedBackend(_openai(server.url), ResponseCache(tmp_path / "c.jsonl"))
        backend.generate([_req("a", "same"), _req("a", "same", temperature=0.5), _req("b", "same")])
        assert len(server.calls) == 2  # the key is the request, not the item id


def test_replay_backend_matches_ids_temperatures_and_samples(tmp_path):
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            {"id": "a", "response": "t1", "temperature": 0.1},
            {"id": "a", "response": "t2", "temperature": 0.2},
            {"id": "b", "response": "s1"},
            {"id": "b", "response": "s2"},
        ],
    )
    backend = build_backend(BackendConfig(kind="replay", responses=str(path)))
    out = backend.generate([_req("a", "", 0.2), _req("a", "", 0.1), _req("b", "", 0.0, n=2), _req("c", "")])
    assert [g.texts for g in out[:3]] == [["t2"], ["t1"], ["s1", "s2"]]
    assert "no recorded response" in out[3].error
    # fewer recorded samples than asked: an error, not a vote over fewer than the config says
    short = build_backend(BackendConfig(kind="replay", responses=str(path)))
    (gen,) = short.generate([_req("b", "", 0.0, n=3)])
    assert gen.texts == [] and "no recorded response for 1 of the 3 samples" in gen.error
    from mushroom.backends.base import backend_warnings

    assert backend_warnings(backend) == []
    # asking for fewer temperatures than were recorded changes the vote: said, not silent
    again = build_backend(BackendConfig(kind="replay", responses=str(path)))
    with pytest.warns(
        RuntimeWarning, match=r"also holds answers at temperature 0.2, .* --temperatures 0.1,0.2"
    ):
        again.generate([_req("a", "", 0.1)])
    again.generate([_req("a", "", 0.1)])  # another language's call: not said again
    assert len(backend_warnings(again)) == 1
    # a temperature the file lacks: its advice names the detect flag and the run config's key
    # (it said "run with --temperatures", which `run` does not take)
    (gen,) = build_backend(BackendConfig(kind="replay", responses=str(path))).generate([_req("a", "", 0.5)])
    assert "detect --temperatures 0.1,0.2; in a run config, temperatures = [0.1, 0.2]" in gen.error, gen.error


def test_replay_keeps_the_recorded_usage_so_a_cut_off_reply_counts_as_cut_off(tmp_path):
    # a run's `llm.truncated` (and its "cut off at max_tokens" warning) vanished on replay
    path = write_lines(
        tmp_path / "r.jsonl",
        [
            {"key": "a", "texts": ["x1", "x2"], "usage": {"completion_tokens": 40}},
            {"key": "b", "texts": ["y"]},
            # as OpenAI servers send it: nested details and nulls load, and only an int counts
            {"key": "c", "texts": ["z"], "usage": {"completion_tokens": None, "details": {"reasoning": 0}}},
        ],
    )
    backend = build_backend(BackendConfig(kind="replay", responses=str(path)))
    a, a2, b, c = backend.generate([_req(k, "", 0.0) for k in ("a", "a", "b", "c")])
    assert a.usage == a2.usage == {"completion_tokens": 20} and b.usage == c.usage == {}  # a text's share
    items = load_split("val", ["en"])["en"][:1]
    cut = '{"incorrect_spans": [{"text": "' + items[0].model_output_text[:18] + '"}, {"text": "sil'
    lines = [{"id": items[0].id, "texts": [cut], "usage": {"completion_tokens": 64}}]
    det = build("llm", {"backend": {"kind": "replay", "responses": str(write_lines(tmp_path / "c.jsonl", lines))},
                        "max_tokens": 64, "cache": False})  # fmt: skip
    det.detect(items, {})
    assert det.last_stats["llm.truncated"] == 1


def test_missing_library_names_the_extra(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise ImportError("No module named 'vllm'", name="vllm")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    sys.modules.pop("mushroom.backends.vllm_backend", None)
    with pytest.raises(MushroomError, match=r"pip install .*\(mushroom's 'vllm' extra\)"):
        build_backend({"kind": "vllm", "model": "x"})


def test_import_mushroom_pulls_no_heavy_library():
    code = "import sys, mushroom, mushroom.cli.app, mushroom.detectors.llm; print([m for m in ('torch','vllm','transformers') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_llm_detector_over_openai_server_with_temperature_vote(tmp_path):
    items = load_split("val", ["en"])["en"][:3]
    first = items[0]  # "Petra van Stoveren won a silver medal in the 2008 Summer Olympics ..."
    script = {
        first.model_output_text: [
            ("ok", '{"incorrect_spans": [{"text": "silver", "probability": 0.9}]}'),
            ("ok", '{"incorrect_spans": [{"text": "silver", "probability": 0.8}, {"text": "2008"}]}'),
            ("ok", "not json at all"),
        ]
    }
    with FakeServer(script) as server:
        det = build(
            "llm",
            {
                "backend": {"kind": "openai", "model": "m", "base_url": server.url, "concurrency": 1},
                "temperatures": [0.05, 0.1, 0.2],
                "prompt": "single_zero_shot",
            },
        )
        det.workdir = tmp_path
        det.raw_log = RawLog(tmp_path / "en.raw.jsonl")
        results = []
        det.run(items, {}, results.append)
        by_id = {r.id: r for r in results}
        assert sorted(by_id) == sorted(it.id for it in items) and all(r.status == "ok" for r in results)
        assert by_id[first.id].prediction.hard_labels == [
            (25, 31)
        ]  # 2 of 3 runs mark "silver"; "2008" only 1
        assert by_id[items[1].id].prediction.hard_labels == []
        total = Counter()
        for r in results:
            total.update(r.stats)
        assert total["llm.requests"] == 9 and total["llm.unparseable"] == 1
        assert total["llm.requests"] == total["llm.parsed"] + total["llm.repaired"] + total["llm.unparseable"]
        raw = [
            RawRecord.model_validate_json(line)
            for line in (tmp_path / "en.raw.jsonl").read_text().splitlines()
        ]
        assert (
            len(raw) == 9
            and {r.stage for r in raw} == {"llm"}
            and {r.temperature for r in raw} == {0.05, 0.1, 0.2}
        )
        # what was sent is in the record: the prompt, its length limit and sampling
        sent = {(c["body"]["temperature"], c["body"]["messages"][-1]["content"]) for c in server.calls}
        assert {(r.temperature, r.messages[-1].content) for r in raw} == sent
        assert {r.max_tokens for r in raw} == {server.calls[0]["body"]["max_tokens"]} and raw[0].top_p == 1.0
        assert (
            det.describe()["prompt_name"] == "single_zero_shot" and len(det.describe()["prompt_sha256"]) == 64
        )


def test_detect_cli_replays_recorded_responses(tmp_path):
    items = load_split("val", ["en"])["en"]
    rows = []
    for it in items:
        spans = [{"text": it.model_output_text[s:e], "probability": 0.9} for s, e in it.hard_labels]
        rows.append({"id": it.id, "response": json.dumps({"incorrect_spans": spans})})
    rows[0]["response"] = "garbage"
    responses = write_lines(tmp_path / "responses.jsonl", rows)
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "mushroom",
            "detect",
            "--split",
            "val",
            "--lang",
            "en",
            "--backend",
            "replay",
            "--responses",
            str(responses),
            "--out",
            str(out),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    # the garbage reply's item failed: no "nothing wrong" read from it (kept empty with --allow-failures)
    assert proc.returncode == 3 and "could not be read as spans" in proc.stdout + proc.stderr, proc.stderr
    proc = subprocess.run([*proc.args, "--allow-failures"], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert any(line.split() == ["│", "unparseable", "│", "1", "│"] for line in proc.stdout.splitlines())
    scores = json.loads((out / "scores.json").read_text())["en"]
    assert scores["iou"] > 0.9
    stats = json.loads((out / "predictions" / "stats.json").read_text())
    assert (
        stats["all"]["llm.requests"] == 50 and stats["all"]["llm.parsed"] + stats["all"]["llm.repaired"] == 49
    )


def test_replay_reads_raw_records_by_key_then_item_and_skips_error_rows(tmp_path):
    rows = [
        {
            "key": "en-1#decompose",
            "item_id": "en-1",
            "stage": "decompose",
            "texts": ["claims"],
            "temperature": 0.0,
        },
        {"key": "en-1#verify", "item_id": "en-1", "stage": "verify", "error": "HTTP 500", "texts": []},
        {
            "key": "en-1#verify",
            "item_id": "en-1",
            "stage": "verify",
            "texts": ["v1", "v2"],
            "logprobs": [[{"a": -0.1}], [{"b": -0.2}]],
            "unknown_field": {"x": 1},
        },
        {"item_id": "en-2", "stage": "llm", "response": "r2", "logprobs": [{"c": -0.3}]},
        {"id": "en-3", "response": "old"},
        {
            "key": "en-4#pyes",
            "item_id": "en-4",
            "continuation": "Yes",
            "loglikelihood": -0.5,
            "is_greedy": True,
        },
        {"key": "en-4#pyes", "item_id": "en-4", "continuation": "No", "logprob": -2.5},
        {"key": "en-4#pyes", "item_id": "en-4", "continuation": "No", "error": "timeout"},
    ]
    path = write_lines(tmp_path / "raw.jsonl", rows)
    backend = build_backend({"kind": "replay", "responses": str(path)})

    def req(key, item_id=None, stage="", n=1):
        return GenerationRequest(
            key=key, item_id=item_id, stage=stage, messages=[Message(role="user", content="")], n=n
        )

    out = backend.generate(
        [
            req("en-1#decompose", "en-1", "decompose"),
            req("en-1#verify", "en-1", "verify", n=2),
            req("en-2#llm", "en-2", "llm"),  # no such key: matched by item and stage
            req("en-2#other", "en-2", "decompose"),  # same item, another stage: no answer
            req("en-3"),  # the old form: key = item id
        ]
    )
    assert [g.texts for g in out[:3]] == [["claims"], ["v1", "v2"], ["r2"]]
    assert out[1].logprobs == [[{"a": -0.1}], [{"b": -0.2}]] and out[2].logprobs == [[{"c": -0.3}]]
    assert "no recorded response" in out[3].error and out[4].texts == ["old"]

    scores = backend.loglikelihood(
        [
            LoglikelihoodRequest(
                key="en-4#pyes", item_id="en-4", messages=[Message(role="user", content="q")], continuation=c
            )
            for c in ("No", "Yes", "No")
        ]
    )
    assert [s.logprob for s in scores[:2]] == [-2.5, -0.5] and scores[1].is_greedy is True
    assert "no recorded log-likelihood" in scores[2].error  # the error row is not an answer


def test_replay_line_without_any_id_is_a_clear_error(tmp_path):
    path = write_lines(tmp_path / "raw.jsonl", [{"response": "x"}])
    with pytest.raises(MushroomError, match=r"raw.jsonl:1.*needs `key`, `item_id` or `id`"):
        build_backend({"kind": "replay", "responses": str(path)})


@pytest.mark.parametrize(
    "status, body, final",
    [
        (400, "anything", True),
        (422, '{"detail": [{"msg": "field required"}]}', True),
        (429, "slow down", False),
        (500, '{"error": "scripted"}', False),
        (500, "1 validation error for CreateChatCompletionRequest", True),
        (500, "response_format json_schema is not supported", True),
        (501, "", True),
        (502, "Bad Gateway: invalid upstream response", False),  # a proxy, not the request
        (503, "Service Unavailable", False),
    ],
)
def test_which_error_answers_are_final(status, body, final):
    from mushroom.backends.http_answers import is_validation_error

    assert is_validation_error(status, body) is final


def test_replay_lines_with_nothing_to_replay_are_named_by_line(tmp_path):
    from mushroom.backends.replay import load_replay_file
    from mushroom.errors import DataError

    path = tmp_path / "r.jsonl"
    path.write_text(
        '{"id": "a", "texts": ["{}"]}\n{"id": "b", "texts": []}\n'
        '{"id": "c", "note": "n", "respone": "{}"}\n{"id": "d", "logprob": 0.0}\n{"id": "e", "error": "x"}\n'
    )
    with pytest.raises(DataError) as caught:
        load_replay_file(path)
    lines = {p.line: p.message for p in caught.value.problems}
    assert set(lines) == {2, 3} and all("nothing to replay" in m for m in lines.values())
    assert "did you mean 'response' for 'respone'?" in lines[3]  # not stopped by the first key
    path.write_text('{"id": "a", "texts": []}\n{"id": "b", "context": "..."}\n')
    with pytest.raises(DataError) as caught:
        load_replay_file(path)  # nothing anywhere: the file is named once, not line by line
    assert len(caught.value.problems) == 1 and "not a file of recorded responses" in str(caught.value)


def test_a_replay_line_of_the_wrong_type_or_a_misspelt_key_is_named(tmp_path):
    """`"temperature": true` was read as 1.0, `"0.05"` as 0.05 and `temperture` left unread: the
    line answered another request, or none, and no message named it (an audit)."""
    from mushroom.backends.replay import load_replay_file
    from mushroom.errors import DataError

    path = tmp_path / "r.jsonl"
    good = '{"id": "a", "texts": ["{}"], "temperature": 0, "schema_version": 1, "seed": 0, "note": "n"}\n'
    path.write_text(good)
    assert load_replay_file(path)[0].temperature == 0.0  # an int is a number; unknown keys are kept
    # an item's own columns, and others near a key of replay's, are no misspelling (a review)
    other = '{"id": "b", "model_input": "Q?", "model_id": "m", "text": "t", "item": 1, "reason": "r", "response": "{}"}'
    path.write_text(good + other + "\n")
    assert len(load_replay_file(path)) == 2
    for line, field in [
        ('{"id": "b", "texts": ["{}"], "temperature": true}', "temperature"),
        ('{"id": "b", "texts": ["{}"], "temperature": "0.05"}', "temperature"),
        ('{"id": "b", "texts": ["{}"], "max_tokens": "384"}', "max_tokens"),
        ('{"id": "b", "texts": ["{}"], "temperture": 0.05}', "temperture"),
    ]:
        path.write_text(good + line + "\n")
        with pytest.raises(DataError) as caught:
            load_replay_file(path)
        (problem,) = caught.value.problems
        assert (problem.line, problem.field) == (2, field), problem
    assert "did you mean 'temperature'" in problem.message


def test_a_replay_file_rewritten_in_place_is_read_again(tmp_path):
    # validated lines are kept per file content, so a file rewritten at once (same size, same
    # clock tick) must not be answered with the lines it had before
    from mushroom.backends.replay import load_replay_file

    path = tmp_path / "r.jsonl"
    path.write_text('{"id": "a", "response": "x"}\n')
    first = load_replay_file(path)
    assert load_replay_file(path) is first  # the same content is validated once
    path.write_text('{"id": "a", "response": "y"}\n')
    assert [r.response for r in load_replay_file(path)] == ["y"]


@pytest.mark.parametrize("name", ["llm", "chain", "pyes"])
def test_a_detectors_answers_are_cached_in_the_split_it_ran_on_and_read_back_from_there(tmp_path, name):
    """One detector runs on test, then val; its backend is built once. The val answers went to
    the test folder's cache, and a re-run where test had nothing to do looked in val's: the
    failed items it retried (a reply cut off at max_tokens, said to come from the cache) went
    to the server again."""
    from mushroom.backends.base import GenerationRequest
    from mushroom.detectors import build

    def detector(url):
        backend = {"kind": "openai", "model": "m", "base_url": url, "max_retries": 0}
        det = build(name, {"models": [backend]} if name == "pyes" else {"backend": backend})
        return det, (lambda: det.backends[0]) if name == "pyes" else (lambda: det.backend)

    def ask(text):
        return [GenerationRequest(key=text, item_id=text, messages=[{"role": "user", "content": text}])]

    test, val = tmp_path / "test" / "raw", tmp_path / "val" / "raw"
    test.mkdir(parents=True)
    val.mkdir(parents=True)
    cache = {"llm": "responses.cache.jsonl", "chain": "chain.cache.jsonl", "pyes": "pyes.model0.cache.jsonl"}
    with FakeServer({}, default_text="an answer") as server:
        det, backend = detector(server.url)
        det.workdir = test
        assert backend().generate(ask("a test item"))[0].texts == ["an answer"]
        det.workdir = val
        backend().generate(ask("a val item"))
        assert len(server.calls) == 2
        assert "a test item" not in (val / cache[name]).read_text()
        assert "a val item" not in (test / cache[name]).read_text()
        again, backend = detector(server.url)  # a re-run whose first split is val
        again.workdir = val
        assert backend().generate(ask("a val item"))[0].cached
        assert len(server.calls) == 2


def test_a_replay_at_another_max_tokens_than_recorded_says_so(tmp_path):
    """Replies cut at the recorded 200 were said to be cut "at max_tokens (1024): raise
    max_tokens", which no replay can change."""
    path = write_lines(
        tmp_path / "r.jsonl",
        [{"key": k, "texts": ["x"], "max_tokens": 200, "finish_reasons": ["length"]} for k in ("a", "b")],
    )
    backend = build_backend(BackendConfig(kind="replay", responses=str(path)))
    with pytest.warns(RuntimeWarning, match="max_tokens"):  # from Python too
        backend.generate([_req(k, "", 0.0) for k in ("a", "b")])  # max_tokens as the requests ask
    (said,) = [w for w in backend_warnings(backend) if "max_tokens" in w]
    assert "recorded with max_tokens 200; this run asks for 1024" in said and "-o max_tokens=200" in said
    again = build_backend(BackendConfig(kind="replay", responses=str(path)))
    again.generate([_req("a", "", 0.0).model_copy(update={"max_tokens": 200})])
    assert not [w for w in backend_warnings(again) if "max_tokens" in w]


def test_a_replay_of_replies_recorded_for_another_prompt_says_so(tmp_path):
    """A chain run replayed with another --contexts reused the verify replies made against the
    first source's contexts, without a word: a score for a prompt never asked."""
    asked = _req("a", "context A")
    recorded = [{"key": "a", "texts": ["x"], "messages": [m.model_dump() for m in asked.messages]}]
    path = write_lines(tmp_path / "r.jsonl", recorded)
    same = build_backend(BackendConfig(kind="replay", responses=str(path)))
    same.generate([asked])
    assert not [w for w in backend_warnings(same) if "prompt" in w]
    other = build_backend(BackendConfig(kind="replay", responses=str(path)))
    with pytest.warns(RuntimeWarning, match="another prompt"):
        assert other.generate([_req("a", "context B")])[0].texts == ["x"]  # still replayed
    (said,) = [w for w in backend_warnings(other) if "another prompt" in w]
    assert "'a'" in said and "--contexts" in said, said


def test_prompt_variants_of_one_item_are_each_replayed_their_own_recorded_reply(tmp_path):
    """A variants config replayed from one file of raw records gave every variant the first
    variant's reply (they share the item's id), with no warning: made-up differences."""
    first, second = _req("a", "zero-shot prompt"), _req("a", "few-shot prompt")
    recorded = [
        {"key": "a", "texts": [text], "messages": [m.model_dump() for m in req.messages]}
        for text, req in (("one", first), ("two", second))
    ]
    path = write_lines(tmp_path / "r.jsonl", recorded)
    for req, text in ((second, "two"), (first, "one")):  # each its own, in any order
        backend = build_backend(BackendConfig(kind="replay", responses=str(path)))
        assert backend.generate([req])[0].texts == [text]
        assert not [w for w in backend_warnings(backend) if "prompt" in w]
    both = build_backend(BackendConfig(kind="replay", responses=str(path)))
    assert [g.texts for g in both.generate([first, second])] == [["one"], ["two"]]
    # a prompt none of the lines recorded is still replayed, with the warning
    other = build_backend(BackendConfig(kind="replay", responses=str(path)))
    with pytest.warns(RuntimeWarning, match="another prompt"):
        assert other.generate([_req("a", "a third prompt")])[0].texts == ["one"]


def test_a_shared_cache_keys_on_the_backend_settings_that_change_answers(tmp_path):
    """Prompt variants share one cache: a variant that turned structured output off, or set a
    sampling extra, was answered with the first variant's replies."""
    path = tmp_path / "c.jsonl"
    req = _req("a", "same")
    with FakeServer({}) as server:
        CachedBackend(_openai(server.url), ResponseCache(path)).generate([req])
        assert len(server.calls) == 1
        for settings in ({"structured_output": "none"}, {"extra": {"top_k": 1}}):
            out = CachedBackend(_openai(server.url, **settings), ResponseCache(path)).generate([req])
            assert not out[0].cached, settings
        assert len(server.calls) == 3
        # how a request travels changes no answer: the entry is shared
        out = CachedBackend(_openai(server.url, concurrency=3, timeout_s=5), ResponseCache(path)).generate(
            [req]
        )
        assert out[0].cached and len(server.calls) == 3
    # at the default settings the key is the one older caches hold: their entries still answer
    from mushroom.backends.config import answer_settings, parse_backend_config

    for kind in ("openai", "transformers", "vllm"):
        assert answer_settings(parse_backend_config({"kind": kind, "model": "m"})) == {}, kind
    # where and in how much memory an engine runs, and a dtype's other name, change no answer
    loads = {"kind": "vllm", "model": "m", "extra": {"gpu_memory_utilization": 0.85, "enforce_eager": True}}
    assert answer_settings(parse_backend_config(loads)) == {}
    # vLLM cuts a reply where prompt and reply reach max_model_len: raising it must ask again
    longer = {"kind": "vllm", "model": "m", "extra": {"max_model_len": 8192}}
    assert answer_settings(parse_backend_config(longer)) == {"extra": {"max_model_len": 8192}}
    half = answer_settings(parse_backend_config({"kind": "transformers", "model": "m", "dtype": "half"}))
    assert half == answer_settings(
        parse_backend_config({"kind": "transformers", "model": "m", "dtype": "float16"})
    )


def test_a_raw_log_opened_after_a_kill_drops_the_cut_line_and_stays_replayable(tmp_path):
    """The next record was glued to a line a kill cut: the file no longer replayed, and the
    cascade's count of the calls a run made stopped on it."""
    from mushroom.backends.rawlog import RawLog, RawRecord
    from mushroom.combine.cascade import spend_by_item

    path = tmp_path / "en.raw.jsonl"
    RawLog(path).write(RawRecord(id="a", key="a", texts=["x"]))
    with path.open("a") as cut:
        cut.write('{"id": "b", "key": "b", "te')
    RawLog(path).write(RawRecord(id="c", key="c", texts=["y"]))
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == ["a", "c"]
    assert set(spend_by_item([path])) == {"a", "c"}
    replayed = build_backend(BackendConfig(kind="replay", responses=str(path))).generate([_req("c", "")])
    assert replayed[0].texts == ["y"]


def test_tokens_that_read_the_same_add_their_probabilities():
    """vLLM on an H100: two byte pieces both decoded to '' and one replaced the other's logprob."""
    import math

    from mushroom.backends.base import by_text
    from mushroom.backends.openai_compat import OpenAIBackend
    from mushroom.detectors.pyes import p_yes

    step = by_text([("", -1.0), ("x", -2.0), ("", -1.5), ("y", -math.inf), ("y", -3.0)])
    assert step[""] == pytest.approx(math.log(math.exp(-1.0) + math.exp(-1.5)))
    assert step["x"] == -2.0 and step["y"] == -3.0
    assert by_text([("z", -math.inf), ("z", -math.inf)]) == {"z": -math.inf}
    # a server listing " Yes" twice (a word token and the same word spelt another way)
    tops = [{"token": " Yes", "logprob": math.log(0.3)}, {"token": "No", "logprob": math.log(0.4)}]
    tops.append({"token": " Yes", "logprob": math.log(0.3)})
    first = {"token": "No", "logprob": math.log(0.4), "top_logprobs": tops}
    gen = OpenAIBackend.parse({"choices": [{"message": {"content": "No"}, "logprobs": {"content": [first]}}]})
    assert gen.logprobs[0][0][" Yes"] == pytest.approx(math.log(0.6))
    assert p_yes(gen, ["yes"], ["no"]) == pytest.approx(0.6)  # not 0.3 / 0.7


def test_no_retry_is_made_past_the_retry_budget():
    """A busy server's Retry-After of 60 s was waited at 60 s into a 90 s budget, and the third
    attempt went out at 120 s, though a request's retries are said to end within the budget."""
    from mushroom.backends.base import GenerationRequest, Message

    with FakeServer({"": [("status", 429)]}, retry_after="1") as server:
        backend = _openai(server.url, max_retries=5, retry_budget_s=1.5)
        req = GenerationRequest(key="a", messages=[Message(role="user", content="a")], max_tokens=8)
        (gen,) = backend.generate([req])
    # at 0 s (the next at 1 s, within 1.5) and at 1 s (the next would be at 2 s): two attempts
    assert len(server.calls) == 2, len(server.calls)
    assert "gave up after 2 attempts (retries end within retry_budget_s 1.5 s)" in (gen.error or ""), (
        gen.error
    )


def test_a_cache_cut_during_its_first_write_is_still_a_cache(tmp_path):
    """Its one line cut by a kill, the folder's cache was refused for good as "not a response
    cache", though the cache mends such a line when it opens (a review)."""
    from mushroom.backends.cache import ResponseCache, cache_file_problem

    path = tmp_path / "responses.cache.jsonl"
    path.write_text('{"key": "abc", "generation": {"texts": ["{\\"incorr')
    assert cache_file_problem(path) is None
    assert ResponseCache(path).cut_line and cache_file_problem(path) is None
    other = tmp_path / "notes.jsonl"
    other.write_text('{"id": "x", "text": "mine')
    assert "is not a response cache" in cache_file_problem(other)


def test_a_cached_backend_built_from_a_factory_without_its_config_says_so(tmp_path):
    """A typing audit: it failed with "'NoneType' object has no attribute 'kind'"."""
    from mushroom.backends.cache import CachedBackend, ResponseCache

    with pytest.raises(TypeError, match="factory needs the backend's config"):
        CachedBackend(lambda: None, ResponseCache(tmp_path / "c.jsonl"))
