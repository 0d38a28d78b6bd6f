"""A failing server costs seconds: the circuit breaker, through the CLI, against loopback servers.

Each server misbehaves the way real ones do: vLLM out of memory or a proxy with a dead
upstream (HTTP 500 to everything), a server that dies mid-run, one that fails about half of
its requests, one that is busy (429 with Retry-After). Retries are cut to one per request
(`-o backend.max_retries=1`) so that the tests run in seconds; the breaker counts requests,
not attempts, so its thresholds are the shipped ones.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter

import pytest
from cli_helpers import cli, llm_args, openai_backend
from fake_openai_server import FakeServer, HungServer

import mushroom.errors as mushroom_errors
from mushroom.backends.breaker import BREAKER_COLD, BREAKER_WARM

OK = '{"incorrect_spans": []}'
OOM = '{"error": {"message": "CUDA out of memory. Tried to allocate 2.00 GiB"}}'


def _detect(capsys, server, out, limit=12, *options):
    # one retry a request: the breaker counts requests, not attempts
    flags = [arg for option in ("backend.max_retries=1", *options) for arg in ("-o", option)]
    return cli(capsys, *llm_args(openai_backend(server.url), out, limit), *flags)


def _failures(out):
    return [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]


def test_a_server_failing_every_request_is_left_after_three_and_a_rerun_sends_them_all(tmp_path, capsys):
    out = tmp_path / "run"
    with FakeServer({"": [("status", 500, OOM)]}) as server:
        code, shown, err = _detect(capsys, server, out)
        sent = len(server.calls)
    assert code == 3, err
    assert sent == BREAKER_COLD * 2  # three requests, each tried twice; eleven items never sent
    failures = _failures(out)
    assert len(failures) == 12
    unsent = [f for f in failures if f["error"].startswith("not sent")]
    assert len(unsent) == 12 - BREAKER_COLD
    reason = unsent[0]["error"]
    assert server.url in reason and "failed the last 3 requests" in reason and "HTTP 500" in reason
    assert "CUDA out of memory" in reason and "the same command retries it" in reason
    # the counters count the requests sent, not those the breaker kept back
    counters = json.loads((out / "summary.json").read_text())["stats"]
    assert (counters["llm.requests"], counters["llm.not_sent"]) == (BREAKER_COLD, 12 - BREAKER_COLD), counters
    # the reason is said once, grouped, not once per item
    said = shown + err
    assert said.count("CUDA out of memory") <= 3, said
    # the server is back (on another port: a transport setting, so the folder resumes): the same
    # command sends every failed item again, and the run ends well
    with FakeServer({}, default_text=OK) as back:
        code, _, err = _detect(capsys, back, out)
        resent = len(back.calls)
    assert code == 0, err
    assert resent == 12


@pytest.mark.parametrize("detector, stage", [("chain", "decompose"), ("pyes", "pyes")])
def test_requests_a_tripped_breaker_kept_back_are_not_counted_as_sent(tmp_path, capsys, detector, stage):
    out = tmp_path / "run"
    with FakeServer({"": [("status", 500, OOM)]}) as server:
        if detector == "pyes":
            model = {"kind": "openai", "base_url": server.url, "model": "m", "max_retries": 1}
            backend = ["-o", f"models=[{json.dumps(model)}]", "-o", "scoring=top_logprobs"]  # chat requests
        else:
            backend = [*openai_backend(server.url), "-o", "backend.max_retries=1"]
        args = ["detect", "--lang", "en", "--limit", "12", "--detector", detector, "--out", out]
        code, _, err = cli(capsys, *args, *backend)
        sent = len(server.calls)
        # each request is tried twice: half the characters the server received
        prompt_chars = sum(len(m["content"]) for c in server.calls for m in c["body"]["messages"]) // 2
    assert code == 3, err
    counters = json.loads((out / "summary.json").read_text())["stats"]
    assert counters[f"{stage}.requests"] == sent // 2 == BREAKER_COLD, (sent, counters)
    assert counters[f"{stage}.not_sent"] > 0 and counters[f"{stage}.backend_errors"] == BREAKER_COLD, counters
    # an item none of whose requests left says so: pyes gave every item the first one's reason
    if detector == "chain":  # the prompts of requests never sent cost nothing either
        assert counters["chain.prompt_chars"] == prompt_chars, counters
    unsent = [f for f in _failures(out) if f["error"].startswith("not sent")]
    assert len(unsent) >= 12 - BREAKER_COLD, _failures(out)  # 3 requests reach at most 3 items


def test_pyes_counts_each_model_s_requests_apart(tmp_path, capsys):
    """Only a piece's first error was counted: a model's failed request behind another's unsent
    one was neither a request nor an error."""
    out = tmp_path / "run"
    with FakeServer({"": [("status", 500, OOM)]}) as one, FakeServer({"": [("status", 500, OOM)]}) as two:
        models = [{"kind": "openai", "base_url": s.url, "model": "m", "max_retries": 1} for s in (one, two)]
        code, _, err = cli(
            capsys, "detect", "--lang", "en", "--limit", "12", "--detector", "pyes", "--out", out,
            "-o", f"models={json.dumps(models)}", "-o", "scoring=top_logprobs",
        )  # fmt: skip
    assert code == 3, err
    counters = json.loads((out / "summary.json").read_text())["stats"]
    sent = 2 * BREAKER_COLD  # each model's breaker trips after its own three
    assert (counters["pyes.requests"], counters["pyes.backend_errors"]) == (sent, sent), counters
    assert counters["pyes.requests"] + counters["pyes.not_sent"] == 2 * counters["pyes.pieces"], counters


def test_a_server_that_dies_mid_run_stops_the_run_after_ten_failures_in_a_row(tmp_path, capsys):
    out = tmp_path / "run"
    script = {"": [("ok", OK)] * 5 + [("status", 502, "Bad Gateway")]}
    with FakeServer(script) as server:
        code, _, err = _detect(capsys, server, out, 30)
        sent = len(server.calls)
    assert code == 3, err
    assert sent == 5 + BREAKER_WARM * 2
    failures = _failures(out)
    assert len(failures) == 30 - 5
    assert sum(f["error"].startswith("not sent") for f in failures) == 30 - 5 - BREAKER_WARM
    assert "failed the last 10 requests; the last: gave up" in next(
        f["error"] for f in failures if f["error"].startswith("not")
    )


def test_a_flaky_server_never_trips_it_and_every_item_gets_done(tmp_path, capsys):
    rng = random.Random(3)
    steps = [("status", 500, OOM) if rng.random() < 0.5 else ("ok", OK) for _ in range(400)]
    out = tmp_path / "run"
    codes = []
    with FakeServer({"": steps}) as server:
        for _ in range(3):
            code, _, err = _detect(capsys, server, out, 30)
            codes.append(code)
            if code == 0:
                break
            assert not any(f["error"].startswith("not sent") for f in _failures(out)), _failures(out)
    assert codes[-1] == 0, (codes, err)
    ledger = [
        json.loads(line) for line in (out / "predictions" / "items" / "en.jsonl").read_text().splitlines()
    ]
    last = {r["id"]: r["status"] for r in ledger}
    assert len(last) == 30 and set(last.values()) == {"ok"}


def test_a_busy_server_is_waited_for_and_never_trips_it(tmp_path, capsys):
    out = tmp_path / "run"
    # 429 with Retry-After: 0 on every other attempt; each request needs its one retry
    script = {"": [("status", 429, '{"error": "busy"}'), ("ok", OK)] * 20}
    with FakeServer(script) as server:
        code, _, err = _detect(capsys, server, out, 8)
    assert code == 0, err
    assert not (out / "failures.jsonl").exists() or not (out / "failures.jsonl").read_text().strip()
    # the retries that saved every request are said and kept: a flaky server passed unseen
    note = "8 failed attempts sent again (HTTP 429 x8); 8 requests answered that way"
    assert note in " ".join(err.split()), err
    summary = json.loads((out / "summary.json").read_text())
    assert any(note in w for w in summary["warnings"]), summary["warnings"]
    assert [st["retries"] for st in summary["stages"].values() if "retries" in st] == [
        {"HTTP 429": 8, "answered after a retry": 8}
    ], summary["stages"]
    # a re-run takes every answer from the cache: no retries, none said
    code, _, err = _detect(capsys, server, out, 8)
    assert code == 0 and "sent again" not in err, err


def test_prompts_too_long_for_the_server_do_not_trip_it_and_the_advice_says_a_rerun_will_not_help(
    tmp_path, capsys
):
    """llama.cpp answers HTTP 400 to a prompt past its context: one request's fault. Three such
    items first tripped the breaker, the items that fit were not sent, and the advice to run
    again gave the same result every time."""
    too_long = (
        '{"error": {"code": 400, "message": "the request exceeds the available context size, '
        'maximum context length is 1536 tokens", "type": "invalid_request_error"}}'
    )
    out = tmp_path / "run"
    script = {"": [("status", 400, too_long)] * 4 + [("ok", OK)] * 20}
    with FakeServer(script) as server:
        code, shown, err = _detect(capsys, server, out, 8)
        sent = len(server.calls)
    assert code == 3, err
    assert sent == 8  # each sent once: a 400 is final, and no item goes unsent
    failures = _failures(out)
    assert len(failures) == 4 and not any(f["error"].startswith("not sent") for f in failures)
    assert all("longer than the server's context" in f["error"] for f in failures)
    said = " ".join((shown + err).split())
    assert "a re-run as it is fails them again" in said and "--n_ctx" in said, said
    assert "to retry only them" not in said


QUOTA = (
    '{"error": {"message": "You exceeded your current quota, please check your plan and billing details.", '
    '"type": "insufficient_quota", "code": "insufficient_quota"}}'
)


def test_an_account_out_of_quota_is_not_waited_for_and_stops_the_run(tmp_path, capsys):
    """OpenAI answers 429 insufficient_quota: no wait cures it. Taken as "busy", every item
    spent its retries on it (~8 s each) and the run never stopped."""
    out = tmp_path / "run"
    with FakeServer({"": [("status", 429, QUOTA)]}) as server:
        code, shown, err = _detect(capsys, server, out)
        sent = len(server.calls)
    assert code == 3, err
    assert sent == BREAKER_COLD  # each sent once, not retried; the rest not sent
    failures = _failures(out)
    unsent = [f["error"] for f in failures if f["error"].startswith("not sent")]
    assert len(failures) == 12 and len(unsent) == 12 - BREAKER_COLD
    assert "HTTP 429" in unsent[0] and "exceeded your current quota" in unsent[0]


def test_a_server_too_slow_for_the_timeout_stops_at_its_first_timeout_and_says_to_raise_it(tmp_path, capsys):
    """Each timeout costs timeout_s (600 s): three before the breaker tripped were half an hour."""
    out = tmp_path / "run"
    with FakeServer({"": [("sleep", 2.0)]}) as server:
        code, shown, err = _detect(capsys, server, out, 6, "backend.timeout_s=0.5")
        sent = len(server.calls)
    assert code == 3, err
    assert sent == 1
    errors = [f["error"] for f in _failures(out)]
    timed_out = [e for e in errors if e.startswith("timeout after 0.5 s")]
    assert len(timed_out) == 1 and "higher -o backend.timeout_s); not resent" in timed_out[0]
    unsent = [e for e in errors if e.startswith("not sent")]
    assert len(unsent) == 5 and "answered no request within 0.5 s; a slower model needs a higher" in unsent[0]
    # the advice is on screen, not cut off in the failure table, and in the advice to re-run
    assert shown.count("backend.timeout_s") == 2  # in both rows of the table, however it wraps
    assert (
        "for 6 of them the server answered too slowly or not at all: raise -o backend.timeout_s"
        in " ".join(err.split())
    )


def test_a_server_that_answers_nothing_stops_the_command_before_a_run_folder(tmp_path, capsys):
    """Its five setup requests each waited connect_timeout_s, then the first item its timeout_s."""
    out = tmp_path / "run"
    with HungServer() as server:
        code, _, err = _detect(
            capsys, server, out, 6, "backend.timeout_s=30", "backend.connect_timeout_s=0.5"
        )
    said = " ".join(err.split())
    assert code == 2 and not out.exists(), err
    assert "took the connection but answered no GET /models within 0.5 s: it is hung" in said
    assert "or busy with another client's requests" in said  # a busy llama.cpp server is no hung one
    assert "a run you just stopped leaves its requests running there" in said  # a kill, then a re-run


def test_a_server_that_hangs_mid_run_is_called_hung_after_one_timeout(tmp_path, capsys):
    """Its chat requests and its status check get no answer; its model list still does."""
    out = tmp_path / "run"
    with FakeServer({"": [("sleep", 5.0)]}, health_delay=5.0) as server:
        code, shown, err = _detect(
            capsys,
            server,
            out,
            6,
            "backend.timeout_s=1",
            "backend.connect_timeout_s=0.5",
            "backend.concurrency=1",
        )
        sent = len(server.calls)
    assert code == 3, err
    assert sent == 1
    errors = [f["error"] for f in _failures(out)]
    assert sum("the server is hung" in e for e in errors) == 1, errors
    unsent = [e for e in errors if e.startswith("not sent")]
    assert len(unsent) == 5 and "no status check (GET /health) within 0.5 s: it is hung" in unsent[0]
    assert "hung" in " ".join((shown + err).split())  # said in the failure table


def test_ctrl_c_cuts_the_requests_in_flight_and_records_none_of_them():
    """Ctrl-C waited, with nothing said, for each request in flight to end (up to timeout_s),
    then recorded their items as failed while the run said what was saved."""
    import signal

    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig, GenerationRequest, Message

    requests = [
        GenerationRequest(key=str(k), messages=[Message(role="user", content=f"item {k}")]) for k in range(4)
    ]
    seen = []
    # its model list answers; its chat requests take a minute
    with FakeServer({"": [("sleep", 60.0)]}) as server:
        backend = build_backend(
            BackendConfig(
                kind="openai",
                model="m",
                base_url=server.url,
                timeout_s=120.0,
                connect_timeout_s=5.0,
                concurrency=2,
            )
        )
        # a real SIGINT at the main thread, as Ctrl-C sends (interrupt_main wakes no blocked wait)
        main = threading.main_thread().ident
        timer = threading.Timer(1.5, signal.pthread_kill, (main, signal.SIGINT))
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                backend.generate(requests, on_result=lambda i, gen: seen.append(gen))
        finally:
            timer.cancel()
        workers = [t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor")]
        for worker in workers:
            worker.join(20)  # the requests' own timeout is 120 s
        assert not any(w.is_alive() for w in workers)
        assert seen == []  # nothing recorded: the items are redone on resume
        assert len(server.calls) == 2  # the two in flight; the others were never sent
    # the same backend (the Python API keeps it) sends the next batch as before
    with FakeServer({}) as good:
        backend.client.base_url = good.url
        assert [g.texts for g in backend.generate(requests[:2])] == [[OK], [OK]]
    backend.close()


RATE_LIMIT = (
    '{"error": {"message": "Rate limit reached for gpt-4o on requests per min (RPM): Limit 3, Used 3. '
    'Visit https://platform.openai.com/account/billing to add a payment method.", "type": "requests", '
    '"code": "rate_limit_exceeded"}}'
)


def test_a_passing_rate_limit_that_mentions_billing_is_waited_for_not_taken_as_out_of_quota():
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig, GenerationRequest, Message

    with FakeServer({"A": [("status", 429, RATE_LIMIT), ("ok", OK)]}) as server:
        backend = build_backend(BackendConfig(kind="openai", model="m", base_url=server.url, max_retries=2))
        out = backend.generate([GenerationRequest(key="a", messages=[Message(role="user", content="A")])])
        backend.close()
    assert out[0].texts == [OK] and server.counts["A"] == 2


def test_a_tripped_breaker_cuts_the_requests_in_flight_and_wakes_those_waiting_to_retry():
    """Cut requests were sent, so they are not "not sent"; one waiting out a Retry-After kept
    the batch running until its wait was over."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig, GenerationRequest, Message

    script = {
        "slow": [("sleep", 30.0)],  # in flight when the breaker trips
        "busy": [("status", 429, '{"error": "busy"}'), ("ok", OK)],  # then waits 60 s to retry
        "bad": [("status", 400, '{"error": "no"}')],  # three of them trip it
    }
    keys = ["slow", "busy", "bad", "bad", "bad"]
    requests = [
        GenerationRequest(key=str(k), messages=[Message(role="user", content=key)])
        for k, key in enumerate(keys)
    ]
    out = []
    with FakeServer(script, retry_after="60") as server:
        backend = build_backend(
            BackendConfig(kind="openai", model="m", base_url=server.url, concurrency=5, max_retries=3)
        )
        worker = threading.Thread(target=lambda: out.extend(backend.generate(requests)))
        worker.start()
        worker.join(25)  # the slow request would take 30 s, the retry 60 s
        assert not worker.is_alive()
        backend.close()
    slow, busy = out[0].error, out[1].error
    assert slow.startswith("cut in flight: the server at") and "failed the last 3 requests" in slow, slow
    assert busy.startswith("stopped after 1 attempt: the server at"), busy
    assert server.counts["busy"] == 1
    assert all(g.error.startswith("HTTP 400") for g in out[2:])


