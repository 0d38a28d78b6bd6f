import json
import re
from collections import Counter

import numpy as np
import pytest
from conftest import write_lines
from fake_openai_server import FakeServer

from mushroom.backends.base import Backend, BackendConfig, Generation
from mushroom.data.contexts import load_contexts
from mushroom.data.records import Context, Item
from mushroom.detectors import build
from mushroom.detectors.chain import ChainDetector, ChainOptions
from mushroom.errors import CUT_OFF, UNREADABLE, DataError, MushroomError, RunFailed
from mushroom.evaluation.score import score_predictions
from mushroom.retrieval.generate import generate_contexts

ANSWER = "Marie Curie was born in 1867 in Berlin and won two Nobel Prizes."
ITEM = Item(
    id="v-1",
    lang="en",
    model_input="Where was Marie Curie born?",
    model_output_text=ANSWER,
    soft_labels=[{"start": 32, "end": 38, "prob": 1.0}],
    hard_labels=[[32, 38]],
)
CTX = {"v-1": [Context(source="s", text="Marie Curie was born in Warsaw in 1867. She won two Nobel Prizes.")]}
DECOMPOSE = json.dumps(
    {
        "claims": [
            {"claim": "Curie was born in 1867", "substring": "born in 1867"},
            {"claim": "Curie was born in Berlin", "substring": "in Berlin"},
            {"claim": "Curie won two Nobel Prizes", "substring": "won two Nobel Prizes"},
        ]
    }
)
VERIFY = json.dumps(
    {
        "verdicts": [
            {"claim": 1, "supported": True, "incorrect_spans": []},
            {"claim": 2, "supported": False, "incorrect_spans": [{"text": "Berlin", "probability": 0.9}]},
            {"claim": 3, "supported": True},
        ]
    }
)


class Scripted(Backend):
    """Answers by request key (item id + stage), successive answers per key."""

    kind = "scripted"

    def __init__(self, script):
        super().__init__(BackendConfig(kind="scripted"))
        self.script = {k: list(v) for k, v in script.items()}
        self.seen = []

    def generate(self, requests, on_result=None):
        out = []
        for req in requests:
            self.seen.append(req)
            steps = self.script.get(req.key, [])
            step = steps.pop(0) if steps else None
            if isinstance(step, tuple):  # (text, completion tokens the server counted)
                out.append(Generation(texts=[step[0]], usage={"completion_tokens": step[1]}))
            else:
                out.append(
                    Generation(texts=[step])
                    if step is not None
                    else Generation(error=f"nothing for {req.key}")
                )
        return out


def run_chain(script, item=ITEM, ctx=CTX, status="ok", **opts):
    """(the item's counters, its prediction or error, the backend); the item must come out `status`."""
    backend = Scripted(script)
    det = ChainDetector(ChainOptions(cache=False, **opts), backend)
    results = []
    det.run([item], ctx, results.append)
    assert len(results) == 1 and results[0].status == status, results
    if status == "failed":
        return Counter(results[0].stats), results[0].error, backend
    stats = Counter(results[0].stats)
    for stage in ("decompose", "verify", "decompose.retry", "verify.retry"):
        outcomes = ("ok", "invalid_json", "wrong_shape", "empty", "cut_empty", "backend_errors")
        parts = sum(stats[f"{stage}.{k}"] for k in outcomes)
        assert stats[f"{stage}.requests"] == parts, stage
    return stats, results[0].prediction, backend


def test_decompose_verify_locate_marks_the_minimal_wrong_substring():
    det, pred, backend = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [VERIFY]})
    assert [list(h) for h in pred.hard_labels] == [[32, 38]]
    assert pred.soft_labels[0].prob == pytest.approx(0.9)
    assert score_predictions([ITEM], [pred]).mean_iou == 1.0
    verify_prompt = backend.seen[1].messages[-1].content
    assert (
        '2. Curie was born in Berlin  [answer text: "in Berlin"]' in verify_prompt
        and "Warsaw" in verify_prompt
    )
    s = det
    assert (s["chain.claims"], s["chain.false_claims"], s["chain.spans"]) == (3, 1, 1)
    assert s["decompose.retries"] == 0 and s["chain.decomposition_failures"] == 0
    assert s["decompose.requests"] + s["verify.requests"] == 2 and s["chain.prompt_chars"] > len(ANSWER) * 2


def test_a_contradiction_placed_nowhere_is_could_not_check_not_nothing_wrong():
    """A contradicted claim whose wrong text and claim are not in the answer was painted nowhere:
    an ok item with an empty prediction, "nothing wrong" (an audit, 3 of 3 SmolLM2 items)."""
    from mushroom.detectors.chain import UNPLACED

    elsewhere = json.dumps({"claims": [{"claim": "Curie was born in Paris", "substring": "in Paris"}]})
    verify = json.dumps(
        {
            "verdicts": [
                {"claim": 1, "supported": False, "incorrect_spans": [{"text": "Paris", "probability": 0.9}]}
            ]
        }
    )
    st, pred, _ = run_chain({"v-1#decompose": [elsewhere], "v-1#verify": [verify]})
    assert st["chain.contradicted_unplaced"] == 1 and st["chain.spans_not_located"] == 1
    assert pred.hard_labels == []  # no place to mark
    assert [(s.start, s.end, s.prob) for s in pred.soft_labels] == [(0, len(ANSWER), pytest.approx(0.4))]
    det = ChainDetector(
        ChainOptions(cache=False), Scripted({"v-1#decompose": [elsewhere], "v-1#verify": [verify]})
    )
    results = []
    det.run([ITEM], CTX, results.append)
    assert results[0].detail["unverifiable"][0]["reason"] == UNPLACED
    # one placed beside it: the placed span is painted over the whole answer's middle probability
    both = json.dumps(
        {"claims": [*json.loads(elsewhere)["claims"], {"claim": "x", "substring": "in Berlin"}]}
    )
    verify2 = json.dumps(
        {
            "verdicts": [
                json.loads(verify)["verdicts"][0],
                {"claim": 2, "supported": False, "incorrect_spans": [{"text": "Berlin", "probability": 0.9}]},
            ]
        }
    )
    st, pred, _ = run_chain({"v-1#decompose": [both], "v-1#verify": [verify2]})
    assert [list(h) for h in pred.hard_labels] == [[32, 38]] and st["chain.contradicted_unplaced"] == 1


def test_a_verdict_on_a_claim_never_made_is_counted_not_painted():
    """SmolLM2 verified 'claim 2' of a one-claim decomposition and called it false."""
    verify = json.dumps(
        {
            "verdicts": [
                {"claim": 2, "supported": False, "incorrect_spans": [{"text": "Berlin"}]},
                {"claim": 4, "supported": False, "incorrect_spans": [{"text": "Nobel"}]},
            ]
        }
    )
    s, pred, _ = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [verify]})
    assert [list(h) for h in pred.hard_labels] == [[32, 38]]  # claim 2 exists; claim 4 does not
    assert (s["chain.false_claims"], s["chain.unknown_claim_verdicts"]) == (1, 1)


def test_verdicts_numbered_from_zero_fall_on_the_claims_meant():
    """Claim 0 was dropped as unknown and claim 1's verdict (meant for the second claim, in
    Berlin) fell on the first, born in 1867 (an audit)."""
    verify = json.dumps(
        {
            "verdicts": [
                {"claim": 0, "verdict": "supported"},
                {"claim": 1, "verdict": "Contradicted.", "incorrect_spans": []},
                {"claim": 2, "verdict": "**SUPPORTS**"},
            ]
        }
    )
    st, pred, _ = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [verify]})
    berlin = ANSWER.index("in Berlin")
    # no wrong text named: the fallback paints the contradicted claim's own text, the second's
    assert [(s.start, s.end) for s in pred.soft_labels] == [(berlin, berlin + len("in Berlin"))]
    assert st["chain.zero_based_claims"] == 1 and st["chain.unknown_claim_verdicts"] == 0
    assert st["chain.unreadable_verdicts"] == 0


def test_a_stray_claim_0_among_1_based_verdicts_shifts_nothing():
    """A reply of 1-based verdicts with an overall note as claim 0 was read one up (a review)."""
    verify = json.dumps(
        {
            "verdicts": [
                {"claim": 0, "verdict": "supported"},
                {"claim": 1, "verdict": "contradicted", "incorrect_spans": [{"text": "1867"}]},
            ]
        }
    )
    st, pred, _ = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [verify]})
    year = ANSWER.index("1867")
    assert [list(h) for h in pred.hard_labels] == [[year, year + 4]]
    assert st["chain.zero_based_claims"] == 0 and st["chain.unknown_claim_verdicts"] == 1


def test_failed_stage_is_retried_once_with_the_error_and_counted():
    det, pred, backend = run_chain(
        {
            "v-1#decompose": ["Sure! Here are the claims:"],
            "v-1#decompose#retry": [DECOMPOSE],
            "v-1#verify": [VERIFY],
        }
    )
    assert [list(h) for h in pred.hard_labels] == [[32, 38]]
    retry = backend.seen[1]
    assert (
        retry.messages[-2].content == "Sure! Here are the claims:"
        and "could not be used" in retry.messages[-1].content
    )
    assert det["decompose.retries"] == 1 and det["decompose.invalid_json"] == 1
    assert det["chain.decomposition_failures"] == 0 and det["decompose.retry.ok"] == 1


LOOPING = '{"claims": [{"claim": "The answer is not a fact. The answer is not a fact. The answer'


