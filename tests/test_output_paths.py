"""Outputs written to a link or a pipe go through to it; they never replace it."""

from __future__ import annotations

import os
import threading

import pytest
from cli_helpers import cli

from mushroom.data.jsonl import JsonlWriter, atomic_write_text
from mushroom.data.splits import split_files


def test_a_link_given_as_output_is_written_through_and_kept(tmp_path, capsys):
    target = tmp_path / "target.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    gold = split_files("val")["it"]
    code, _, err = cli(capsys, "score", gold, gold, "--json", link)
    assert code == 0, err
    assert link.is_symlink() and '"iou": 1.0' in target.read_text()
    writer = JsonlWriter(link)
    writer.write([{"a": 1}])
    writer.commit()
    assert link.is_symlink() and target.read_text() == '{"a": 1}\n'


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes on this system")
def test_a_pipe_given_as_output_is_written_to_not_replaced(tmp_path):
    # as root a rename replaced any such file: `--output /dev/null` deleted /dev/null (an audit)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    atomic_write_text(fifo, "through the pipe\n")
    reader.join(timeout=10)
    assert got == ["through the pipe\n"]
    assert not fifo.is_file() and fifo.exists()
