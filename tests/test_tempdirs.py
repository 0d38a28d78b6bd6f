"""A killed process's temporary copy of a dataset is removed by the next process that makes one."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from mushroom.util.tempdirs import process_temp_dir

KILLED = """
import os, signal
from mushroom.util.tempdirs import process_temp_dir
folder = process_temp_dir("mushroom-hf-")
(folder / "items.jsonl").write_text("{}")
print(folder, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.skipif(os.name == "nt", reason="no SIGKILL, and nothing is swept on Windows")
def test_the_copy_a_killed_process_left_is_removed_and_a_live_ones_is_kept(tmp_path, monkeypatch):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", KILLED], env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode == -9, run.stderr
    left = tmp_path / run.stdout.strip().rsplit("/", 1)[-1]
    assert (left / "items.jsonl").exists()  # no exit hook ran
    live = tmp_path / f"mushroom-hf-{os.getppid()}-abc"  # a running process's folder
    live.mkdir()
    other = tmp_path / "mushroom-hf-notapid"
    other.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mine = process_temp_dir("mushroom-hf-")
    assert not left.exists() and live.is_dir() and other.is_dir()
    assert mine.is_dir() and mine.name.startswith(f"mushroom-hf-{os.getpid()}-")