def test_a_socket_opened_while_requests_are_being_cut_is_cut_too():
    """A request still connecting when Ctrl-C came kept its socket, and waited out its timeout."""
    import socket

    from mushroom.backends.sockets import OpenSockets

    kept = OpenSockets()
    early, early_peer = socket.socketpair()
    kept.add(early)
    assert kept.abort() == 1 and early.recv(1) == b""  # shut down: the read ends at once
    late, late_peer = socket.socketpair()
    kept.add(late)  # connected after the cut began
    assert late.recv(1) == b""
    kept.resume()
    fresh, fresh_peer = socket.socketpair()
    kept.add(fresh)
    fresh_peer.sendall(b"x")
    assert fresh.recv(1) == b"x"  # left open once the batch is over
    for s in (early, early_peer, late, late_peer, fresh, fresh_peer):
        s.close()


def test_requests_go_through_the_proxy_of_the_environment(monkeypatch):
    """Cutting requests in flight needs the client's pools; building it with its own transport
    turned off HTTP(S)_PROXY."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig, GenerationRequest, Message

    with FakeServer({}) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url.removesuffix("/v1"))
        for name in ("NO_PROXY", "no_proxy", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        backend = build_backend(
            BackendConfig(kind="openai", model="m", base_url="http://model.invalid/v1", concurrency=1)
        )
        backend.generate([GenerationRequest(key="a", messages=[Message(role="user", content="A")])])
        backend.close()
    # a proxy is asked for the absolute URL
    assert [c["path"] for c in proxy.calls] == ["http://model.invalid/v1/chat/completions"]


def test_once_the_breaker_tripped_scoring_asks_the_server_nothing_more():
    """Each item's chat-template request waited connect_timeout_s on a hung server."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig, LoglikelihoodRequest, Message

    with HungServer() as server:
        backend = build_backend(
            BackendConfig(kind="openai", model="m", base_url=server.url, concurrency=2, connect_timeout_s=5.0)
        )
        backend.breaker.trip("the server at it is hung")
        backend._model_checked = True  # the GET /models a first batch makes would be answered by nothing
        requests = [
            LoglikelihoodRequest(
                key=str(k), messages=[Message(role="user", content="q")], continuation=" Yes"
            )
            for k in range(4)
        ]
        scores = backend.loglikelihood(requests)
        backend.close()
        asked = server.accepted
    assert [s.error for s in scores] == [
        "not sent: the server at it is hung; the same command retries it"
    ] * 4
    assert asked == 0


