"""benchmarks/same_outputs.py --replies: the check behind "CUDA writes what the CPU writes"."""

import subprocess
import sys
from pathlib import Path

from mushroom.backends.rawlog import RawLog, RawRecord

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "same_outputs.py"


def run_with(folder: Path, replies: dict[str, str], failed: tuple[str, ...] = ()) -> Path:
    log = RawLog(folder / "predictions" / "raw" / "en.raw.jsonl")
    for key, text in replies.items():
        log.write(RawRecord(id=key, key=key, stage="llm", texts=[text]))
    for key in failed:
        log.write(RawRecord(id=key, key=key, stage="llm", error="HTTP 500"))
    return folder


def compare(a: Path, b: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(a), str(b), "--replies"],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_replies_compare_by_key_over_the_keys_both_runs_hold(tmp_path):
    cpu = run_with(tmp_path / "cpu", {"a": '{"x": 1}', "b": "{}", "c": "[]"})
    # a run stopped part way (no "c") with a failed call (no reply to compare)
    cuda = run_with(tmp_path / "cuda", {"a": '{"x": 1}', "b": "{}"}, failed=("c",))
    done = compare(cpu, cuda)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("2 of 2 shared replies identical (3 in ")

    other = run_with(tmp_path / "other", {"a": '{"x": 2}', "b": "{}"})
    done = compare(cpu, other)
    assert done.returncode == 1
    assert "1 of 2 shared replies identical" in done.stdout
    assert "differs: predictions/raw: - llm a at temperature None (text 1, from character 6)" in done.stdout


def test_each_temperature_of_an_item_is_its_own_reply(tmp_path):
    """An item's requests share its key: only the last temperature's reply was compared."""

    def run(folder, texts):
        log = RawLog(folder / "predictions" / "raw" / "en.raw.jsonl")
        for t, text in zip((0.05, 0.1, 0.2), texts):
            log.write(RawRecord(id="a", key="a", stage="llm", temperature=t, texts=[text]))
        return folder

    done = compare(run(tmp_path / "x", ["1", "2", "3"]), run(tmp_path / "y", ["9", "2", "3"]))
    assert done.returncode == 1 and done.stdout.startswith("2 of 3 shared replies identical"), done.stdout
    assert "differs: predictions/raw: - llm a at temperature 0.05 (text 1, from character 0)" in done.stdout


def test_runs_with_no_reply_in_common_are_no_match(tmp_path):
    done = compare(run_with(tmp_path / "a", {"a": "{}"}), run_with(tmp_path / "b", {"b": "{}"}))
    assert done.returncode == 1 and done.stdout.startswith("0 of 0 shared replies identical")


def test_variants_and_models_are_kept_apart_and_a_cut_line_is_skipped(tmp_path):
    """A config's variants write the same keys in folders of their own, and pyes' models share
    their item's key: only the last one read was compared. A line a kill cut off crashed it."""

    def run(folder, few, zero):
        for variant, text in (("few-shot", few), ("zero-shot", zero)):
            RawLog(folder / variant / "val" / "raw" / "en.raw.jsonl").write(
                RawRecord(id="a", key="a", stage="llm", texts=[text])
            )
        for model, score in (("m0", -0.1), ("m1", -2.0)):
            RawLog(folder / "pyes" / "raw" / "en.raw.jsonl").write(
                RawRecord(id="a", key="a", stage="pyes", call="loglikelihood", model=model, logprob=score)
            )
        return folder

    a = run(tmp_path / "a", "x", "z")
    b = run(tmp_path / "b", "DIFFERENT", "z")
    with (b / "zero-shot" / "val" / "raw" / "en.raw.jsonl").open("a") as cut:
        cut.write('{"key": "a", "te')
    done = compare(a, b)
    assert done.returncode == 1 and done.stdout.startswith("3 of 4 shared replies identical"), done.stdout
    assert "skipped lines that are no raw record (cut by a kill?): 0 in A, 1 in B" in done.stdout
    assert "differs: few-shot/val/raw: - llm a at temperature None" in done.stdout


def test_a_folder_that_is_not_there_or_holds_nothing_is_no_match(tmp_path):
    """A mistyped RUN_A compared nothing and said '0 identical, 0 different, 0 missing', exit 0."""
    there = run_with(tmp_path / "there", {"a": "{}"})
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "typo"), str(there)], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no such run folder" in done.stderr
    (tmp_path / "empty").mkdir()
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "empty"), str(there)], capture_output=True, text=True
    )
    assert done.returncode == 1 and "nothing to compare" in done.stdout


def test_the_file_comparison_leaves_model_call_logs_to_replies(tmp_path):
    """A resumed run's raw log keeps its failed calls: two runs with the same predictions read as
    "different" on their raw logs and response caches (a kill/resume audit)."""
    a = run_with(tmp_path / "a", {"a": "{}"})
    b = run_with(tmp_path / "b", {"a": "{}"}, failed=("a",))
    for run in (a, b):
        (run / "predictions" / "mushroom.en-val.v2.jsonl").write_text('{"id": "a", "hard_labels": []}\n')
        (run / "predictions" / "raw" / "responses.cache.jsonl").write_text(run.name)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(a), str(b)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.startswith("1 identical, 0 different, 0 missing"), done.stdout
