"""The run service through the CLI: failures are loud, re-runs redo only what failed."""

import io
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, VAL_EN
from fake_openai_server import FakeServer

from mushroom.data.splits import load_split

SPANS = '{"incorrect_spans": []}'


def mushroom(*args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "mushroom", *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout
    )


def detect_args(out, url, split="val", *extra):
    return [
        "detect", "--split", split, "--lang", "en", "--limit", "5", "--backend", "openai", "--base-url", url,
        "--model", "m", "-o", "backend.max_retries=0", "--out", str(out), "--quiet", *extra,
    ]  # fmt: skip


def closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def test_a_dead_server_fails_the_run_loudly_and_writes_no_submission(tmp_path):
    out = tmp_path / "dead"
    proc = mushroom(*detect_args(out, closed_port_url(), "test"))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "5 items failed" in proc.stderr and "connection error" in proc.stdout
    # a command given no --out makes a new folder: the advice names this one, and what to mend
    told = " ".join(proc.stderr.split())
    assert "Nothing answered at the server's URL (the connection was refused): start the server" in told
    assert f"then run the same command again with --out {out}" in told
    assert not list((out / "predictions").glob("mushroom.*.jsonl"))  # no file that looks complete
    # and none is announced, nor are the failed items' predictions called "empty"
    assert "no prediction file was written" in proc.stdout and "predictions in" not in proc.stdout
    assert "requests failed" not in proc.stdout + proc.stderr
    failures = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    assert len(failures) == 5 and all("connection error" in f["error"] for f in failures)
    summary = json.loads((out / "summary.json").read_text())
    # the first request found no server; the others were not sent, and say why
    assert summary["items_failed"] == 5 and sorted(summary["failures_by_error"].values()) == [1, 4]
    assert sum("not sent: an earlier request gave up" in f["error"] for f in failures) == 4
    # --allow-failures: the file is written with the failed items empty, and they are listed
    proc = mushroom(*detect_args(out, closed_port_url(), "test", "--allow-failures"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "--allow-failures" in proc.stdout and (out / "predictions" / "mushroom.en-tst.v1.jsonl").is_file()


def test_a_failed_rerun_leaves_no_scores_of_the_pass_before(tmp_path):
    out = tmp_path / "dead"
    proc = mushroom(*detect_args(out, closed_port_url(), "val", "--allow-failures"))
    assert proc.returncode == 0 and (out / "scores.json").is_file(), proc.stdout + proc.stderr
    # a run with no mark-all baseline had an empty column for it in scores.md
    head, _, row, _, failed = (out / "scores.md").read_text().splitlines()
    assert failed.startswith("5 items failed and scored as empty predictions (en 5;"), failed
    assert "mark-all" not in head and head.count("|") == row.count("|") and " |  |" not in row
    # scoring that run says its scores hold failed items written empty, not the method's output
    proc = mushroom("score", str(VAL_EN), str(out))
    assert proc.returncode == 0 and "5 of its items are listed as failed" in proc.stderr, proc.stderr
    assert "(scored as written)" in proc.stderr
    proc = mushroom(*detect_args(out, closed_port_url()))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert not (out / "scores.json").exists() and not (out / "scores.md").exists()


def test_a_model_answering_only_garbage_fails_its_items_and_is_warned_about(tmp_path):
    """Prose for every item wrote a submission of empty predictions, exit 0: "nothing wrong"
    where nothing was read. Its items fail; --allow-failures writes them empty, listed."""
    out = tmp_path / "run"
    with FakeServer({}, "I am sorry, I cannot help with that.") as server:
        proc = mushroom(*detect_args(out, server.url))
        said = " ".join(proc.stderr.split())
        assert proc.returncode == 3 and "5 items failed" in said, proc.stdout + proc.stderr
        errors = [json.loads(line)["error"] for line in (out / "failures.jsonl").read_text().splitlines()]
        assert all("could not be read as spans (it begins 'I am sorry" in e for e in errors), errors
        assert "try another prompt or model, in a new folder" in said
        warning = "llm:val en: 5 of 5 LLM responses were unparseable"
        assert warning in said and "warning" not in proc.stdout
        assert any(w.startswith(warning) for w in json.loads((out / "summary.json").read_text())["warnings"])
        proc = mushroom(*detect_args(out, server.url), "--allow-failures")
    assert proc.returncode == 0 and len((out / "failures.jsonl").read_text().splitlines()) == 5, proc.stderr


def test_claims_that_are_not_in_the_answer_are_warned_about():
    """An echoed template parses fine, yet none of its spans is in the answer: not a quiet 'nothing'."""
    from mushroom.runs.service import unusable_warnings

    stats = {"llm.requests": 4, "llm.unparseable": 0, "llm.claims": 10, "llm.lost": 6}
    (warning,) = unusable_warnings("llm:val en", stats)
    assert warning.startswith("llm:val en: 6 of 10 claimed spans were not found in the answer")
    assert unusable_warnings("x", {"llm.claims": 10, "llm.lost": 4, "chain.claims": 2}) == []
    (warning,) = unusable_warnings("x", {"chain.spans": 2, "chain.spans_not_located": 2})
    assert "2 of 2 wrong spans were not found" in warning
    (warning,) = unusable_warnings("x", {"llm.replies": 3, "llm.truncated": 2})
    assert "2 of 3 LLM responses used their whole max_tokens budget" in warning
    (warning,) = unusable_warnings("x", {"llm.replies": 30, "llm.truncated": 1})  # said however few
    assert "1 of 30 LLM responses" in warning


def _locked_elsewhere(folder) -> bool:
    """Whether a new open file description of the folder's lock cannot take it (as another process)."""
    import fcntl

    with open(folder / ".lock", "a+") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def test_services_of_one_process_share_the_folder_lock_until_the_last_finishes(tmp_path):
    pytest.importorskip("fcntl")
    from mushroom.errors import MushroomError
    from mushroom.runs.service import RunService

    first = RunService(tmp_path / "run", {"detector": "a"}, quiet=True)
    assert _locked_elsewhere(tmp_path / "run")
    (tmp_path / "run" / "items").mkdir()
    (tmp_path / "run" / "items" / "en.jsonl").write_text('{"id": "x"}\n')  # a finished item: config locked
    with pytest.raises(MushroomError, match="another config"):
        RunService(tmp_path / "run", {"detector": "b"}, quiet=True)
    assert _locked_elsewhere(tmp_path / "run")  # the refused one did not free the first one's lock
    second = RunService(tmp_path / "run", {"detector": "a"}, quiet=True)
    first.finish({})
    assert _locked_elsewhere(tmp_path / "run")  # the second still holds it
    second.finish({})
    assert not _locked_elsewhere(tmp_path / "run")


def test_a_folder_in_use_by_another_run_is_refused(tmp_path):
    fcntl = pytest.importorskip("fcntl")

    out = tmp_path / "run"
    out.mkdir()
    with open(out / ".lock", "a+") as held:  # as a running process holds it
        held.write("4242")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = mushroom(*detect_args(out, closed_port_url()))
        assert proc.returncode == 2 and "in use by another mushroom run (pid 4242)" in proc.stderr
        assert not (out / "config.json").exists()
    proc = mushroom(*detect_args(out, closed_port_url()))  # freed: the run goes ahead (and fails)
    assert proc.returncode == 3, proc.stdout + proc.stderr


def test_failures_naming_their_item_are_grouped_as_one_error(tmp_path):
    # Recorded at temperatures 0.1 and 0.2, replayed at the default 0: the error says so, and
    # the five failures are one group, not five groups of one. The ids are digits that also
    # occur in the message ("0.1"), which must stay as it is.
    items = [it.model_copy(update={"id": str(k)}) for k, it in enumerate(load_split("val", ["en"])["en"][:5])]
    item_file = tmp_path / "items.jsonl"
    item_file.write_text("".join(it.model_dump_json() + "\n" for it in items))
    ctx = tmp_path / "ctx.jsonl"
    ctx.write_text("".join(json.dumps({"id": it.id, "context": it.model_input}) + "\n" for it in items))
    responses = tmp_path / "rec.jsonl"
    lines = [{"id": it.id, "temperature": t, "response": SPANS} for it in items for t in (0.1, 0.2)]
    responses.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "run"
    proc = mushroom("detect", "--items", str(item_file), "--contexts", str(ctx), "--backend", "replay",
                    "--responses", str(responses), "--out", str(out), "--quiet")  # fmt: skip
    assert proc.returncode == 3, proc.stdout + proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    [(error, count)] = summary["failures_by_error"].items()
    assert count == 5 and "at temperature 0" in error and "--temperatures 0.1,0.2" in error
    # the same command would fail them again, so it is not what the error advises
    advice = " ".join(proc.stderr.split())
    assert "a re-run would fail them again" in advice and "Run the same command again" not in advice
    # one item alone: its table row names it, not the group's '<id>'
    one = tmp_path / "one"
    item_file.write_text(items[0].model_dump_json() + "\n")
    proc = mushroom("detect", "--items", str(item_file), "--contexts", str(ctx), "--backend", "replay",
                    "--responses", str(responses), "--out", str(one))  # fmt: skip
    assert proc.returncode == 3 and "no recorded response for '0'" in proc.stdout, proc.stdout
    assert "'<id>'" not in proc.stdout


def test_a_server_failing_some_items_then_a_healthy_one_retries_only_those(tmp_path):
    items = load_split("val", ["en"])["en"][:5]
    bad = [items[1].model_output_text, items[3].model_output_text]
    out = tmp_path / "run"
    with FakeServer({bad[0]: [("status", 500)], bad[1]: [("status", 500)]}, SPANS) as flaky:
        proc = mushroom(*detect_args(out, flaky.url))
    assert proc.returncode == 3 and len(flaky.calls) == 5, proc.stdout + proc.stderr
    assert "2 failed items" in proc.stdout and "Run the same command again" in " ".join(proc.stderr.split())
    with FakeServer({}, SPANS) as healthy:  # another port: transport settings do not lock the run
        proc = mushroom(*detect_args(out, healthy.url))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(healthy.calls) == 2
        assert {c["body"]["messages"][-1]["content"].count(bad[0]) > 0 for c in healthy.calls} == {
            True,
            False,
        }
        proc = mushroom(*detect_args(out, healthy.url))  # finished: nothing is sent again
        assert proc.returncode == 0 and len(healthy.calls) == 2
    summary = json.loads((out / "summary.json").read_text())
    assert summary["items_failed"] == 0 and summary["stats"]["items.ok"] == 5
    assert (out / "predictions" / "mushroom.en-val.v2.jsonl").is_file() and (out / "scores.json").is_file()
    raw = [
        json.loads(line) for line in (out / "predictions" / "raw" / "en.raw.jsonl").read_text().splitlines()
    ]
    assert sum(1 for r in raw if r.get("error")) == 2 and sum(1 for r in raw if r.get("texts")) >= 5


def variants_toml(url: str, limit: int, few: str = "", backend: str = "") -> str:
    """A run config of the llm detector with a zero-shot and a few-shot variant."""
    return f"""
name = "v"
splits = ["val"]
langs = ["en"]
limit = {limit}
[detector]
name = "llm"
[detector.options.backend]
kind = "openai"
model = "m"
base_url = "{url}"
{backend}
[[variants]]
name = "zero"
options = {{ prompt = "single_zero_shot" }}
[[variants]]
name = "few"
options = {{ prompt = "single_few_shot_plain"{few} }}
"""


def test_prompt_variants_run_on_the_same_items_and_are_compared(tmp_path):
    items = load_split("val", ["en"])["en"][:4]
    gold_span = items[0].model_output_text[slice(*items[0].hard_labels[0])]
    # the few-shot prompt (it has an "## Examples" section) finds the gold span of item 0; the
    # other items' prompts are answered "nothing wrong" first (a span their answers lack is no vote)
    others = {it.model_output_text: [("ok", SPANS)] for it in items[1:]}
    with FakeServer(
        {**others, "## Examples": [("ok", json.dumps({"incorrect_spans": [{"text": gold_span}]}))]}, SPANS
    ) as srv:
        config = tmp_path / "variants.toml"
        config.write_text(variants_toml(srv.url, 4, ", temperatures = [0.0, 0.1]"))
        args = [
            "run",
            str(config),
            "--out",
            str(tmp_path / "run"),
            "--eval-dir",
            str(tmp_path / "eval"),
            "--quiet",
        ]
        proc = mushroom(*args)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert len(srv.calls) == 4 + 8
        assert "variants against zero" in proc.stdout and "few" in proc.stdout
        md = next((tmp_path / "eval").glob("variants-v-*.md")).read_text()
        csv = next((tmp_path / "eval").glob("variants-v-*.csv")).read_text().splitlines()
        assert "| few | en | 4 |" in md and csv[0].startswith("run,lang,n,iou")
        assert f"From the run {tmp_path / 'run'}." in md  # which run the table is of
        assert (tmp_path / "run" / "zero" / "val" / "mushroom.en-val.v2.jsonl").is_file()
        stages = json.loads((tmp_path / "run" / "stages.json").read_text())
        assert {"llm:zero/val", "llm:few/val"} <= set(stages)  # each variant keeps its own time
        proc = mushroom(*args)  # everything done: nothing is sent again
        assert proc.returncode == 0 and len(srv.calls) == 12


def test_items_without_context_are_warned_about_and_a_wrong_replay_file_is_named(tmp_path):
    from conftest import write_lines

    items = load_split("val", ["en"])["en"][:3]
    write_lines(tmp_path / "items.jsonl", [it.model_dump(mode="json") for it in items])
    write_lines(tmp_path / "ctx.jsonl", [{"id": items[0].id, "context": items[0].model_input}])
    # `mushroom contexts` graded every context of one bare item irrelevant: the warning says so
    grade = {"id": items[1].id, "grading": "embedding", "relevant": False, "no_usable_context": True}
    write_lines(tmp_path / "ctx.grades.jsonl", [grade, {"id": items[2].id, "relevant": True}])
    out = tmp_path / "own"
    proc = mushroom(
        "detect",
        "--items",
        str(tmp_path / "items.jsonl"),
        "--contexts",
        str(tmp_path / "ctx.jsonl"),
        "--out",
        str(out),
        "--quiet",
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert (
        any("no context for 2 of 3 items" in w for w in summary["warnings"]) and "no context" in proc.stderr
    )
    assert "1 of them had every context graded irrelevant" in proc.stderr
    assert "ctx.grades.jsonl" in " ".join(summary["warnings"])
    # the detector's own word, and a counter: "context-based detectors flag nothing" was said
    # of llm too, which judged them all the same, and lexical counted nothing
    assert "lexical flags nothing in them (counted as context.none)" in " ".join(summary["warnings"])
    assert summary["stats"]["context.none"] == 2, summary["stats"]
    with FakeServer({}, default_text='{"incorrect_spans": []}') as srv:
        llm = ["--detector", "llm", "--backend", "openai", "--base-url", srv.url, "--model", "m"]
        proc = mushroom(
            "detect", "--items", str(tmp_path / "items.jsonl"), "--contexts", str(tmp_path / "ctx.jsonl"),
            *llm, "--temperatures", "0.1", "--out", str(tmp_path / "llm"), "--quiet",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    warned = " ".join(json.loads((tmp_path / "llm" / "summary.json").read_text())["warnings"])
    assert "llm judges them on its model's own knowledge" in warned and "flag nothing" not in warned, warned
    proc = mushroom("detect", "--items", str(tmp_path / "items.jsonl"), "--out", str(tmp_path / "x"))
    assert proc.returncode == 2 and "give the contexts as files" in proc.stderr
    # a contexts file given as recorded responses: an input error naming the file, not 3 failed items
    args = ["detect", "--split", "val", "--lang", "en", "--limit", "3", "--backend", "replay"]
    proc = mushroom(
        *args, "--responses", str(tmp_path / "ctx.jsonl"), "--out", str(tmp_path / "r"), "--quiet"
    )
    assert (
        proc.returncode == 1
        and "ctx.jsonl:1" in proc.stderr
        and "not a file of recorded responses" in proc.stderr
    )
    # one line with a typo'd key among good ones is named with its line, before any folder
    rows = [{"id": items[0].id, "response": SPANS}, {"id": items[1].id, "respone": SPANS}]
    write_lines(tmp_path / "typo.jsonl", rows)
    proc = mushroom(*args, "--responses", str(tmp_path / "typo.jsonl"), "--out", str(tmp_path / "t"))
    assert proc.returncode == 1 and "typo.jsonl:2" in proc.stderr, proc.stderr
    assert "nothing to replay" in proc.stderr and "did you mean 'response' for 'respone'?" in proc.stderr
    assert not (tmp_path / "t").exists()


def test_a_changed_member_setting_is_named_inside_the_members_list():
    """The main job's config lists its members; a refusal must name the one setting that moved."""
    from mushroom.runs.confighash import config_changes

    old = {"members": [{"detector": "lexical", "options": {"threshold": 0.25}}, {"detector": "semantic"}]}
    new = {
        "members": [
            {"detector": "lexical", "options": {"threshold": 0.25, "channels": True}},
            {"detector": "semantic"},
        ]
    }
    assert config_changes(old, new) == ["members[0].options.channels: (not set) -> true"]
    assert config_changes({"sources": ["a", "b"]}, {"sources": ["b", "a"]}) == [
        'sources: ["a", "b"] -> ["b", "a"]'
    ]
    # a variant added to a run config is named, not shown as the lists' common beginning
    variants = [{"name": "zero-shot", "options": {"prompt": "single_zero_shot" * 5}}]
    added = [*variants, {"name": "four", "options": {}}]
    assert config_changes({"variants": variants}, {"variants": added}) == [
        'variants[1]: (not set) -> {"name": "four", "options": {}}'
    ]


def _kept_bars(bars: list):
    """A rich reporter whose progress bars (drawn nowhere) are appended to `bars`, to be read after."""
    from contextlib import contextmanager

    from mushroom.cli.tables import RichReporter, progress_bar

    class KeptBars(RichReporter):
        @contextmanager
        def progress(self, disable=False):
            bars.append(progress_bar(True, self.console))
            with bars[-1] as bar:
                yield bar

    return KeptBars


def test_work_between_items_shows_under_the_stage_bar_until_it_is_done(tmp_path):
    """A detector's work before any item is finished (encoding a chunk) moves a row of its own."""
    import mushroom.runs.service as service
    from mushroom.data.records import Prediction
    from mushroom.detectors.base import Detector, DetectorOptions, ItemResult

    bars = []
    KeptBars = _kept_bars(bars)

    rows = []

    class Chunked(Detector):
        name = "chunked"

        def run(self, items, contexts, emit):
            bar = bars[-1]
            self.on_work("encoding the texts of 2 items", 1, 3)
            rows.append({t.description: (t.completed, t.total) for t in bar.tasks})
            self.on_work("encoding the texts of 2 items", 3, 3)
            rows.append({t.description for t in bar.tasks})
            self.on_work("encoding the texts of 2 items", 1, 3)  # stops short (a failed encoding) ...
            emit(ItemResult.ok(Prediction(id=items[0].id)))  # ... and an item is finished after it
            rows.append({t.description for t in bar.tasks})
            self.on_work("encoding the texts of 1 item", 1, 2)
            raise RuntimeError("killed mid-chunk")  # the row must not outlive the run

    det = Chunked(DetectorOptions())
    out = service.RunService(tmp_path / "run", {"detector": "chunked"}, KeptBars(), quiet=True)
    res = out.detect_split(det, "val", tmp_path / "run" / "predictions", langs=["en"], limit=2)
    assert rows[0]["  encoding the texts of 2 items"] == (1, 3)
    assert rows[1] == rows[2] == {"chunked on val"}  # done, or an item finished since: the row is gone
    assert [t.description for t in bars[-1].tasks] == ["chunked on val"] and det.on_work is None
    assert len(res.failures) == 1 and "killed mid-chunk" in res.failures[0].error


def test_main_job_runs_an_llm_detector_on_a_server_given_by_nested_options(tmp_path):
    # `-o backend.kind=openai` is nested as `detect` nests it (it was refused as an unknown
    # option `backend.kind`, which left main-job with an LLM detector no way to name a server)
    with FakeServer({}, SPANS) as srv:
        out = tmp_path / "main"
        args = ["-o", "backend.kind=openai", "-o", f"backend.base_url={srv.url}", "-o", "backend.model=m"]
        proc = mushroom("main-job", "--detector", "llm", *args, "--lang", "en", "--out", str(out), "--quiet")
        assert proc.returncode == 0, proc.stdout + proc.stderr
        n_test, n_val = (len(load_split(split, ["en"])["en"]) for split in ("test", "val"))
        assert len(srv.calls) == n_test + n_val
    assert (out / "mushroom.en-tst.v1.jsonl").is_file() and (out / "submission.zip").is_file()
    assert json.loads((out / "config.json").read_text())["config"]["options"]["backend"]["kind"] == "openai"


def test_a_run_answered_from_a_shared_cache_needs_no_server(tmp_path):
    # The checks made before a run folder exists must not refuse what the cache would answer.
    cache = tmp_path / "shared.cache.jsonl"
    base = ["detect", "--detector", "llm", "--split", "val", "--lang", "en", "--limit", "2", "--quiet"]
    with FakeServer({}, SPANS) as srv:
        args = [
            *base,
            "--backend",
            "openai",
            "--base-url",
            srv.url,
            "--model",
            "m",
            "-o",
            f"cache_path={cache}",
        ]
        proc = mushroom(*args, "--out", str(tmp_path / "first"))
        assert proc.returncode == 0, proc.stderr
    proc = mushroom(*base, "--backend", "openai", "--model", "m", "-o", f"cache_path={cache}", "--out",
                    str(tmp_path / "again"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr  # no base_url: every answer came from the cache
    proc = mushroom(*base, "--backend", "openai", "--model", "m", "--out", str(tmp_path / "none"))
    assert proc.returncode == 2 and "llm option backend: the openai backend needs `base_url`" in proc.stderr
    assert not (tmp_path / "none").exists()


def test_the_backend_that_is_not_ready_is_named_among_several(tmp_path):
    from mushroom.detectors import build
    from mushroom.errors import MushroomError

    good = tmp_path / "r.jsonl"
    good.write_text('{"id": "a", "loglikelihood": -1.0}\n')
    det = build("pyes", {"models": [{"kind": "replay", "responses": str(good)}, {"kind": "replay"}]})
    with pytest.raises(
        MushroomError,
        match=r"pyes option models\[1\]: the replay backend \(the default of LLM detectors\) needs",
    ):
        det.check_ready()
    det.check_ready(out=tmp_path)  # a resumed folder may hold every answer: not checked


def test_the_contexts_command_checks_its_backend_before_writing_anything(tmp_path):
    proc = mushroom("contexts", "--split", "val", "--lang", "en", "--limit", "1", "--model", "m",
                    "--context-dir", str(tmp_path / "ctx"))  # fmt: skip
    assert proc.returncode == 2 and "needs `base_url`" in proc.stderr, proc.stderr
    assert not (tmp_path / "ctx").exists()


def test_a_submission_zip_of_some_test_languages_is_warned_about(tmp_path):
    from mushroom.data.predictions import submission_name
    from mushroom.data.splits import split_files
    from mushroom.runs.service import RunService

    service = RunService(tmp_path / "run", {"detector": "a"}, quiet=True)
    files = []
    for lang in sorted(split_files("test")):
        path = tmp_path / submission_name(lang, "test")
        path.write_text("")
        files.append(path)
    service.submit(files, tmp_path / "all.zip")
    assert service.warnings == []
    service.submit(files[:2], tmp_path / "two.zip")
    assert service.warnings == [
        "two.zip holds 2 of the 14 test languages; a leaderboard submission usually has one file per "
        "language (a run over every language writes them all)"
    ]
    service.finish({})  # frees the folder's lock


def test_a_backend_warning_is_one_warning_line_kept_in_the_summary(tmp_path):
    # through warnings.warn the CLI showed Python's line with the source file and code, and
    # then the run's own warning line
    out = tmp_path / "run"
    with FakeServer({}, ignore_n=True) as server:  # as llama.cpp: one sample whatever n says
        args = detect_args(out, server.url, "val", "-o", "samples=2", "-o", "temperatures=0.7")
        proc = mushroom(*[a for a in args if a != "--quiet"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    both = " ".join((proc.stdout + proc.stderr).split())
    assert "RuntimeWarning" not in both and "openai_compat.py" not in both
    assert both.count("answered n=2 with 1 sample(s)") == 1
    summary = json.loads((out / "summary.json").read_text())
    assert any("answered n=2 with 1 sample(s)" in w for w in summary["warnings"])


def test_run_scope_reaches_a_main_job_members_val_files_and_no_deeper(tmp_path):
    """A file is scored with its run's --limit and --lang only when it is that run's file."""
    from mushroom.data.runfolder import run_scope

    def run_folder(path, config):
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps({"config": config, "config_hash": "h"}))
        return path

    job = run_folder(tmp_path / "job", {"job": "main", "langs": ["en"]})

    def file_in(folder):
        folder.mkdir(parents=True)
        (folder / "mushroom.en-val.v2.jsonl").write_text("")
        return folder / "mushroom.en-val.v2.jsonl"

    assert run_scope(file_in(job / "members" / "lexical" / "val")).folder == job
    # a user's own files three folders into a detect run made with --limit are not that run's
    run = run_folder(tmp_path / "run", {"job": "detect", "limit": 5, "langs": ["en"]})
    assert run_scope(file_in(run / "notes" / "exp" / "a")) is None
    # nor under a folder named members in such a run
    assert run_scope(file_in(run / "members" / "x" / "val")) is None


def test_failed_items_of_items_files_and_never_of_the_mark_all_baseline(tmp_path):
    from mushroom.data.records import Prediction
    from mushroom.data.runfolder import failed_items

    def run_folder(path, config):
        path.mkdir(parents=True)
        (path / "config.json").write_text(json.dumps({"config": config, "config_hash": "h"}))
        return path

    empty = {"i-1": Prediction(id="i-1"), "i-2": Prediction(id="i-2")}
    # a `detect --items` run: its files are named mushroom.<lang>-items.jsonl and have a ledger
    items_run = run_folder(tmp_path / "items-run", {"job": "detect", "split": "items"})
    (items_run / "predictions" / "items").mkdir(parents=True)
    file = items_run / "predictions" / "mushroom.en-items.jsonl"
    file.write_text("")
    ledger = items_run / "predictions" / "items" / "en.jsonl"
    ledger.write_text(json.dumps({"id": "i-1", "status": "failed"}) + "\n")
    found = failed_items(file, empty)
    assert found is not None and found.failed == {"i-1"} and found.where == ledger.resolve()
    # the ledger, not a stale failures.jsonl, speaks for the file
    (items_run / "failures.jsonl").write_text(json.dumps({"id": "i-2", "split": "items"}) + "\n")
    ledger.write_text(json.dumps({"id": "i-1", "status": "ok"}) + "\n")
    assert failed_items(file, empty) is None
    # a main job's mark-all baseline depends on no detector: its failures are not the baseline's
    job = run_folder(tmp_path / "job", {"job": "main"})
    (job / "failures.jsonl").write_text(json.dumps({"id": "i-1", "split": "val"}) + "\n")
    (job / "val" / "mark-all").mkdir(parents=True)
    baseline = job / "val" / "mark-all" / "mushroom.en-val.v2.jsonl"
    baseline.write_text("")
    assert failed_items(baseline, empty) is None
    stack_output = job / "val" / "mushroom.en-val.v2.jsonl"
    stack_output.write_text("")
    assert failed_items(stack_output, empty).failed == {"i-1"}  # no ledger: failures.jsonl counts


def test_a_run_reports_through_any_reporter_without_rich(tmp_path):
    """A notebook or script gets a run's warnings, tables and messages as values, not terminal text."""
    from mushroom.runs.reporter import PlainReporter
    from mushroom.runs.service import RunService

    class Recording:
        def __init__(self):
            self.messages, self.warnings, self.tables = [], [], []

        def message(self, text, lead=""):
            self.messages.append((lead, text))

        def warning(self, text):
            self.warnings.append(text)

        def table(self, table):
            self.tables.append(table)

        def progress(self, disable=False):
            return PlainReporter().progress(disable)

    seen = Recording()
    service = RunService(tmp_path / "run", {"detector": "a"}, seen, quiet=True)
    service.warn("the model is slow")
    service.warn("the model is slow")  # said once
    service.report_stats("llm on val: counts", {"llm.requests": 4, "llm.unparseable": 1, "items.ok": 4})
    service.finish({})
    assert seen.warnings == ["the model is slow"]
    (counts,) = seen.tables
    assert counts.columns == ["counter", "llm"] and counts.rows == [["requests", 4], ["unparseable", 1]]
    assert seen.messages[-1][1].startswith(f"run folder: {tmp_path / 'run'}")


def test_the_progress_bar_rate_and_time_left_are_the_stage_average_not_the_last_burst():
    """A batch of items finished at once (pyes, an ensemble) once read as thousands per second."""
    from rich.console import Console

    from mushroom.cli.tables import progress_bar

    now = [100.0]
    bar = progress_bar(False, Console(file=io.StringIO(), width=200))
    bar.get_time = lambda: now[0]
    task_id = bar.add_task("pyes on val", total=10)
    bar.start_task(task_id)
    now[0] += 40.0
    bar.advance(task_id, 4)  # four items, done together after 40 s
    now[0] += 0.001
    rate, left = (col.render(bar.tasks[0]).plain for col in bar.columns[3:6:2])
    assert (rate, left) == ("0.1/s", "0:01:00")  # 4 items in 40 s; 6 more at that rate


def test_a_resumed_run_counts_on_its_bar_only_the_items_it_computes(tmp_path):
    """Items an earlier run finished once filled the bar in a burst: rate and time left read wrong."""
    import mushroom.runs.service as service
    from mushroom.detectors import build

    bars = []
    KeptBars = _kept_bars(bars)

    folder = tmp_path / "run"
    for limit in (3, 5):  # the second run resumes: 3 items done, 2 to compute
        run = service.RunService(folder, {"detector": "lexical"}, KeptBars(), quiet=True)
        run.detect_split(build("lexical"), "val", folder / "predictions", langs=["it"], limit=limit)
    first, second = (b.tasks[0] for b in bars)
    assert (first.completed, first.total) == (3, 3)
    assert (second.completed, second.total) == (2, 2)


def test_a_detector_span_past_the_answer_fails_every_run_and_is_never_written(tmp_path):
    """The span check once ran after the items were recorded done: a re-run wrote the bad file."""
    import numpy as np

    import mushroom.runs.service as service
    from mushroom.detectors.base import VectorDetector
    from mushroom.detectors.lexical import LexicalOptions
    from mushroom.errors import DataError

    class TooLong(VectorDetector):
        name = "too-long"
        Options = LexicalOptions

        def item_vector(self, item, contexts):
            return np.full(len(item.model_output_text) + 3, 0.9)

    folder = tmp_path / "run"
    for _ in range(2):
        run = service.RunService(folder, {"detector": "too-long"}, quiet=True)
        with pytest.raises(DataError, match=r"must satisfy 0 <= start < end <= \d+"):
            run.detect_split(TooLong(LexicalOptions()), "val", folder / "predictions", langs=["it"], limit=2)
    assert not list((folder / "predictions").glob("*.jsonl"))


def test_a_nan_probability_fails_its_item_and_not_as_nothing_wrong(tmp_path):
    """NaN compares False with every threshold: it once became an empty prediction marked ok."""
    import numpy as np

    import mushroom.runs.service as service
    from mushroom.detectors.base import VectorDetector
    from mushroom.detectors.lexical import LexicalOptions

    class HalfNan(VectorDetector):
        name = "half-nan"
        Options = LexicalOptions

        seen: list[str] = []

        def item_vector(self, item, contexts):
            self.seen.append(item.id)
            vec = np.full(len(item.model_output_text), 0.9)
            if len(self.seen) == 2:
                vec[2:] = np.nan
            return vec

    folder = tmp_path / "run"
    run = service.RunService(folder, {"detector": "half-nan"}, quiet=True, allow_failures=True)
    detector = HalfNan(LexicalOptions())
    out = run.detect_split(detector, "val", folder / "predictions", langs=["it"], limit=3)
    (failure,) = out.failures
    assert failure.id == detector.seen[1] and "probabilities are not finite (NaN or infinity" in failure.error


def test_no_detector_option_that_changes_answers_is_left_out_of_the_config_hash():
    """Chain's `retry` was: a folder resumed under the other setting and mixed both."""
    from mushroom.detectors import available, detector_class
    from mushroom.runs.confighash import UNHASHED_KEYS, config_hash

    where_it_runs = {"device", "batch_size"}  # how a model runs, not what it answers
    for name in available():
        fields = set(detector_class(name).Options.model_fields)
        assert fields & UNHASHED_KEYS <= where_it_runs, name
    chain = {"detector": "chain", "options": {"retry": True}}
    assert config_hash(chain) != config_hash({**chain, "options": {"retry": False}})


def test_an_option_added_later_keeps_older_folders_resumable_at_its_default():
    """Every semantic and main-job folder was refused once `answer_pool` appeared in their configs."""
    from mushroom.detectors import build
    from mushroom.runs.confighash import LATER_DEFAULTS, config_hash

    semantic = build("semantic", {}).describe()
    options = semantic["options"]
    older = {k: v for k, v in options.items() if k not in LATER_DEFAULTS}
    assert options["answer_pool"] == LATER_DEFAULTS["answer_pool"]
    assert config_hash(semantic) == config_hash({**semantic, "options": older})
    other = {**options, "answer_pool": "sentences"}  # another value changes the answers
    assert config_hash({**semantic, "options": other}) != config_hash(semantic)


def test_check_compare_sweep_and_report_say_a_runs_failed_items(tmp_path):
    """Only `score` said that a run's failed items were written empty; check said OK."""
    out = tmp_path / "dead"
    proc = mushroom(*detect_args(out, closed_port_url(), "val", "--allow-failures"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = "5 of its items are listed as failed in its run"
    pred = out / "predictions" / "mushroom.en-val.v2.jsonl"
    proc = mushroom("check", str(pred), "--items", str(VAL_EN), "--partial")
    assert proc.returncode == 0 and said in proc.stderr and "2 warnings" in proc.stdout, (
        proc.stdout + proc.stderr
    )
    for args in (
        ["compare", str(out), "--eval-dir", str(tmp_path / "ev")],
        ["sweep", str(out), "--svg", str(tmp_path / "s.svg")],
        ["report", str(out), "--out", str(tmp_path / "r.html")],
    ):
        proc = mushroom(*args)
        assert proc.returncode == 0 and said in proc.stderr, args
    # the page marks each failed item where it shows "predicted hard spans: none"
    page = (tmp_path / "r.html").read_text()
    assert page.count("<b>failed in its run</b>") == 5 and "this empty prediction is not the method" in page
    # and at the top, where the scores are read (summary.json lists no warning for them)
    top = page[: page.index("<h2>Items</h2>")]
    assert "items that failed in the run" in top and "<li>en: 5 items (listed in" in top, top[-600:]


def test_a_damaged_line_of_failures_jsonl_is_named_not_skipped(tmp_path):
    """It was skipped in silence, and with it perhaps the one failed item a score should note."""
    from mushroom.data.runfolder import run_failures
    from mushroom.errors import DataError

    (tmp_path / "failures.jsonl").write_text('{"id": "a", "error": "x"}\n{"id": "b", "err\n')
    with pytest.raises(DataError, match=r"failures.jsonl:2: invalid JSON"):
        run_failures(tmp_path / "mushroom.en-val.v2.jsonl")


def test_warnings_go_to_stderr_unless_the_caller_gave_its_own_log(capsys):
    """A script's log (llm_quality's runs.log) lost its warnings once they went to stderr."""
    import io

    from rich.console import Console

    from mushroom.cli.tables import RichReporter
    from mushroom.runs.reporter import PlainReporter

    PlainReporter().warning("to stderr")
    RichReporter(Console(file=io.StringIO()), Console(stderr=True)).warning("rich to stderr")
    out, err = capsys.readouterr()
    assert "to stderr" in err and "rich to stderr" in err and out == ""
    plain, rich = io.StringIO(), io.StringIO()
    PlainReporter(plain).warning("kept")
    RichReporter(Console(file=rich)).warning("kept too")
    assert "warning: kept" in plain.getvalue() and "kept too" in rich.getvalue()
    assert capsys.readouterr() == ("", "")


def test_each_failed_item_says_which_variants_files_it_is_missing_from(tmp_path):
    """Two variants failing the same items wrote the same lines twice to failures.jsonl."""
    config = tmp_path / "variants.toml"
    config.write_text(variants_toml(closed_port_url(), 2, backend="max_retries = 0"))
    out = tmp_path / "run"
    proc = mushroom("run", str(config), "--out", str(out), "--eval-dir", str(tmp_path / "e"), "--quiet")
    assert proc.returncode == 3, proc.stdout + proc.stderr
    rows = [json.loads(line) for line in (out / "failures.jsonl").read_text().splitlines()]
    by_folder = {}
    for row in rows:
        by_folder.setdefault(row["folder"], set()).add(row["id"])
    assert len(by_folder) == 2 and all(len(ids) == 2 for ids in by_folder.values()), rows
    assert all(folder.split("/")[0] in ("zero", "few") for folder in by_folder), by_folder
    # with --allow-failures the run ends, and says why the variants are not compared
    proc = mushroom(
        "run",
        str(config),
        "--out",
        str(out),
        "--eval-dir",
        str(tmp_path / "e"),
        "--quiet",
        "--allow-failures",
    )
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0 and "the variants are not compared: every item failed in one of them" in said


def test_with_allow_failures_variants_are_compared_on_the_items_every_one_answered(tmp_path):
    """A model that fails the same item every time (SmolLM2 on the shipped example) never
    reached the comparison the page promises, --allow-failures or not."""
    items = load_split("val", ["en"])["en"][:4]
    with FakeServer({items[1].model_output_text: [("status", 400)]}, SPANS) as srv:
        config = tmp_path / "variants.toml"
        config.write_text(variants_toml(srv.url, 4))
        args = ["run", str(config), "--out", str(tmp_path / "run"), "--eval-dir", str(tmp_path / "e")]
        proc = mushroom(*args, "--quiet")
        said = " ".join((proc.stdout + proc.stderr).split())
        assert proc.returncode == 3 and "or add --allow-failures to compare the variants" in said, said
        proc = mushroom(*args, "--quiet", "--allow-failures")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode == 0 and "compared on the 3 items every variant answered" in said, said
    # one item failed in both variants: two failures of one item, not "2 items failed" of four
    assert "1 item failed in at least one of them" in said, said
    assert "2 items (1 distinct, in 2 variants, members or splits) failed" in said, said
    table = next((tmp_path / "e").glob("variants-v-*.md")).read_text()
    assert "| few | en | 3 |" in table
    # the table names each variant's prompt, and the summary the items its means are of
    assert "- zero: prompt single_zero_shot (shipped, sha256 " in table, table
    comparison = json.loads((tmp_path / "run" / "summary.json").read_text())["comparison"]
    assert (comparison["items_compared"], comparison["items_left_out"]) == (3, 1)
    # `compare` of the variants' folders scored the failed item as written (empty) in both;
    # --answered compares them as the run did
    pair = [str(tmp_path / "run" / "zero"), str(tmp_path / "run" / "few"), "--eval-dir", str(tmp_path / "c")]
    proc = mushroom("compare", *pair)
    assert proc.returncode == 0 and "│ 4 │" in proc.stdout and "(scored as written)" in proc.stderr, (
        proc.stderr
    )
    proc = mushroom("compare", *pair, "--answered")
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 0 and "│ 3 │" in proc.stdout and "│ 4 │" not in proc.stdout, proc.stdout
    assert "1 item some run failed left out" in said and "scored as written" not in said, said
    # a language whose every item failed is compared in none (it was scored against no items, exit 1)
    german = load_split("val", ["de"])["de"][:4]
    with FakeServer({it.model_output_text: [("status", 400)] for it in [items[1], *german]}, SPANS) as srv:
        config.write_text(variants_toml(srv.url, 4).replace('langs = ["en"]', 'langs = ["en", "de"]'))
        args = ["run", str(config), "--out", str(tmp_path / "two"), "--eval-dir", str(tmp_path / "e2")]
        proc = mushroom(*args, "--quiet", "--allow-failures")
    said = " ".join((proc.stdout + proc.stderr).split())
    assert (
        proc.returncode == 0 and "compared on the 3 items every variant answered; 5 items failed" in said
    ), said
    table = next((tmp_path / "e2").glob("variants-v-*.md")).read_text()
    assert "| few | en | 3 |" in table and "| de |" not in table, table
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["comparison"]


def test_a_resumed_run_has_no_summary_until_it_finishes_again(tmp_path):
    """A finished run resumed and then stopped kept its old summary: it read as finished."""
    from mushroom.runs.service import RunService

    out = tmp_path / "run"
    proc = mushroom("detect", "--lang", "en", "--limit", "2", "--out", str(out), "--quiet")
    assert proc.returncode == 0 and (out / "summary.json").is_file(), proc.stderr
    saved = json.loads((out / "config.json").read_text())["config"]
    service = RunService(out, saved, quiet=True)  # as the same command starts again
    assert service.resumed and not (out / "summary.json").exists()
    service.finish({})
    assert (out / "summary.json").is_file()


def test_a_ledger_line_that_cannot_be_read_is_said_and_a_line_cut_by_a_kill_is_dropped(tmp_path, capsys):
    """An unreadable ledger line (another version's, or damaged) made its item run again in silence."""
    from cli_helpers import cli

    run = tmp_path / "run"
    args = ("detect", "--split", "val", "--lang", "en", "--limit", "3", "--out", run, "--quiet")
    code, _, err = cli(capsys, *args)
    assert code == 0, err
    ledger = run / "predictions" / "items" / "en.jsonl"
    first = json.loads(ledger.read_text().splitlines()[0])
    with ledger.open("a") as handle:
        handle.write(json.dumps({**first, "field_of_a_newer_version": 1}) + "\n")
        handle.write('{"id": "val-en-3", "status": "o')  # a kill cut this one mid-write
    code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert code == 0, err
    assert "1 line of the item ledger" in said and "could not be read" in said, said
    assert "the last line of the item ledger" in said and "was cut" in said, said  # dropped, said
    assert not ledger.read_text().endswith('"o') and ledger.read_text().count('"status": "o\n') == 0


def test_a_ledger_line_edited_by_hand_is_computed_again_not_written_as_it_says(tmp_path, capsys):
    """An "ok" line without its prediction was written out as an empty one, a span past the
    answer's end failed the run on every re-run naming the submission file (an audit)."""
    from cli_helpers import cli

    run = tmp_path / "run"
    args = ("detect", "--split", "val", "--lang", "en", "--limit", "3", "--out", run, "--quiet")
    code, _, err = cli(capsys, *args)
    assert code == 0, err
    submission = run / "predictions" / "mushroom.en-val.v2.jsonl"
    before = submission.read_text()
    ledger = run / "predictions" / "items" / "en.jsonl"
    lines = [json.loads(line) for line in ledger.read_text().splitlines()]
    assert lines[0]["prediction"]["soft_labels"] and lines[1]["prediction"]["soft_labels"], lines
    del lines[0]["prediction"]
    lines[1]["prediction"]["soft_labels"][0]["end"] = 9999
    ledger.write_text("".join(json.dumps(line) + "\n" for line in lines))

    code, _, err = cli(capsys, *args)
    said = " ".join(err.split())
    assert code == 3, err  # the span past the end: named, the item failed, no submission
    assert "1 line of the item ledger" in said and "could not be read" in said, said
    failures = [json.loads(line) for line in (run / "failures.jsonl").read_text().splitlines()]
    assert [f["id"] for f in failures] == [lines[1]["id"]]
    assert "items/en.jsonl has a span past the end of the answer" in failures[0]["error"]
    assert not submission.exists()

    code, _, err = cli(capsys, *args)  # the next run computes it again
    assert code == 0, err
    assert submission.read_text() == before


def test_a_wrong_eval_dir_is_refused_before_the_run_starts(tmp_path, capsys):
    """`run --eval-dir` was read only after every variant had run: a file there failed the run
    at its end, and a folder in the official data got the comparison."""
    from cli_helpers import cli

    from mushroom.data.splits import DEFAULT_DATA_DIR

    config = tmp_path / "variants.toml"
    config.write_text(variants_toml("http://127.0.0.1:9/v1", 2))
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    out = tmp_path / "run"
    other = tmp_path / "other"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"config": {"job": "detect"}, "config_hash": "x"}))
    cases = [
        (DEFAULT_DATA_DIR / "mine", "the folder of the official data files"),
        (a_file, "is a file, not a folder"),
        (Path("-"), "--eval-dir -: this writes files, not to stdout"),
        (other / "val", f"would be written among the files the run {other.resolve()} keeps"),
    ]
    for eval_dir, message in cases:
        code, _, err = cli(capsys, "run", config, "--out", out, "--eval-dir", eval_dir, "--quiet")
        assert code == 2 and message in " ".join(err.split()), err
        assert not out.exists() and not (DEFAULT_DATA_DIR / "mine").exists() and not Path("-").exists()
    single = tmp_path / "single.toml"
    single.write_text(variants_toml("http://127.0.0.1:9/v1", 2).split("[[variants]]")[0])
    code, _, err = cli(capsys, "run", single, "--out", out, "--eval-dir", tmp_path / "e", "--quiet")
    assert code == 3 and "has no variants to compare on val; nothing is written there" in " ".join(
        err.split()
    )
    assert not (tmp_path / "e").exists()


def test_a_config_whose_description_alone_changed_resumes_its_folder(tmp_path, capsys):
    """Editing a run config's description refused its folder as a run with another config;
    so did a folder hashed by an older mushroom, whose settings were all the same."""
    from cli_helpers import cli

    config = tmp_path / "d.toml"
    text = 'name = "d"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\ndescription = "first"\n[detector]\nname = "lexical"\n'
    config.write_text(text)
    out = tmp_path / "run"
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    assert code == 0, err
    config.write_text(text.replace("first", "second words"))
    code, said, err = cli(capsys, "run", config, "--out", out)
    assert code == 0 and "resuming" in said + err, err
    saved = json.loads((out / "config.json").read_text())
    assert saved["config"]["run_config"]["description"] == "second words"
    older = {k: v for k, v in saved.items() if k != "hash_scheme"}  # as an older mushroom wrote it
    (out / "config.json").write_text(json.dumps({**older, "config_hash": "0" * 16}))
    code, said, err = cli(capsys, "run", config, "--out", out)
    assert code == 0 and "resuming" in said + err, err
    config.write_text(text + "[detector.options]\nthreshold = 0.9\n")
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    assert code == 2 and "holds a run with another config" in err and "threshold" in err, err


def test_a_run_configs_option_is_listed_once_among_what_differs():
    """Editing `threshold` listed it twice: as written, and as `variants[0].options.threshold`."""
    from mushroom.runs.confighash import config_changes, listed_changes

    def config(threshold, default):
        return {
            "run_config": {"detector": {"name": "lexical", "options": {"threshold": threshold}}},
            "variants": [{"name": "", "options": {"threshold": threshold, "min_prefix": default}}],
        }

    changes = config_changes(config(0.3, 4), config(0.5, 5))
    assert listed_changes(changes, "\n") == (
        "\nrun_config.detector.options.threshold: 0.3 -> 0.5\nvariants[0].options.min_prefix: 4 -> 5"
    )


def test_a_ctrl_c_between_a_runs_stages_says_where_its_finished_work_is(tmp_path, capsys, monkeypatch):
    """A Ctrl-C during the variants' comparison, after every variant had run, said only
    "interrupted": nothing told the user that a re-run would reuse all of it."""
    from cli_helpers import cli

    import mushroom.runs.config as run_config

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_config, "compare_variants", interrupted)
    config = tmp_path / "v.toml"
    config.write_text(
        'name = "v"\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "lexical"\n'
        '[[variants]]\nname = "a"\noptions = {}\n[[variants]]\nname = "b"\noptions = { threshold = 0.5 }\n'
    )
    out = tmp_path / "run"
    code, _, err = cli(capsys, "run", config, "--out", out, "--quiet")
    told = " ".join(err.split())
    assert (
        code == 130 and f"what finished is kept in {out}; run the same command again with --out {out}" in told
    )
    # the hint ends with its command: a later interrupt elsewhere is not told of this folder
    from mushroom.util.interrupts import current_hint

    assert current_hint() is None


def test_a_ctrl_c_counts_failed_items_apart_from_finished_ones(tmp_path, capsys, monkeypatch):
    """It said "8 finished items" of a ledger holding 5 ok and 3 failed (an audit)."""
    from cli_helpers import cli

    from mushroom.detectors.base import ItemResult
    from mushroom.detectors.lexical import LexicalDetector

    calls = {"n": 0}
    real = LexicalDetector.run

    def flaky(self, items, contexts, emit):
        calls["n"] += 1
        if calls["n"] == 1:  # the first batch: one item fails, the rest are done
            emit(ItemResult.failed(items[0].id, "boom"))
            return real(self, items[1:], contexts, emit)
        raise KeyboardInterrupt

    monkeypatch.setattr(LexicalDetector, "run", flaky)
    monkeypatch.setattr("mushroom.runs.service.CHUNK_ITEMS", 3)
    out = tmp_path / "run"
    code, _, err = cli(capsys, "detect", "--lang", "en", "--limit", "6", "--out", out, "--quiet")
    told = " ".join(err.split())
    assert (
        code == 130
        and "2 finished items and 1 failed item, which the next run retries (a reply kept in the response cache is read again as it was),"
        in told
    ), told
    # the command has ended: its folder is free for another process (a notebook kept it locked)
    probe = "import fcntl, sys; fcntl.flock(open(sys.argv[1], 'a'), fcntl.LOCK_EX | fcntl.LOCK_NB)"
    assert subprocess.run([sys.executable, "-c", probe, str(out / ".lock")]).returncode == 0
    # ... and only the holds the command took: a notebook's own run keeps its folder
    from mushroom.util import folderlock

    mine = tmp_path / "mine"
    mine.mkdir()
    key = folderlock.hold(mine, "--out", print)
    try:
        assert cli(capsys, "detectors")[0] == 0
        assert subprocess.run([sys.executable, "-c", probe, str(mine / ".lock")]).returncode != 0
    finally:
        folderlock.release(key)


def test_the_config_hash_is_pinned_to_its_scheme():
    """A folder whose settings no longer give its hash, under this scheme, is refused as edited
    by hand: a change to what the hash leaves out must bump HASH_SCHEME, or every folder of
    the current scheme would be refused."""
    from mushroom.runs.confighash import HASH_SCHEME, config_hash

    config = {
        "job": "detect",
        "detector": "lexical",
        "options": {"threshold": 0.25, "answer_pool": "whole"},
        "split": "val",
        "langs": ["en"],
        "limit": 5,
        "description": "words",
        "llm_budget": 0.3,
        "made_from": {"items": "/a"},
        "backend": {"base_url": "http://h/v1", "model": "m", "timeout_s": 60},
    }
    assert (config_hash(config), HASH_SCHEME) == ("288f4a5358396584", 2), (
        "config_hash changed: bump HASH_SCHEME in mushroom/runs/confighash.py, then pin both here"
    )


def test_a_ledger_counts_the_time_of_attempts_a_later_line_replaced(tmp_path):
    """A resumed run's stage time (`item_seconds`) dropped the failed first tries of the items
    it did again (196.9 s, then 113.9 s after a resume: an audit)."""
    from mushroom.data.records import Prediction
    from mushroom.detectors.base import ItemResult
    from mushroom.runs.ledger import Ledger

    path = tmp_path / "items" / "en.jsonl"
    ledger = Ledger(path)
    ledger.add(ItemResult.failed("a", "boom").model_copy(update={"seconds": 2.0}))
    ledger.add(ItemResult.ok(Prediction(id="b")).model_copy(update={"seconds": 0.5}))
    ledger.add(ItemResult.ok(Prediction(id="a")).model_copy(update={"seconds": 1.0}))
    ledger.close()
    assert ledger.spent == {"a": 3.0, "b": 0.5}
    assert Ledger(path).spent == {"a": 3.0, "b": 0.5}  # read back as a resumed run reads it


@pytest.mark.parametrize("members", [None, "lexical"])
def test_a_ctrl_c_before_the_main_jobs_folder_is_made_says_nothing_was_saved(
    tmp_path, capsys, monkeypatch, members
):
    """A Ctrl-C while main-job read its items said only "interrupted" (an audit): had a folder,
    and with it the work of a minute, been made or not?"""
    from cli_helpers import cli

    import mushroom.runs.mainjob as mainjob

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mainjob, "load_split", interrupted)
    out = tmp_path / "run"
    args = ("--detector", "lexical") if members is None else ("--members", members)
    code, _, err = cli(capsys, "main-job", "--lang", "en", "--out", out, "--quiet", *args)
    told = " ".join(err.split())
    assert (
        code == 130 and "interrupted; nothing was saved yet" in told and "run the same command again" in told
    )
    assert not out.exists()


@pytest.mark.parametrize("name", ["config.json", "Failures.jsonl", "responses.cache.jsonl"])
def test_a_variant_named_as_a_file_of_the_run_folder_is_refused_before_the_run(tmp_path, capsys, name):
    """`name = "config.json"` ran the variants before it, then failed on a path that is a file."""
    from cli_helpers import cli

    config = tmp_path / "v.toml"
    config.write_text(
        'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "lexical"\n'
        f'[[variants]]\nname = "a"\n[[variants]]\nname = "{name}"\noptions = {{ threshold = 0.4 }}\n'
    )
    out = tmp_path / "run"
    code, _, err = cli(capsys, "run", config, "--out", out)
    said = " ".join(err.split())
    assert code == 2 and "variants.1.name" in said and f"a variant name may not be {name!r}" in said, said
    assert not out.exists()


def test_variants_named_as_a_main_jobs_folders_still_run(tmp_path, capsys):
    """The first check refused every job's top-level names (raw, items): folders made so could
    no longer be resumed, for a clash a `run` folder does not have."""
    from cli_helpers import cli

    config = tmp_path / "v.toml"
    config.write_text(
        'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "lexical"\n'
        '[[variants]]\nname = "raw"\n[[variants]]\nname = "items"\noptions = { threshold = 0.4 }\n'
    )
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run", "--eval-dir", tmp_path / "e")
    assert code == 0, err


def test_a_variants_own_truth_value_for_a_number_is_said_with_the_others(tmp_path, capsys):
    """A variant's `threshold = true` matched itself in the table's de-duplication and was
    dropped; the run then stopped on it with no file, variant or key."""
    from cli_helpers import cli

    config = tmp_path / "v.toml"
    head = 'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "lexical"\n'
    config.write_text(
        head + '[[variants]]\nname = "c"\noptions = { threshold = true }\n'
        '[[variants]]\nname = "e"\noptions = { threshold = "0.3" }\n'
    )
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run")
    said = " ".join(err.split())
    assert (
        code == 2 and "2 problems" in said and "field 'variants.c.options': threshold: give a number" in said
    ), said
    # the table's own mistake is still said once, not again for each variant
    config.write_text(
        head + 'options = { threshold = true }\n[[variants]]\nname = "a"\n[[variants]]\nname = "b"\n'
    )
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run")
    said = " ".join(err.split())
    assert code == 2 and "1 problem in input" in said and "field 'detector.options'" in said, said


def test_a_quoted_list_of_numbers_is_told_to_be_written_as_a_list(tmp_path, capsys):
    """`temperatures = "0.1,0.2"` was told "write 0.1,0.2 without quotes": invalid TOML."""
    from cli_helpers import cli

    config = tmp_path / "v.toml"
    config.write_text(
        'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "llm"\n'
        'options = { temperatures = "0.1,0.2", backend = { kind = "replay", responses = "r.jsonl" } }\n'
    )
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "run")
    said = " ".join(err.split())
    assert code == 2 and "'0.1,0.2' is text, not a number: write [0.1, 0.2] without quotes" in said, said


def test_a_run_with_a_limit_writes_no_submission_zip(tmp_path, capsys):
    """A limited run on test zipped the first N items of each language, a zip `check` then
    refused ("no prediction for 151 of 154 items"), with only a note on its languages."""
    from cli_helpers import cli

    config = tmp_path / "c.toml"
    config.write_text('name = "c"\nsplits = ["test"]\nlangs = ["en"]\n[detector]\nname = "lexical"\n')
    code, out, err = cli(capsys, "run", config, "--limit", "2", "--out", tmp_path / "a")
    said = " ".join((out + err).split())
    assert code == 0 and "no submission.zip, as the run has a limit (2 items" in said, said
    assert not (tmp_path / "a" / "test" / "submission.zip").exists()
    assert json.loads((tmp_path / "a" / "summary.json").read_text())["splits"]["c/test"]["zip"] is None
    code, out, err = cli(capsys, "run", config, "--out", tmp_path / "b", "--quiet")
    assert code == 0 and (tmp_path / "b" / "test" / "submission.zip").is_file(), err


def test_two_variant_tables_made_in_the_same_second_get_files_of_their_own(tmp_path):
    """Named by the second they were made, two runs side by side wrote one table file and
    each run's summary named it."""
    from mushroom.runs.config import _new_stem

    first, second = _new_stem(tmp_path, "variants-v-1"), _new_stem(tmp_path, "variants-v-1")
    assert first.name == "variants-v-1" and second.name == "variants-v-1-2"
    assert (tmp_path / "variants-v-1.md").exists() and (tmp_path / "variants-v-1-2.md").exists()
    # a run named with a dot (qwen2.5): every stem was cut to one `variants-qwen2.md`, and the
    # second run raised "999 tables" after all its variants had run
    one, two = _new_stem(tmp_path, "variants-qwen2.5-1"), _new_stem(tmp_path, "variants-qwen2.5-2")
    assert (one.name, two.name) == ("variants-qwen2.5-1", "variants-qwen2.5-2")
    assert (tmp_path / "variants-qwen2.5-1.md").exists() and (tmp_path / "variants-qwen2.5-2.md").exists()


def test_a_config_says_what_its_variants_list_does(tmp_path, capsys):
    """`variants = []` ran as a plain run and one variant ran with no comparison, neither said;
    `detector = "lexical"` was told "valid dictionary or instance of DetectorSection"."""
    from cli_helpers import cli

    config = tmp_path / "v.toml"
    head = 'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\n'
    config.write_text(head + 'variants = []\n[detector]\nname = "lexical"\n')
    code, _, err = cli(capsys, "run", config, "--out", tmp_path / "a")
    said = " ".join(err.split())
    assert code == 2 and "field 'variants'" in said and "leave `variants` out for a plain run" in said, said
    config.write_text(head + 'detector = "lexical"\n[[variants]]\nname = "only"\n')
    code, out, err = cli(capsys, "run", config, "--out", tmp_path / "b", "--eval-dir", tmp_path / "e")
    said = " ".join((out + err).split())
    assert code == 0 and "one variant (only): nothing to compare it with" in said, said
    assert (tmp_path / "b" / "only" / "val").is_dir()
    # scored, its scope is said in the config's words: `run` has no --lang; its limit is the
    # config's or `run --limit`'s (it said "its config" of a limit typed on the command line)
    from cli_helpers import VAL_DIR

    code, out, err = cli(capsys, "score", VAL_DIR, tmp_path / "b" / "only")
    said = " ".join((out + err).split())
    assert code == 0 and "was made with limit 2 and langs en (its config, or `run --limit`)" in said, said


def test_scores_md_counts_only_its_own_variants_failed_items(tmp_path, capsys):
    """One service runs every variant: a good variant's scores.md said another's item failed."""
    from cli_helpers import VAL_EN, cli

    first = [json.loads(line) for line in open(VAL_EN, encoding="utf-8")][:2]
    full, half = tmp_path / "full.jsonl", tmp_path / "half.jsonl"
    full.write_text(
        "".join(json.dumps({"id": r["id"], "texts": ['{"incorrect_spans": []}']}) + "\n" for r in first)
    )
    half.write_text(full.read_text().splitlines()[0] + "\n")
    config = tmp_path / "v.toml"
    config.write_text(
        'name = "v"\nsplits = ["val"]\nlangs = ["en"]\nlimit = 2\n[detector]\nname = "llm"\n'
        "[detector.options]\ntemperatures = [0.1]\n"
        f'[[variants]]\nname = "bad"\noptions = {{ backend = {{ kind = "replay", responses = "{half}" }} }}\n'
        f'[[variants]]\nname = "good"\noptions = {{ backend = {{ kind = "replay", responses = "{full}" }} }}\n'
    )
    out = tmp_path / "run"
    code, _, err = cli(capsys, "run", config, "--out", out, "--allow-failures", "--eval-dir", tmp_path / "e")
    assert code == 0, err
    assert (
        "1 item failed and scored as empty predictions (en 1;"
        in (out / "bad" / "val" / "scores.md").read_text()
    )
    assert "failed" not in (out / "good" / "val" / "scores.md").read_text()


def test_a_run_resumed_with_other_versions_records_them_and_says_so(tmp_path):
    """versions.json was written once, at the first pass: a folder resumed after an upgrade
    held items of two versions and named one (an audit)."""
    out = tmp_path / "run"
    args = ("detect", "--detector", "lexical", "--lang", "en", "--out", str(out), "--quiet", "--limit")
    assert mushroom(*args, "1").returncode == 0
    first = json.loads((out / "versions.json").read_text())
    assert first["packages"]["threadpoolctl"] and "blas" in first  # what the numbers rest on
    # a resume with the same versions adds nothing
    assert mushroom(*args, "1").returncode == 0
    assert json.loads((out / "versions.json").read_text()) == first
    old = {**first, "packages": {**first["packages"], "numpy": "1.0.0"}, "git_commit": "abc"}
    (out / "versions.json").write_text(json.dumps(old))
    proc = mushroom(*args, "2")
    said = " ".join(proc.stderr.split())
    assert proc.returncode == 0 and f"{out} was made with other versions (numpy 1.0.0 -> " in said, said
    record = json.loads((out / "versions.json").read_text())
    assert record["packages"]["numpy"] == "1.0.0"  # the first pass's, as it was
    (resumed,) = record["resumed"]
    assert resumed["changed"]["packages.numpy"] == ["1.0.0", first["packages"]["numpy"]]
    assert resumed["changed"]["git_commit"] == ["abc", first["git_commit"]]
    # said once: the next resume compares with the last pass's versions, not the first's
    proc = mushroom(*args, "3")
    assert proc.returncode == 0 and "other versions" not in proc.stderr, proc.stderr
    assert len(json.loads((out / "versions.json").read_text())["resumed"]) == 1
    # a folder of an older mushroom, which recorded less, is no change (a review)
    older = {k: v for k, v in first.items() if k != "blas"}
    older["packages"] = {k: v for k, v in first["packages"].items() if k != "joblib"}
    (out / "versions.json").write_text(json.dumps(older))
    proc = mushroom(*args, "4")
    assert proc.returncode == 0 and "other versions" not in proc.stderr, proc.stderr
    assert "resumed" not in json.loads((out / "versions.json").read_text())


@pytest.mark.parametrize(
    ("error", "advice"),
    [
        # a cut-off reply comes back from the cache: the same command fails it again (an audit)
        (
            "the reply was cut off at max_tokens (1024) before it named a span found in the answer: raise "
            "max_tokens",
            "raise max_tokens (-o max_tokens=N) and run in a new folder",
        ),
        ("ConnectError: [Errno 111] Connection refused", "start the server"),
        ("HTTP 503 from the server", "run that run's command again to retry only them"),
    ],
)
def test_a_failed_items_note_gives_the_advice_its_errors_need(tmp_path, error, advice):
    assert advice in _failed_note(tmp_path, [error])


CUT = (
    "the reply was cut off at max_tokens (1024) before it named a span found in the answer: raise max_tokens"
)


def test_a_failed_items_note_says_what_a_re_run_cannot_mend_for_some_and_in_the_run_s_own_form(tmp_path):
    """A cut-off reply among other failures lost its caveat; a main job's member took the advice
    in detect's form (-o max_tokens=N), which the main job refuses (a review)."""
    said = _failed_note(tmp_path / "a", [CUT, "ConnectError: [Errno 111] Connection refused"])
    assert "run that run's command again to retry only them" in said and "from the cache again" in said
    job = tmp_path / "job"
    (job / "members" / "chain" / "val").mkdir(parents=True)
    (job / "config.json").write_text(json.dumps({"config": {"job": "main"}, "config_hash": "x"}))
    assert "raise max_tokens (-o chain.max_tokens=N)" in _failed_note(
        job / "members" / "chain" / "val", [CUT]
    )


def _failed_note(folder: Path, errors: list[str]) -> str:
    """The failed items note of a prediction file whose ledger lists an item failed with each error."""
    from mushroom.data.records import Prediction
    from mushroom.data.runfolder import failed_items

    (folder / "items").mkdir(parents=True)
    rows = [{"id": f"val-en-{k}", "status": "failed", "error": e} for k, e in enumerate(errors)]
    rows.append({"id": "val-en-ok", "status": "ok"})
    (folder / "items" / "en.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = folder / "mushroom.en-val.v2.jsonl"
    path.touch()  # as a run writes it: its folder is the one its run is found from
    empty = {r["id"]: Prediction(id=r["id"], soft_labels=[], hard_labels=[]) for r in rows}
    found = failed_items(path, empty)
    assert found is not None and len(found.failed) == len(errors)
    return found.message(path)


def test_a_failed_items_note_of_a_run_with_no_ledger_gives_the_advice_its_failures_list_needs(tmp_path):
    """A file with no item ledger (a main job's stack output) took the generic "run that run's
    command again", which reads the same cut-off replies from the cache (a known weak point)."""
    from mushroom.data.records import Prediction
    from mushroom.data.runfolder import failed_items

    job = tmp_path / "job"
    job.mkdir()
    (job / "config.json").write_text(json.dumps({"config": {"job": "main"}, "config_hash": "x"}))
    rows = [{"split": "val", "lang": "en", "id": "val-en-1", "detector": "chain", "error": CUT}]
    (job / "failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = job / "val" / "mushroom.en-val.v2.jsonl"
    path.parent.mkdir()
    path.touch()
    empty = {i: Prediction(id=i, soft_labels=[], hard_labels=[]) for i in ("val-en-1", "val-en-2")}
    found = failed_items(path, empty)
    assert found is not None and found.failed == {"val-en-1"}
    said = found.message(path)
    assert "raise max_tokens (-o chain.max_tokens=N)" in said, said
    # two members' failures, one item failed by both: the advice names its MEMBER placeholder
    # and both members (a review: the item's last line alone was kept)
    rows.append({**rows[0], "detector": "llm"})
    (job / "failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    said = failed_items(path, empty).message(path)
    assert "(-o MEMBER.max_tokens=N)" in said and "(MEMBER: chain, llm)" in said, said
    rows.append({**rows[0], "id": "val-en-2", "detector": "llm"})
    (job / "failures.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    said = failed_items(path, empty).message(path)
    assert "(-o MEMBER.max_tokens=N)" in said and "(MEMBER: chain, llm)" in said, said
