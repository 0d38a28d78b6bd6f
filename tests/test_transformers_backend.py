"""The transformers backend end to end with a tiny random model built here (~0.1 s).

Recipe (nothing is downloaded): a word-level tokenizer over a small vocabulary built with
`tokenizers`, wrapped in PreTrainedTrainedTokenizerFast with a one-line chat template, and a
LlamaConfig with 2 layers, hidden size 32, 2 heads, random weights. Its output is garbage:
the detector must count it as unparseable and predict no span, without crashing.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install 'mushroom[transformers]'")
transformers = pytest.importorskip("transformers", reason="transformers not installed")

from tiny_models import tiny_llama, word_tokenizer  # noqa: E402

from mushroom.backends.base import BackendConfig, GenerationRequest, Message  # noqa: E402
from mushroom.backends.hf import TransformersBackend  # noqa: E402
from mushroom.data import load_split  # noqa: E402
from mushroom.detectors import build  # noqa: E402


def tiny_model_and_tokenizer():
    words = [
        "[PAD]",
        "[UNK]",
        "</s>",
        "{",
        "}",
        "[",
        "]",
        '"',
        ":",
        ",",
        "incorrect_spans",
        "text",
        "user",
        "assistant",
    ]
    words += [f"w{i}" for i in range(50)]
    return tiny_llama(len(words), 4096), word_tokenizer(words)


def test_batched_generation_greedy_sampled_and_logprobs():
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TransformersBackend(
        BackendConfig(kind="transformers", model="tiny", device="cpu", batch_size=2), model, tokenizer
    )
    reqs = [
        GenerationRequest(
            key=str(i),
            messages=[Message(role="user", content=f"w{i} w{i + 1}")],
            max_tokens=5,
            temperature=t,
            n=n,
            top_logprobs=3,
        )
        for i, (t, n) in enumerate([(0.0, 1), (0.0, 1), (0.0, 1), (0.7, 2)])
    ]
    seen = []
    out = backend.generate(reqs, on_result=lambda i, g: seen.append(i))
    assert sorted(seen) == [0, 1, 2, 3]
    assert [len(g.texts) for g in out] == [1, 1, 1, 2]
    assert len(out[0].logprobs[0]) <= 5 and len(out[0].logprobs[0][0]) == 3
    again = backend.generate(reqs[:1])
    assert again[0].texts == out[0].texts  # greedy is deterministic


def test_llm_detector_with_garbage_model_predicts_nothing_and_counts_it(monkeypatch):
    model, tokenizer = tiny_model_and_tokenizer()
    import mushroom.backends as backends

    monkeypatch.setattr(
        backends,
        "build_backend",
        lambda cfg: TransformersBackend(
            BackendConfig(kind="transformers", model="tiny", device="cpu"), model, tokenizer
        ),
    )
    items = load_split("val", ["en"])["en"][:3]
    det = build(
        "llm", {"backend": {"kind": "transformers", "model": "tiny"}, "max_tokens": 16, "cache": False}
    )
    results = []
    det.run(items, {}, results.append)
    assert [r.prediction.hard_labels for r in results] == [[], [], []]
    assert sum(r.stats["llm.requests"] for r in results) == 3
    assert sum(r.stats["llm.unparseable"] for r in results) == 3


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_runs_on_cuda():
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TransformersBackend(
        BackendConfig(kind="transformers", model="tiny", device="cuda"), model, tokenizer
    )
    out = backend.generate(
        [GenerationRequest(key="a", messages=[Message(role="user", content="w1")], max_tokens=4)]
    )
    assert out[0].error is None and next(backend.model.parameters()).is_cuda