def test_a_reply_cut_off_into_an_empty_list_is_retried_and_counted_not_read_as_no_claims():
    """SmolLM2 repeats itself until max_tokens; the repair parser closes that into {"claims": []}."""
    from mushroom.runs.service import unusable_warnings

    s, error, backend = run_chain(
        {"v-1#decompose": [LOOPING], "v-1#decompose#retry": [LOOPING]}, status="failed"
    )
    # no claims read as "nothing wrong" wrote an empty prediction, exit 0: the item fails
    assert error == f"every decompose reply was cut off: {CUT_OFF} (1024); raise max_tokens"
    # replayed, the same replies come back whatever max_tokens says: they must be recorded again
    from mushroom.detectors.chain import _unread
    from mushroom.errors import RECORDED_CUT

    assert _unread(s, "decompose", 1024, replayed=True).endswith(f"(1024); {RECORDED_CUT}")
    assert len(backend.seen) == 2
    assert (s["decompose.truncated"], s["decompose.retry.truncated"], s["chain.truncated"]) == (1, 1, 2)
    assert s["decompose.cut_empty"] == s["decompose.retry.cut_empty"] == 1
    assert s["chain.decomposition_failures"] == 1 and s["chain.requests"] == 2
    assert "broke off (max_tokens is" in backend.seen[1].messages[-1].content
    shown = " | ".join(unusable_warnings("chain (en)", dict(s)))
    assert "2 of 2 chain responses used their whole max_tokens budget" in shown
    assert "1 of 1 answers could not be decomposed" in shown
    # with the server's token count, that count decides: a reply that stopped short of the
    # budget with its brace left open is the model's answer (no claims), not a cut-off one
    s, pred, _ = run_chain({"v-1#decompose": [('{"claims": []', 30)]}, max_tokens=64)
    assert pred.hard_labels == [] and s["chain.truncated"] == 0 and s["decompose.ok"] == 1
    s, _, _ = run_chain(
        {"v-1#decompose": [(LOOPING, 64)], "v-1#decompose#retry": [(LOOPING, 64)]},
        max_tokens=64,
        status="failed",
    )
    assert (
        s["chain.truncated"] == 2 and s["decompose.cut_empty"] == 1 and s["chain.decomposition_failures"] == 1
    )
    # the retry that finishes is used as before
    s, pred, _ = run_chain(
        {"v-1#decompose": [LOOPING], "v-1#decompose#retry": [DECOMPOSE], "v-1#verify": [VERIFY]}
    )
    assert [list(h) for h in pred.hard_labels] == [[32, 38]] and s["chain.decomposition_failures"] == 0


def test_malformed_answers_are_counted_and_fail_or_fall_back():
    # decomposition unreadable twice: nothing to verify, and no "nothing wrong" either
    det, error, _ = run_chain(
        {"v-1#decompose": ["not json"], "v-1#decompose#retry": ["{still not"]}, status="failed"
    )
    assert UNREADABLE in error and det["chain.decomposition_failures"] == 1 and det["decompose.retries"] == 1
    # a claim quoted wrongly, a span that is not in the answer -> fallback to the claim's substring
    bad_dec = json.dumps(
        {
            "claims": [
                {"claim": "x", "substring": "born in Paris in 1900"},
                {"claim": "y", "substring": "in Berlin"},
            ]
        }
    )
    bad_ver = json.dumps(
        {
            "verdicts": [
                {"claim": 2, "supported": False, "incorrect_spans": [{"text": "Hamburg", "probability": 0.8}]}
            ]
        }
    )
    det, pred, _ = run_chain({"v-1#decompose": [bad_dec], "v-1#verify": [bad_ver]}, retry=False)
    s = det
    assert (s["chain.claims_not_in_answer"], s["chain.spans_not_located"], s["chain.fallbacks"]) == (1, 1, 1)
    assert pred.hard_labels == []  # 0.5 is not above the 0.5 threshold
    assert [(x.start, x.end, x.prob) for x in pred.soft_labels] == [(29, 38, 0.5)]


def test_chain_over_a_loopback_server_and_replay(tmp_path):
    with FakeServer(
        {
            "Split the ANSWER": [("ok", "```json\n" + DECOMPOSE + "\n```")],
            "For each claim, give one verdict": [("ok", VERIFY)],
        }
    ) as server:
        det = build(
            "chain", {"backend": {"kind": "openai", "model": "m", "base_url": server.url}, "cache": False}
        )
        pred = det.detect([ITEM], CTX)[0]
    assert [list(h) for h in pred.hard_labels] == [[32, 38]]
    assert len(server.calls) == 2
    replay = write_lines(
        tmp_path / "r.jsonl",
        [{"id": "v-1#decompose", "response": DECOMPOSE}, {"id": "v-1#verify", "response": VERIFY}],
    )
    det = build("chain", {"backend": {"kind": "replay", "responses": str(replay)}})
    det.workdir = tmp_path
    assert [list(h) for h in det.detect([ITEM], CTX)[0].hard_labels] == [[32, 38]]


def test_a_failed_call_fails_the_item_instead_of_an_empty_prediction():
    backend = Scripted({"v-1#decompose": [DECOMPOSE]})  # verify gets no answer: a backend error
    det = ChainDetector(ChainOptions(cache=False), backend)
    results = []
    det.run([ITEM], CTX, results.append)
    assert [r.status for r in results] == ["failed"] and "nothing for v-1#verify" in results[0].error
    assert results[0].prediction is None and results[0].stats["verify.backend_errors"] == 1
    with pytest.raises(RunFailed, match="1 of 1 item failed"):
        ChainDetector(ChainOptions(cache=False), Scripted({})).detect([ITEM], CTX)
    import mushroom

    assert mushroom.RunFailed is RunFailed  # as the README catches it


def test_supported_as_a_string_false_counts_as_not_supported():
    ver = VERIFY.replace('"supported": false', '"supported": "false"')
    assert '"false"' in ver
    stats, pred, _ = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [ver]})
    assert [list(h) for h in pred.hard_labels] == [[32, 38]] and stats["chain.false_claims"] == 1


class FakeEncoder:
    """Question/context similarity by shared words (the real MiniLM is tested in test_semantic)."""

    def encode(self, texts):
        import zlib

        vecs = np.zeros((len(texts), 256))
        for row, text in enumerate(texts):
            for word in text.lower().split():
                vecs[row, zlib.crc32(word.encode()) % 256] += 1
        return vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-9)


def test_context_stage_generates_only_missing_items_grades_and_resumes(tmp_path):
    items = [
        Item(id="a", lang="en", model_input="who founded rome", model_output_text="x"),
        Item(id="b", lang="en", model_input="capital of peru", model_output_text="x"),
        Item(id="c", lang="en", model_input="height of everest", model_output_text="x"),
    ]
    write_lines(tmp_path / "val.en.retrieved.jsonl", [{"id": "a", "context": "Rome was founded by Romulus."}])
    backend = Scripted({"b": ["the capital of peru is lima"], "c": ["bananas are yellow fruit"]})
    st = generate_contexts(
        "val",
        "en",
        items,
        backend,
        source="gen",
        tiers=("retrieved",),
        grading="embedding",
        min_similarity=0.3,
        context_dir=tmp_path,
        encoder=FakeEncoder(),
    )
    assert (st.covered_by_tiers, st.generated, st.kept, st.dropped) == (1, 2, 1, 1)
    assert [r.key for r in backend.seen] == ["b", "c"]
    ctx = load_contexts("val", "en", ("retrieved", "gen"), allow_missing_source=True, context_dir=tmp_path)
    assert [c.text for c in ctx.by_id["b"]] == ["the capital of peru is lima"] and "c" not in ctx.by_id
    grades = [json.loads(line) for line in (tmp_path / "val.en.gen.grades.jsonl").read_text().splitlines()]
    assert {g["id"]: g["relevant"] for g in grades if "tier" not in g} == {"b": True, "c": False}
    assert [(g["id"], g["tier"], g["relevant"]) for g in grades if "tier" in g] == [("a", "retrieved", True)]
    # resume with the same grading: nothing is sent again
    again = Scripted({})
    st2 = generate_contexts(
        "val", "en", items, again, source="gen", tiers=("retrieved",), grading="embedding",
        context_dir=tmp_path, encoder=FakeEncoder(),
    )  # fmt: skip
    assert again.seen == [] and st2.already_generated == 2
    # without grading, the context the embedding grade dropped is made again and kept
    ungraded = Scripted({"c": ["bananas are yellow fruit"]})
    st3 = generate_contexts(
        "val", "en", items, ungraded, source="gen", tiers=("retrieved",), context_dir=tmp_path
    )
    assert [r.key for r in ungraded.seen] == ["c"] and (st3.already_generated, st3.kept) == (1, 1)
    # the grades file beside the source is no source of its own
    from mushroom.data.contexts import available_sources

    assert available_sources("val", "en", tmp_path) == ["gen", "retrieved"]
    # nor is the contexts command's response cache, `.cache.<source>.jsonl`
    (tmp_path / ".cache.other.jsonl").write_text("")
    from mushroom.data.contexts import exists_anywhere

    assert not exists_anywhere("other", tmp_path) and exists_anywhere("gen", tmp_path)


def test_context_stage_llm_grading_over_loopback(tmp_path):
    items = [Item(id="q1", lang="en", model_input="Who painted the Mona Lisa?", model_output_text="x")]
    script = {
        "Is the background text": [("ok", "Irrelevant.")],
        "Mona Lisa": [("ok", "It is a painting by Leonardo.")],
    }
    with FakeServer(script) as server:
        backend = build_backend_for(server.url)
        st = generate_contexts("test", "en", items, backend, source="g", grading="llm", context_dir=tmp_path)
    assert (st.generated, st.dropped, st.kept, st.without_context) == (1, 1, 0, 1)
    # a re-run asks nothing, and still says the item has no usable context
    again = generate_contexts("test", "en", items, backend, source="g", grading="llm", context_dir=tmp_path)
    assert (again.already_generated, again.without_context) == (1, 1)
    # the source is there and empty: a detector reads it as "no usable context" (it refused
    # a source with no file, so a split where every context was dropped could not be run)
    from mushroom.data.contexts import load_contexts

    assert (tmp_path / "test.en.g.jsonl").read_text() == ""
    assert load_contexts("test", "en", ("g",), context_dir=tmp_path).by_id.get("q1", []) == []


def build_backend_for(url):
    from mushroom.backends import build_backend

    return build_backend({"kind": "openai", "model": "m", "base_url": url})


