"""A reply cut off at max_tokens is counted as cut off, whatever the server's usage says.

The server's `finish_reason: "length"` is the signal every OpenAI-compatible server sends
(vLLM, llama.cpp, TGI, Ollama). Before, only a `usage.completion_tokens` that reached
max_tokens counted: a server reporting fewer tokens, or none, turned a reply closed by the
repair parser into a quiet "nothing wrong".
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import cli, llm_args, openai_backend
from fake_openai_server import FakeServer

from mushroom.backends.base import Generation
from mushroom.backends.openai_compat import OpenAIBackend
from mushroom.backends.rawlog import RawRecord

CUT = '{"incorrect_spans": [{"text": "the '


def test_finish_reason_length_is_cut_off_whatever_usage_says():
    small = {"completion_tokens": 5}
    assert Generation(texts=["x"], usage=small, finish_reasons=["length"]).used_budget(200) is True
    assert Generation(texts=["x"], finish_reasons=["length"]).used_budget(200) is True
    assert Generation(texts=["x", "y"], finish_reasons=["stop", "length"]).used_budget(200) is True
    # the engine said every text finished: a token count at the budget does not overrule it
    assert (
        Generation(texts=["x"], usage={"completion_tokens": 200}, finish_reasons=["stop"]).used_budget(200)
        is False
    )
    # no finish reasons: the token count decides, and without one nothing is known
    assert Generation(texts=["x"], usage={"completion_tokens": 200}).used_budget(200) is True
    assert Generation(texts=["x"], usage=small).used_budget(200) is False
    assert Generation(texts=["x"]).used_budget(200) is None


def test_the_openai_reply_parser_reads_each_choices_finish_reason():
    gen = OpenAIBackend.parse(
        {
            "choices": [
                {"index": 1, "message": {"content": "b"}, "finish_reason": "length"},
                {"index": 0, "message": {"content": "a"}, "finish_reason": "stop"},
            ]
        }
    )
    assert gen.texts == ["a", "b"] and gen.finish_reasons == ["stop", "length"]
    # log-probabilities on the second choice only stay with the second text
    top = {"token": "b", "logprob": -0.5, "top_logprobs": [{"token": "b", "logprob": -0.5}]}
    gen = OpenAIBackend.parse(
        {
            "choices": [
                {"index": 0, "message": {"content": "a"}},
                {"index": 1, "message": {"content": "b"}, "logprobs": {"content": [top]}},
            ]
        }
    )
    assert gen.logprobs == [[], [{"b": -0.5}]]
    assert OpenAIBackend.parse({"choices": [{"message": {"content": "a"}}]}).finish_reasons == []


@pytest.mark.parametrize("send_usage", [True, False], ids=["with-usage", "without-usage"])
def test_a_reply_cut_off_before_it_named_anything_fails_its_item(tmp_path, capsys, send_usage):
    """An empty prediction from a reply cut off at max_tokens read as "nothing wrong"."""
    out = tmp_path / "run"
    with FakeServer({"": [("cut", CUT)]}, send_usage=send_usage) as server:
        code, shown, err = cli(capsys, *llm_args(openai_backend(server.url), out))
    said = " ".join((shown + err).split())
    assert code == 3, err
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 3 and all("cut off at max_tokens (" in f["error"] for f in failures)
    assert "a re-run reads the same replies from the cache: raise max_tokens" in said, said
    assert "to retry only them" not in said
    stats = json.loads((out / "predictions" / "stats.json").read_text())["all"]
    assert stats["llm.requests"] == 3 and stats["llm.truncated"] == 3, stats
    assert stats["llm.cut_before_any_span"] == 3
    summary = json.loads((out / "summary.json").read_text())
    warned = [w for w in summary["warnings"] if "cut off" in w]
    assert warned and "max_tokens" in warned[0], summary["warnings"]
    raw = [
        RawRecord.model_validate_json(line) for line in (out / "predictions" / "raw" / "en.raw.jsonl").open()
    ]
    assert raw and all(r.finish_reasons == ["length"] for r in raw)
    # replayed from its raw records, the run fails the same items with no server
    replayed = tmp_path / "replayed"
    replay = ["--backend", "replay", "--responses", out / "predictions" / "raw" / "en.raw.jsonl"]
    code, _, err = cli(capsys, *llm_args(replay, replayed))
    assert code == 3 and "cut off at max_tokens" in err, err
    # raising max_tokens changes nothing in a replay: the recorded replies must be recorded again
    said = " ".join(err.split())
    assert "raise max_tokens (-o max_tokens=N)" not in said, said
    assert "record them again with a live backend and a larger max_tokens" in said, said
    failures = [json.loads(line) for line in (replayed / "failures.jsonl").read_text().splitlines()]
    assert all(
        f["error"].endswith("record it again with a live backend and a larger max_tokens") for f in failures
    )
    assert json.loads((replayed / "predictions" / "stats.json").read_text())["all"]["llm.truncated"] == 3


def test_a_reply_cut_off_after_an_empty_list_is_no_nothing_wrong_unless_blanks_alone_follow(tmp_path, capsys):
    """A model looping until max_tokens opened with a whole empty list: each item came out "ok",
    all-zero, exit 0 (an audit). A reply that went on named nothing it stood by; one padded
    with blanks alone (llama.cpp's grammar) said it in full, and failed forever from the cache."""
    out = tmp_path / "run"
    looping = '{"incorrect_spans": []}\n{"incorrect_spans": []}\n{"incorrect_spans": [{"text": "'
    with FakeServer({"": [("cut", looping)]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out))
    assert code == 3, err
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 3 and all("cut off at max_tokens (" in f["error"] for f in failures)
    stats = json.loads((out / "predictions" / "stats.json").read_text())["all"]
    assert stats["llm.cut_before_any_span"] == 3
    padded = '{"incorrect_spans": []}' + "\n" * 300
    with FakeServer({"": [("cut", padded)]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), tmp_path / "padded"))
    assert code == 0, err
    stats = json.loads((tmp_path / "padded" / "predictions" / "stats.json").read_text())["all"]
    assert stats["llm.truncated"] == 3 and "llm.cut_before_any_span" not in stats


