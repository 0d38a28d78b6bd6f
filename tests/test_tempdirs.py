"""A killed process's temporary copy of a dataset is removed by the next process that makes one."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import pytest

from mushroom.util.tempdirs import process_temp_dir

MAKE = """
import os, signal, sys
from mushroom.util.tempdirs import process_temp_dir
folder = process_temp_dir("mushroom-hf-")
(folder / "items.jsonl").write_text("{}")
print(folder, flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdin.read()  # runs until its input closes
"""


@pytest.mark.skipif(os.name == "nt", reason="no SIGKILL, and nothing is swept on Windows")
def test_the_copy_a_killed_process_left_is_removed_and_a_running_ones_is_kept(tmp_path, monkeypatch):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    killed = subprocess.run(
        [sys.executable, "-c", MAKE, "kill"], env=env, capture_output=True, text=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    left = tmp_path / os.path.basename(killed.stdout.strip())
    assert (left / "items.jsonl").exists()  # no exit hook ran
    running = subprocess.Popen(
        [sys.executable, "-c", MAKE, "wait"],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        live = tmp_path / os.path.basename(running.stdout.readline().strip())
        unowned = tmp_path / "mushroom-hf-being-made"  # no lock file yet: left alone
        unowned.mkdir()
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        mine = process_temp_dir("mushroom-hf-")
        assert not left.exists() and (live / "items.jsonl").exists() and unowned.is_dir()
        assert process_temp_dir("mushroom-hf-").is_dir() and mine.is_dir()  # this process's own stays
    finally:
        running.communicate("", timeout=60)
    assert not live.exists()  # removed at its exit


@pytest.mark.skipif(os.name == "nt", reason="nothing is swept on Windows")
def test_a_folder_that_cannot_be_looked_into_is_left_alone(tmp_path, monkeypatch):
    """Another user's 0700 folder raised PermissionError, and every saved dataset failed to load."""
    from pathlib import Path

    from mushroom.util.tempdirs import sweep

    other = tmp_path / "mushroom-hf-other"
    (other / ".owner").parent.mkdir()
    (other / ".owner").write_text("")
    real = Path.is_file

    def refused(path):
        if path.parent == other:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "is_file", refused)
    assert sweep("mushroom-hf-", tmp_path) == [] and other.is_dir()
