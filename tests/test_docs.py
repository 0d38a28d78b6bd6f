"""The docs site builds with `mkdocs build --strict`, so a broken link or page fails the suite.

The CLI reference is generated from the typer app and the API reference from docstrings, so
this also fails when a command or a documented function can no longer be rendered. The
README's results table must be the one benchmarks/results_page.py wrote for the docs.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_docs_build_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[docs]'")
    # this checkout's package first (the hook imports mushroom.cli.app), and no banner noise
    pythonpath = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": pythonpath, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    # generated from the app, not copied: every top-level command and a nested one is there
    for command in ("score", "ensemble", "main-job", "contexts", "allow-failures", "mushroom stack fit"):
        assert command in cli, f"{command!r} missing from the generated CLI reference"
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert "detect_batch" in api and "RunFailed" in api


def table_rows(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("| ")]


def test_readme_results_table_is_the_generated_one():
    generated = table_rows((ROOT / "docs" / "results" / "val_systems.md").read_text())
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Results", 1)[1].split("\n## ", 1)[0]
    assert generated, "docs/results/val_systems.md has no table: run python benchmarks/results_page.py"
    assert table_rows(section) == generated, (
        "README's results table differs from docs/results/val_systems.md; copy the generated rows"
    )


def test_readme_starts_with_the_two_commands():
    # .ci/run runs the first of these commands: it must stay as it is
    lines = (ROOT / "README.md").read_text().splitlines()
    assert lines[2:6] == [
        "```bash",
        "python3 -m pip install -q -e '.[dev]' && python3 -m pytest",
        "./run.sh",
        "```",
    ]
    assert re.fullmatch(r"# mushroom", lines[0])
