"""The openai backend against a real llama.cpp server (llama-cpp-python) running SmolLM2-135M.

Marked `real_model`: they run in the normal test command and skip, saying why, only when the
model wheel cannot be fetched or the server package is not installed (the `server` extra).
Few requests with few tokens each: CPU inference on one thread is slow.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from real_models import LlamaServer, llama_server_missing, smollm2_gguf

from mushroom.backends import build_backend
from mushroom.backends.base import GenerationRequest, LoglikelihoodRequest, Message
from mushroom.backends.openai_compat import render_plain
from mushroom.data.languages import language_name
from mushroom.data.splits import load_split
from mushroom.detectors.llm import context_text
from mushroom.detectors.prompts import load_prompt
from mushroom.parsing.parser import SpanList

pytestmark = pytest.mark.real_model


@pytest.fixture(scope="module")
def llama():
    path, why = smollm2_gguf()
    if path is None:
        pytest.skip(why)
    missing = llama_server_missing(path)
    if missing:
        pytest.skip(missing)
    with LlamaServer(path) as server:
        yield server


def _backend(server, **kw):
    return build_backend({"kind": "openai", "model": server.alias, "base_url": server.url, **kw})


def _span_request(key: str, max_tokens: int = 96) -> GenerationRequest:
    item = load_split("val", ["en"])["en"][0]
    messages = load_prompt("single_zero_shot").render(
        language=language_name(item.lang),
        context=context_text([], 1000),
        question=item.model_input,
        answer=item.model_output_text,
    )
    return GenerationRequest(
        key=key, messages=messages, max_tokens=max_tokens, json_schema=SpanList.model_json_schema()
    )


def test_auto_structured_output_settles_on_json_object_and_yields_span_json(llama):
    backend = _backend(llama)  # every default: structured_output auto, concurrency auto
    out = backend.generate([_span_request("a"), _span_request("b")])
    assert [g.error for g in out] == [None, None], llama.tail()
    assert [g.structured_output for g in out] == ["json_object", "json_object"]
    assert backend.structured_form == "json_object" and backend.form_confirmed
    for gen in out:
        spans = SpanList.model_validate_json(gen.texts[0])  # grammar-constrained: valid JSON
        assert isinstance(spans.incorrect_spans, list)
    assert backend.retries_made == 0
    backend.close()


def test_a_rejected_schema_form_is_not_retried(llama):
    backend = _backend(llama, structured_output="json_schema", max_retries=5)
    out = backend.generate([_span_request("c", max_tokens=8)])
    assert out[0].error.startswith("HTTP 500") and backend.retries_made == 0
    backend.close()


def test_default_concurrency_matches_one_slot_and_abandons_nothing(llama):
    backend = _backend(llama)
    requests = [
        GenerationRequest(
            key=str(i), messages=[Message(role="user", content=f"Count to {i + 2}.")], max_tokens=12
        )
        for i in range(4)
    ]
    out = backend.generate(requests)
    assert backend.concurrency == 1 and backend.concurrency_source.startswith("default")
    assert all(g.error is None and g.texts[0] for g in out)
    assert all(g.usage.get("completion_tokens", 0) >= 1 for g in out)
    backend.close()


def _reference_logprob(model_path, prompt: str, continuation: str) -> float:
    """log P(continuation | prompt) from the model's own logits, in process (no server code)."""
    from llama_cpp import Llama

    llm = Llama(str(model_path), logits_all=True, n_threads=1, n_ctx=2048, verbose=False)
    full = llm.tokenize((prompt + continuation).encode(), add_bos=True, special=True)
    head = llm.tokenize(prompt.encode(), add_bos=True, special=True)
    assert full[: len(head)] == head, "the continuation changes the prompt's tokens"
    llm.eval(full)
    logits = np.asarray(llm.scores[: len(full)], dtype=np.float64)
    logp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    return float(sum(logp[j - 1, full[j]] for j in range(len(head), len(full))))


def test_loglikelihood_matches_the_models_own_logits(llama):
    backend = _backend(llama)
    messages = [Message(role="user", content="Is Paris the capital of France? Answer Yes or No.")]
    out = backend.loglikelihood(
        [LoglikelihoodRequest(key=c, messages=messages, continuation=c) for c in ("Yes", "No")]
    )
    assert [s.error for s in out] == [None, None], out
    assert all(math.isfinite(s.logprob) and s.logprob < 0 for s in out)
    assert backend.loglikelihood_template_used == "plain"  # llama-cpp-python has no /apply-template
    expected = _reference_logprob(llama.model, render_plain(messages), "Yes")
    assert out[0].logprob == pytest.approx(expected, abs=1e-3)
    backend.close()


def test_loglikelihood_says_when_the_server_keeps_no_prompt_logits(llama):
    with LlamaServer(llama.model, logits_all=False) as plain:
        backend = _backend(plain)
        out = backend.loglikelihood(
            [LoglikelihoodRequest(key="a", messages=[Message(role="user", content="Hi")], continuation="Yes")]
        )
        assert out[0].logprob is None and "logits_all" in out[0].error
        backend.close()


def test_a_reply_cut_by_max_tokens_is_counted_as_cut_off(llama):
    """llama.cpp says `finish_reason: "length"`; the llm detector counts the reply as truncated."""
    backend = _backend(llama, structured_output="none")
    request = GenerationRequest(
        key="cut", messages=[Message(role="user", content="Write a long story about a dragon.")], max_tokens=4
    )
    (gen,) = backend.generate([request])
    assert gen.error is None, llama.tail()
    assert gen.finish_reasons == ["length"] and gen.used_budget(4) is True
    (whole,) = backend.generate(
        [GenerationRequest(key="whole", messages=[Message(role="user", content="Say yes.")], max_tokens=200)]
    )
    assert whole.error is None and whole.finish_reasons == ["stop"] and whole.used_budget(200) is False