def test_an_out_of_quota_answer_to_a_scoring_request_counts_for_the_breaker_too():
    """Only the chat path marked it: a P(Yes) run against an empty account was never stopped."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig
    from mushroom.backends.http_answers import http_error

    def judged(body: str) -> str | None:
        backend = build_backend(BackendConfig(kind="openai", model="m", base_url="http://127.0.0.1:9/v1"))
        for _ in range(BREAKER_COLD):
            backend._judged(f"the server cannot score prompts ({http_error(429, body)})")
        backend.close()
        return backend.breaker.blocked()

    assert "exceeded your current quota" in judged(QUOTA)
    assert judged(RATE_LIMIT) is None  # a passing rate limit is waited for, never counted


def test_a_hung_server_stops_contexts_with_advice_in_its_own_option_form(tmp_path, capsys):
    """`contexts` advised `-o backend.connect_timeout_s`, which it refuses: its -o sets the backend."""
    with HungServer() as server:
        args = ["contexts", "--split", "val", "--lang", "en", "--limit", "1", "--backend", "openai", "--model", "m", "--base-url", server.url, "-o", "connect_timeout_s=0.5", "--context-dir", tmp_path / "ctx"]  # fmt: skip
        code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert code == 2 and "raise -o connect_timeout_s" in said and "backend.connect" not in said, err


def test_the_advice_for_cut_off_replies_names_the_options_as_the_command_takes_them(tmp_path):
    """chain's cut-off items were told a re-run retries them (it reads the same replies), and the
    main job's advice named `-o max_tokens=N`, which it refuses for a member."""
    from mushroom.detectors.chain import _unread
    from mushroom.errors import retry_advice
    from mushroom.runs.service import Failure, RunService

    chain_error = _unread(Counter({"decompose.cut_empty": 1}), "decompose", 1024)
    assert "run in a new folder" in retry_advice([chain_error])
    # a replay's cut-off reply among other failures: to be recorded again, not "raise it"
    replayed = _unread(Counter({"decompose.cut_empty": 1}), "decompose", 1024, replayed=True)
    mixed = retry_advice([replayed, "the model's reply could not be read as spans (it begins 'x')"])
    assert "(raise it)" not in mixed and "record it again with a live backend" in mixed, mixed
    service = RunService(tmp_path / "run", {"job": "main", "members": ["llm"]}, quiet=True)
    service.failures = [Failure("test", "en", "tst-en-1", chain_error, "llm")]
    assert "-o llm.max_tokens=N" in service._retry_advice()
    service.failures.append(Failure("test", "en", "tst-en-2", chain_error, "chain"))
    assert (
        "-o MEMBER.max_tokens=N" in service._retry_advice()
        and "(MEMBER: chain, llm)" in service._retry_advice()
    )
    service.release()