def test_context_stage_from_recorded_responses_through_the_cli(tmp_path):
    from typer.testing import CliRunner

    from mushroom.cli.app import app
    from mushroom.data.splits import load_split

    items = load_split("val", ["it"])["it"][:2]
    replay = write_lines(
        tmp_path / "r.jsonl", [{"id": it.id, "response": f"Background for {it.id}."} for it in items]
    )
    args = ["contexts", "--split", "val", "--lang", "it", "--backend", "replay", "--responses", str(replay)]
    args += ["--source", "rec", "--context-dir", str(tmp_path)]
    res = CliRunner().invoke(app, [*args, "--limit", "2"])
    assert res.exit_code == 0, res.output
    ctx = load_contexts("val", "it", ("rec",), context_dir=tmp_path)
    assert {i: [c.text for c in cs] for i, cs in ctx.by_id.items()} == {
        it.id: [f"Background for {it.id}."] for it in items
    }
    raw = (tmp_path / ".raw" / "val.it.rec.jsonl").read_text().splitlines()
    assert len(raw) == 2 and all(json.loads(line)["stage"] == "context" for line in raw)
    # the raw file replays into the same contexts, with no model
    again = tmp_path / "again"
    replayed = ["contexts", "--split", "val", "--lang", "it", "--backend", "replay", "--limit", "2"]
    replayed += [
        "--responses",
        str(tmp_path / ".raw" / "val.it.rec.jsonl"),
        "--source",
        "rec",
        "--context-dir",
        str(again),
    ]
    res = CliRunner().invoke(app, replayed)
    assert res.exit_code == 0, res.output
    assert (again / "val.it.rec.jsonl").read_text() == (tmp_path / "val.it.rec.jsonl").read_text()
    # the other 48 items have no recorded response: failed, nothing written for them, exit 3
    res = CliRunner().invoke(app, args)
    assert isinstance(res.exception, RunFailed) and "48 contexts could not be generated" in str(res.exception)
    # the same command would fail them again: the advice says what would help instead
    assert "a re-run would fail them again" in str(res.exception) and "Run the same command" not in str(
        res.exception
    )
    assert any(
        line.split("│")[4].strip() == "2"
        for line in res.output.splitlines()
        if "│  " in line and " it " in line
    )  # done before


def test_a_failed_grading_call_fails_the_item_and_a_rerun_grades_it(tmp_path):
    # a grading call that failed counted the context as kept, and it was never graded again
    items = [Item(id="q1", lang="en", model_input="Who painted the Mona Lisa?", model_output_text="x")]

    def grade(verdict: tuple):
        script = {"Is the background text": [verdict], "Mona Lisa": [("ok", "It is a painting by Leonardo.")]}
        with FakeServer(script) as server:
            backend = build_backend_for(server.url)
            return generate_contexts(
                "test", "en", items, backend, source="g", grading="llm", context_dir=tmp_path
            )

    st = grade(("status", 400))
    assert (st.generated, st.failed, st.kept) == (0, 1, 0) and "grading failed: HTTP 400" in st.errors[0]
    assert not (tmp_path / "test.en.g.jsonl").exists() and not (tmp_path / "test.en.g.grades.jsonl").exists()
    st = grade(("ok", "Relevant."))
    assert (st.failed, st.kept) == (0, 1)


def test_a_reasoning_model_s_thinking_is_not_a_context_and_an_unread_verdict_is_counted(tmp_path):
    """A <think> block became the start of the context; a verdict like "Maybe" was kept uncounted."""
    items = [
        Item(id="q1", lang="en", model_input="Who painted the Mona Lisa?", model_output_text="x"),
        Item(id="q2", lang="en", model_input="Who wrote Hamlet?", model_output_text="y"),
        Item(id="q3", lang="en", model_input="Who built the Eiffel Tower?", model_output_text="z"),
    ]
    script = {
        "Is the background text": [
            ("ok", "<think>hmm</think>Relevant."),
            ("ok", "Maybe."),
            ("ok", "Relevant"),
        ],
        "Mona Lisa": [("ok", "<think>The user asks about art.</think>\nIt is a painting by Leonardo.")],
        "Hamlet": [("ok", "Hamlet is a play by Shakespeare.")],
        "Eiffel": [("ok", "<think>Let me recall who built")],  # cut off while thinking
    }
    with FakeServer(script) as server:
        backend = build_backend_for(server.url)
        st = generate_contexts("test", "en", items, backend, source="g", grading="llm", context_dir=tmp_path)
    assert (st.generated, st.failed, st.kept, st.unreadable_verdicts) == (2, 1, 2, 1)
    assert st.errors == ["q3: only reasoning, no context after it"]
    ctx = load_contexts("test", "en", ("g",), context_dir=tmp_path)
    assert ctx.by_id["q1"][0].text == "It is a painting by Leonardo."
    grades = [json.loads(line) for line in (tmp_path / "test.en.g.grades.jsonl").read_text().splitlines()]
    assert [g["readable"] for g in grades] == [True, False]


VERIFY3 = json.dumps(
    {
        "verdicts": [
            {"claim": 1, "verdict": "supported", "incorrect_spans": []},
            {
                "claim": 2,
                "verdict": "contradicted",
                "incorrect_spans": [{"text": "Berlin", "probability": 0.9}],
            },
            {"claim": 3, "verdict": "not_in_context", "incorrect_spans": [], "reason": "no prizes named"},
        ]
    }
)


def test_a_claim_the_context_does_not_settle_is_unverifiable_painted_apart_and_recorded():
    from mushroom.data.spans import soft_to_vector

    backend = Scripted({"v-1#decompose": [DECOMPOSE], "v-1#verify": [VERIFY3]})
    det = ChainDetector(ChainOptions(cache=False, unverifiable_probability=0.3), backend)
    results = []
    det.run([ITEM], CTX, results.append)
    (res,) = results
    s = Counter(res.stats)
    assert (s["chain.false_claims"], s["chain.unverifiable"], s["chain.unreadable_verdicts"]) == (1, 1, 0)
    n = len(ANSWER)
    start = ANSWER.index("won two Nobel Prizes")
    end = start + len("won two Nobel Prizes")
    vec = soft_to_vector(res.prediction.soft_labels, n)
    assert np.allclose(vec[start:end], 0.3) and vec[ANSWER.index("Berlin")] == pytest.approx(0.9)
    assert [list(h) for h in res.prediction.hard_labels] == [[32, 38]]  # 0.3 is no hard span
    channel = soft_to_vector(res.channels["unverifiable"], n)
    assert channel[start:end].min() == 1.0 and channel.sum() == end - start  # the claim alone
    assert res.detail["unverifiable"] == [
        {"claim": 3, "text": "won two Nobel Prizes", "start": start, "end": end, "reason": "no prizes named"}
    ]
    # the prompt and the decoding schema ask for the third verdict
    request = backend.seen[1]
    assert "not_in_context" in request.messages[-1].content
    enum = request.json_schema["$defs"]["Verdict"]["properties"]["verdict"]["enum"]
    assert enum == ["supported", "contradicted", "not_in_context"]


def test_an_old_two_way_reply_paints_as_before_with_nothing_unverifiable():
    from mushroom.data.spans import soft_to_vector

    backend = Scripted({"v-1#decompose": [DECOMPOSE], "v-1#verify": [VERIFY]})
    results = []
    ChainDetector(ChainOptions(cache=False), backend).run([ITEM], CTX, results.append)
    (res,) = results
    assert res.stats.get("chain.unverifiable", 0) == 0 and res.detail["unverifiable"] == []
    assert soft_to_vector(res.channels["unverifiable"], len(ANSWER)).sum() == 0
    assert [(s.start, s.end, s.prob) for s in res.prediction.soft_labels] == [(32, 38, pytest.approx(0.9))]


def test_claims_and_wrong_spans_the_chain_cannot_read_are_counted():
    """A claim with no answer text, or a wrong span with no text, was dropped with no counter:
    that part of the answer went unchecked and the item read as "nothing wrong" (a review)."""
    decompose = json.dumps(
        {
            "claims": [
                {"claim": "Curie was born in 1867", "substring": "born in 1867"},
                {"claim": "Curie was born in Berlin", "span": "in Berlin"},
            ]
        }
    )
    verify = json.dumps(
        {
            "verdicts": [
                {"claim": 1, "verdict": "contradicted", "incorrect_spans": [{"text": "1867"}, {"wrong": "x"}]}
            ]
        }
    )
    s, pred, _ = run_chain({"v-1#decompose": [decompose], "v-1#verify": [verify]})
    assert (s["chain.claims"], s["chain.unreadable_claims"], s["chain.invalid_entries"]) == (1, 1, 1), s
    assert [list(h) for h in pred.hard_labels] == [[24, 28]]


def test_an_item_without_usable_context_is_not_verified_but_counted_as_context_none():
    empty = {"v-1": [Context(source="g", text="  ")]}
    s, pred, backend = run_chain({"v-1#decompose": [DECOMPOSE]}, ctx=empty)
    assert [r.key for r in backend.seen] == ["v-1#decompose"]  # no verdict against nothing
    assert (s["context.none"], s["chain.unverifiable"], s["verify.requests"]) == (1, 3, 0)
    assert pred.hard_labels == [] and {sp.prob for sp in pred.soft_labels} == {0.4}


