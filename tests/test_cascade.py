"""The cascade: a budget picks the items the CPU stack is least sure of; only those reach the model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_helpers import VAL_DIR, cli, gold_model, llm_member_options
from fake_openai_server import FakeServer

from mushroom.backends.breaker import BREAKER_COLD
from mushroom.combine.cascade import (
    budget_count,
    check_budget,
    cut,
    plan,
    select,
    spend_by_item,
    uncertainty,
)
from mushroom.errors import MushroomError

UNSURE = {"a": 0.9, "b": 0.1, "c": 0.5, "d": 0.5, "e": 0.0, "f": 0.7, "g": 0.2, "h": 0.3, "i": 0.6, "j": 0.4}


def test_a_budget_sends_the_most_uncertain_items_with_ties_broken_by_id():
    assert select(UNSURE, 0.3) == ["a", "f", "i"]
    # 0.4 of 10 is 4: c and d tie at 0.5, c first by id
    assert select(UNSURE, 0.4) == ["a", "f", "i", "c"]
    assert select(UNSURE, 0.5) == ["a", "f", "i", "c", "d"]
    assert select(UNSURE, 0.0) == [] and len(select(UNSURE, 1.0)) == 10
    # a share that is not a whole count rounds up: 0.25 of 10 sends 3
    assert select(UNSURE, 0.25) == ["a", "f", "i"]
    assert select(UNSURE, 0.0, minimum=2) == ["a", "f"]


def test_a_language_cut_sends_what_select_sends_one_item_at_a_time():
    # a worker holding one item and its language's cut decides as `select` does on the whole
    # language, ties included: at 0.4, c (0.5) is the cut and d (0.5, after c by id) is not sent
    for budget in (0.1, 0.25, 0.3, 0.4, 0.5, 0.9, 1.0):
        c = cut("it", UNSURE, budget)
        assert {i for i, u in UNSURE.items() if c.sends(i, u)} == set(select(UNSURE, budget)), budget
        assert c.sent == len(select(UNSURE, budget)) and c.of == 10
    at_04 = cut("it", UNSURE, 0.4)
    assert (at_04.id, at_04.uncertainty) == ("c", 0.5) and not at_04.sends("d", 0.5)
    assert cut("it", UNSURE, 0.0).id is None and not cut("it", UNSURE, 0.0).sends("a", 0.9)
    with pytest.raises(MushroomError, match="at least one item"):
        cut("it", {}, 0.3)


def test_a_larger_budget_chooses_a_superset_of_a_smaller_one():
    rng = np.random.default_rng(3)
    unsure = {f"id-{k}": float(v) for k, v in enumerate(rng.choice([0.1, 0.2, 0.3], size=57))}
    chosen = [set(select(unsure, b)) for b in (0.1, 0.2, 0.3, 0.5, 1.0)]
    assert all(small < large for small, large in zip(chosen, chosen[1:]))


def test_budget_counts_round_a_decimal_whole_count_down_to_it():
    assert budget_count(50, 0.3) == 15  # 0.3 * 50 is 15.000000000000002 in floating point
    assert budget_count(150, 0.3) == 45 and budget_count(150, 0.301) == 46
    assert budget_count(1, 0.01) == 1 and budget_count(3, 0.1, minimum=5) == 3


def test_the_plan_says_where_each_item_went_and_why():
    records = plan("val", "it", UNSURE, 0.1, minimum=2)
    by_id = {r.id: r for r in records}
    assert [r.id for r in records if r.sent] == ["a", "f"]
    assert by_id["a"].rank == 1 and by_id["a"].of == 10 and "most uncertain" in by_id["a"].reason
    assert "at least 2" in by_id["f"].reason
    assert not by_id["e"].sent and "keeps the CPU stack's prediction" in by_id["e"].reason


def test_uncertainty_is_the_loss_the_stack_expects_of_its_own_hard_labels():
    marked = np.array([False, True, True, False])
    # sure of the span it marks and of the rest: no loss expected
    assert uncertainty(np.array([0.0, 1.0, 1.0, 0.0]), marked) == 0.0
    # expected overlap 0.8 + 0.6 over expected union 2 + 0.2: IoU 1.4 / 2.2
    assert uncertainty(np.array([0.2, 0.8, 0.6, 0.0]), marked) == pytest.approx(1 - 1.4 / 2.2)
    # marking nothing is right when nothing is wrong: judged by the most suspect character
    assert uncertainty(np.array([0.1, 0.7, 0.2]), np.zeros(3, dtype=bool)) == pytest.approx(0.7)
    assert uncertainty(np.zeros(0), np.zeros(0, dtype=bool)) == 0.0


def test_a_budget_outside_0_to_1_is_refused():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(MushroomError, match="above 0 and at most 1"):
            check_budget(bad)


def test_spend_counts_calls_and_tokens_per_item_without_cache_hits(tmp_path):
    path = tmp_path / "it.raw.jsonl"
    rows = [
        {"id": "x", "key": "k1", "usage": {"prompt_tokens": 10, "completion_tokens": 5}},
        {"id": "x", "key": "k2", "usage": {"total_tokens": 7}},
        {"id": "y", "key": "k3", "cached": True, "usage": {"prompt_tokens": 10}},
        {"id": "z", "key": "k4", "error": "connection refused"},
        {"id": "w", "key": "k5", "error": "not sent: the server at http://h/v1 failed the last 3 requests"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spend = spend_by_item([path])
    assert spend["x"].calls == 2 and spend["x"].tokens == 22 and spend["x"].cached == 0
    assert spend["y"].calls == 0 and spend["y"].cached == 1 and spend["y"].tokens == 0
    # a call that failed is a call made, not an answer
    assert spend["z"].calls == 1 and spend["z"].failed == 1
    assert spend["x"].answered and spend["y"].answered and not spend["z"].answered
    # a request a tripped circuit breaker never sent is no call
    assert spend["w"].calls == spend["w"].failed == 0 and spend["w"].unsent == 1 and not spend["w"].answered
    path.write_text("not json\n")
    with pytest.raises(MushroomError, match="it.raw.jsonl:1: not a raw record"):
        spend_by_item([path])


def _job(out, budget):
    return [
        "main-job",
        "--members",
        "lexical,llm",
        "--lang",
        "it",
        "--llm-budget",
        budget,
        *llm_member_options(),
        "--out",
        out,
        "--quiet",
    ]


def _sent(out) -> set[tuple[str, str]]:
    rows = [json.loads(line) for line in (out / "cascade.jsonl").read_text().splitlines()]
    return {(r["split"], r["id"]) for r in rows if r["sent"]}


def _lines(path) -> dict[str, str]:
    """A prediction file's lines by item id."""
    return {json.loads(line)["id"]: line for line in path.read_text().splitlines()}