def test_a_reply_cut_off_after_a_span_keeps_it_and_is_warned_of(tmp_path, capsys):
    out = tmp_path / "run"
    cut = '{"incorrect_spans": [{"text": "Petra van Stoveren"}, {"text": "silv'
    with FakeServer({"": [("cut", cut)]}) as server:
        code, shown, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=1))
    assert code == 0, err
    (pred,) = [json.loads(line) for line in (out / "predictions" / "mushroom.en-val.v2.jsonl").open()]
    assert pred["hard_labels"] == [[0, 18]]
    assert "cut off" in " ".join((shown + err).split())


def test_a_generated_context_cut_off_at_max_tokens_is_counted_and_warned_of(tmp_path, capsys):
    with FakeServer({"": [("cut", "Background that stops in the midd")]}, send_usage=False) as server:
        code, _, err = cli(
            capsys,
            "contexts",
            "--split",
            "val",
            "--lang",
            "it",
            "--limit",
            "2",
            "--backend",
            "openai",
            "--base-url",
            server.url,
            "--model",
            "m",
            "--source",
            "gen",
            "--context-dir",
            tmp_path,
            "--max-tokens",
            "32",
        )
    assert code == 0, err
    said = " ".join(err.split())
    assert "2 generated contexts stopped at --max-tokens 32" in said and "raise --max-tokens" in said


