"""Fuzzing every reader of user files with corrupted copies of real files.

A corrupted file must either load completely (one record per non-blank line: no silent
partial load) or fail with a DataError/MushroomError whose problems name the file and, for a
bad line, the line. Any other exception type is a bug.
"""

import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, VAL_EN
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mushroom.data.jsonl import load_records
from mushroom.data.label_files import read_scoring_file
from mushroom.data.predictions import load_predictions
from mushroom.data.records import ContextRecord
from mushroom.data.splits import load_items
from mushroom.errors import DataError, MushroomError
from mushroom.evaluation.check import check_file
from mushroom.evaluation.compare import load_tags

CONTEXT_FILE = ROOT / "contexts" / "ucsc" / "en-val.v2_perplexity-sonar-pro.jsonl"
CONFIG_FILE = ROOT / "configs" / "qwen2.5-14b-fewshot-temps.toml"

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


def _head(path: Path, n: int = 12) -> bytes:
    return b"".join(path.read_bytes().splitlines(keepends=True)[:n])


def _prediction_sample() -> bytes:
    rows = [json.loads(line) for line in _head(VAL_EN).decode().splitlines()]
    keep = [{"id": r["id"], "soft_labels": r["soft_labels"], "hard_labels": r["hard_labels"]} for r in rows]
    return "".join(json.dumps(r) + "\n" for r in keep).encode()


def _tags_sample() -> bytes:
    types = ["incorrect-context", "other", "semantic-equivalence-fp"]
    return "".join(
        json.dumps({"id": f"val-en-{k}", "error_type": types[k % 3], "note": "n"}) + "\n" for k in range(1, 9)
    ).encode()


def _replay_sample() -> bytes:
    return "".join(
        json.dumps({"id": f"val-en-{k}", "response": '{"spans": ["x"]}', "temperature": 0.1 * (k % 3)}) + "\n"
        for k in range(1, 9)
    ).encode()


WRONG_VALUES = [None, True, -1, 0, 1.5, 10**30, -(10**30), 1e300, "x", "", [], {}, [[1]], [1, 2, 3], {"a": 1}]


def _mutate_json(line: bytes, data: st.DataObject) -> bytes:
    """Replace one value anywhere in a JSON line by a wrong type or an extreme number."""
    try:
        obj = json.loads(line)
    except ValueError:
        return line
    paths = []

    def walk(node, path):
        paths.append(path)
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, (*path, i))

    walk(obj, ())
    path = data.draw(st.sampled_from(paths[1:] or [()]))
    if not path:
        return line
    node = obj
    for part in path[:-1]:
        node = node[part]
    action = data.draw(st.sampled_from(["replace", "delete"]))
    if action == "delete" and isinstance(node, dict):
        del node[path[-1]]
    else:
        node[path[-1]] = data.draw(st.sampled_from(WRONG_VALUES))
    return json.dumps(obj, ensure_ascii=False).encode()


def corrupt(raw: bytes, data: st.DataObject) -> bytes:
    """One or more random corruptions of a JSONL file's bytes."""
    for _ in range(data.draw(st.integers(1, 3))):
        lines = raw.split(b"\n")
        kind = data.draw(
            st.sampled_from(
                [
                    "truncate",
                    "flip",
                    "insert",
                    "delete",
                    "drop_line",
                    "dup_line",
                    "json",
                    "bom",
                    "crlf",
                    "bytes",
                ]
            )
        )
        k = data.draw(st.integers(0, max(len(lines) - 1, 0)))
        if kind == "truncate" and lines[k]:
            lines[k] = lines[k][: data.draw(st.integers(0, len(lines[k]) - 1))]
        elif kind in ("flip", "insert", "delete") and raw:
            pos = data.draw(st.integers(0, len(raw) - 1))
            byte = bytes([data.draw(st.integers(0, 255))])
            raw = {
                "flip": raw[:pos] + byte + raw[pos + 1 :],
                "insert": raw[:pos] + byte + raw[pos:],
                "delete": raw[:pos] + raw[pos + 1 :],
            }[kind]
            continue
        elif kind == "drop_line" and lines:
            del lines[k]
        elif kind == "dup_line" and lines:
            lines.insert(k, lines[k])
        elif kind == "json" and lines:
            lines[k] = _mutate_json(lines[k], data)
        elif kind == "bom":
            raw = b"\xef\xbb\xbf" + raw
            continue
        elif kind == "crlf":
            raw = raw.replace(b"\n", b"\r\n")
            continue
        elif kind == "bytes":
            lines.insert(k, data.draw(st.binary(max_size=30)))
        raw = b"\n".join(lines)
    return raw


