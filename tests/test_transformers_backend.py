"""The transformers backend end to end with a tiny random model built here (~0.1 s).

Recipe (nothing is downloaded): a word-level tokenizer over a small vocabulary built with
`tokenizers`, wrapped in PreTrainedTrainedTokenizerFast with a one-line chat template, and a
LlamaConfig with 2 layers, hidden size 32, 2 heads, random weights. Its output is garbage:
the detector must count it as unparseable and predict no span, without crashing.
"""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed: pip install -e '.[transformers]'")
transformers = pytest.importorskip("transformers", reason="transformers not installed")

from tiny_models import SMALL_SCHEMA, obeys_schema, tiny_llama, word_tokenizer  # noqa: E402

from mushroom.backends.base import BackendConfig, GenerationRequest, Message  # noqa: E402
from mushroom.backends.hf import TransformersBackend  # noqa: E402
from mushroom.data.splits import load_split  # noqa: E402
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


def test_llm_detector_with_garbage_model_fails_its_cut_off_replies_and_counts_them(monkeypatch):
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
    with pytest.warns(RuntimeWarning, match="cannot read this tokenizer"):  # word-level: no decoder
        det.run(items, {}, results.append)
    # 16 tokens of noise, cut off: not "nothing wrong" but a failed item that says why
    assert [r.status for r in results] == ["failed"] * 3
    assert all(
        "cut off at max_tokens (16) before it named a span found in the answer" in r.error for r in results
    )
    assert sum(r.stats["llm.requests"] for r in results) == 3
    assert sum(r.stats["llm.unparseable"] for r in results) == 3
    assert any("cannot read this tokenizer" in w for w in det.warnings)  # reaches the run's summary
    # a response that used the whole budget is counted as cut off; one that stopped is not
    from mushroom.backends.base import Generation

    cut = det._item_result(
        items[0], [Generation(texts=['{"incorrect_spans": ['], usage={"completion_tokens": 16})]
    )
    done = det._item_result(
        items[0], [Generation(texts=['{"incorrect_spans": []}'], usage={"completion_tokens": 9})]
    )
    assert cut.stats["llm.truncated"] == 1 and "llm.truncated" not in done.stats


# -- log-likelihood ------------------------------------------------------------------------------

from mushroom.backends import grammar  # noqa: E402
from mushroom.backends.base import LoglikelihoodRequest  # noqa: E402


