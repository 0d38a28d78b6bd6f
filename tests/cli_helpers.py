"""Shared by the tests/test_cli_*.py files: the CLI run in-process, and predictions as real submissions write them."""

import json

from conftest import ROOT, VAL_EN

from mushroom.cli.app import app
from mushroom.cli.boundary import run_cli

VAL_DIR = ROOT / "data" / "mushroom" / "val"
GOLD_ROWS = [json.loads(line) for line in VAL_EN.read_text(encoding="utf-8").splitlines()]


def cli(capsys, *args):
    """Runs the CLI in-process through its error boundary: (exit code, stdout, stderr)."""
    code = run_cli(app, [str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def leaderboard_style(rows):
    """Predictions as some real submissions are: soft spans carry the span's text, plus extra keys."""
    out = []
    for r in rows:
        text = r["model_output_text"]
        out.append(
            {
                "id": r["id"],
                "lang": r["lang"],
                "model_output_text": text,
                "soft_labels": [{**s, "text": text[s["start"] : s["end"]]} for s in r["soft_labels"]],
                "hard_labels": r["hard_labels"],
            }
        )
    return out


def limited_run(tmp_path, capsys, name="run", *extra):
    """A lexical run on the first 5 English val items, as `detect --lang en --limit 5` makes it."""
    out = tmp_path / name
    code, _, err = cli(
        capsys, "detect", "--split", "val", "--lang", "en", "--limit", "5", "--out", out, "--quiet", *extra
    )
    assert code == 0, err
    return out


def llm_args(backend: list, out, limit: int = 3, lang: str = "en", temperature: str = "0.1") -> list:
    """`detect` of the llm detector on the first val items of a language, into `out`."""
    return [
        "detect", "--split", "val", "--lang", lang, "--limit", str(limit), "--detector", "llm",
        *backend, "--temperatures", temperature, "--out", out,
    ]  # fmt: skip


def llm_member_options(url: str | None = None) -> list[str]:
    """main-job's `-o` flags for an llm member on a (fake) OpenAI-compatible server, one temperature."""
    flags = ["llm.temperatures=[0.1]", "llm.backend.kind=openai", "llm.backend.model=m"]
    flags += [f"llm.backend.base_url={url}"] if url is not None else []
    return [arg for flag in flags for arg in ("-o", flag)]


def openai_backend(url: str, model: str = "m") -> list:
    return ["--backend", "openai", "--base-url", url, "--model", model]


def gold_model(*langs: str):
    """A reply function for FakeServer: a model that names the gold spans of each val answer.

    It answers the task, so the member stack beats the CPU stack and is used; on a test item
    (no labels) it names nothing.
    """
    from mushroom.data.splits import load_split

    spans = {
        it.model_output_text: [it.model_output_text[s:e] for s, e in it.hard_labels or []]
        for items in load_split("val", list(langs or ["it"])).values()
        for it in items
    }
    longest_first = sorted(spans, key=len, reverse=True)  # an answer inside another's is not taken for it

    def reply(prompt: str) -> str:
        text = next((t for t in longest_first if t in prompt), None)
        return json.dumps({"incorrect_spans": spans[text] if text is not None else []})

    return reply