def test_a_prompt_too_long_to_score_is_named_so_and_does_not_trip_the_breaker():
    """pyes scores by /completions: a too-long prompt said "the server cannot score prompts"
    (pointing at the server) and counted as a server failure, so three long pieces tripped the
    breaker and every other item went unsent."""
    import httpx

    from mushroom.backends.base import LoglikelihoodRequest, Message
    from mushroom.backends.config import OpenAIConfig
    from mushroom.backends.openai_compat import OpenAIBackend

    too_long = '{"object": "error", "message": "This model\'s maximum context length is 4096 tokens."}'
    with FakeServer({}) as server:
        config = OpenAIConfig(base_url=server.url, model="m", concurrency=1, loglikelihood_template="plain")
        backend = OpenAIBackend(config)
        real = backend.post
        backend.post = lambda path, body: (
            httpx.Response(400, text=too_long) if "LONG" in body.get("prompt", "") else real(path, body)
        )
        reqs = [
            LoglikelihoodRequest(
                key=f"k{i}", messages=[Message(role="user", content=text)], continuation="Yes"
            )
            for i, text in enumerate(["LONG"] * 4 + ["short"])
        ]
        scores = backend.loglikelihood(reqs)
        backend.close()
    assert all("longer than the server's context" in s.error for s in scores[:4]), [s.error for s in scores]
    assert scores[4].error is None and scores[4].logprob is not None