def test_a_cut_off_reply_is_left_out_of_the_vote_and_fails_the_item_only_when_none_is_left():
    """With three temperatures, a cut reply used to vote "nothing wrong" beside the others."""
    from mushroom.data.splits import load_split
    from mushroom.detectors import build

    item = load_split("val", ["en"])["en"][0]  # "Petra van Stoveren won a silver medal ..."
    det = build("llm", {"backend": {"kind": "replay", "responses": "-"}, "temperatures": [0.1, 0.2, 0.3]})
    good = Generation(
        texts=['{"incorrect_spans": [{"text": "Petra van Stoveren"}]}'], finish_reasons=["stop"]
    )
    cut = Generation(texts=['{"incorrect_spans": [{"text": "Petra'], finish_reasons=["length"])
    empty = Generation(texts=['{"incorrect_spans": []}'], finish_reasons=["stop"])
    # one good reply and two cut: the good one alone votes, so its span is kept
    result = det._item_result(item, [good, cut, cut])
    assert result.status == "ok" and result.prediction.hard_labels == [(0, 18)]
    assert result.stats["llm.cut_before_any_span"] == 2
    assert [r.get("cut_off", False) for r in result.detail["responses"]] == [False, True, True]
    # one good and one empty: one vote of two is no majority, as before
    assert det._item_result(item, [good, cut, empty]).prediction.hard_labels == []
    # every reply cut: the item failed, saying why
    failed = det._item_result(item, [cut, cut, cut])
    assert failed.status == "failed" and "cut off at max_tokens" in failed.error
    # no finish reason, but the whole budget used by the count: cut off too
    counted = Generation(texts=['{"incorrect_spans": [{"text": "Pe'], usage={"completion_tokens": 1024})
    assert det._item_result(item, [good, counted, counted]).stats["llm.cut_before_any_span"] == 2
    # a backend that answered with neither a reply nor an error: a failure, not a crash in the vote
    none = det._item_result(item, [Generation(texts=[])] * 3)
    assert none.status == "failed" and "no reply and no error" in none.error
    assert none.stats["llm.backend_errors"] == 3


@pytest.mark.parametrize("content", ["", None], ids=["empty", "null"])
def test_an_empty_reply_fails_its_item_and_a_rerun_asks_again(tmp_path, capsys, content):
    """A server's `content: null` (or a model that stopped at once) was parsed as "no spans":
    an empty prediction, exit 0, as if the model had checked the answer."""
    out = tmp_path / "run"
    with FakeServer({"": [("ok", content)]}) as server:
        code, shown, err = cli(capsys, *llm_args(openai_backend(server.url), out))
    assert code == 3, err
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert [f["error"] for f in failures] == ["the model's reply was empty (finish_reason: stop)"] * 3
    assert "to retry only them" in " ".join((shown + err).split())
    stats = json.loads((out / "predictions" / "stats.json").read_text())["all"]
    assert stats["llm.empty_replies"] == 3 and stats.get("llm.responses", 0) == 0, stats
    # empty replies are not cached: the same command asks again, and a server that answers ends it
    with FakeServer({}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out))
        asked = len(server.calls)
    assert code == 0, err
    assert asked == 3


def test_an_empty_reply_among_others_is_no_vote_and_one_cut_off_empty_counts_as_cut():
    from mushroom.data.splits import load_split
    from mushroom.detectors import build

    item = load_split("val", ["en"])["en"][0]  # "Petra van Stoveren won a silver medal ..."
    det = build("llm", {"backend": {"kind": "replay", "responses": "-"}, "temperatures": [0.1, 0.2]})
    good = Generation(
        texts=['{"incorrect_spans": [{"text": "Petra van Stoveren"}]}'], finish_reasons=["stop"]
    )
    blank = Generation(texts=["  "], finish_reasons=["stop"])
    result = det._item_result(item, [good, blank])  # one vote of one: its span is kept
    assert result.status == "ok" and result.prediction.hard_labels == [(0, 18)]
    assert result.stats["llm.empty_replies"] == 1
    assert result.detail["responses"][1] == {"temperature": 0.2, "sample": 0, "empty": True}
    failed = det._item_result(item, [blank, blank])
    assert failed.status == "failed" and failed.error == "the model's reply was empty (finish_reason: stop)"
    # empty because it hit max_tokens (a reasoning model's content is null then): cut off
    cut = det._item_result(item, [Generation(texts=[""], finish_reasons=["length"])] * 2)
    assert cut.status == "failed" and "cut off at max_tokens" in cut.error