def test_graded_tiers_fall_through_to_the_next_tier_then_generation_then_no_context(tmp_path):
    """A loopback grader rejects tier 1 for b; b falls to tier 2, c through both to generation."""
    items = [
        Item(id="a", lang="en", model_input="Who founded Rome?", model_output_text="Romulus founded Rome."),
        Item(id="b", lang="en", model_input="What is the capital of Peru?", model_output_text="Lima."),
        Item(id="c", lang="en", model_input="How high is Everest?", model_output_text="It is 8849 m high."),
        Item(id="d", lang="en", model_input="Who wrote Hamlet?", model_output_text="Shakespeare."),
    ]
    write_lines(
        tmp_path / "val.en.t1.jsonl",
        [{"id": "a", "context": "T1A Rome was founded by Romulus."}, {"id": "b", "context": "T1B Bananas."}],
    )
    write_lines(
        tmp_path / "val.en.t2.jsonl",
        [{"id": "b", "context": "T2B Lima is the capital of Peru."}, {"id": "c", "context": "T2C Pears."}],
    )
    script = {  # grading prompts first: they also hold the question the generation prompt holds
        "T1A": [("ok", "Relevant")],
        "T1B": [("ok", "Irrelevant")],
        "T2B": [("ok", "Relevant")],
        "T2C": [("ok", "Irrelevant")],
        "GENC": [("ok", "Irrelevant")],
        "GEND": [("ok", "Relevant")],
        "Everest": [("ok", "GENC Apples grow on trees.")],
        "Hamlet": [("ok", "GEND Hamlet is a play by Shakespeare.")],
    }

    def run(script):
        with FakeServer(script) as server:
            st = generate_contexts(
                "val", "en", items, build_backend_for(server.url), source="g", tiers=("t1", "t2"),
                grading="llm", context_dir=tmp_path,
            )  # fmt: skip
        return st, server

    st, server = run(script)
    assert (st.covered_by_tiers, st.tier_rejected, st.generated, st.kept, st.dropped) == (2, 2, 2, 1, 1)
    assert st.failed == 0
    # tier 1 is graded for a and b only; tier 2 only for b and c, which tier 1 did not serve
    prompts = [c["body"]["messages"][-1]["content"] for c in server.calls]
    graded = [m for m in prompts if "Background text:" in m]
    assert sorted(m.split("Background text:\n")[1].split()[0] for m in graded) == [
        "GENC", "GEND", "T1A", "T1B", "T2B", "T2C"
    ]  # fmt: skip
    ctx = load_contexts("val", "en", ("g",), context_dir=tmp_path).by_id
    assert {i: [c.text for c in cs] for i, cs in ctx.items()} == {
        "a": ["T1A Rome was founded by Romulus."],
        "b": ["T2B Lima is the capital of Peru."],
        "d": ["GEND Hamlet is a play by Shakespeare."],
    }
    rows = [json.loads(line) for line in (tmp_path / "val.en.g.jsonl").read_text().splitlines()]
    assert {r["id"]: r.get("tier") for r in rows} == {"a": "t1", "b": "t2", "d": None}
    grades = [json.loads(line) for line in (tmp_path / "val.en.g.grades.jsonl").read_text().splitlines()]
    assert {(g["id"], g.get("tier")): g["relevant"] for g in grades} == {
        ("a", "t1"): True, ("b", "t1"): False, ("b", "t2"): True, ("c", "t2"): False,
        ("c", None): False, ("d", None): True,
    }  # fmt: skip
    assert [g["id"] for g in grades if g.get("no_usable_context")] == ["c"]
    # read beside its own tiers, the chosen contexts count twice and the rejected ones are read
    from mushroom.data.contexts import stray_contexts

    said = stray_contexts("val", {"en": items}, ["g", "t1", "t2?"], tmp_path)
    assert said == [
        "val/en: context source 'g' holds the contexts it chose of its tiers 't1', 't2', named here "
        "too: their contexts count twice, and those it graded irrelevant are read; give --contexts g alone"
    ]
    assert stray_contexts("val", {"en": items}, ["g"], tmp_path) == []
    (
        tmp_path / "val.en.adir.jsonl"
    ).mkdir()  # was "no context file for source 'adir' ... did you mean 'adir'?"
    with pytest.raises(
        MushroomError, match=r"context source 'adir': .*val.en.adir.jsonl is a folder, expected a file"
    ):
        load_contexts("val", "en", ("adir",), context_dir=tmp_path)
    # resumed: every grade and context is on file, nothing is asked again
    st2, server2 = run({})
    assert server2.calls == [] and (st2.covered_by_tiers, st2.already_generated, st2.failed) == (2, 2, 0)
    assert (tmp_path / "val.en.g.jsonl").read_text().count("\n") == 3  # nothing copied twice
    # an ungraded run without tiers keeps the chosen contexts: only c, dropped by the grade, is made
    with FakeServer({}, default_text="Everest is 8849 m high.") as server3:
        st3 = generate_contexts(
            "val", "en", items, build_backend_for(server3.url), source="g", context_dir=tmp_path
        )
    assert len(server3.calls) == 1 and (st3.already_generated, st3.kept) == (3, 1)
    assert len(load_contexts("val", "en", ("g",), context_dir=tmp_path).by_id) == 4  # still one line per id
    # c has no usable context: the chain says so instead of verifying against nothing
    c_item = items[2]
    decompose = json.dumps({"claims": [{"claim": "Everest is 8849 m", "substring": "8849 m"}]})
    s, pred, backend = run_chain({"c#decompose": [decompose]}, item=c_item, ctx=ctx)
    assert (s["context.none"], s["chain.unverifiable"]) == (1, 1) and len(backend.seen) == 1


def test_a_tier_context_rewritten_after_its_grade_is_graded_again(tmp_path):
    """An off-topic tier file replaced by the right one was judged by the old verdicts: the
    items were generated (and paid for) although the tier now served them."""
    items = [Item(id="b", lang="en", model_input="What is the capital of Peru?", model_output_text="Lima.")]
    tier = tmp_path / "val.en.t1.jsonl"
    write_lines(tier, [{"id": "b", "context": "T1B Bananas are yellow."}])

    def run(script):
        with FakeServer(script) as server:
            st = generate_contexts(
                "val", "en", items, build_backend_for(server.url), source="g", tiers=("t1",),
                grading="llm", context_dir=tmp_path,
            )  # fmt: skip
        return st, server

    st, _ = run({"T1B": [("ok", "Irrelevant")], "Peru": [("status", 400)]})
    assert (st.tier_rejected, st.failed, st.generated) == (1, 1, 0)
    write_lines(tier, [{"id": "b", "context": "T1N Lima is the capital of Peru."}])
    st, server = run({"T1N": [("ok", "Relevant")]})
    assert (st.covered_by_tiers, st.tier_rejected, st.generated, st.failed) == (1, 0, 0, 0)
    assert len(server.calls) == 1  # the new text graded, nothing generated
    # the same text again is not asked again: its grade is on file
    st, server = run({})
    assert server.calls == [] and (st.covered_by_tiers, st.generated) == (1, 0)


def test_a_chain_run_writes_the_unverifiable_channel_and_the_stack_takes_it_as_a_feature(tmp_path, capsys):
    from cli_helpers import cli

    from mushroom.combine.stack.features import feature_names
    from mushroom.combine.stack.members import Member, load_member_evidence
    from mushroom.data.runfolder import prediction_folder
    from mushroom.data.splits import load_split

    # one reply for both stages: a claim on the answer's first character, not in the context
    items = load_split("val", ["it"])["it"][:2]
    first = items[0].model_output_text[0]
    reply = json.dumps(
        {
            "claims": [{"claim": "c", "substring": first}],
            "verdicts": [{"claim": 1, "verdict": "not_in_context", "incorrect_spans": [], "reason": "r"}],
        }
    )
    out = tmp_path / "chain"
    with FakeServer({}, default_text=reply) as server:
        code, _, err = cli(
            capsys, "detect", "--detector", "chain", "--split", "val", "--lang", "it", "--limit", "2",
            "-o", "backend.kind=openai", "-o", "backend.model=m", "-o", f"backend.base_url={server.url}",
            "--out", out, "--quiet",
        )  # fmt: skip
    assert code == 0, err
    stats = json.loads((prediction_folder(out, "val") / "stats.json").read_text())
    assert "chain.unverifiable" in json.dumps(stats)
    per_member, found = load_member_evidence([Member("chain", out)], "val", {"it": items})
    assert found == [{"it": ["unverifiable"]}]
    _, chans = per_member[0][items[0].id]
    assert chans["unverifiable"][0] == 1.0
    assert "chain.unverifiable" in feature_names(["chain"], [found[0]["it"]], ["it"])
    # and the report shows the claim in its own colour, with the model's reason
    from mushroom.evaluation.report import UNVERIFIABLE_COLOUR, build_report

    page = build_report(out, "val", ["it"]).html
    assert (
        len(
            re.findall(
                rf'class="seg[^"]*unverifiable" style="background:{re.escape(UNVERIFIABLE_COLOUR)}"', page
            )
        )
        == 2
    )
    assert page.count('title="unverifiable: r; p=0.400"') == 2


def test_a_new_min_similarity_judges_again_what_an_old_cut_dropped(tmp_path):
    items = [Item(id="a", lang="en", model_input="who founded rome", model_output_text="x")]
    write_lines(tmp_path / "val.en.retrieved.jsonl", [{"id": "a", "context": "Rome was founded by Romulus."}])

    def run(cut, backend):
        return generate_contexts(
            "val", "en", items, backend, source="gen", tiers=("retrieved",), grading="embedding",
            min_similarity=cut, context_dir=tmp_path, encoder=FakeEncoder(),
        )  # fmt: skip

    # a cut no context can pass: the tier's context and the generated one are both dropped
    first = Scripted({"a": ["bananas are yellow fruit"]})
    run(0.99, first)
    ctx = load_contexts("val", "en", ("retrieved", "gen"), allow_missing_source=True, context_dir=tmp_path)
    assert [r.key for r in first.seen] == ["a"]
    assert not (tmp_path / "val.en.gen.jsonl").exists() or "a" not in {
        json.loads(line)["id"] for line in (tmp_path / "val.en.gen.jsonl").read_text().splitlines()
    }
    # the usual cut: the recorded cosine of the tier's context is judged again, and it passes
    st = run(0.3, Scripted({}))
    assert st.covered_by_tiers == 1
    rows = [json.loads(line) for line in (tmp_path / "val.en.gen.jsonl").read_text().splitlines()]
    assert [(r["id"], r["tier"]) for r in rows] == [("a", "retrieved")]
    assert run(0.3, Scripted({})).covered_by_tiers == 1  # the same command again goes on
    del ctx
    # a stricter cut again cannot take back what the source file holds: refused, not ignored
    from mushroom.errors import MushroomError

    with pytest.raises(
        MushroomError,
        match="1 context was kept under a lower --min-similarity than 0.99 and is in val.en.gen.jsonl",
    ):
        run(0.99, Scripted({}))


def test_a_grading_the_source_was_not_made_under_is_refused_not_ignored(tmp_path):
    """A source generated with --grade none, run again with --grade embedding, exited 0 with
    "done before 1": its contexts were never graded, and nothing said so."""
    from mushroom.errors import MushroomError

    items = [Item(id="a", lang="en", model_input="who founded rome", model_output_text="x")]

    def run(grading, backend):
        return generate_contexts(
            "val", "en", items, backend, source="gen", grading=grading, context_dir=tmp_path,
            encoder=FakeEncoder(),
        )  # fmt: skip

    run("none", Scripted({"a": ["Rome was founded by Romulus."]}))
    with pytest.raises(MushroomError, match="1 context in val.en.gen.jsonl was kept under --grade none"):
        run("embedding", Scripted({}))
    with pytest.raises(MushroomError, match="give another --source"):
        run("llm", Scripted({}))
    assert run("none", Scripted({})).already_generated == 1  # the grading it was made under goes on