def record_lines(raw: bytes) -> int:
    """Non-blank lines as the readers count them (LF-separated, BOM skipped)."""
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    return sum(1 for line in raw.split(b"\n") if line.decode("utf-8", "replace").strip())


def assert_located(exc: BaseException, path: Path) -> None:
    """The error names the file; each problem of a DataError names the file and a line."""
    assert isinstance(exc, MushroomError), f"{type(exc).__name__}: {exc}"
    assert str(path) in str(exc)
    if isinstance(exc, DataError):
        for problem in exc.problems:
            assert problem.path == str(path)
            assert _located(problem), problem


# file-level problems (no line) only when there is no line to blame
FILE_LEVEL = ("no line", "JSON Lines", "zip", "gzip", "UTF-16")


def _located(problem) -> bool:
    """A line, the id field, or a problem of the whole file (a zip's first bytes)."""
    return problem.line is not None or problem.field == "id" or any(w in problem.message for w in FILE_LEVEL)


def _write(tmp_path_factory, name: str, raw: bytes) -> Path:
    path = tmp_path_factory.mktemp("fuzz") / name
    path.write_bytes(raw)
    return path


def _load_or_locate(load, path: Path, raw: bytes, count=len) -> None:
    try:
        result = load(path)
    except Exception as exc:  # noqa: BLE001 - the point: which type escapes
        assert_located(exc, path)
        return
    assert count(result) == record_lines(raw), "silent partial load"


@FUZZ
@given(data=st.data())
def test_items(tmp_path_factory, data):
    raw = corrupt(_head(VAL_EN), data)
    path = _write(tmp_path_factory, "mushroom.en-val.v2.jsonl", raw)
    _load_or_locate(load_items, path, raw)


@FUZZ
@given(data=st.data())
def test_predictions(tmp_path_factory, data):
    raw = corrupt(_prediction_sample(), data)
    path = _write(tmp_path_factory, "p.jsonl", raw)
    items = load_items(_write(tmp_path_factory, "i.jsonl", _head(VAL_EN)))
    lengths = {i.id: len(i.model_output_text) for i in items}
    _load_or_locate(load_predictions, path, raw)
    _load_or_locate(lambda p: load_predictions(p, lengths), path, raw)
    _load_or_locate(lambda p: read_scoring_file(p, is_gold=False).records, path, raw)


@FUZZ
@given(data=st.data())
def test_check(tmp_path_factory, data):
    raw = corrupt(_prediction_sample(), data)
    path = _write(tmp_path_factory, "p.jsonl", raw)
    items = load_items(_write(tmp_path_factory, "i.jsonl", _head(VAL_EN)))
    try:
        report = check_file(path, items)
    except Exception as exc:  # noqa: BLE001
        assert_located(exc, path)
        return
    for problem in report.errors:
        assert problem.path == str(path)
        assert _located(problem), problem  # a corruption that made the first bytes a zip's is the file's
    if report.ok:
        assert report.n_lines == record_lines(raw) == len(items)


@FUZZ
@given(data=st.data())
def test_gold_for_scoring(tmp_path_factory, data):
    raw = corrupt(_head(VAL_EN), data)
    path = _write(tmp_path_factory, "g.jsonl", raw)
    _load_or_locate(lambda p: read_scoring_file(p, is_gold=True).records, path, raw)