def test_a_server_without_the_endpoint_is_asked_whether_it_is_openai_compatible(tmp_path, capsys):
    """A URL of some other web server failed every item with 'HTTP 501: <!DOCTYPE HTML> ...'."""
    page = "<!DOCTYPE HTML>\n<html lang='en'>\n<head><title>Error response</title></head></html>"
    out = tmp_path / "run"
    with FakeServer({"": [("status", 501, page)]}) as server:
        code, shown, err = _detect(capsys, server, out, 2)
    assert code == 3, err
    errors = [f["error"] for f in _failures(out)]
    assert errors[0].startswith(
        "HTTP 501 (this server has no such endpoint: is the URL an OpenAI-compatible server's, ending in /v1?): "
        "<!DOCTYPE HTML> <html lang='en'> <head>"
    ), errors


def _schema_free(key):
    from mushroom.backends.base import GenerationRequest, Message

    return GenerationRequest(key=key, messages=[Message(role="user", content=f"item {key}")])


def test_a_second_backend_to_a_server_that_failed_in_this_command_pays_one_attempt_not_the_trip():
    """A variants config built a backend per variant, and each paid ~20 s of retries to trip."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig
    from mushroom.backends.trips import remembering_trips

    def backend(url):
        return build_backend(
            BackendConfig(kind="openai", model="m", base_url=url, max_retries=3, timeout_s=5.0)
        )

    with (
        FakeServer({"": [("status", 500, OOM)]}, retry_after=None, models=("m", "n")) as server,
        remembering_trips(),
    ):
        first = backend(server.url).generate([_schema_free(str(i)) for i in range(6)])
        assert len(server.calls) == BREAKER_COLD * 4 and all(g.error for g in first)
        before = len(server.calls)
        second = backend(server.url).generate([_schema_free(str(i)) for i in range(6)])
        assert len(server.calls) == before + 2  # one attempt of two requests, then not sent
        assert (
            "failed 2 requests again, as it did earlier in this command" in second[-1].error
            and "CUDA out of memory" in second[-1].error
        )
        other_model = build_backend(
            BackendConfig(kind="openai", model="n", base_url=server.url, max_retries=1)
        )
        before = len(server.calls)
        other_model.generate([_schema_free("x")])
        assert len(server.calls) == before + 2  # another model on the server: its own retries
        server.script = {}  # the server is back: the one attempt works, and the memory is dropped
        third = backend(server.url).generate([_schema_free(str(i)) for i in range(3)])
        assert [g.error for g in third] == [None] * 3
        before = len(server.calls)
        server.script = {"": [("status", 500, OOM)]}
        server.counts.clear()
        backend(server.url).generate([_schema_free("y")])
        assert len(server.calls) == before + 4  # afresh: a request's own retries again


def test_outside_a_command_every_backend_starts_afresh():
    """A Python caller who restarts a server and calls again expects a plain try."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig

    with FakeServer({"": [("status", 500, OOM)]}, retry_after=None) as server:
        for _ in range(2):
            before = len(server.calls)
            b = build_backend(BackendConfig(kind="openai", model="m", base_url=server.url, max_retries=1))
            b.generate([_schema_free(str(i)) for i in range(4)])
            assert len(server.calls) - before == BREAKER_COLD * 2


def test_the_variants_of_a_run_config_pay_one_breaker_trip_between_them(tmp_path, capsys):
    config = tmp_path / "variants.toml"
    with FakeServer({"": [("status", 500, OOM)]}, retry_after=None) as server:
        config.write_text(
            'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 5\n\n[detector]\nname = "llm"\n\n'
            "[detector.options]\ntemperatures = [0.1]\n\n[detector.options.backend]\n"
            f'kind = "openai"\nbase_url = "{server.url}"\nmodel = "m"\nmax_retries = 1\n\n'
            '[[variants]]\nname = "a"\noptions = { prompt = "single_zero_shot" }\n\n'
            '[[variants]]\nname = "b"\noptions = { prompt = "single_few_shot" }\n'
        )
        code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run")
        assert code == 3, err
        assert len(server.calls) == BREAKER_COLD * 2 + 2, err  # variant a trips it, variant b sends two
    failures = _failures(tmp_path / "run")
    assert sum("again, as it did earlier in this command" in f["error"] for f in failures) == 3


def test_a_backend_on_probation_is_not_stopped_by_a_refusal_of_n_or_one_requests_own_fault():
    """llama.cpp refuses n > 1 and is asked again with n = 1; on probation that refusal, counted
    as a failure, stopped a backend to a healthy server before its first real request."""
    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig, GenerationRequest, Message
    from mushroom.backends.trips import remember_trip, remembering_trips

    def req(key, n=1):
        return GenerationRequest(key=key, messages=[Message(role="user", content=f"item {key}")], n=n)

    with FakeServer({"bad": [("status", 400, '{"error": "filtered"}')]}, refuse_n=True) as server:
        with remembering_trips():
            remember_trip(server.url, "m", "earlier")
            b = build_backend(BackendConfig(kind="openai", model="m", base_url=server.url, max_retries=1))
            out = b.generate([req("bad"), req("a", n=3), req("b")])
        assert out[0].error and [len(g.texts) for g in out[1:]] == [3, 1], [g.error for g in out]
    # of a request with n = 1 the same words are the server's fault: every one refused trips it
    refusal = '{"error": "Unsupported parameter: \'n\' is not supported with this model."}'
    with FakeServer({"": [("status", 400, refusal)]}) as server:
        b = build_backend(BackendConfig(kind="openai", model="m", base_url=server.url, max_retries=1))
        b.generate([req(str(k)) for k in range(20)])
        assert len(server.calls) == BREAKER_COLD