def test_a_contexts_rerun_asks_again_for_an_empty_answer_checks_the_model_and_drops_a_cut_line(
    tmp_path, capsys
):
    """An empty answer was cached, so the advised re-run never asked again; a mistyped --model
    was checked only in a folder without a cache; a line cut by a kill was glued to the next."""
    from cli_helpers import cli

    from mushroom.data.contexts import load_contexts

    ctx = tmp_path / "ctx"

    def contexts(url, limit=2, model="m"):
        return cli(
            capsys, "contexts", "--lang", "en", "--limit", str(limit), "--backend", "openai",
            "--base-url", url, "--model", model, "--context-dir", ctx, "-o", "max_retries=0",
        )  # fmt: skip

    with FakeServer({}, "") as empty:
        code, _, err = contexts(empty.url)
    assert code == 3 and "empty context" in err, err
    with FakeServer({}, "Some background on the question.") as good:
        code, _, err = contexts(good.url)
        assert code == 0 and len(good.calls) == 2, err  # both asked again, not read from the cache
        code, _, err = contexts(good.url, model="mm")
        assert code == 2 and "serves only 'm', not 'mm'" in err, err
        source = ctx / "val.en.llm.jsonl"
        with source.open("a", encoding="utf-8") as handle:
            handle.write('{"id": "val-en-99", "context": "cut by a ki')
        code, _, err = contexts(good.url, limit=3)
        assert code == 0, err
    assert len(load_contexts("val", "en", ("llm",), context_dir=ctx).by_id) == 3


def test_the_contexts_command_says_what_a_retry_saved(tmp_path, capsys):
    """A server that needed a retry for every context passed unseen: the command said nothing."""
    from cli_helpers import cli

    script = {"": [("status", 503, '{"error": "overloaded"}'), ("ok", "Background.")] * 2}
    with FakeServer(script) as server:
        code, _, err = cli(
            capsys, "contexts", "--lang", "en", "--limit", "2", "--backend", "openai", "--base-url",
            server.url, "--model", "m", "--context-dir", tmp_path / "ctx", "-o", "max_retries=1",
        )  # fmt: skip
    assert code == 0, err
    assert "2 failed attempts sent again (HTTP 503 x2); 2 requests answered that way" in " ".join(err.split())


def test_a_tier_file_of_other_items_is_refused_or_warned_of_before_generating(tmp_path, capsys):
    """A tier file of another language covered nothing, and every item was generated (and
    paid for) with nothing said; `detect` warned of the same file."""
    from cli_helpers import cli

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    tier = ctx / "val.en.mine.jsonl"
    tier.write_text('{"id": "val-de-1", "context": "Hintergrund."}\n')
    args = [
        "contexts",
        "--lang",
        "en",
        "--limit",
        "2",
        "--tiers",
        "mine",
        "--backend",
        "openai",
        "--model",
        "m",
    ]
    with FakeServer({}, "Background.") as server:
        run = [*args, "--base-url", server.url, "--context-dir", ctx]
        code, _, err = cli(capsys, *run)
        told = " ".join(err.split())
        assert code == 2 and f"--tiers {tier}: none of its ids is the id of an item of val/en" in told, err
        assert server.calls == []
        tier.write_text('{"id": "val-en-1", "context": "Background."}\n{"id": "val-xx-9", "context": "x"}\n')
        code, _, err = cli(capsys, *run)
    told = " ".join(err.split())
    assert code == 0 and "context source 'mine'" in told and "1 is not for an item of val/en" in told, err
    # a cascade's plan sends some items: the tier file is still of the whole split, not strays
    from mushroom.data.splits import load_split
    from mushroom.retrieval.run import generate_split

    ids = [it.id for it in load_split("val", ["en"])["en"][:5]]
    tier.write_text("".join(f'{{"id": "{i}", "context": "Background."}}\n' for i in ids[2:]))
    with FakeServer({}, "Background.") as server:
        backend = {"kind": "openai", "model": "m", "base_url": server.url}
        run = generate_split("val", ["en"], backend, tiers="mine", context_dir=ctx, only={"en": set(ids[:2])})
    assert run.warnings == [] and not run.failed, run.warnings  # (one of the two was made above)


def test_two_contexts_commands_on_one_folder_do_not_run_at_once(tmp_path, capsys):
    """Two runs at once wrote every id twice to the source, and both exited 0."""
    import fcntl

    from cli_helpers import cli

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    with open(ctx / ".lock", "a+") as other:  # as another process's run holds it
        other.write("4242")
        other.flush()
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with FakeServer({}, "Background.") as server:
            args = ["contexts", "--lang", "en", "--limit", "2", "--backend", "openai", "--model", "m"]
            code, _, err = cli(capsys, *args, "--base-url", server.url, "--context-dir", ctx)
            told = " ".join(err.split())
            assert code == 2 and "is in use by another mushroom run (pid 4242)" in told, err
            assert "choose another --context-dir" in told and server.calls == [], err
    dead = ["--base-url", "http://127.0.0.1:9/v1"]
    code, _, err = cli(capsys, *args, *dead, "--context-dir", ctx / ".lock")
    assert code == 2 and "--context-dir" in err and "is a file" in err, err


def test_a_broken_line_inside_a_generated_source_or_its_grades_stops_the_contexts_command(tmp_path, capsys):
    """A broken middle line was skipped unsaid: `contexts` exited 0 and regenerated the item
    beside it, and every detector reading the source then stopped on that line."""

    ctx = tmp_path / "ctx"

    def contexts(url, *extra):
        return _contexts(capsys, url, ctx, 3, *extra)

    with FakeServer({}, "Some background on the question.") as good:
        code, _, err = contexts(good.url, "--grade", "llm")
        assert code == 0, err
        for name in ("val.en.llm.jsonl", "val.en.llm.grades.jsonl"):
            path = ctx / name
            kept = path.read_text()
            lines = kept.splitlines(keepends=True)
            path.write_text(lines[0] + '{"id": "val-en-2", "cont\n' + "".join(lines[2:]))
            calls = len(good.calls)
            code, _, err = contexts(good.url, "--grade", "llm")
            told = " ".join(err.split())
            assert code == 1 and f"{path}:2" in told and "invalid JSON" in told, err
            assert len(good.calls) == calls  # nothing asked again
            path.write_text(kept)
        # a source line that is JSON but no context passed as "done before", never made again
        # (a detector then stopped on it): read as detectors read it
        source = ctx / "val.en.llm.jsonl"
        kept = source.read_text()
        lines = kept.splitlines(keepends=True)
        broken = {
            "contxt": lines[0].replace('"context"', '"contxt"'),
            "(got None)": '{"id": "val-en-1", "context": null}\n',
            "duplicate id": lines[1],
        }
        for what, line in broken.items():
            source.write_text(line + kept if what.startswith("duplicate") else line + "".join(lines[1:]))
            code, _, err = contexts(good.url, "--grade", "llm")
            told = " ".join(err.split())
            assert code == 1 and f"{source}:" in told and what in told, err
            assert "delete or mend the line" in told, err
        source.write_text(kept)
        # a grade that is JSON but lacks its verdict ended in "internal error: KeyError" (exit 70)
        grades = ctx / "val.en.llm.grades.jsonl"
        kept = grades.read_text()
        for line, what in (
            ('{"id": "val-en-1", "grading": "llm", "tier": "t", "verdict": "irrelevant"}\n', "relevant"),
            ('{"id": "val-en-1", "grading": "llm", "relevant": null}\n', "relevant"),
            ('{"id": "val-en-1", "relevant": true}\n', "grading"),
            # read as False, but the code reads the row: the text "false" is true there
            ('{"id": "val-en-1", "grading": "llm", "relevant": "false"}\n', "relevant"),
        ):
            grades.write_text(line + kept)
            code, _, err = contexts(good.url, "--grade", "llm")
            told = " ".join(err.split())
            assert (
                code == 1
                and f"{grades}:1: id 'val-en-1': field '{what}'" in told
                and "mend the line, then run again (a grade deleted is not asked again)" in told
            ), err
        grades.write_text(kept)


def test_the_contexts_command_names_grading_failures_and_the_files_of_unread_verdicts(tmp_path, capsys):
    """A grading call that failed was told as a context that "could not be generated", and
    unread verdicts pointed at `val.<lang>.llm.grades.jsonl`, a file of no name."""
    from cli_helpers import cli

    ctx = tmp_path / "ctx"
    args = ["contexts", "--lang", "en,de", "--limit", "2", "--backend", "openai", "--model", "m",
            "--context-dir", ctx, "--grade", "llm", "-o", "max_retries=0"]  # fmt: skip
    with FakeServer({"Is the background text": [("ok", "Perhaps.")]}, "Background on it.") as server:
        code, said, err = cli(capsys, *args, "--base-url", server.url)
    told = " ".join(err.split())
    files = f"{ctx / 'val.en.llm.grades.jsonl'}, {ctx / 'val.de.llm.grades.jsonl'}"
    assert (
        code == 0
        and f"4 grading verdicts said neither relevant nor irrelevant; those contexts were kept (verdicts in {files})"
        in told
    ), err
    assert "<lang>" not in told
    with FakeServer({"Is the background text": [("status", 400)]}, "Background on it.") as server:
        code, said, err = cli(capsys, *args[:4], "3", *args[5:], "--base-url", server.url)
    told = " ".join(err.split())
    assert code == 3 and "2 contexts could not be graded" in told and "could not be generated" not in told, (
        err
    )


def test_the_contexts_table_splits_its_columns_at_80_columns_instead_of_cutting_headers():
    """Eleven counts do not fit 80 columns: rich cut "done before" to "bef…", a count no one
    could name. The table is printed in parts, each with the language column."""
    import io

    from rich.console import Console

    from mushroom.cli.tables import fitted_tables
    from mushroom.retrieval.run import COLUMNS
    from mushroom.runs.reporter import Table

    columns = [*COLUMNS, "tier rejections", "kept unread", "no usable context"]
    rows = [
        ["en", 154, 20, 0, 134, 0, 120, 14, 5, 0, 14],
        ["all", 1932, 200, 0, 1732, 0, 1600, 132, 50, 0, 132],
    ]
    out = io.StringIO()
    console = Console(file=out, width=80)
    parts = fitted_tables(Table("contexts: val, source 'gen'", columns=columns, rows=rows), console)
    for part in parts:
        console.print(part)
    text = out.getvalue()
    assert len(parts) > 1 and "…" not in text and max(map(len, text.splitlines())) <= 80
    headers = " ".join(
        " ".join(line.strip("┃ ").split()) for line in text.splitlines() if line.startswith("┃")
    )
    for column in columns:  # a header rich wrapped over lines is still whole in its words
        assert all(word in headers.split() for word in column.split()), column
    assert text.count("1932") == 1 and sum(line.split()[1:2] == ["all"] for line in text.splitlines()) == len(
        parts
    )
    wide = io.StringIO()
    assert len(fitted_tables(Table("t", columns=columns, rows=rows), Console(file=wide, width=140))) == 1