OOM = '{"error": {"message": "CUDA out of memory"}}'
PROSE = "I'm sorry, I cannot help with that."
SPAN = '{"incorrect_spans": [{"text": "Petra van Stoveren"}, {"text": "silv'


@pytest.mark.parametrize(
    "reply, samples, said",
    [
        (("cut", SPAN), 1, "2 of 2 LLM responses used their whole max_tokens budget"),
        (("ok", PROSE), 1, "2 of 2 LLM responses were unparseable"),
        (("cut", SPAN), 3, "6 of 6 LLM responses used their whole max_tokens budget"),
    ],
)
def test_the_share_of_bad_replies_is_of_the_replies_received(tmp_path, capsys, reply, samples, said):
    """It was of the requests: failed ones counted as replies ("2 of 5"), a sample as none
    ("2 of 2" of six replies), and two prose replies of two, among failures, warned of nothing."""
    out = tmp_path / "run"
    with FakeServer({"": [reply, reply, ("status", 500, OOM)]}) as server:
        args = [*llm_args(openai_backend(server.url), out, limit=5), "-o", "backend.max_retries=0"]
        args += ["-o", "backend.concurrency=1", "-o", f"samples={samples}", "--allow-failures"]
        code, shown, err = cli(capsys, *args)
    assert code == 0, err
    assert said in " ".join((shown + err).split()), shown + err


def test_a_reply_naming_only_text_not_in_the_answer_is_no_vote_for_nothing_wrong():
    """SmolLM2 echoed the prompt's examples ("1901"): every span lost, an empty prediction
    that read as "nothing hallucinated" (a Python API audit)."""
    from mushroom.data.splits import load_split
    from mushroom.detectors import build
    from mushroom.runs.service import unusable_warnings

    item = load_split("val", ["en"])["en"][0]  # "Petra van Stoveren won a silver medal ..."
    det = build("llm", {"backend": {"kind": "replay", "responses": "-"}, "temperatures": [0.1, 0.2]})
    echoed = Generation(texts=['{"incorrect_spans": [{"text": "1901"}]}'], finish_reasons=["stop"])
    good = Generation(
        texts=['{"incorrect_spans": [{"text": "Petra van Stoveren"}]}'], finish_reasons=["stop"]
    )
    failed = det._item_result(item, [echoed, echoed])
    assert failed.status == "failed" and "named only text that is not in the answer ('1901')" in failed.error
    assert failed.stats["llm.lost_replies"] == 2
    kept = det._item_result(item, [good, echoed])  # one vote of one: its span is kept
    assert kept.status == "ok" and kept.prediction.hard_labels == [(0, 18)]
    # a reply that names nothing at all is still "nothing wrong"
    nothing = Generation(texts=['{"incorrect_spans": []}'], finish_reasons=["stop"])
    assert det._item_result(item, [nothing, nothing]).status == "ok"
    (warning,) = unusable_warnings("llm:val en", {"llm.claims": 2, "llm.lost": 2})
    assert "a reply that named nothing in the answer is no vote" in warning


def test_a_reply_of_deep_brackets_cut_off_is_said_cut_not_a_recursion_error(tmp_path, capsys):
    """The padding check decoded it with the stock decoder, which recursed past Python's limit."""
    out = tmp_path / "run"
    with FakeServer({"": [("cut", "[" * 3000)]}) as server:
        code, _, err = cli(capsys, *llm_args(openai_backend(server.url), out, limit=1))
    assert code == 3, err
    (failure,) = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert "cut off at max_tokens (" in failure["error"] and "Recursion" not in failure["error"]


