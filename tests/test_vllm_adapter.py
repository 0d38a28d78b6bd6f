"""The vllm backend's own logic against a stand-in `vllm` package, so it runs where vLLM cannot.

`tests/test_vllm_backend.py` runs the real engine (GPU only). This checks, on any machine,
what the adapter hands vLLM and how it reads the answers: the engine settings (compact JSON,
overridable), the strict schema, and top log-probabilities keyed by text. The stand-in has
the names and shapes of vLLM 0.26's offline API that the adapter uses.
"""

import math
import sys

import pytest

FAKE_VLLM = {
    "__init__.py": """
import math
from types import SimpleNamespace


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    made = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.sent = []
        LLM.made.append(self)

    def chat(self, conversations, sampling_params, use_tqdm=True):
        self.sent.append((conversations, sampling_params))
        outs = []
        for params in sampling_params:
            # two byte pieces that both decode to '' and one word: keyed by token id, as vLLM does
            step = {
                7: SimpleNamespace(decoded_token="", logprob=math.log(0.25)),
                8: SimpleNamespace(decoded_token="", logprob=math.log(0.25)),
                9: SimpleNamespace(decoded_token="ok", logprob=math.log(0.5)),
            }
            done = SimpleNamespace(text='{"ok": true}', logprobs=[step], finish_reason="stop")
            outs.append(SimpleNamespace(outputs=[done] * params.kwargs["n"]))
        return outs
""",
    "sampling_params.py": """
class StructuredOutputsParams:
    def __init__(self, json=None):
        self.json = json
""",
    "config.py": """
from dataclasses import dataclass


@dataclass
class StructuredOutputsConfig:
    backend: str = "auto"
    disable_any_whitespace: bool = False
""",
}


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    pytest.importorskip(
        "torch", reason="the adapter makes schemas strict with the transformers backend's helper"
    )
    from mushroom.backends.registry import BACKENDS

    package = tmp_path / "site" / "vllm"
    package.mkdir(parents=True)
    for name, source in FAKE_VLLM.items():
        (package / name).write_text(source)

    def ours(name):
        return name.split(".")[0] == "vllm" or name == "mushroom.backends.vllm_backend"

    for loaded in [m for m in sys.modules if ours(m)]:
        monkeypatch.delitem(sys.modules, loaded)
    registered = dict(BACKENDS.registered)
    BACKENDS.registered.pop("vllm", None)  # the backend registers itself on import: from the stand-in here
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    import vllm

    yield vllm, model
    for loaded in [m for m in sys.modules if ours(m)]:  # the stand-in's modules go with it
        del sys.modules[loaded]
    BACKENDS.registered.clear()
    BACKENDS.registered.update(registered)


def _build(model, **settings):
    from mushroom.backends import build_backend

    return build_backend({"kind": "vllm", "model": str(model), **settings})


def test_the_engine_is_asked_for_compact_json_unless_the_user_says_otherwise(fake_vllm):
    vllm, model = fake_vllm
    _build(model, dtype="bfloat16")
    settings = vllm.LLM.made[-1].kwargs
    assert settings["structured_outputs_config"] == {"backend": "xgrammar", "disable_any_whitespace": True}
    assert settings["dtype"] == "bfloat16" and settings["enable_prefix_caching"] is True
    mine = {"backend": "xgrammar"}
    _build(model, extra={"structured_outputs_config": mine, "enforce_eager": True})
    assert vllm.LLM.made[-1].kwargs["structured_outputs_config"] == mine
    assert vllm.LLM.made[-1].kwargs["enforce_eager"] is True


def test_a_vllm_without_the_whitespace_setting_is_left_to_its_default(fake_vllm, monkeypatch):
    vllm, model = fake_vllm
    import dataclasses

    @dataclasses.dataclass
    class Older:
        backend: str = "auto"

    import importlib

    monkeypatch.setattr(importlib.import_module("vllm.config"), "StructuredOutputsConfig", Older)
    _build(model)
    assert "structured_outputs_config" not in vllm.LLM.made[-1].kwargs


def test_requests_carry_a_strict_schema_and_read_logprobs_by_text(fake_vllm):
    from mushroom.backends.base import GenerationRequest, Message
    from mushroom.parsing.parser import SpanList

    vllm, model = fake_vllm
    backend = _build(model)
    schema = SpanList.model_json_schema()
    reqs = [
        GenerationRequest(
            key="a", messages=[Message(role="user", content="x")], json_schema=schema, top_logprobs=3, n=2
        ),
        GenerationRequest(key="b", messages=[Message(role="user", content="y")]),
    ]
    out = backend.generate(reqs)
    sent = vllm.LLM.made[-1].sent[0][1]
    bound = sent[0].kwargs["structured_outputs"].json
    assert bound["additionalProperties"] is False  # keys beyond the listed ones are closed
    assert "additionalProperties" not in schema  # the caller's schema is left alone
    assert "structured_outputs" not in sent[1].kwargs and sent[0].kwargs["n"] == 2
    assert out[0].texts == ['{"ok": true}'] * 2 and out[0].finish_reasons == ["stop", "stop"]
    step = out[0].logprobs[0][0]
    assert step[""] == pytest.approx(math.log(0.5)) and step["ok"] == pytest.approx(math.log(0.5))
    assert out[1].logprobs is None


def test_a_package_the_engine_misses_mid_run_stops_the_run_instead_of_failing_every_item(
    fake_vllm, tmp_path, capsys
):
    """vLLM 0.26 on an H100 imported lm-format-enforcer only when the first request came: 8 of 8
    items failed with "No module named 'lmformatenforcer'" and the advice to retry them."""
    from cli_helpers import cli

    vllm, model = fake_vllm

    def chat(self, conversations, sampling_params, use_tqdm=True):
        raise ModuleNotFoundError("No module named 'lmformatenforcer'", name="lmformatenforcer")

    vllm.LLM.chat = chat
    out = tmp_path / "run"
    args = ["detect", "--detector", "llm", "--backend", "vllm", "-o", f"backend.model={model}"]
    code, shown, err = cli(capsys, *args, "--lang", "en", "--limit", "3", "--out", out)
    said = " ".join((shown + err).split())
    assert code == 4, said
    assert "'lmformatenforcer'" in said and "every item would fail the same way" in said, said
    assert "retry" not in said and not (out / "failures.jsonl").exists()