def test_an_empty_decompose_reply_is_retried_and_fails_the_item_when_the_retry_is_empty_too():
    """An empty reply decomposed into nothing: an empty prediction, exit 0."""
    s, error, backend = run_chain({"v-1#decompose": [""], "v-1#decompose#retry": [""]}, status="failed")
    assert error == "every decompose reply was empty: a re-run asks again"
    assert s["decompose.empty"] == s["decompose.retry.empty"] == 1 and len(backend.seen) == 2
    assert "the reply was empty" in backend.seen[1].messages[-1].content
    # the retry that answers is used
    s, pred, _ = run_chain(
        {"v-1#decompose": [""], "v-1#decompose#retry": [DECOMPOSE], "v-1#verify": [VERIFY]}
    )
    assert [list(h) for h in pred.hard_labels] == [[32, 38]] and s["decompose.empty"] == 1
    # an empty reply, then prose: no claims to read, so no "nothing wrong" either; the item fails
    s, error, _ = run_chain({"v-1#decompose": [""], "v-1#decompose#retry": ["no idea"]}, status="failed")
    assert UNREADABLE in error and s["chain.decomposition_failures"] == 1


def test_an_empty_reply_cut_off_at_max_tokens_fails_the_item_as_cut_off():
    """A reasoning model's content is null when it used max_tokens: read as invalid JSON, the
    item became "nothing wrong"."""
    s, error, _ = run_chain(
        {"v-1#decompose": [("", 100000)], "v-1#decompose#retry": [("", 100000)]}, status="failed"
    )
    assert error == f"every decompose reply was cut off: {CUT_OFF} (1024); raise max_tokens"
    assert s["decompose.cut_empty"] == s["decompose.retry.cut_empty"] == 1 and s["chain.truncated"] == 2


def _generate(ctx, limit: int) -> list:
    """`mushroom contexts` on the first English val items, into `ctx`, from an OpenAI-style server."""
    return ["contexts", "--lang", "en", "--limit", str(limit), "--backend", "openai", "--model", "m", "--context-dir", ctx]  # fmt: skip


def test_a_context_lost_after_its_grade_was_written_is_generated_again_from_the_cache(tmp_path, capsys):
    """The grade is written before the context: a kill between the two lines, or a source file
    deleted to generate again, left items "done before" with no context, never asked again."""
    from cli_helpers import cli

    from mushroom.data.contexts import load_contexts

    ctx = tmp_path / "ctx"
    args = _generate(ctx, 2)
    with FakeServer({}, "Some background on the question.") as server:
        code, _, err = cli(capsys, *args, "--base-url", server.url)
        assert code == 0 and len(server.calls) == 2 and "came from answers" not in err, err
        source = ctx / "val.en.llm.jsonl"
        first, second = source.read_text().splitlines()
        source.write_text(first + "\n" + second[:20])  # a kill cut the second context's line
        code, out, err = cli(capsys, *args, "--base-url", server.url)
        assert code == 0, err
        assert len(load_contexts("val", "en", ("llm",), context_dir=ctx).by_id) == 2
        source.unlink()  # deleted, to be written again
        code, out, err = cli(capsys, *args, "--base-url", server.url)
        assert code == 0, err
        assert len(load_contexts("val", "en", ("llm",), context_dir=ctx).by_id) == 2
        assert len(server.calls) == 2  # both times from the response cache
        said = " ".join(err.split())
        assert "2 generated contexts came from answers in the response cache" in said, said


def test_a_source_name_read_as_something_else_and_a_tier_named_twice_are_refused(tmp_path, capsys):
    from cli_helpers import cli

    ctx = tmp_path / "ctx"
    base = _generate(ctx, 1)
    base += ["--base-url", "http://127.0.0.1:9/v1"]
    for source, said in (("e3.grades", "the grades of another source"), ("qa_mine", "a fact-check source")):
        code, _, err = cli(capsys, *base, "--source", source)
        assert code == 2 and f"--source {source}: a name like that is read as {said}" in err, err
    code, _, err = cli(capsys, *base, "--tiers", "deepseek-r1,deepseek-r1", "--grade", "embedding")
    assert code == 2 and "--tiers: context source deepseek-r1 named twice" in err, err
    code, _, err = cli(capsys, *base, "--tiers", "gen?", "--source", "gen")
    assert code == 2 and "'gen?' is the source being generated (--source), not a tier" in err, err
    # a source name is part of a file name: one with a path read a file outside the folder
    (ctx / "val.en.").mkdir(parents=True)
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "x.jsonl").write_text('{"id": "val-en-1", "context": "planted"}\n')
    code, _, err = cli(capsys, *base, "--tiers", "/../../evil/x", "--grade", "embedding")
    assert code == 2 and "--tiers: context source '/../../evil/x' cannot name a file" in err, err
    args = ["detect", "--lang", "en", "--limit", "1", "--out", tmp_path / "run"]
    code, _, err = cli(capsys, *args, "--contexts", "/../../evil/x?")
    assert code == 2 and "context source '/../../evil/x' cannot name a file" in err, err
    assert not (ctx / ".raw").exists() and not (tmp_path / "run").exists()


def test_a_min_similarity_without_embedding_grading_is_refused(tmp_path, capsys):
    """It was taken and did nothing: the contexts were graded by the llm, or not at all."""
    from cli_helpers import cli

    for grade in ("none", "llm"):
        code, _, err = cli(
            capsys, "contexts", "--lang", "en", "--limit", "1", "--backend", "openai", "--base-url",
            "http://127.0.0.1:9/v1", "--model", "m", "--context-dir", tmp_path, "--grade", grade,
            "--min-similarity", "0.5",
        )  # fmt: skip
        said = " ".join(err.split())
        assert code == 2 and "--min-similarity is the cut of --grade embedding" in said, said


def test_an_answer_decomposed_into_no_claims_is_left_unverifiable_not_nothing_wrong():
    """A random-weight model on a GPU decomposed answers into `{"claims": []}`: each scored as a check."""
    from mushroom.data.spans import soft_to_vector
    from mushroom.runs.service import unusable_warnings

    backend = Scripted({"v-1#decompose": ['{"claims": []}']})
    results = []
    ChainDetector(ChainOptions(cache=False), backend).run([ITEM], CTX, results.append)
    (res,) = results
    assert [r.key for r in backend.seen] == ["v-1#decompose"]  # nothing to verify
    s = Counter(res.stats)
    assert (s["chain.no_claims"], s["chain.claims"]) == (1, 0)
    n = len(ANSWER)
    assert (
        np.allclose(soft_to_vector(res.prediction.soft_labels, n), 0.4) and res.prediction.hard_labels == []
    )
    assert soft_to_vector(res.channels["unverifiable"], n).min() == 1.0
    (record,) = res.detail["unverifiable"]
    assert (record["start"], record["end"]) == (0, n) and "no claim" in record["reason"]
    (warning,) = unusable_warnings("chain:val en", {**s, "items.ok": 1})
    assert "1 of 1 answers were decomposed into no claims" in warning and "unverifiable" in warning


def test_a_claim_the_verify_reply_skips_is_left_unverifiable_not_supported():
    from mushroom.data.spans import soft_to_vector

    skips = json.dumps(
        {
            "verdicts": [
                {"claim": 1, "verdict": "supported"},
                {
                    "claim": 2,
                    "verdict": "contradicted",
                    "incorrect_spans": [{"text": "Berlin", "probability": 0.9}],
                },
                {"claim": 3, "verdict": "maybe"},  # unreadable: claim 3 was not judged
            ]
        }
    )
    s, pred, _ = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [skips]})
    assert (s["chain.claims_unjudged"], s["chain.unreadable_verdicts"], s["chain.unverifiable"]) == (1, 1, 0)
    vec = soft_to_vector(pred.soft_labels, len(ANSWER))
    start = ANSWER.index("won two Nobel Prizes")
    assert np.allclose(vec[start : start + len("won two Nobel Prizes")], 0.4)
    assert vec[ANSWER.index("Berlin")] == pytest.approx(0.9) and vec[: ANSWER.index("born")].max() == 0
    assert [list(h) for h in pred.hard_labels] == [[32, 38]]


def test_a_context_generated_for_an_old_question_is_said(tmp_path, capsys):
    """An item's question edited after its context was generated: resumed by id, the old
    question's context was kept with no word, and detectors read it (an audit)."""
    from cli_helpers import cli

    from mushroom.data.splits import load_split

    items = load_split("val", ["it"])["it"][:2]
    replay = write_lines(
        tmp_path / "r.jsonl", [{"id": it.id, "response": f"Background {it.id}."} for it in items]
    )
    args = ["contexts", "--lang", "it", "--backend", "replay", "--responses", replay, "--limit", "2"]
    args += ["--source", "rec", "--context-dir", tmp_path]
    code, _, err = cli(capsys, *args)
    assert code == 0 and "warning" not in err, err
    source = tmp_path / "val.it.rec.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    assert all(len(row["question"]) == 16 for row in rows)
    rows[1]["question"] = "0" * 16  # as if made for another model_input
    write_lines(source, rows)
    code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert (
        code == 0 and "1 context done before in val.it.rec.jsonl was generated for another question" in said
    )
    assert f"changed since: {items[1].id}); kept" in said and "delete its line to generate again" in said, (
        said
    )
    # with --topic the answer's first sentence is asked for too (an edited answer kept its context)
    from mushroom.retrieval.generate import question_digest

    edited = items[0].model_copy(
        update={"model_output_text": "Another answer. " + items[0].model_output_text}
    )
    assert question_digest(edited, True) != question_digest(items[0], True)
    assert question_digest(edited, False) == question_digest(items[0], False)