@FUZZ
@given(data=st.data())
def test_contexts(tmp_path_factory, data):
    raw = corrupt(_head(CONTEXT_FILE, 6), data)
    root = tmp_path_factory.mktemp("ctx")
    path = root / "val.en.mine.jsonl"
    path.write_bytes(raw)
    _load_or_locate(lambda p: load_records(p, ContextRecord), path, raw)
    from mushroom.data.contexts import load_contexts

    try:
        ctx = load_contexts("val", "en", ("mine",), context_dir=root)
    except Exception as exc:  # noqa: BLE001
        assert_located(exc, path)
        return
    assert sum(len(v) for v in ctx.by_id.values()) == record_lines(raw)


@FUZZ
@given(data=st.data())
def test_tags(tmp_path_factory, data):
    raw = corrupt(_tags_sample(), data)
    path = _write(tmp_path_factory, "tags.jsonl", raw)
    _load_or_locate(load_tags, path, raw)


@FUZZ
@given(data=st.data())
def test_recorded_responses(tmp_path_factory, data):
    from mushroom.backends.base import BackendConfig
    from mushroom.backends.replay import ReplayBackend

    raw = corrupt(_replay_sample(), data)
    path = _write(tmp_path_factory, "responses.jsonl", raw)
    config = BackendConfig(kind="replay", responses=str(path))
    _load_or_locate(lambda p: ReplayBackend(config), path, raw, count=lambda b: len(b.records))


@pytest.mark.skipif(not CONFIG_FILE.is_file(), reason="no shipped config")
@FUZZ
@given(data=st.data())
def test_run_configs(tmp_path_factory, data):
    from mushroom.runs.config import load_run_config

    raw = CONFIG_FILE.read_bytes()
    lines = raw.split(b"\n")
    k = data.draw(st.integers(0, len(lines) - 1))
    kind = data.draw(st.sampled_from(["flip", "truncate", "drop", "bom", "crlf", "value"]))
    if kind == "flip" and raw:  # printable ASCII: non-UTF-8 bytes are the test below
        pos = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:pos] + bytes([data.draw(st.integers(32, 126))]) + raw[pos + 1 :]
    elif kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    elif kind == "drop":
        raw = b"\n".join(lines[:k] + lines[k + 1 :])
    elif kind == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif kind == "crlf":
        raw = raw.replace(b"\n", b"\r\n")
    elif kind == "value" and b"=" in lines[k]:
        key = lines[k].split(b"=", 1)[0]
        value = data.draw(
            st.sampled_from([b"-1", b"1e999", b'"x"', b"[]", b"{}", b"true", b"99999999999999999999"])
        )
        lines[k] = key + b"= " + value
        raw = b"\n".join(lines)
    path = _write(tmp_path_factory, "run.toml", raw)
    try:
        load_run_config(path)
    except Exception as exc:  # noqa: BLE001
        assert isinstance(exc, MushroomError), f"{type(exc).__name__}: {exc}"
        if isinstance(exc, DataError):
            assert all(p.path == str(path) for p in exc.problems)


def test_run_config_that_is_not_utf8(tmp_path):
    from mushroom.runs.config import load_run_config

    path = tmp_path / "run.toml"
    path.write_bytes(b"\x80" + CONFIG_FILE.read_bytes())
    with pytest.raises(MushroomError, match="run.toml"):
        load_run_config(path)


def test_fuzz_samples_load_as_they_are(tmp_path):
    """The uncorrupted samples load completely: the fuzz tests start from valid files."""
    for name, raw, load in (
        ("i.jsonl", _head(VAL_EN), load_items),
        ("p.jsonl", _prediction_sample(), load_predictions),
        ("t.jsonl", _tags_sample(), load_tags),
        ("c.jsonl", _head(CONTEXT_FILE, 6), lambda p: load_records(p, ContextRecord)),
    ):
        path = tmp_path / name
        path.write_bytes(raw)
        assert len(load(path)) == record_lines(raw) > 0
    shutil.rmtree(tmp_path)