def test_a_reply_the_server_stopped_far_below_max_tokens_is_not_told_to_raise_it(tmp_path, capsys):
    """finish_reason "length" after 5 of 1024 tokens: the prompt filled the server's context,
    and the advice to raise max_tokens could not help."""
    out = tmp_path / "run"
    with FakeServer({"": [("stopped", CUT)]}) as server:
        code, shown, err = cli(capsys, *llm_args(openai_backend(server.url), out))
    said = " ".join((shown + err).split())
    assert code == 3, err
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    said_of_each = "stopped for length by the server, not at max_tokens (5 of 1024 tokens)"
    assert failures and all(said_of_each in f["error"] for f in failures), failures
    assert "raise the server's context length (llama-server -c" in said and "in a new folder" in said, said
    assert "raise max_tokens" not in said and "to retry only them" not in said, said


def test_a_reply_with_no_finish_reason_or_token_count_whose_json_was_left_open_is_cut_off(tmp_path, capsys):
    """A server that sends neither a finish reason nor usage (and a replay file without them):
    `{"incorrect_spans": [` was closed by the parser into "nothing wrong", exit 0; the chain
    already read such a reply as cut off. A content filter's stop ends a reply as the budget does."""
    from cli_helpers import VAL_EN

    first = [json.loads(line) for line in open(VAL_EN, encoding="utf-8")][:3]
    rows = [
        {"id": first[0]["id"], "texts": ['{"incorrect_spans": [']},  # said nothing of its end
        {"id": first[1]["id"], "texts": [CUT], "finish_reasons": ["content_filter"]},
        {"id": first[2]["id"], "texts": ['{"incorrect_spans": []}']},  # whole: nothing wrong
    ]
    responses = tmp_path / "r.jsonl"
    responses.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    args = ["detect", "--detector", "llm", "--responses", responses, "--lang", "en", "--limit", "3"]
    code, shown, err = cli(capsys, *args, "--out", out, "--quiet")
    assert code == 3, err
    failures = {
        f["id"]: f["error"] for f in map(json.loads, (out / "failures.jsonl").read_text().splitlines())
    }
    assert set(failures) == {first[0]["id"], first[1]["id"]}, failures
    assert "cut off at max_tokens" in failures[first[0]["id"]]
    assert "content filter stopped the reply" in failures[first[1]["id"]]
    # the filter's stop is counted and warned of as its own: it was a max_tokens cut-off, and
    # the warning said "raise max_tokens" of it (a review)
    said = " ".join(err.split())
    assert "1 of 3 LLM responses used their whole max_tokens budget" in said, said
    assert "1 of 3 LLM responses were stopped by the server's content filter" in said, said
    stats = json.loads((out / "summary.json").read_text())["stats"]
    assert (stats["llm.truncated"], stats["llm.content_filtered"]) == (1, 1), stats
    # a filter stops the same request again, which the advice says (it said a re-run retries it)
    assert "for 1 of them the server's content filter stopped the reply, which a re-run gets again" in said, (
        said
    )
    from mushroom.errors import retry_advice

    advice = retry_advice([failures[first[1]["id"]]] * 2, "--out D")
    assert advice.startswith("The server's content filter stopped each reply") and "new folder" in advice


def test_a_reply_of_reasoning_alone_is_an_empty_reply_that_a_re_run_asks_again(tmp_path, capsys):
    """It was called unreadable, with "a re-run reads the same replies from the cache", though
    the cache keeps no such reply and the re-run asked again (an audit)."""
    from cli_helpers import VAL_EN

    first = json.loads(open(VAL_EN, encoding="utf-8").readline())
    responses = tmp_path / "r.jsonl"
    responses.write_text(json.dumps({"id": first["id"], "texts": ["<think>Let me see.</think>"]}) + "\n")
    out = tmp_path / "run"
    args = ["detect", "--detector", "llm", "--responses", responses, "--lang", "en", "--limit", "1"]
    code, shown, err = cli(capsys, *args, "--out", out, "--quiet")
    said = " ".join((shown + err).split())
    assert code == 3 and "the model's reply held only reasoning" in said, said
    assert "from the cache" not in said, said
    stats = json.loads((out / "predictions" / "stats.json").read_text())["all"]
    assert stats["llm.empty_replies"] == 1 and not stats.get("llm.unparseable"), stats