def test_contexts_done_before_with_other_settings_are_said_not_kept_in_silence(tmp_path, capsys):
    """An audit re-ran `contexts` with --max-tokens 300 --topic over contexts made with 64 and
    no topic: "done before", exit 0, no word (`detect` refuses a folder made otherwise)."""
    from cli_helpers import cli

    from mushroom.data.splits import load_split

    items = load_split("val", ["it"])["it"][:3]
    replay = write_lines(
        tmp_path / "r.jsonl", [{"id": it.id, "response": f"Background {it.id}."} for it in items]
    )
    args = ["contexts", "--lang", "it", "--backend", "replay", "--responses", replay]
    args += ["--source", "rec", "--context-dir", tmp_path]
    code, _, err = cli(capsys, *args, "--limit", "2", "--max-tokens", "64")
    assert code == 0 and "warning" not in err, err
    code, _, err = cli(capsys, *args, "--limit", "2", "--max-tokens", "64")  # the same: nothing to say
    assert code == 0 and "made with" not in err, err
    made_with = tmp_path / "val.it.rec.made_with.json"
    kept = made_with.read_text()
    made_with.write_text("garbage")  # read as "the same settings", it hid the mix below
    code, _, err = cli(capsys, *args, "--limit", "3", "--max-tokens", "300", "--topic")
    assert code == 1 and f"{made_with}: unreadable" in " ".join(err.split()), err
    made_with.write_text(kept)
    code, _, err = cli(capsys, *args, "--limit", "3", "--max-tokens", "300", "--topic")
    said = " ".join(err.split())
    assert code == 0 and "it: 2 contexts done before in val.it.rec.jsonl were made with" in said, err
    assert "max_tokens 64" in said and "topic False" in said and "give another --source" in said
    assert "and the 1 context made now with this command's, so the source mixes both" in said, err
    # the source now mixes both: each re-run names the contexts made otherwise, and only those
    # (the file kept the first settings only: a re-run with them said nothing, one with the
    # second counted all 3 as made with the first)
    code, _, err = cli(capsys, *args, "--limit", "3", "--max-tokens", "64")
    said = " ".join(err.split())
    assert (
        code == 0 and "it: 1 context done before in val.it.rec.jsonl was made with max_tokens 300" in said
    ), err
    code, _, err = cli(capsys, *args, "--limit", "3", "--max-tokens", "300", "--topic")
    said = " ".join(err.split())
    assert (
        code == 0 and "it: 2 contexts done before in val.it.rec.jsonl were made with max_tokens 64" in said
    ), err
    # a folder of before: one settings object, rows that name none (made with those)
    first = json.loads(made_with.read_text())["settings"]
    made_with.write_text(json.dumps(next(v for v in first.values() if v["max_tokens"] == 64)))
    source = tmp_path / "val.it.rec.jsonl"
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    source.write_text(
        "".join(json.dumps({k: v for k, v in r.items() if k != "made_with"}) + "\n" for r in rows)
    )
    code, _, err = cli(capsys, *args, "--limit", "3", "--max-tokens", "300", "--topic")
    said = " ".join(err.split())
    assert (
        code == 0 and "it: 3 contexts done before in val.it.rec.jsonl were made with max_tokens 64" in said
    ), err


def test_a_claim_number_written_as_text_or_left_out_in_order_still_judges_its_claim():
    """'"claim": "1"' (a reply without the schema) left every claim "unjudged", painted at 0.4
    though the model had called two of them supported (a review)."""
    from mushroom.data.spans import soft_to_vector

    as_text = {
        "verdicts": [
            {"claim": "1", "verdict": "supported"},
            {
                "claim": " 2 ",
                "verdict": "contradicted",
                "incorrect_spans": [{"text": "Berlin", "probability": 0.9}],
            },
            {"claim": "3", "verdict": "supported"},
        ]
    }
    in_order = {"verdicts": [{k: v for k, v in x.items() if k != "claim"} for x in as_text["verdicts"]]}
    for reply in (as_text, in_order):
        s, pred, _ = run_chain({"v-1#decompose": [DECOMPOSE], "v-1#verify": [json.dumps(reply)]})
        assert s["chain.claims_unjudged"] == 0 and s["chain.false_claims"] == 1, (reply, s)
        vec = soft_to_vector(pred.soft_labels, len(ANSWER))
        assert [list(h) for h in pred.hard_labels] == [[32, 38]] and vec[ANSWER.index("won")] == 0


def test_a_chain_batch_s_time_is_shared_by_its_items():
    """Timed from one result to the next, the first item carried the whole batch (85 s, then
    0.002 s for each other item: an audit)."""
    import time

    class Slow(Scripted):
        def generate(self, requests, on_result=None):
            time.sleep(0.3)
            return super().generate(requests)

    items = [ITEM.model_copy(update={"id": f"v-{k}"}) for k in (1, 2, 3)]
    script = {
        f"v-{k}#{stage}": [text]
        for k in (1, 2, 3)
        for stage, text in (("decompose", DECOMPOSE), ("verify", VERIFY))
    }
    det = ChainDetector(ChainOptions(cache=False), Slow(script))
    results = []
    det.run(items, {it.id: CTX["v-1"] for it in items}, results.append)
    seconds = [r.seconds for r in results]
    assert all(s is not None and s > 0.15 for s in seconds), seconds  # two stages, 0.6 s, over three
    assert max(seconds) - min(seconds) < 0.05, seconds


@pytest.mark.parametrize("kind", ["llm", "chain"])
def test_a_backend_given_to_a_detector_is_the_callers_to_close(kind):
    """Both detectors share how they hold a backend: one given is used and recorded, never closed."""
    from mushroom.detectors import detector_class

    closed = []

    class Closing(Scripted):
        def close(self):
            closed.append(True)

    cls = detector_class(kind)
    det = cls(cls.Options(cache=False), Closing({}))
    assert det.built_backends() and det.backend is det.built_backends()[0]
    det.close()
    assert closed == [] and det.built_backends()  # still the caller's, still there


def test_an_unfinished_last_line_dropped_from_a_source_is_said(tmp_path, capsys):
    """A hand edit that broke the last line, saved without its newline, was dropped in silence
    and the cached text put back: the edit was lost unsaid (an audit)."""
    from cli_helpers import cli

    ctx = tmp_path / "ctx"
    with FakeServer({}, "Some background on the question.") as good:
        args = ["contexts", "--lang", "en", "--limit", "2", "--backend", "openai", "--base-url", good.url]
        args += ["--model", "m", "--context-dir", ctx, "--quiet"]
        assert cli(capsys, *args)[0] == 0
        source = ctx / "val.en.llm.jsonl"
        lines = source.read_text().splitlines()
        source.write_text(lines[0] + "\n" + '{"id": "val-en-10", "context": "my "quoted" edit"}')
        code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert code == 0 and f"{source}: dropped an unfinished last line" in said and "quoted" in said, err
    assert len(source.read_text().splitlines()) == 2  # made again


def test_a_reply_of_only_reasoning_is_not_cached_so_the_advised_rerun_asks_again(tmp_path, capsys):
    """`<think>hmm</think>` failed as "only reasoning" but was cached: "run the same command
    again" read it back forever, never asking the server (an audit)."""

    ctx = tmp_path / "ctx"

    def contexts(url, *extra):
        return _contexts(capsys, url, ctx, 2, *extra)

    with FakeServer({}, "<think>hmm</think>") as thinking:
        code, _, err = contexts(thinking.url)
        assert code == 3 and "only reasoning, no context after it" in err, err
        asked = len(thinking.calls)
        assert contexts(thinking.url)[0] == 3
        assert len(thinking.calls) == 2 * asked  # asked again, not read back
    with FakeServer({}, "Some background on the question.") as good:
        code, _, err = contexts(good.url)
        assert code == 0 and len(good.calls) == asked, err


def test_contexts_tell_each_model_call_as_it_ends_for_a_progress_bar(tmp_path):
    """`contexts` showed nothing until every language was done: a slow server looked hung."""
    from mushroom.data.splits import load_split
    from mushroom.retrieval.run import generate_split

    items = load_split("val", ["it"])["it"][:3]
    replay = write_lines(
        tmp_path / "r.jsonl", [{"id": it.id, "response": f"Background {it.id}."} for it in items]
    )
    calls: list[str] = []
    backend = {"kind": "replay", "responses": str(replay)}
    run = generate_split(
        "val",
        ["it"],
        backend,
        "rec",
        limit=3,
        context_dir=tmp_path,
        on_call=calls.append,
        on_batch=lambda code, n: calls.append(f"{code} +{n}"),
    )
    # the bar had no total, a count with no end; each batch's size is told before its calls end
    assert calls == ["it +3"] + ["it"] * 3 and run.rows[0][4] == 3


def test_a_misspelt_optional_tier_is_refused_not_skipped_for_every_item(tmp_path, capsys):
    """`--tiers 'tavily-5?'` misspelt was skipped everywhere, and every item generated (and paid
    for) with nothing said; `detect --contexts` refuses such a source as a typo."""
    from cli_helpers import cli

    from mushroom.data.splits import load_split

    items = load_split("val", ["it"])["it"][:2]
    write_lines(tmp_path / "val.it.mytier.jsonl", [{"id": items[0].id, "context": "Known background."}])
    replay = write_lines(tmp_path / "r.jsonl", [{"id": it.id, "response": "Background."} for it in items])
    args = ["contexts", "--lang", "it", "--limit", "2", "--backend", "replay", "--responses", replay]
    args += ["--context-dir", tmp_path]
    code, _, err = cli(capsys, *args, "--tiers", "mytear?")
    told = " ".join(err.split())
    assert (
        code == 2 and "no context files for source 'mytear'" in told and "did you mean 'mytier'?" in told
    ), err
    code, out, err = cli(capsys, *args, "--tiers", "mytier?")
    assert code == 0, err
    assert len((tmp_path / "val.it.llm.jsonl").read_text().splitlines()) == 1  # the tier covered one


def test_a_source_graded_all_unusable_is_read_when_given_as_a_file(tmp_path, capsys):
    """The empty file `contexts` leaves where every context was graded irrelevant exists so that
    detect counts `context.none`; given as `--contexts FILE` it was refused as "no contexts"."""
    from cli_helpers import cli

    from mushroom.data.splits import load_split

    items = load_split("val", ["en"])["en"][:3]
    items_file = write_lines(
        tmp_path / "items.jsonl", [it.model_dump(mode="json", exclude_none=True) for it in items]
    )
    source = tmp_path / "val.en.llm.jsonl"
    source.write_text("")
    code, _, err = cli(capsys, "detect", "--items", items_file, "--contexts", source, "--out", tmp_path / "a")
    assert code == 1 and "the file has no contexts" in err, err  # no grades: an empty file by mistake
    write_lines(
        tmp_path / "val.en.llm.grades.jsonl",
        [{"id": it.id, "grading": "llm", "relevant": False, "no_usable_context": True} for it in items],
    )
    code, _, err = cli(capsys, "detect", "--items", items_file, "--contexts", source, "--out", tmp_path / "b")
    assert code == 0 and "had every context graded irrelevant" in err, err
    stats = json.loads((tmp_path / "b" / "predictions" / "stats.json").read_text())
    assert stats["all"]["context.none"] == 3