def test_the_failure_table_says_how_many_it_left_out_and_names_a_members_options(tmp_path):
    """Ten rows were shown and the rest cut unsaid (errors quoting each reply are a group each);
    the main job's rows named `-o backend.timeout_s`, which it refuses for a member."""
    from mushroom.runs.reporter import PlainReporter
    from mushroom.runs.service import Failure, RunService

    tables = []
    reporter = PlainReporter()
    reporter.table = tables.append
    service = RunService(tmp_path / "run", {"job": "main", "members": ["llm"]}, quiet=True, reporter=reporter)
    service.failures = [
        Failure("test", "en", "tst-en-99", "a slower model needs a higher -o backend.timeout_s", "llm")
    ]
    service.failures += [
        Failure("test", "en", f"tst-en-{k}", f"the model's reply could not be read (it begins 'x{k}')", "llm")
        for k in range(13)
    ]
    with pytest.raises(mushroom_errors.RunFailed) as err:
        service.finish({})
    (table,) = tables
    assert sum(row[0] for row in table.rows) == 14 and len(table.rows) == 11
    assert table.rows[-1][1].startswith("... 4 other errors, each in ")
    shown = " ".join(str(row[1]) for row in table.rows)
    assert "-o llm.backend.timeout_s" in shown and "-o backend." not in shown
    assert "those items are left empty" in str(err.value)


def test_a_url_found_dead_earlier_in_the_command_gets_one_attempt_from_the_next_backend():
    """Each variant spent a request's retries on a URL nothing listens at: 32 s for four, 12 now."""
    import socket

    from mushroom.backends import build_backend
    from mushroom.backends.base import BackendConfig
    from mushroom.backends.trips import remembering_trips

    with socket.socket() as sock:  # a port nothing listens at once closed
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"

    def backend():
        config = BackendConfig(kind="openai", model="m", base_url=url, max_retries=2, timeout_s=5.0)
        return build_backend(config)

    with remembering_trips():
        first = backend()
        assert all(g.error for g in first.generate([_schema_free("a")]))
        assert first.retries_made == 2
        second = backend()
        out = second.generate([_schema_free("b"), _schema_free("c")])
        assert all(g.error for g in out) and second.retries_made == 0


def test_a_server_that_refuses_every_request_is_not_told_to_retry_them(tmp_path, capsys):
    """Every request answered 400 ended in "Run the same command again to retry only them":
    the same request is refused again (an audit of `contexts`)."""
    from cli_helpers import cli

    from mushroom.errors import retry_advice

    refused = [("status", 400, '{"error": "unknown model"}')] * 10
    with FakeServer({"Write what is reliably known": refused}, "x") as refusing:
        code, _, err = cli(
            capsys, "contexts", "--lang", "en", "--limit", "2", "--backend", "openai", "--base-url",
            refusing.url, "--model", "m", "--context-dir", tmp_path,
        )  # fmt: skip
    said = " ".join(err.split())
    assert code == 3 and "a re-run as it is fails them again" in said and "retry only them" not in said, err
    # a 429 or 408 is the server's "not now": retried
    assert "retry only them" in retry_advice(["HTTP 429: slow down", "HTTP 408: timeout", "HTTP 409: busy"])
    assert "retry only them" in retry_advice(["HTTP 425: too early"])  # the backend retries these too
    dead = "gave up after 6 attempts: connection error: ConnectError: [Errno 111] Connection refused (u)"
    assert "Nothing answered at the server's URL" in retry_advice(
        [dead, f"not sent: an earlier request {dead}"]
    )
    mixed = retry_advice(["HTTP 500: boom", "HTTP 404: no such model"])
    assert "retry only them; 1 of them was refused by the server" in mixed, mixed


def test_the_contexts_failure_lines_name_options_as_contexts_takes_them_and_count_the_rest(tmp_path, capsys):
    """Each failure line advised `-o backend.timeout_s`, which `contexts` refuses (its -o sets the
    backend), and only 5 were listed, with no word of the others (an audit)."""
    from cli_helpers import cli

    slow = [("sleep", 3)] * 20
    with FakeServer({"Write what is reliably known": slow}, "x") as server:
        code, _, err = cli(
            capsys, "contexts", "--lang", "en", "--limit", "7", "--backend", "openai", "--base-url",
            server.url, "--model", "m", "--context-dir", tmp_path, "-o", "timeout_s=1", "-o", "retry_timeouts=false",
        )  # fmt: skip
    said = " ".join(err.split())
    assert code == 3 and "-o timeout_s" in said and "-o backend." not in said, err
    assert "failed and 2 more (each in" in said, err


def test_main_jobs_hung_server_message_names_the_members_own_option(tmp_path, capsys):
    """It advised `-o backend.connect_timeout_s`, which main-job refuses ("'backend' is not a
    member"), and then taught how to set a backend as if the settings given were wrong."""
    from cli_helpers import cli

    out = tmp_path / "run"
    with HungServer() as server:
        code, _, err = cli(
            capsys, "main-job", "--members", "lexical,llm", "--llm-budget", "0.3", "--lang", "en",
            "--out", out, "--quiet", "-o", "llm.backend.kind=openai", "-o", f"llm.backend.base_url={server.url}",
            "-o", "llm.backend.model=m", "-o", "llm.backend.connect_timeout_s=0.5",
        )  # fmt: skip
    said = " ".join(err.split())
    assert code == 2 and not out.exists(), err
    assert "it is hung" in said and "raise -o llm.backend.connect_timeout_s" in said, err
    assert "-o backend." not in said and "a member's backend is set with" not in said, err


