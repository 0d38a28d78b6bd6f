"""mushroom as an installed package: a wheel in a fresh venv, used from another folder.

The venv sees this machine's site-packages for numpy, pydantic and the rest (tests run
offline), but mushroom itself comes from the wheel: prompts and other resources must be
package data, not files of the checkout.
"""

import json
import subprocess
import sys
import venv
import zipfile

import pytest
from conftest import ROOT, write_lines

from mushroom.data.splits import load_split


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"building the wheel failed:\n{proc.stderr[-2000:]}")
    wheel = next(tmp.glob("mushroom-*.whl"))
    env_dir = tmp / "venv"
    venv.EnvBuilder(system_site_packages=True, with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        pytest.fail(f"installing the wheel failed:\n{proc.stderr[-2000:]}")
    return wheel, python, tmp


def test_the_wheel_ships_the_prompts_and_resources(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    for prompt in (
        "single_few_shot",
        "single_zero_shot",
        "decompose",
        "verify",
        "pyes",
        "context_generation",
    ):
        assert f"mushroom/resources/prompts/{prompt}.md" in names
    assert "mushroom/resources/lexical_calibration.json" in names


def test_library_api_and_cli_from_another_folder(installed):
    _, python, tmp = installed
    work = tmp / "elsewhere"
    work.mkdir()
    code = (
        "import json, mushroom\n"
        "assert 'site-packages' in mushroom.__file__ and 'venv' in mushroom.__file__, mushroom.__file__\n"
        "from mushroom.detectors.prompts import load_prompt\n"
        "load_prompt('single_few_shot')\n"
        "p = mushroom.detect('Paris is the capital of Italy since 1850.', "
        "contexts=['Paris is the capital of France.'], question='What is Paris?')\n"
        "print(json.dumps({'hard': p.hard_labels, 'n': len(p.probs), 'spans': p.spans}))\n"
    )
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=work, timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["n"] == len("Paris is the capital of Italy since 1850.") and out["hard"]
    assert any("Italy" in text for _, _, text in out["spans"])
    items = load_split("val", ["en"])["en"][:3]
    write_lines(work / "items.jsonl", [it.model_dump(mode="json") for it in items])
    write_lines(work / "ctx.jsonl", [{"id": it.id, "context": it.model_input} for it in items])
    cmd = [str(python), "-m", "mushroom", "detect", "--items", "items.jsonl", "--contexts", "ctx.jsonl"]
    proc = subprocess.run(
        [*cmd, "--out", "run", "--quiet"], capture_output=True, text=True, cwd=work, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = (work / "run" / "predictions" / "mushroom.en-items.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [it.id for it in items]
    assert (work / "run" / "scores.json").is_file()  # the items carry labels: scored


def test_an_installed_package_records_no_git_commit_of_the_project_around_it(monkeypatch):
    """A wheel in `proj/.venv` recorded the user's project's HEAD (and +dirty) as mushroom's commit."""
    from mushroom.data import runfolder

    assert runfolder.versions()["git_commit"]  # this checkout's own
    monkeypatch.setattr(runfolder, "IN_CHECKOUT", False)
    assert runfolder.versions()["git_commit"] is None
