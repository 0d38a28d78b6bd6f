import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if "MUSHROOM_TEST_CACHE" not in os.environ:
    # Encoder outputs go to a fresh cache per test session, never the user's: a test must not
    # pass only because an earlier run left vectors behind. It is deleted when the session
    # ends (each session left up to 613 MB in the temp folder: a pulled model and its
    # converted copy). Model files the user has pulled (`mushroom models pull`, checked by
    # sha256) are linked in one by one, so they are not fetched again; what a test derives
    # from them (the transformers backend's converted copy) is still made in the session's
    # own folder, so the code that makes it runs every session.
    import atexit
    import shutil
    import tempfile

    from mushroom.util.cachedir import cache_root

    _cache = Path(tempfile.mkdtemp(prefix="mushroom-test-cache-"))
    atexit.register(shutil.rmtree, _cache, ignore_errors=True)
    try:
        for _file in (cache_root().expanduser().resolve() / "models").glob("*/*"):
            if _file.is_file():
                (_cache / "models" / _file.parent.name).mkdir(parents=True, exist_ok=True)
                (_cache / "models" / _file.parent.name / _file.name).symlink_to(_file)
    except OSError:  # an unreadable user cache: the tests fetch what they need, as on a new machine
        pass
    os.environ["MUSHROOM_CACHE_DIR"] = str(_cache)

ROOT = Path(__file__).resolve().parent.parent
VAL_EN = ROOT / "data" / "mushroom" / "val" / "mushroom.en-val.v2.extra.jsonl"


@pytest.fixture(autouse=True, scope="session")
def _checkout_output_folders_stay_as_they_were():
    """A test that writes to the checkout's eval/, runs/ or submissions/ fails the session.

    A scoring test left a variants table in eval/ at every run of the suite (found in a fresh
    clone after CI); those folders are a user's, and a test writes under its own tmp_path.
    """

    def listing() -> set[Path]:
        return {p for name in ("eval", "runs", "submissions") for p in (ROOT / name).glob("*")}

    before = listing()
    yield
    added = sorted(str(p.relative_to(ROOT)) for p in listing() - before)
    assert not added, f"tests wrote into the checkout (or a run of yours ran beside them): {added}"


def install_fake_distribution(
    folder: Path, monkeypatch, name: str, version: str, group: str, entry: str
) -> None:
    """Makes `folder` an importable place holding one installed distribution with one entry point.

    What a third-party plugin package looks like to `importlib.metadata` once pip installed
    it: a `NAME-VERSION.dist-info` with METADATA and entry_points.txt (`entry`: "name = mod:Obj").
    """
    dist = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\n{entry}\n")
    monkeypatch.syspath_prepend(str(folder))


def write_lines(path: Path, rows: list) -> Path:
    """Writes rows (dicts are JSON-encoded, strings written as they are) one per line."""
    with path.open("w", encoding="utf-8") as out:
        for row in rows:
            out.write((row if isinstance(row, str) else json.dumps(row, ensure_ascii=False)) + "\n")
    return path


def heavy_val_lines(path: Path) -> list[dict]:
    """200 English val lines written to `path`, each with 5,000 logits (about 5 MB in all).

    A file whose lines are big, as a corpus of official items is: a reader that holds every
    line shows it in its memory.
    """
    rows = [json.loads(line) for line in VAL_EN.read_text(encoding="utf-8").splitlines()][:5]
    rows = [
        {**row, "id": f"{row['id']}#{k}", "model_output_logits": [0.5] * 5000}
        for k in range(40)
        for row in rows
    ]
    write_lines(path, rows)
    return rows


def traced(fn):
    """(fn(), bytes Python held after it, bytes at its peak), by tracemalloc."""
    import tracemalloc

    tracemalloc.start()
    try:
        result = fn()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, held, peak


@pytest.fixture
def item_rows() -> list[dict]:
    return [
        {
            "id": "t-1",
            "lang": "EN",
            "model_input": "Who won?",
            "model_output_text": "Alice won in 1990.",
            "soft_labels": [{"start": 13, "end": 17, "prob": 0.8}],
            "hard_labels": [[13, 17]],
        },
        {
            "id": "t-2",
            "lang": "EN",
            "model_input": "Where?",
            "model_output_text": "In Paris.",
            "soft_labels": [],
            "hard_labels": [],
        },
    ]