@pytest.mark.slow
def test_a_budget_sends_its_share_and_a_wider_one_sends_only_the_items_it_adds(tmp_path, capsys):
    out = tmp_path / "job"
    # the model flags one word of every answer
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
        code, _, err = cli(capsys, *_job(out, 0.3), "-o", f"llm.backend.base_url={server.url}")
        first = len(server.calls)
    assert code == 0, err
    # it has 50 val and 150 test items: 15 and 45 of them, one request each
    assert first == 15 + 45
    sent = _sent(out)
    assert sum(split == "val" for split, _ in sent) == 15 and len(sent) == 60
    summary = json.loads((out / "summary.json").read_text())["cascade"]
    assert summary["val"] == {"sent": 15, "kept": 35, "failed": 0}
    assert summary["test"] == {"sent": 45, "kept": 105, "failed": 0}
    assert summary["model_calls_recorded"] == 60 and summary["budget"] == 0.3
    # the model-backed member's own folder is scored and compared on the items it was sent; it
    # was refused as invalid input, "no prediction for 35 gold ids"
    member = out / "members" / "llm"
    code, _, err = cli(capsys, "score", VAL_DIR, member)
    assert code == 0 and "scored 15 of 50 gold items" in err and "--llm-budget 0.3, a cascade" in err, err
    code, _, err = cli(capsys, "compare", member, "--eval-dir", tmp_path / "e")
    assert code == 0, err
    # its page says where each item went and why, and shows a member's unverifiable claims
    ledger = out / "members" / "llm" / "val" / "items" / "it.jsonl"
    one = next(i for split, i in sent if split == "val")
    row = json.loads(next(line for line in ledger.read_text().splitlines() if json.loads(line)["id"] == one))
    row["detail"] = {
        "unverifiable": [{"start": 0, "end": 2, "text": "xx", "reason": "the context is silent"}]
    }
    with ledger.open("a") as handle:  # the last line per id wins, as a chain member's ledger says
        handle.write(json.dumps(row) + "\n")
    code, _, err = cli(capsys, "report", out, "--lang", "it", "--out", tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert (
        code == 0 and "<b>cascade</b>: 15 of 50 items of val went to the model-backed members (llm)" in page
    )
    assert page.count("cascade: <b>sent to the model</b>") == 15, err
    assert page.count("cascade: <b>kept the CPU stack's prediction</b>") == 35
    assert f"mushroom report {out / 'members' / 'llm'}" in page
    assert "llm: the context is silent" in page and "unverifiable" in page
    # the CPU member saw every item: no such note
    code, _, err = cli(capsys, "score", VAL_DIR, out / "members" / "lexical")
    assert code == 0 and "--llm-budget" not in err and "scored 50 of 50" not in err, err
    # an item not sent keeps the CPU stack's test prediction, written beside it for comparing
    final = _lines(out / "mushroom.it-tst.v1.jsonl")
    base = _lines(out / "cascade" / "base" / "mushroom.it-tst.v1.jsonl")
    kept = [i for i in base if ("test", i) not in sent]
    assert len(kept) == 105 and all(final[i] == base[i] for i in kept)
    # the items sent take the member stack's prediction when it is used, else the CPU stack's:
    # a model flagging "a" is noise, and the member stack may leave it out (the case of a model
    # naming the gold spans, used, is below)
    used = json.loads((out / "summary.json").read_text())["cascade"]["member_stack"]["used"]
    assert any(final[i] != base[i] for i in base if ("test", i) in sent) == used
    # on val too, where both stacks' predictions are out of fold
    val_final = _lines(out / "val" / "mushroom.it-val.v2.jsonl")
    val_base = _lines(out / "cascade" / "base" / "val" / "mushroom.it-val.v2.jsonl")
    assert all(val_final[i] == val_base[i] for i in val_base if ("val", i) not in sent)
    # the model's raw records are of the items sent, and of no other
    raw = [
        line
        for p in (out / "members" / "llm").glob("**/raw/*.raw.jsonl")
        for line in p.read_text().splitlines()
    ]
    assert {json.loads(line)["id"] for line in raw} == {i for _, i in sent}

    # Ctrl-C early in a run at a new budget: config.json says 0.5, and the 0.3 run's files sat
    # beside it as if made at 0.5 (an audit); they go, and the run that finishes writes them
    import _thread
    import threading
    import time

    with FakeServer({"": [("sleep", 1)]}, default_text='{"incorrect_spans": ["a"]}') as slow:

        def interrupt():
            while not slow.calls:
                time.sleep(0.05)
            _thread.interrupt_main()

        threading.Thread(target=interrupt, daemon=True).start()
        code, _, err = cli(capsys, *_job(out, 0.5), "-o", f"llm.backend.base_url={slow.url}")
        time.sleep(1.5)  # the request the Ctrl-C cut ends in the server's thread before it closes
    assert code == 130, err
    assert json.loads((out / "config.json").read_text())["config"]["llm_budget"] == 0.5
    assert not (out / "submission.zip").exists() and not (out / "mushroom.it-tst.v1.jsonl").exists()
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as again:
        code, _, err = cli(capsys, *_job(out, 0.5), "-o", f"llm.backend.base_url={again.url}")
        second = len(again.calls)
    assert (out / "submission.zip").exists()
    assert code == 0, err
    wider = _sent(out)
    assert sent < wider and len(wider) == 25 + 75
    # the run stopped above may have kept the one answer it was waiting on
    assert len(wider - sent) == 10 + 30 and second in (39, 40)
    assert json.loads((out / "config.json").read_text())["config"]["llm_budget"] == 0.5

    # a smaller budget again sends nothing new, and says which answers it leaves unused
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as back:
        code, said, err = cli(capsys, *_job(out, 0.3), "-o", f"llm.backend.base_url={back.url}")
    assert code == 0, err
    assert not back.calls
    assert "40 items llm answered in an earlier run of this folder are not sent at budget 0.3" in said + err
    # the member's counters are of the items this budget sends, not of every answer recorded
    assert json.loads((out / "members" / "llm" / "stats.json").read_text())["all"]["items.ok"] == 45
    assert json.loads((out / "members" / "llm" / "val" / "stats.json").read_text())["all"]["items.ok"] == 15

    # without a budget every item goes to the model: only those never sent are, and the
    # cascade's records, no longer this run's, go
    everything = [a for a in _job(out, 1.0) if a not in ("--llm-budget", 1.0)]
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as last:
        code, _, err = cli(capsys, *everything, "-o", f"llm.backend.base_url={last.url}")
        third = len(last.calls)
    assert code == 0, err
    assert third == 200 - 100
    assert not (out / "cascade.jsonl").exists() and not (out / "cascade").exists()
    assert "cascade" not in json.loads((out / "summary.json").read_text())


def test_the_member_stack_is_used_only_with_model_evidence_that_beats_the_cpu_stack():
    from mushroom.combine.cascade import member_stack_verdict

    kept = {"llm": {"kept": True}}
    assert member_stack_verdict(kept, ["llm"], 0.50, 0.40)[0]
    # worse, or level, out of fold on the val items answered: the CPU stack's prediction stands
    used, why = member_stack_verdict(kept, ["llm"], 0.40, 0.40)
    assert not used and "IoU 0.4000 out of fold, the CPU stack 0.4000" in why
    assert not member_stack_verdict(kept, ["llm"], 0.30, 0.40)[0]
    # every model-backed member left out: a refit of the CPU members alone, however it scored
    used, why = member_stack_verdict({"llm": {"kept": False}}, ["llm"], 0.50, 0.40)
    assert not used and "left llm out" in why
    assert member_stack_verdict(
        {"llm": {"kept": False}, "chain": {"kept": True}}, ["llm", "chain"], 0.5, 0.4
    )[0]


@pytest.mark.slow
def test_a_model_that_finds_nothing_leaves_every_item_the_cpu_stacks_prediction(tmp_path, capsys):
    """A member stack without model evidence replaced the CPU stack's labels on the items sent."""
    out = tmp_path / "job"
    with FakeServer({}, default_text='{"incorrect_spans": []}') as server:
        code, said, err = cli(capsys, *_job(out, 0.3), "-o", f"llm.backend.base_url={server.url}")
    assert code == 0, err
    assert "every item sent keeps the CPU stack's prediction" in " ".join((said + err).split())
    for final, base in (
        (out / "mushroom.it-tst.v1.jsonl", out / "cascade" / "base" / "mushroom.it-tst.v1.jsonl"),
        (
            out / "val" / "mushroom.it-val.v2.jsonl",
            out / "cascade" / "base" / "val" / "mushroom.it-val.v2.jsonl",
        ),
    ):
        assert _lines(final) == _lines(base)
    said = json.loads((out / "summary.json").read_text())["cascade"]["member_stack"]
    assert said["used"] is False and "left llm out" in said["why"]
    rows = [json.loads(line) for line in (out / "cascade.jsonl").read_text().splitlines()]
    assert all("the member stack was not used" in r["reason"] for r in rows if r["sent"])
    # the Ray recipe is told why there is no member stack, not to finish the run
    assert not (out / "cascade" / "member-stack.json").exists()
    from mushroom.runs.ray_data import RayCascade

    with pytest.raises(MushroomError, match="the job kept no member stack") as caught:
        RayCascade.from_run(out)
    assert "finish it" not in str(caught.value)
    # a model that names the gold spans: the member stack is used, and the items sent change
    with FakeServer({}, default_text=gold_model()) as server:
        code, said, err = cli(
            capsys, *_job(tmp_path / "good", 0.3), "-o", f"llm.backend.base_url={server.url}"
        )
    assert code == 0, err
    assert json.loads((tmp_path / "good" / "summary.json").read_text())["cascade"]["member_stack"]["used"]
    val_final = _lines(tmp_path / "good" / "val" / "mushroom.it-val.v2.jsonl")
    assert val_final != _lines(tmp_path / "good" / "cascade" / "base" / "val" / "mushroom.it-val.v2.jsonl")
    # on test, the items sent take the member stack's prediction; the others keep the CPU stack's
    sent = _sent(tmp_path / "good")
    final = _lines(tmp_path / "good" / "mushroom.it-tst.v1.jsonl")
    base = _lines(tmp_path / "good" / "cascade" / "base" / "mushroom.it-tst.v1.jsonl")
    assert all(final[i] == base[i] for i in base if ("test", i) not in sent)
    assert any(final[i] != base[i] for i in base if ("test", i) in sent)


@pytest.mark.slow
def test_an_item_the_model_failed_on_keeps_the_cpu_stacks_prediction(tmp_path, capsys):
    """Under --allow-failures a failed item is not "nothing wrong": it is not fitted on, and keeps
    the CPU stack's prediction."""
    out = tmp_path / "job"
    # test's 45 items are sent first, then val's 15: the last 5 calls are refused
    flags = gold_model()
    script = {"": [("ok", flags)] * 55 + [("status", 400)]}
    with FakeServer(script, default_text=flags) as server:
        code, _, err = cli(capsys, *_job(out, 0.3), "-o", f"llm.backend.base_url={server.url}")
        # it said --allow-failures leaves them empty: in a cascade they keep the CPU stack's
        assert code == 3 and "it keeps the CPU stack's prediction)" in " ".join(err.split()), err
        code, said, err = cli(
            capsys, *_job(out, 0.3), "--allow-failures", "-o", f"llm.backend.base_url={server.url}"
        )
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cascade"]["val"] == {"sent": 15, "kept": 35, "failed": 5}
    assert summary["cascade"]["test"]["failed"] == 0 and summary["items_failed"] == 5
    assert "5 of the items sent failed and keep the CPU stack's prediction" in said + err
    rows = [json.loads(line) for line in (out / "cascade.jsonl").read_text().splitlines()]
    failed = {r["id"] for r in rows if r["failed"]}
    listed = {json.loads(line)["id"] for line in (out / "failures.jsonl").read_text().splitlines()}
    assert len(failed) == 5 and failed == listed
    assert all("llm failed on it" in r["reason"] for r in rows if r["failed"])
    val_final = _lines(out / "val" / "mushroom.it-val.v2.jsonl")
    val_base = _lines(out / "cascade" / "base" / "val" / "mushroom.it-val.v2.jsonl")
    assert all(val_final[i] == val_base[i] for i in failed)
    # the member stack was fitted on the 10 items the model answered
    assert any(val_final[i] != val_base[i] for i in val_base if i not in failed)
    comparison = json.loads((out / "val" / "comparison.json").read_text())
    assert "member stack, items answered (CV)" in comparison
    # the first run sent 60; this one sent the 5 failed again, 3 of them before the breaker
    # tripped on the 400s (the last 2 unsent are no calls)
    assert summary["cascade"]["sent_this_run"] == 3


@pytest.mark.slow
def test_a_rerun_answered_from_the_cache_sends_no_item(tmp_path, capsys):
    """Items whose replies were cut off fail and are run again on each re-run, answered from
    the response cache: they were counted as sent by every run ("3 sent by this run", 0 requests)."""
    out = tmp_path / "job"
    flags = '{"incorrect_spans": ["a"]}'
    script = {"": [("ok", flags)] * 55 + [("cut", '{"incorrect_spans": ["')] * 5}
    args = [*_job(out, 0.3), "--allow-failures"]
    with FakeServer(script, default_text=flags) as server:
        code, _, err = cli(capsys, *args, "-o", f"llm.backend.base_url={server.url}")
        assert code == 0, err
        assert json.loads((out / "summary.json").read_text())["cascade"]["sent_this_run"] == 60
        before = len(server.calls)
        code, said, err = cli(capsys, *args, "-o", f"llm.backend.base_url={server.url}")
        assert code == 0, err
        assert len(server.calls) == before  # the cut replies come from the cache
    assert json.loads((out / "summary.json").read_text())["cascade"]["sent_this_run"] == 0
    assert "(0 sent by this run)" in " ".join((said + err).split())


def test_items_a_tripped_circuit_breaker_never_sent_are_not_counted_as_sent(tmp_path, capsys):
    out = tmp_path / "job"
    flags = '{"incorrect_spans": ["a"]}'
    # test's 45 items answered, then every request fails: 10 in a row trip it, 5 go unsent
    script = {"": [("ok", flags)] * 45 + [("status", 500, "boom")] * 40}
    with FakeServer(script, default_text=flags) as server:
        code, said, err = cli(
            capsys, *_job(out, 0.3), "--allow-failures", "-o", f"llm.backend.base_url={server.url}",
            "-o", "llm.backend.max_retries=0",
        )  # fmt: skip
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["cascade"]["val"]["failed"] == 15
    assert summary["cascade"]["sent_this_run"] == 45 + 10
    assert "(55 sent by this run)" in " ".join((said + err).split())


def test_the_budget_needs_a_model_backed_member_and_a_share_above_0(tmp_path, capsys):
    code, _, err = cli(
        capsys,
        "main-job",
        "--members",
        "lexical",
        "--lang",
        "it",
        "--llm-budget",
        "0.3",
        "--out",
        tmp_path / "a",
    )
    assert code == 2 and "model-backed" in err
    code, _, err = cli(
        capsys, "main-job", "--members", "lexical,llm", "--llm-budget", "0", "--out", tmp_path / "b"
    )
    assert code == 2 and "above 0" in err
    code, _, err = cli(
        capsys, "main-job", "--detector", "lexical", "--llm-budget", "0.3", "--out", tmp_path / "c"
    )
    assert code == 2 and "--llm-budget" in err
    # every member calling a model leaves no CPU stack to choose the items
    code, _, err = cli(
        capsys,
        "main-job",
        "--members",
        "llm",
        "--llm-budget",
        "0.3",
        *llm_member_options("http://127.0.0.1:9/v1"),
        "--out",
        tmp_path / "d",
    )
    assert code == 2 and "add a CPU member" in err
    assert not any((tmp_path / name).exists() for name in "abcd")


def test_the_model_backed_detectors_are_those_with_backend_settings():
    """`calls_model` comes from the options: a plugin that holds backend settings is costly too."""
    from mushroom.backends.config import BackendSettings
    from mushroom.detectors import DETECTORS, Detector, DetectorOptions, build, calls_model

    assert {name for name in DETECTORS.builtins if calls_model(name)} == {"llm", "chain", "pyes"}
    assert not calls_model(None) and not calls_model("no-such-detector")

    class ServedOptions(DetectorOptions):
        judges: list[BackendSettings] | None = None

    class Served(Detector):
        name = "served"
        Options = ServedOptions

        def run(self, items, contexts, emit):  # pragma: no cover - never run
            raise NotImplementedError

    class SaysSo(Served):
        calls_model = False  # a class may say otherwise

    assert Served.calls_model and not SaysSo.calls_model

    backend = {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:1/v1"}
    assert not build("lexical").calls_model
    assert build("llm", {"backend": backend}).calls_model
    assert build("pyes", {"models": [backend]}).calls_model  # a list of backends, one per model


@pytest.mark.slow
def test_a_cascade_stopped_by_failed_items_says_so_in_its_records_and_summary(tmp_path, capsys):
    """Stopped on failures, cascade.jsonl said `"failed": false` of the failed items, summary.json
    had no `cascade`, and the val scores of an earlier invocation were left beside."""
    out = tmp_path / "job"
    flags = '{"incorrect_spans": ["a"]}'
    with FakeServer({}, default_text=flags) as server:
        code, _, err = cli(capsys, *_job(out, 0.3), "-o", f"llm.backend.base_url={server.url}")
    assert code == 0, err
    assert (out / "val" / "scores.json").exists()
    # a wider budget sends 40 more items, and the server refuses them: 3 refused, 37 never sent
    with FakeServer({"": [("status", 400)]}) as server:
        code, _, err = cli(capsys, *_job(out, 0.5), "-o", f"llm.backend.base_url={server.url}")
        asked = len(server.calls)
    assert code == 3, err
    assert asked == BREAKER_COLD
    summary = json.loads((out / "summary.json").read_text())
    cascade = summary["cascade"]
    assert summary["items_failed"] == 40
    assert cascade["val"]["failed"] + cascade["test"]["failed"] == 40 and cascade["budget"] == 0.5
    assert cascade["sent_this_run"] == BREAKER_COLD
    assert (
        cascade["model_calls_failed"] == BREAKER_COLD and cascade["model_calls_not_sent"] == 40 - BREAKER_COLD
    )
    rows = [json.loads(line) for line in (out / "cascade.jsonl").read_text().splitlines()]
    failed = {r["id"] for r in rows if r["failed"]}
    listed = {json.loads(line)["id"] for line in (out / "failures.jsonl").read_text().splitlines()}
    assert len(failed) == 40 and failed == listed
    assert all(r["reason"].endswith("llm failed on it: the run stopped") for r in rows if r["failed"])
    # no score of the earlier invocation is left beside the files it no longer has
    assert not (out / "val" / "scores.json").exists() and not (out / "val" / "comparison.json").exists()
    assert not list((out / "val").glob("mushroom.*.jsonl")) and not (out / "submission.zip").exists()


def _digests(path) -> dict[str, str]:
    """A member's ledger: each item's input digest (its text and the contexts it read)."""
    return {
        json.loads(line)["id"]: json.loads(line)["input_digest"] for line in path.read_text().splitlines()
    }


@pytest.mark.slow
def test_contexts_are_generated_for_the_items_a_cascade_plans_to_send_and_read_by_its_model_alone(
    tmp_path, capsys, monkeypatch
):
    """Context generation costs a model call per item as the llm member does: a plan made
    before any call says which items, `contexts --cascade` writes contexts for those alone,
    and only the model-backed member reads them (the CPU members' output chose the items)."""
    import mushroom.data.contexts as contexts_module

    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "ucsc").symlink_to(contexts_module.DEFAULT_CONTEXT_DIR / "ucsc")
    monkeypatch.setattr(contexts_module, "DEFAULT_CONTEXT_DIR", ctx)
    out = tmp_path / "job"
    job = [*_job(out, 0.3), "--member-contexts", "deepseek-r1,gen"]

    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
        code, said, err = cli(capsys, *job, "--plan-only", "-o", f"llm.backend.base_url={server.url}")
        assert code == 0, err
        assert not server.calls  # nothing sent, though the generated source does not exist yet
    told = " ".join((said + err).split())
    assert "60 items would go to llm (60 not answered before); nothing was sent" in told
    # with the member's backend: without it the command failed as printed ("needs `base_url`")
    backend = f"--backend openai --model m --base-url {server.url}`"
    assert f"--split val --source gen {backend}" in told and f"--split test --source gen {backend}" in told
    assert "then run this command again without --plan-only" in told
    plan = [json.loads(line) for line in (out / "cascade-plan.jsonl").read_text().splitlines()]
    planned = {(r["split"], r["id"]) for r in plan if r["sent"]}
    assert len(planned) == 15 + 45
    assert not (out / "cascade.jsonl").exists() and not (out / "summary.json").exists()
    assert not list(out.glob("mushroom.*.jsonl"))

    # before the source exists, the run itself refuses it, naming the flag
    code, _, err = cli(capsys, *job, "-o", "llm.backend.base_url=http://127.0.0.1:9/v1")
    assert code == 2 and "--member-contexts: no context file for source 'gen'" in err, err

    with FakeServer({}, default_text="BACKGROUND-MARK about the question.") as writer:
        for split in ("val", "test"):
            code, _, err = cli(
                capsys, "contexts", "--split", split, "--lang", "it", "--cascade", out / "cascade-plan.jsonl",
                "--backend", "openai", "--base-url", writer.url, "--model", "m", "--source", "gen",
                "--context-dir", ctx,
            )  # fmt: skip
            assert code == 0, err
            # a plan sends both splits' items: the val run told of the test ones (it said nothing)
            if split == "val":
                assert (
                    "note: the plan also sends 45 test items: run this command again with --split test" in err
                )
        assert len(writer.calls) == 15 + 45
    written = {
        (split, json.loads(line)["id"])
        for split in ("val", "test")
        for line in (ctx / f"{split}.it.gen.jsonl").read_text().splitlines()
    }
    assert written == planned

    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
        code, _, err = cli(capsys, *job, "-o", f"llm.backend.base_url={server.url}")
        prompts = [json.dumps(call["body"]["messages"]) for call in server.calls]
    assert code == 0, err
    assert _sent(out) == planned  # the same choice as the plan's
    assert len(prompts) == 60 and all("BACKGROUND-MARK" in p for p in prompts)
    # the CPU member read the same contexts as in the plan, without the generated source
    plan_digests = _digests(out / "members" / "lexical" / "items" / "it.jsonl")
    fresh = tmp_path / "fresh"
    code, _, err = cli(
        capsys, *[str(fresh) if a == out else a for a in _job(out, 0.3)], "--plan-only", "-o",
        "llm.backend.base_url=http://127.0.0.1:9/v1",
    )  # fmt: skip
    assert code == 0, err
    assert _digests(fresh / "members" / "lexical" / "items" / "it.jsonl") == plan_digests

    # a plan at a wider budget leaves the finished run's record as it was
    record = {name: (out / name).read_bytes() for name in ("summary.json", "config.json", "cascade.jsonl")}
    wider = [a if a != 0.3 else 0.5 for a in job]
    code, _, err = cli(capsys, *wider, "--plan-only", "-o", "llm.backend.base_url=http://127.0.0.1:9/v1")
    assert code == 0, err
    assert {name: (out / name).read_bytes() for name in record} == record
    # its items run without their generated context only with a warning that says so
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
        code, said, err = cli(capsys, *wider, "-o", f"llm.backend.base_url={server.url}")
    assert code == 0, err
    told = " ".join((said + err).split())
    assert "context source 'gen' has no context for 10 val, 30 test items sent" in told, told
    assert "--source gen --backend openai --model m --base-url" in told
    assert (
        "` with --split val and --split test generates them, and this command run again sends those" in told
    )


def test_member_contexts_none_sends_the_model_no_context_while_the_cpu_members_read_theirs(tmp_path, capsys):
    """`--member-contexts none`: the model-backed member is asked without a context, on purpose;
    the CPU members still read --contexts, so the items chosen are those of a run without it."""
    prompts = {}
    for given in (None, "none"):
        out = tmp_path / f"job-{given}"
        with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
            flags = [] if given is None else ["--member-contexts", given]
            code, _, err = cli(capsys, *_job(out, 0.3), *flags, "-o", f"llm.backend.base_url={server.url}")
            assert code == 0, err
        prompts[given] = [call["body"]["messages"][-1]["content"] for call in server.calls]
        assert len(prompts[given]) == 15 + 45
    lexical = "members/lexical/items/it.jsonl"
    assert _digests(tmp_path / "job-none" / lexical) == _digests(tmp_path / "job-None" / lexical)
    assert _sent(tmp_path / "job-none") == _sent(tmp_path / "job-None")
    assert all("CONTEXT:\n(no context available)" in p for p in prompts["none"])
    assert not any("(no context available)" in p for p in prompts[None])


def test_a_plan_and_the_member_contexts_are_refused_where_they_mean_nothing(tmp_path, capsys):
    out = tmp_path / "job"
    everything = [a for a in _job(out, 1.0) if a not in ("--llm-budget", 1.0)]
    code, _, err = cli(capsys, *everything, "--plan-only")
    assert code == 2 and "--plan-only writes the items a cascade would send" in err, err
    code, _, err = cli(capsys, "main-job", "--detector", "lexical", "--plan-only", "--out", out)
    assert code == 2 and "--plan-only plans the stack's cascade" in err, err
    code, _, err = cli(
        capsys, "main-job", "--members", "lexical", "--lang", "it", "--member-contexts", "deepseek-r1",
        "--out", out,
    )  # fmt: skip
    assert code == 2 and "none is among lexical" in err, err
    assert not out.exists()
    code, _, err = cli(capsys, "contexts", "--split", "test", "--cascade", tmp_path / "nosuch.jsonl")
    assert code == 2 and "--cascade: no such file" in err, err
    plan = tmp_path / "plan.jsonl"
    plan.write_text('{"id": "val-it-1", "lang": "it", "split": "val", "uncertainty": 2, "rank": 1}\n')
    code, _, err = cli(capsys, "contexts", "--split", "val", "--cascade", plan)
    assert code != 0 and "plan.jsonl:1" in err and "uncertainty" in err, err
    row = {"id": "val-it-1", "lang": "it", "split": "val", "uncertainty": 0.5, "rank": 1, "of": 50}
    plan.write_text(json.dumps({**row, "sent": True, "reason": "r"}) + "\n")
    code, _, err = cli(capsys, "contexts", "--split", "test", "--cascade", plan)
    assert code == 2 and "has no test items (it has val): give --split val" in err, err
    code, _, err = cli(capsys, "contexts", "--split", "val", "--lang", "de", "--cascade", plan)
    assert code == 2 and "the plan has no items of de; it covers it" in err, err
    plan.write_text(json.dumps({**row, "id": "val-it-999", "sent": True, "reason": "r"}) + "\n")
    code, _, err = cli(capsys, "contexts", "--split", "val", "--cascade", plan)
    assert (
        code == 1 and "the plan sends 1 item in it that this split does not have (e.g. val-it-999)" in err
    ), err
    assert str(plan) in err
    plan.write_text("")
    code, _, err = cli(capsys, "contexts", "--split", "val", "--cascade", plan)
    assert code == 1 and "empty: it holds no cascade's records" in err, err
    for given, said in ((",", "',' has an empty context source"), ("a,a", "context source a named twice")):
        code, _, err = cli(capsys, *_job(out, 0.3), "--member-contexts", given, "--plan-only")
        assert code == 2 and f"--member-contexts: {said}" in err, err


@pytest.mark.slow
def test_a_plan_stopped_by_a_failed_cpu_member_leaves_the_finished_run_as_it_was(
    tmp_path, capsys, monkeypatch
):
    """A plan is a side pass: its CPU member failing on an item removed the finished run's
    submission and wrote a failed summary over its own."""
    from mushroom.detectors.lexical import LexicalDetector

    real = LexicalDetector.item_vector

    def fails_on_one(self, item, contexts):
        if item.id == "tst-it-3":
            raise ValueError("broken item")
        return real(self, item, contexts)

    monkeypatch.setattr(LexicalDetector, "item_vector", fails_on_one)
    out = tmp_path / "job"
    with FakeServer({}, default_text='{"incorrect_spans": ["a"]}') as server:
        code, _, err = cli(
            capsys, *_job(out, 0.1), "--allow-failures", "-o", f"llm.backend.base_url={server.url}"
        )
    assert code == 0, err
    # every file but the plan's own computation: the CPU member's ledger and the stages' times
    record = {
        p.relative_to(out).as_posix(): p.read_bytes()
        for p in out.rglob("*")
        if p.is_file() and p.name not in ("stages.json", ".lock") and "items" not in p.parts
    }
    assert "submission.zip" in record and "val/scores.json" in record
    assert "members/lexical/mushroom.it-tst.v1.jsonl" in record

    code, said, err = cli(
        capsys, *_job(out, 0.3), "--plan-only", "-o", "llm.backend.base_url=http://127.0.0.1:9/v1"
    )
    told = " ".join((said + err).split())
    assert code == 3 and "broken item" in told and "no plan was made" in told, told
    assert {name: (out / name).read_bytes() for name in record if (out / name).is_file()} == record
    assert all((out / name).is_file() for name in record) and not (out / "cascade-plan.jsonl").exists()


def test_a_plan_warns_of_a_member_source_whose_name_is_close_to_an_existing_one(tmp_path, capsys):
    """`--member-contexts perplexity-sonar-pr --plan-only` planned, and advised generating, the
    misspelt source; only the run without --plan-only said "did you mean"."""
    out = tmp_path / "job"
    job = [*_job(out, 0.3), "--member-contexts", "perplexity-sonar-pr", "--plan-only"]
    code, said, err = cli(capsys, *job, "-o", "llm.backend.base_url=http://127.0.0.1:9/v1")
    told = " ".join((said + err).split())
    assert (
        code == 0
        and "no context file has the source 'perplexity-sonar-pr' yet (did you mean 'perplexity-sonar-pro'?)"
        in told
    ), told
    job[job.index("perplexity-sonar-pr")] = "deepseek-r1,gen"
    job[job.index(out)] = tmp_path / "other"
    code, said, err = cli(capsys, *job, "-o", "llm.backend.base_url=http://127.0.0.1:9/v1")
    assert code == 0 and "did you mean" not in said + err


def test_the_report_s_cascade_note_counts_the_languages_on_its_page(tmp_path):
    """Under `report --lang it` the note counted every language's items of the split."""
    from mushroom.evaluation.report import _cascade

    rows = [
        {"id": f"{lang}-{k}", "lang": lang, "split": "val", "uncertainty": 0.5, "rank": k + 1, "of": 4,
         "sent": k < sent, "reason": "its rank"}
        for lang, sent in (("it", 1), ("en", 3))
        for k in range(4)
    ]  # fmt: skip
    (tmp_path / "cascade.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "1 of 4 items of val went" in _cascade(tmp_path, "val", {"it"}).note
    assert "4 of 8 items of val went" in _cascade(tmp_path, "val", {"it", "en"}).note