def manual_logprob(backend, messages, continuation):
    """log P(continuation | prompt) from one unpadded forward pass, summed token by token."""
    prompt = backend._prompt_ids(messages)
    cont = backend.tokenizer(continuation, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = backend.model(torch.tensor([prompt + cont])).logits[0].float()
    steps = logits.log_softmax(-1)[len(prompt) - 1 : len(prompt) - 1 + len(cont)]
    picked = steps[torch.arange(len(cont)), torch.tensor(cont)]
    return float(picked.sum()), bool((steps.argmax(-1) == torch.tensor(cont)).all())


def test_loglikelihood_matches_a_manual_forward_pass_across_padded_batches():
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TransformersBackend(
        BackendConfig(kind="transformers", model="tiny", device="cpu", batch_size=3), model, tokenizer
    )
    cases = [
        ("w1", "w2"),
        ("w1 w2 w3 w4 w5 w6 w7 w8", "w9 w10"),
        ("w3", "w4 w5 w6"),
        ("w11 w12 w13", "Oui"),  # an unknown word: scored as [UNK], still one token
        ("w20 w21", "w22"),
        ("w1", "w3"),  # same prompt as the first: one pass serves both single-token labels
        ("w1", "w2 w3"),
    ]
    reqs = [
        LoglikelihoodRequest(key=str(i), messages=[Message(role="user", content=p)], continuation=c)
        for i, (p, c) in enumerate(cases)
    ]
    seen = []
    out = backend.loglikelihood(reqs, on_result=lambda i, r: seen.append(i))
    assert sorted(seen) == list(range(len(cases)))
    for req, got in zip(reqs, out):
        want, greedy = manual_logprob(backend, req.messages, req.continuation)
        assert got.error is None
        assert got.logprob == pytest.approx(want, abs=1e-4)
        assert got.is_greedy is greedy
    # the model's own greedy continuation is recognised as greedy
    prompt = backend._prompt_ids(reqs[0].messages)
    with torch.no_grad():
        first = int(backend.model(torch.tensor([prompt])).logits[0, -1].argmax())
    word = tokenizer.convert_ids_to_tokens([first])[0]
    greedy = backend.loglikelihood([reqs[0].model_copy(update={"continuation": word})])[0]
    assert greedy.is_greedy is True and greedy.logprob < 0


def test_loglikelihood_of_a_continuation_with_no_tokens_is_an_error_not_a_crash():
    model, tokenizer = tiny_model_and_tokenizer()
    backend = TransformersBackend(
        BackendConfig(kind="transformers", model="tiny", device="cpu"), model, tokenizer
    )
    out = backend.loglikelihood(
        [
            LoglikelihoodRequest(key="a", messages=[Message(role="user", content="w1")], continuation="   "),
            LoglikelihoodRequest(key="b", messages=[Message(role="user", content="w1")], continuation="w2"),
        ]
    )
    assert out[0].logprob is None and "no tokens" in out[0].error
    assert out[1].error is None and out[1].logprob < 0


# -- JSON-schema-constrained generation ----------------------------------------------------------


def byte_backend(**config):
    from tiny_models import byte_tokenizer

    tokenizer = byte_tokenizer()
    model = tiny_llama(len(tokenizer), 512)
    cfg = BackendConfig(**{"kind": "transformers", "model": "tiny-bytes", "device": "cpu", **config})
    return TransformersBackend(cfg, model, tokenizer)


def schema_requests():
    return [
        GenerationRequest(
            key=str(i),
            messages=[Message(role="user", content=f"answer {i}")],
            max_tokens=48,
            temperature=t,
            n=n,
            seed=1,
            json_schema=schema,
        )
        for i, (t, n, schema) in enumerate(
            [(0.0, 1, SMALL_SCHEMA), (0.0, 1, None), (0.0, 1, SMALL_SCHEMA), (1.0, 3, SMALL_SCHEMA)]
        )
    ]


@pytest.mark.skipif(not grammar.available(), reason="llguidance not installed: pip install llguidance")
def test_random_model_writes_schema_json_only_when_constrained():
    backend = byte_backend(batch_size=4)
    out = backend.generate(schema_requests())
    assert [len(g.texts) for g in out] == [1, 1, 1, 3]
    for i in (0, 2, 3):
        assert all(obeys_schema(t) for t in out[i].texts), out[i].texts
    assert not obeys_schema(out[1].texts[0])  # the request without a schema is left free
    assert backend.constrained_requests == 3 and backend.warnings == []
    assert 0 < out[0].usage["completion_tokens"] <= 48

    free = byte_backend(batch_size=4, structured_output=False)
    loose = free.generate(schema_requests())
    assert not any(obeys_schema(t) for g in loose for t in g.texts)
    assert free.unconstrained_schema_requests == 3


def test_without_llguidance_generation_runs_free_and_warns_once(monkeypatch):
    monkeypatch.setattr(grammar, "available", lambda: False)
    backend = byte_backend()
    with pytest.warns(RuntimeWarning, match="NOT constrained"):
        first = backend.generate(schema_requests()[:1])
    second = backend.generate(schema_requests()[:1])
    assert first[0].error is None and second[0].error is None
    assert len(backend.warnings) == 1 and backend.unconstrained_schema_requests == 2


def test_strict_schema_closes_listed_objects_only():
    schema = {
        "type": "object",
        "properties": {
            "properties": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "free": {"type": "object", "additionalProperties": True, "properties": {}},
            "kind": {"enum": [{"properties": {}}]},
        },
        "$defs": {"X": {"type": "object", "properties": {"b": {"type": "string"}}}},
    }
    out = grammar.strict(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["properties"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]["properties"]["properties"]  # a name map
    assert out["properties"]["free"]["additionalProperties"] is True
    assert out["properties"]["kind"] == {"enum": [{"properties": {}}]}
    assert out["$defs"]["X"]["additionalProperties"] is False
    assert "additionalProperties" not in schema  # the caller's schema is left alone


def test_quiet_loading_silences_transformers_and_gguf_progress_bars(capfd):
    import importlib

    from transformers.utils import logging as hf_logging

    from mushroom.backends.hf import quiet_loading

    gguf_utils = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
    before = hf_logging.is_progress_bar_enabled()
    with quiet_loading():
        list(hf_logging.tqdm(range(3), desc="Loading weights"))
        list(gguf_utils.tqdm(range(3), desc="Converting and de-quantizing GGUF tensors"))
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "de-quantizing" not in err
    assert hf_logging.is_progress_bar_enabled() == before  # restored afterwards
    list(gguf_utils.tqdm(range(3), desc="visible again"))
    assert "visible again" in capfd.readouterr().err


# -- CUDA ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
def test_cuda_gives_what_the_cpu_gives():
    """The same weights on CUDA: greedy text and log-likelihoods as on the CPU, padded batches too."""
    import copy

    model, tokenizer = tiny_model_and_tokenizer()
    on = {
        device: TransformersBackend(
            BackendConfig(kind="transformers", model="tiny", device=device, batch_size=3),
            copy.deepcopy(model),
            tokenizer,
        )
        for device in ("cpu", "cuda")
    }
    assert next(on["cuda"].model.parameters()).is_cuda
    prompts = ["w1", "w2 w3 w4 w5 w6 w7", "w8 w9"]  # unequal lengths: left padding in one batch
    gen = [
        GenerationRequest(key=str(i), messages=[Message(role="user", content=p)], max_tokens=6)
        for i, p in enumerate(prompts)
    ]
    texts = {d: [g.texts for g in b.generate(gen)] for d, b in on.items()}
    assert texts["cuda"] == texts["cpu"] and all(t != [""] for t in texts["cpu"])
    ll = [
        LoglikelihoodRequest(key=str(i), messages=[Message(role="user", content=p)], continuation="w10 w11")
        for i, p in enumerate(prompts)
    ]
    scores = {d: b.loglikelihood(ll) for d, b in on.items()}
    assert all(r.error is None for r in scores["cuda"])
    assert [r.logprob for r in scores["cuda"]] == pytest.approx([r.logprob for r in scores["cpu"]], abs=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device here")
@pytest.mark.skipif(not grammar.available(), reason="llguidance not installed: pip install llguidance")
def test_schema_constrained_generation_on_cuda():
    backend = byte_backend(batch_size=4, device="cuda")
    out = backend.generate(schema_requests())
    for i in (0, 2, 3):
        assert all(obeys_schema(t) for t in out[i].texts), out[i].texts
    assert backend.constrained_requests == 3 and backend.warnings == []


# -- a grammar that breaks mid-answer ----------------------------------------------------------


@pytest.mark.skipif(not grammar.available(), reason="llguidance not installed: pip install llguidance")
def test_a_tokenizer_llguidance_misreads_is_refused_not_used():
    """transformers 5.17 wrapped a GGUF tokenizer's byte-level decoder so that llguidance read 'Ġ' as a letter."""

    class Misread:
        def decode_bytes(self, ids):
            return b"\xc4\xa0".join(b"x" for _ in ids)

    from tiny_models import byte_tokenizer

    with pytest.raises(ValueError, match="decodes this tokenizer's tokens to other bytes"):
        grammar._check_same_bytes(byte_tokenizer(), Misread())

    class HiddenSpace:  # Llama-2/Mistral style: the same bytes with the prefix space kept
        def decode_bytes(self, ids):
            return b" " + byte_tokenizer().decode(ids).encode()

    grammar._check_same_bytes(byte_tokenizer(), HiddenSpace())


@pytest.mark.skipif(not grammar.available(), reason="llguidance not installed: pip install llguidance")
def test_a_byte_level_decoder_wrapped_in_a_sequence_still_constrains():
    """transformers 5.17 loads a GGUF tokenizer with its ByteLevel decoder inside a Sequence.

    llguidance then read 'Ġ' as a letter, the tokenizer was refused and generation ran
    unconstrained: on an H200 with transformers 5.17, SmolLM2 wrote prose for all of 50 items.
    """
    from tiny_models import byte_tokenizer
    from tokenizers import decoders

    tokenizer = byte_tokenizer()
    tokenizer.backend_tokenizer.decoder = decoders.Sequence(
        [decoders.ByteFallback(), decoders.Fuse(), decoders.Replace("\u2581", " "), decoders.ByteLevel()]
    )
    import llguidance.hf

    with pytest.raises(ValueError, match="other bytes"):  # what llguidance makes of it unaided
        grammar._check_same_bytes(tokenizer, llguidance.hf.from_tokenizer(tokenizer, n_vocab=len(tokenizer)))
    grammar.SchemaConstrainer(tokenizer, len(tokenizer))  # no ValueError: read as byte-level
    backend = TransformersBackend(
        BackendConfig(kind="transformers", model="tiny-bytes", device="cpu", batch_size=4),
        tiny_llama(len(tokenizer), 512),
        tokenizer,
    )
    out = backend.generate(schema_requests())
    for i in (0, 2, 3):
        assert all(obeys_schema(t) for t in out[i].texts), out[i].texts
    assert backend.constrained_requests == 3 and backend.warnings == []

    # a <0x0A> token is a newline to ByteFallback and six characters to a bare ByteLevel: the
    # grammar would allow a raw newline inside a JSON string, so the tokenizer stays refused
    tokenizer.add_tokens(["<0x0A>"])
    assert tokenizer.decode(tokenizer.convert_tokens_to_ids(["<0x0A>"])) == "\n"
    with pytest.raises(ValueError, match="other bytes"):
        grammar.SchemaConstrainer(tokenizer, len(tokenizer))


@pytest.mark.skipif(not grammar.available(), reason="llguidance not installed: pip install llguidance")
def test_a_broken_grammar_is_marked_on_its_response_and_warned_through_the_wrappers(monkeypatch, tmp_path):
    from mushroom.backends.base import backend_warnings
    from mushroom.backends.cache import CachedBackend, ResponseCache
    from mushroom.backends.rawlog import RecordingBackend

    backend = byte_backend(batch_size=4)
    processor = backend._constrainer or grammar.SchemaConstrainer(backend.tokenizer, len(backend.tokenizer))
    # the real matcher refuses a token its grammar forbids: row 0 is fed '}' before anything
    proc = processor.processor([SMALL_SCHEMA])
    prompt = torch.tensor([[1, 2]])
    proc(prompt, torch.zeros(1, backend.model.config.vocab_size))
    brace = backend.tokenizer("}", add_special_tokens=False)["input_ids"][-1]
    proc(torch.cat([prompt, torch.tensor([[brace]])], 1), torch.zeros(1, backend.model.config.vocab_size))
    assert list(proc.errors) == [0] and proc.errors[0] and processor.matcher_errors == [proc.errors[0]]
    # a row that broke during generate: its response says so and the backend warns once
    real = grammar.SchemaConstrainer.processor

    calls = []

    def breaking(self, schemas, rows_per_schema=1):
        made = real(self, schemas, rows_per_schema)
        if len(made._matchers) > 1:  # row 1 of a batch that has one, each time another error
            made.errors[1] = f"Parser Error: token {len(calls)} doesn't satisfy the grammar\n<state>"
        calls.append(made)
        return made

    monkeypatch.setattr(grammar.SchemaConstrainer, "processor", breaking)
    wrapped = RecordingBackend(CachedBackend(backend, ResponseCache(tmp_path / "c.jsonl")), sink=None)
    assert backend_warnings(wrapped) == []
    with pytest.warns(RuntimeWarning, match="decoding broke"):
        out = wrapped.generate(schema_requests()[3:4] + schema_requests()[:1])  # two batches: n=3, n=1
    assert out[0].structured_output == "llguidance: broke" and out[1].structured_output == "llguidance"
    assert len(backend_warnings(wrapped)) == 1 and "decoding broke" in backend_warnings(wrapped)[0]
    again = [
        r.model_copy(update={"key": r.key + "b", "messages": [Message(role="user", content="answer again")]})
        for r in schema_requests()[3:4]
    ]
    wrapped.generate(again)  # not cached: it breaks again, with another error
    assert backend.broken_rows == 2 and len(backend_warnings(wrapped)) == 1  # still one warning


def test_a_seeded_sample_does_not_depend_on_the_batch_it_is_in():
    """One random stream served a whole batch: a request's samples changed with batch_size, and
    a resumed run (cache hits leave gaps in the batches) sampled other answers than a whole one."""
    model, tokenizer = tiny_model_and_tokenizer()

    def sample(batch_size, prompts):
        backend = TransformersBackend(
            BackendConfig(kind="transformers", model="tiny", device="cpu", batch_size=batch_size),
            model,
            tokenizer,
        )
        reqs = [
            GenerationRequest(
                key=p, messages=[Message(role="user", content=p)], max_tokens=8, temperature=1.0, n=2, seed=0
            )
            for p in prompts
        ]
        return {r.key: g.texts for r, g in zip(reqs, backend.generate(reqs))}

    alone = sample(1, ["w5 w6"])
    batched = sample(3, ["w1 w2 w3", "w5 w6", "w9"])
    assert batched["w5 w6"] == alone["w5 w6"]
    assert len(set(alone["w5 w6"])) == 2  # two samples, not one copied