def test_an_empty_or_blank_source_is_refused_where_no_item_would_read_a_context(
    tmp_path, capsys, monkeypatch
):
    """A 0-byte source (no grades beside it) or one of blank contexts ran every item unchecked,
    and exit 0; as a tier, every item was generated and paid for with nothing said."""
    from cli_helpers import cli

    from mushroom.data.splits import load_split

    items = load_split("val", ["en"])["en"]
    from mushroom.data import contexts as contexts_module

    monkeypatch.setattr(contexts_module, "DEFAULT_CONTEXT_DIR", tmp_path)
    (tmp_path / "val.en.zero.jsonl").write_text("")
    write_lines(tmp_path / "val.en.bl.jsonl", [{"id": it.id, "context": " "} for it in items])
    write_lines(
        tmp_path / "val.en.good.jsonl", [{"id": it.id, "context": "Some background."} for it in items]
    )
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "2", "--quiet"]
    code, _, err = cli(capsys, *args, "--contexts", "zero", "--out", tmp_path / "a")
    said = " ".join(err.split())
    assert code == 1 and "val.en.zero.jsonl: an empty file (no grades file beside it" in said, said
    assert not (tmp_path / "a").exists()
    code, _, err = cli(capsys, *args, "--contexts", "bl", "--out", tmp_path / "b")
    said = " ".join(err.split())
    assert code == 1 and "val.en.bl.jsonl: only blank contexts for the items of val/en" in said, said
    # beside a source that is read, a warning names it
    code, _, err = cli(capsys, *args, "--contexts", "bl,good", "--out", tmp_path / "c")
    said = " ".join(err.split())
    assert code == 0 and "context source 'bl' (" in said and "holds only blank contexts" in said, said
    # as the only tier of `contexts`: refused before any call
    replay = write_lines(tmp_path / "r.jsonl", [{"id": it.id, "response": "Background."} for it in items[:2]])
    args = ["contexts", "--lang", "en", "--limit", "2", "--backend", "replay", "--responses", replay]
    code, _, err = cli(capsys, *args, "--context-dir", tmp_path, "--tiers", "zero", "--quiet")
    said = " ".join(err.split())
    # as a tier where it has no file: said, and its items generated
    assert code == 0 and "context source 'zero'" in said and "an empty file" in said, said
    assert len((tmp_path / "val.en.llm.jsonl").read_text().splitlines()) == 2
    # test-labeled's contexts are made for test (they serve it), not a second time
    code, _, err = cli(capsys, *args, "--split", "test-labeled", "--context-dir", tmp_path, "--quiet")
    assert code == 2 and "make their contexts with --split test" in " ".join(err.split()), err


def test_a_tier_with_no_file_for_a_language_is_said_and_a_grades_file_is_no_tier(tmp_path, capsys):
    """`--tiers chatgpt-search --lang en,de` covered nothing in German, where it has no file,
    and generated every item with nothing said; `--tiers llm.grades` read a grades file as
    contexts ("field 'context': Field required" nine times)."""
    from cli_helpers import cli

    from mushroom.data.splits import load_split

    data = load_split("val", ["it", "en"])
    write_lines(tmp_path / "val.it.mytier.jsonl", [{"id": data["it"][0].id, "context": "Known background."}])
    replay = write_lines(
        tmp_path / "r.jsonl", [{"id": its[0].id, "response": "Background."} for its in data.values()]
    )
    args = ["contexts", "--lang", "it,en", "--limit", "1", "--backend", "replay", "--responses", replay]
    args += ["--context-dir", tmp_path, "--quiet"]
    code, _, err = cli(capsys, *args, "--tiers", "mytier")
    told = " ".join(err.split())
    assert code == 0 and "--tiers: mytier has no val file for en: their items are all generated" in told, err
    code, _, err = cli(capsys, *args, "--tiers", "mytier?")
    assert code == 0 and "has no val file" not in err, err
    code, _, err = cli(capsys, *args, "--tiers", "llm.grades")
    assert code == 2 and "'llm.grades' is the file of another source's grades" in err, err


def _contexts(capsys, url, ctx, limit, *extra):
    """`mushroom contexts` of the first `limit` English val items against a server at `url`."""
    from cli_helpers import cli

    return cli(
        capsys, "contexts", "--lang", "en", "--limit", str(limit), "--backend", "openai", "--base-url", url,
        "--model", "m", "--context-dir", ctx, *extra,
    )  # fmt: skip


def test_contexts_made_with_two_other_settings_are_said_group_by_group(tmp_path):
    """It read "8 contexts ... were made with 6 with topic False; 2 with ..." (an audit)."""
    from mushroom.retrieval.generate import _made_otherwise, settings_key

    now = {"max_tokens": 512, "topic": True}
    a, b = {"max_tokens": 512, "topic": False}, {"max_tokens": 256, "topic": False}
    source = write_lines(
        tmp_path / "s.jsonl",
        [{"id": f"i{k}", "context": "x", "made_with": settings_key(a if k < 3 else b)} for k in range(5)],
    )
    known = {settings_key(a): a, settings_key(b): b}
    told, n = _made_otherwise([f"i{k}" for k in range(5)], known, now, source, tmp_path / "none.jsonl")
    assert n == 5 and told == "other settings (3 with topic False; 2 with max_tokens 256, topic False)", told


def test_a_blank_context_in_a_generated_source_is_a_broken_line_not_done_before(tmp_path):
    """A context blanked by hand counted as done: never made again, and read as no context."""
    from mushroom.data.splits import load_split
    from mushroom.retrieval.run import generate_split

    items = load_split("val", ["it"])["it"][:2]
    replay = write_lines(tmp_path / "r.jsonl", [{"id": it.id, "response": f"About {it.id}."} for it in items])
    backend = {"kind": "replay", "responses": str(replay)}
    generate_split("val", ["it"], backend, "rec", limit=2, context_dir=tmp_path)
    source = tmp_path / "val.it.rec.jsonl"
    lines = source.read_text().splitlines()
    lines[1] = json.dumps({"id": json.loads(lines[1])["id"], "context": "   "})
    source.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError) as exc:
        generate_split("val", ["it"], backend, "rec", limit=2, context_dir=tmp_path)
    (problem,) = exc.value.problems
    assert (problem.path, problem.line, problem.field) == (str(source), 2, "context")
    assert "a blank context; delete or mend the line" in problem.message


def test_contexts_generated_for_test_serve_test_labeled_and_a_source_is_no_file_name(tmp_path, capsys):
    """The labelled test split holds the test items: its runs found no context generated for
    test, and had it made (and paid for) again. `--source foo.jsonl` wrote foo.jsonl.jsonl, which
    `detect --contexts` cannot name."""
    from cli_helpers import cli

    from mushroom.data.contexts import OwnFiles

    made = write_lines(tmp_path / "test.en.gen.jsonl", [{"id": "tst-en-1", "context": "Background."}])
    assert OwnFiles.find(tmp_path, "test-labeled", "en", "gen") == made
    assert OwnFiles.sources(tmp_path, "test-labeled", "en") == {"gen"}
    assert OwnFiles.find(tmp_path, "val", "en", "gen") is None
    code, _, err = cli(capsys, "contexts", "--source", "gen.jsonl", "--context-dir", tmp_path, "--quiet")
    assert code == 2 and "a source is a name, not a file; give --source gen" in " ".join(err.split()), err
    # the name it would suggest is refused too: both are said (it suggested a released source's name)
    code, _, err = cli(capsys, "contexts", "--source", "deepseek-r1.jsonl", "--quiet")
    said = " ".join(err.split())
    assert code == 2 and "not a file; and --source deepseek-r1: a released source" in said, said


def test_claims_none_of_which_is_in_the_answer_leave_it_unverifiable_not_nothing_wrong():
    """SmolLM2 echoed the prompt's placeholder claim: its items read as "nothing wrong" and scored
    IoU 1 where gold marks nothing, the whole of the run's score (an audit)."""
    from mushroom.data.spans import soft_to_vector
    from mushroom.runs.service import unusable_warnings

    echo = json.dumps(
        {"claims": [{"claim": "<self-contained statement>", "substring": "<exact substring of the answer>"}]}
    )
    verify = json.dumps({"verdicts": [{"claim": 1, "verdict": "supported"}]})
    backend = Scripted({"v-1#decompose": [echo], "v-1#verify": [verify]})
    results = []
    ChainDetector(ChainOptions(cache=False), backend).run([ITEM], CTX, results.append)
    (res,) = results
    s = Counter(res.stats)
    assert (s["chain.no_claims_in_answer"], s["chain.claims_not_in_answer"]) == (1, 1)
    n = len(ANSWER)
    assert np.allclose(soft_to_vector(res.prediction.soft_labels, n), 0.4)
    assert soft_to_vector(res.channels["unverifiable"], n).min() == 1.0
    assert any(r["start"] == 0 and r["end"] == n for r in res.detail["unverifiable"])
    warnings = unusable_warnings("chain:val en", {**s, "items.ok": 1})
    assert any("claims none of which is in them" in w and "unverifiable" in w for w in warnings), warnings


def test_a_wrong_span_placed_keeps_an_answer_with_no_claim_in_it_a_finding():
    """The claim is not text of the answer, but its verdict placed the wrong word: a finding,
    not "nothing in it was checked" (a review)."""
    decompose = json.dumps(
        {"claims": [{"claim": "Curie was born in Berlin", "substring": "Curie, born in Berlin"}]}
    )
    verify = json.dumps(
        {
            "verdicts": [
                {
                    "claim": 1,
                    "verdict": "contradicted",
                    "incorrect_spans": [{"text": "Berlin", "probability": 0.9}],
                }
            ]
        }
    )
    st, pred, _ = run_chain({"v-1#decompose": [decompose], "v-1#verify": [verify]})
    berlin = ANSWER.index("Berlin")
    assert [list(h) for h in pred.hard_labels] == [[berlin, berlin + 6]]
    assert st["chain.no_claims_in_answer"] == 0