def test_main_job_refuses_a_new_folder_whose_members_server_is_not_there(tmp_path, capsys):
    """A mistyped port was found only after the CPU members had run, leaving a folder of
    failed items (an audit: 34 s on one language, minutes on all)."""
    from cli_helpers import cli

    out = tmp_path / "run"
    args = ["main-job", "--members", "lexical,llm", "--llm-budget", "0.3", "--lang", "en", "--quiet"]
    args += ["-o", "llm.backend.kind=openai", "-o", "llm.backend.base_url=http://127.0.0.1:9/v1"]
    args += ["-o", "llm.backend.model=m", "--out", out]
    code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert code == 2 and not out.exists(), err
    assert "member 'llm': nothing answers at http://127.0.0.1:9/v1" in said and "nothing was run" in said
    assert cli(capsys, *args, "--plan-only")[0] == 0  # a plan calls no model
    # a shared cache_path that exists may answer every item without the server
    shared = tmp_path / "shared.cache.jsonl"
    shared.write_text("")
    args[args.index(out)] = tmp_path / "run2"
    code, _, err = cli(capsys, *args, "-o", f"llm.cache_path={shared}")
    assert code == 3 and "nothing answers at" not in err, err  # it ran: its items failed, not refused


def test_main_jobs_wrong_model_message_is_not_taken_for_detects_flags(tmp_path, capsys):
    """Its "--model_alias NAME" was read as detect's --model: the lesson on how to set a
    member's backend was added, as if the settings given were wrong (a review)."""
    from cli_helpers import cli

    with FakeServer({}, models=("other",)) as server:
        code, _, err = cli(
            capsys, "main-job", "--members", "lexical,llm", "--llm-budget", "0.3", "--lang", "en",
            "--out", tmp_path / "run", "--quiet", "-o", "llm.backend.kind=openai",
            "-o", f"llm.backend.base_url={server.url}", "-o", "llm.backend.model=m",
        )  # fmt: skip
    said = " ".join(err.split())
    assert code == 2 and "serves only 'other', not 'm'" in said and "--model_alias" in said, err
    assert "a member's backend is set with" not in said, err


def test_replies_read_from_the_cache_are_not_said_to_be_retried_by_the_same_command():
    """An audit ran the same command as told: 1.5 s, nothing sent, the same failures and advice."""
    from mushroom.errors import NAMED_ELSEWHERE, retry_advice

    elsewhere = f"{NAMED_ELSEWHERE} ('x'): a re-run reads the same reply from the cache; try another prompt"
    cut = "the reply was cut off at max_tokens (200) before it named a span found in the answer: raise max_tokens"
    said = retry_advice([elsewhere, elsewhere], "--out D")
    assert "Run the same command again" not in said and "in a new folder" in said, said
    said = retry_advice([elsewhere, cut], "--out D")
    assert "Run the same command again" not in said and "-o max_tokens=N" in said, said
    # with a failure a re-run can mend, it is still the first advice, and the cached ones are said
    said = retry_advice([elsewhere, cut, "gave up after 6 attempts: HTTP 500: boom"], "--out D")
    assert said.startswith("Run the same command again with --out D"), said
    assert NAMED_ELSEWHERE in said and "(raise it, in a new folder)" in said, said


def _detect_against(capsys, handler, out, limit=2, extra=()):
    """`detect` of the llm detector against a server of `handler` (a BaseHTTPRequestHandler)."""
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        return cli(capsys, *llm_args(openai_backend(url), out, limit), *extra)
    finally:
        server.shutdown()


def test_a_web_page_at_the_url_is_refused_before_the_run_not_after_every_item_failed(tmp_path, capsys):
    """A login page (or another app) answering 200 with HTML passed the model check; every item
    then failed with "a body that is not JSON", after the CPU members had run."""
    from http.server import BaseHTTPRequestHandler

    page = b"<!DOCTYPE html><html><head><title>Sign in</title></head></html>"

    class Page(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _page(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        do_GET = do_POST = _page

    out = tmp_path / "run"
    code, _, err = _detect_against(capsys, Page, out)
    said = " ".join(err.split())
    assert code == 2 and "/models answered with a body that is not JSON" in said, said
    assert "<!DOCTYPE html><html><head><title>Sign in" in said and not (out / "raw").exists()


def test_a_connection_closed_after_a_long_silence_is_a_timeout_not_resent(tmp_path, capsys, monkeypatch):
    """A proxy that closes a request after its read timeout: each item waited it out three
    times over, said as 'gave up after 1 attempt: connection error', unexplained."""
    from http.server import BaseHTTPRequestHandler

    import mushroom.backends.openai_compat as compat

    monkeypatch.setattr(compat, "LONG_SILENCE_S", 0.3, raising=False)
    posts = []

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_GET(self):  # the model list, and a 404 for /health: the front answers
            body = json.dumps({"data": [{"id": "m"}]} if self.path == "/v1/models" else {}).encode()
            self.send_response(200 if self.path == "/v1/models" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            posts.append(self.path)
            self.rfile.read(int(self.headers["Content-Length"]))
            time.sleep(0.6)
            self.close_connection = True  # no answer: the proxy's timeout

    out = tmp_path / "run"
    code, _, err = _detect_against(capsys, Proxy, out, limit=4, extra=["-o", "backend.concurrency=1"])
    assert code == 3, err
    errors = [f["error"] for f in _failures(out)]
    assert len(errors) == 4 and "closed after" in errors[0] and "a proxy's read timeout" in errors[0], errors
    # one close when none worked stops the run, as a read timeout does: the other three items
    # waited out the proxy's timeout each before the run stopped
    assert len(posts) == 1, posts
    assert all(
        "closed a request after a long wait" in e and "or the server dropped them" in e for e in errors[1:]
    )


def test_the_breakers_reason_after_timeouts_and_closes_gives_the_timeouts_advice():
    """The reason was chosen by the last failure: a read timeout then a close said only "a
    proxy's timeout", and the advice to raise timeout_s was lost."""
    from mushroom.backends.breaker import CircuitBreaker

    breaker = CircuitBreaker("http://x/v1", timeout_s=600)
    breaker.success()  # after some worked: two in a row trip it
    breaker.failure("gave up after 1 attempt: timeout after 600 s waiting for http://x/v1/chat")
    breaker.failure("gave up after 1 attempt: the connection was closed after 61 s with no answer (...)")
    assert (
        "none of the last 2 requests within 600 s" in breaker.blocked() and "timeout_s" in breaker.blocked()
    )
    closes = CircuitBreaker("http://x/v1", timeout_s=600)
    closes.failure("gave up after 1 attempt: the connection was closed after 61 s with no answer (...)")
    assert "closed a request after a long wait" in closes.blocked() and "timeout_s" not in closes.blocked()


def test_a_larger_limit_on_the_same_folder_keeps_the_finished_items(tmp_path, capsys):
    """A larger --limit was refused as another config, and a new folder asked the model again
    for every item it had answered."""
    out = tmp_path / "run"
    with FakeServer({}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, 2))
        assert code == 0, err
        sent = len(server.calls)
        code, shown, err = cli(capsys, *llm_args(openai_backend(server.url), out, 3))
        assert code == 0 and "its finished items are kept" in " ".join((shown + err).split()), err
        assert len(server.calls) == sent + 1, server.calls  # only the new item
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, 1))
    assert code == 2 and "limit: 3 -> 1" in err, err  # a smaller one is still another run
    assert len((out / "predictions" / "mushroom.en-val.v2.jsonl").read_text().splitlines()) == 3


def test_a_larger_limit_does_not_take_a_folder_whose_config_was_edited_by_hand(tmp_path, capsys):
    """The larger-limit path returned before the hand-edit check: the folder then claimed settings
    its first items were not made with."""
    out = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "2", "--out", out)
    assert code == 0, err
    cfg = json.loads((out / "config.json").read_text())
    cfg["config"]["options"]["threshold"] = 0.5
    (out / "config.json").write_text(json.dumps(cfg))
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "3", "-o", "threshold=0.5", "--out", out)
    assert code == 2 and "holds a run with another config" in " ".join(err.split()), err  # not taken


def test_one_sample_cut_at_max_tokens_among_short_ones_is_not_said_stopped_by_the_server():
    from mushroom.backends.base import Generation
    from mushroom.detectors import build

    det = build("llm", {"max_tokens": 1024})
    gen = Generation(
        texts=["a", "b", "c"], finish_reasons=["length", "stop", "stop"], usage={"completion_tokens": 1104}
    )
    assert det._stopped_by_server(gen) is None
    short = Generation(texts=["a"], finish_reasons=["length"], usage={"completion_tokens": 5})
    assert det._stopped_by_server(short) == 5


def test_scores_md_of_an_allow_failures_run_says_its_failed_items(tmp_path, capsys):
    """scores.md is the file people share; it scored failed items as empty predictions unsaid."""
    out = tmp_path / "run"
    with FakeServer({"": [("status", 400, '{"error": "bad request"}')]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=2), "--allow-failures")
    assert code == 0, err
    table = (out / "scores.md").read_text()
    assert (
        "2 items failed and scored as empty predictions (en 2; listed in the run's failures.jsonl)" in table
    )
    with FakeServer({}) as server:  # a run without failures: no such line
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), tmp_path / "ok", limit=2))
    assert code == 0 and "failed" not in (tmp_path / "ok" / "scores.md").read_text(), err


def test_requests_not_sent_after_refusals_are_not_said_to_be_retried_by_the_same_command(tmp_path, capsys):
    """The breaker's rows said "the same command retries it" beside "a re-run as it is fails them again"."""
    out = tmp_path / "run"
    with FakeServer({"": [("status", 400, '{"error": "unknown field"}')]}, retry_after=None) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=6))
    assert code != 0
    rows = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    unsent = [r["error"] for r in rows if r["error"].startswith("not sent")]
    assert unsent, rows
    assert all("the same command retries it" not in e and "refused again" in e for e in unsent), unsent
    assert "a re-run as it is fails them again" in " ".join(err.split())


def test_pyes_against_a_server_without_logprobs_names_them_and_advises_no_plain_rerun(tmp_path, capsys):
    """It said "no usable P(yes)" and "Run the same command again", which read the same replies."""
    out = tmp_path / "run"
    with FakeServer({}, default_text="Yes") as server:  # its chat replies carry no logprobs
        model = {"kind": "openai", "base_url": server.url, "model": "m"}
        code, _, err = cli(
            capsys, "detect", "--lang", "en", "--limit", "2", "--detector", "pyes", "--out", out,
            "-o", f"models=[{json.dumps(model)}]", "-o", "scoring=top_logprobs",
        )  # fmt: skip
    said = " ".join(err.split())
    assert code != 0
    errors = {f["error"] for f in _failures(out)}
    assert len(errors) == 1 and "none of its replies carried log-probabilities" in errors.pop(), said
    assert "Run the same command again" not in said and "a re-run gets the same replies" in said, said


def test_pyes_with_a_calibration_and_no_logprobs_fails_its_items_not_exit_0(tmp_path, capsys):
    """With statistics given, every piece unscored became P 0.5 everywhere, exit 0 (an audit)."""
    calibration = tmp_path / "cal.json"
    calibration.write_text(json.dumps({"models": {"0:openai:m": {"mean": 0.5, "std": 0.2, "n": 10}}}))
    out = tmp_path / "run"
    with FakeServer({}, default_text="Yes") as server:
        model = {"kind": "openai", "base_url": server.url, "model": "m"}
        code, _, err = cli(
            capsys, "detect", "--lang", "en", "--limit", "2", "--detector", "pyes", "--out", out,
            "-o", f"models=[{json.dumps(model)}]", "-o", "scoring=top_logprobs", "-o", f"calibration={calibration}",
        )  # fmt: skip
    said = " ".join(err.split())
    assert code == 3, said
    errors = [f["error"] for f in _failures(out)]
    assert len(errors) == 2 and all("none of the replies carried log-probabilities" in e for e in errors), (
        errors
    )
    assert "`--backend replay`" not in said and 'a models entry of kind "replay"' in said, said
