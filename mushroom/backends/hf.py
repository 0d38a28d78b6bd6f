"""transformers: batched generation and log-likelihood scoring with the model's chat template.

`model` is a registry name (`smollm2`: a GGUF pulled from PyPI, see mushroom.models.zoo), a
`.gguf` file, a local folder or a hub id. Prompts are grouped by sampling parameters and sent
in batches of `batch_size` with left padding; temperature 0 means greedy decoding. A request
with a `json_schema` is decoded under that schema (llguidance, see mushroom.backends.grammar)
unless `structured_output` is off; without llguidance installed it runs unconstrained and says
so once. Needs `pip install -e '.[transformers]'`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch  # this module is imported only when the transformers backend is chosen
from transformers import AutoModelForCausalLM, AutoTokenizer, LogitsProcessorList

from mushroom.backends import grammar
from mushroom.backends.base import (
    BROKEN_GRAMMAR,
    Backend,
    BackendConfig,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    Message,
    OnResult,
    OnScore,
    by_text,
)
from mushroom.backends.config import DTYPE_NAMES
from mushroom.errors import MushroomError, error_text, load_failure, looks_damaged
from mushroom.models import zoo
from mushroom.models.zoo import ResolvedModel, resolve_model


@contextlib.contextmanager
def quiet_loading() -> Iterator[None]:
    """Silences transformers' loading chatter ("Loading weights", GGUF de-quantizing bars, info logs).

    They would interleave with the CLI's own output; errors still raise. The GGUF converter uses
    tqdm directly rather than transformers' switchable one, so its `tqdm` is swapped for the call.
    """
    from transformers.utils import logging as hf_logging

    bars_on = hf_logging.is_progress_bar_enabled()
    verbosity = hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    patched = None
    try:
        patched = importlib.import_module("transformers.modeling_gguf_pytorch_utils")
        original_tqdm = patched.tqdm
        patched.tqdm = functools.partial(original_tqdm, disable=True)
    except (ImportError, AttributeError):
        patched = None
    try:
        yield
    finally:
        if patched is not None:
            patched.tqdm = original_tqdm
        hf_logging.set_verbosity(verbosity)
        if bars_on:
            hf_logging.enable_progress_bar()


def _converted_dir(resolved: ResolvedModel) -> Path | None:
    """Where the transformers copy of a registry GGUF lives (None for anything else)."""
    if resolved.registry_name is None or resolved.gguf_file is None:
        return None
    import transformers

    sha = zoo.entry(resolved.registry_name).sha256[:16]
    return Path(resolved.source) / f"transformers-{transformers.__version__}-{sha}"


def _save_converted(model: Any, tokenizer: Any, folder: Path) -> None:
    """Saves the de-quantized model as safetensors; written aside, then renamed into place.

    transformers refuses to save a model loaded through its GGUF "quantizer", though the
    weights are plain float tensors by then; the quantizer is detached for the save only.
    """
    tmp = folder.with_name(f".{folder.name}.{os.getpid()}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    quantizer = getattr(model, "hf_quantizer", None)
    qconfig = getattr(model.config, "quantization_config", None)
    try:
        model.hf_quantizer = None
        if qconfig is not None:
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not folder.exists():  # another process may have finished first: its copy is as good
            os.replace(tmp, folder)
    finally:
        model.hf_quantizer = quantizer
        if qconfig is not None:
            model.config.quantization_config = qconfig
        shutil.rmtree(tmp, ignore_errors=True)


def _structured_on(config: BackendConfig) -> bool:
    """Whether `structured_output` asks for schema-constrained output (a bool, or a mode name)."""
    value = getattr(config, "structured_output", True)
    return value not in (False, None, "none")


class TransformersBackend(Backend):
    """A causal LM from transformers (a registry name, a GGUF file, a local folder or a hub id)."""

    kind = "transformers"

    def __init__(self, config: BackendConfig, model: Any = None, tokenizer: Any = None):
        super().__init__(config)
        self.device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.resolved = None
        if model is None or tokenizer is None:
            try:
                self.resolved = resolve_model(config.model)  # a pull into an unusable cache raised here
                loaded_model, loaded_tokenizer = self._load(config)
            except MushroomError:
                raise
            except Exception as exc:  # it failed every item, with advice to retry only them
                raise MushroomError(load_failure("transformers model", config.model, exc)) from exc
            model = model or loaded_model
            tokenizer = tokenizer or loaded_tokenizer
        self.tokenizer = tokenizer
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = model
        self.model.to(self.device)
        self.model.eval()
        self._templated = bool(getattr(self.tokenizer, "chat_template", None))
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self._constrainer: grammar.SchemaConstrainer | None | bool = None  # False: cannot be built
        self.constrained_requests = 0
        self.broken_rows = 0  # generated rows whose grammar broke (finished unconstrained)
        self.unconstrained_schema_requests = 0

    def _load(self, config: BackendConfig) -> tuple[Any, Any]:
        """Model and tokenizer; a registry GGUF is converted once and loaded from the copy after.

        Reading a GGUF through transformers parses its metadata three times and maps tensor
        names in Python (about 25 s for SmolLM2 on two cores, most of it not de-quantizing), so
        the de-quantized float32 weights, config and tokenizer are saved beside the cached GGUF
        (keyed on its sha256 and the transformers version) and later loads take well under a
        second. Only the registry's own cache folder is written to; a user's GGUF file is read
        as it is every time.
        """
        resolved = self.resolved
        assert resolved is not None
        named = DTYPE_NAMES.get(config.dtype or "", config.dtype)
        dtype = {"dtype": named if named == "auto" else getattr(torch, named)} if named else {}
        converted = _converted_dir(resolved)
        source, load = resolved.source, ({"gguf_file": resolved.gguf_file} if resolved.gguf_file else {})
        if converted is not None and (converted / "config.json").is_file():
            try:
                with quiet_loading():
                    tokenizer = AutoTokenizer.from_pretrained(converted)
                    return AutoModelForCausalLM.from_pretrained(converted, **dtype, **config.extra), tokenizer
            except Exception as exc:
                if not looks_damaged(exc):  # a bad dtype or extra setting: the copy is fine
                    raise
                # a copy cut short (a full disk, a kill mid-save) failed every run for good:
                # `models pull` found the GGUF verified, and nothing said to delete the copy
                remade = (
                    f"it is made again from {resolved.file}"
                    if not dtype and not config.extra
                    else f"it is removed, and {resolved.file} is read instead"
                )
                self.warn(f"the converted copy {converted} could not be read ({error_text(exc)}); {remade}")
                shutil.rmtree(converted, ignore_errors=True)
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(source, **load)
            model = AutoModelForCausalLM.from_pretrained(source, **load, **dtype, **config.extra)
        if converted is not None and load and not dtype and not config.extra:
            try:
                with quiet_loading():
                    _save_converted(model, tokenizer, converted)
            except (OSError, ValueError, RuntimeError) as exc:  # a read-only cache only costs time
                self.warn(f"could not save a converted copy of {resolved.file} ({exc}); loads stay slow")
        return model, tokenizer

    # -- prompts -------------------------------------------------------------------------------

    def _prompt_ids(self, messages: list[Message]) -> list[int]:
        """Token ids of the chat prompt up to and including the assistant's generation prompt.

        A chat template writes its own special tokens, so the tokenizer adds none (as
        `apply_chat_template(tokenize=True)` does); a model without a template (a base model)
        gets plain role-prefixed turns and its usual BOS.
        """
        rows = [m.model_dump() for m in messages]
        if self._templated:
            text = self.tokenizer.apply_chat_template(rows, tokenize=False, add_generation_prompt=True)
            return self.tokenizer(text, add_special_tokens=False)["input_ids"]
        text = "\n\n".join(f"{m['role']}: {m['content']}" for m in rows) + "\n\nassistant:"
        return self.tokenizer(text)["input_ids"]

    def _pad_left(self, sequences: list[list[int]]) -> dict[str, torch.Tensor]:
        width = max(len(s) for s in sequences)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], dtype=torch.long)
        mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], dtype=torch.long)
        return {"input_ids": ids.to(self.device), "attention_mask": mask.to(self.device)}

    # -- generation ----------------------------------------------------------------------------

    def _logits_processor(self, batch: list[GenerationRequest]) -> LogitsProcessorList | None:
        schemas = [r.json_schema for r in batch]
        if not any(s is not None for s in schemas):
            return None
        if not _structured_on(self.config):
            self.unconstrained_schema_requests += sum(s is not None for s in schemas)
            return None
        if self._constrainer is None:
            self._constrainer = self._build_constrainer() or False
        if self._constrainer is False:
            self.unconstrained_schema_requests += sum(s is not None for s in schemas)
            return None
        self.constrained_requests += sum(s is not None for s in schemas)
        return LogitsProcessorList([self._constrainer.processor(schemas, batch[0].n)])

    def _build_constrainer(self) -> grammar.SchemaConstrainer | None:
        if not grammar.available():
            self.warn(
                "llguidance is not installed: transformers generation is NOT constrained to the JSON "
                f"schema, so small models may write invalid JSON; {grammar.INSTALL_HINT}"
            )
            return None
        head = self.model.get_output_embeddings()
        vocab = head.weight.shape[0] if head is not None else self.model.config.vocab_size
        try:
            return grammar.SchemaConstrainer(self.tokenizer, vocab)
        except (ValueError, TypeError, RuntimeError) as exc:
            self.warn(
                f"llguidance cannot read this tokenizer ({exc}): "
                "generation is NOT constrained to the JSON schema"
            )
            return None

    def _stop_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    def _batch(self, batch: list[GenerationRequest]) -> list[Generation]:
        req = batch[0]
        prompts = [self._prompt_ids(r.messages) for r in batch]
        enc = self._pad_left(prompts)
        kwargs: dict[str, Any] = {
            "max_new_tokens": req.max_tokens,
            "num_return_sequences": req.n,
            "pad_token_id": self.tokenizer.pad_token_id,
            "return_dict_in_generate": True,
            "output_scores": req.top_logprobs is not None,
        }
        if req.temperature > 0:
            kwargs.update(do_sample=True, temperature=req.temperature, top_p=req.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        processors = self._logits_processor(batch)
        if processors is not None:
            kwargs["logits_processor"] = processors
        constraint = processors[0] if processors is not None else None
        if req.seed is not None:
            torch.manual_seed(req.seed)
        with torch.no_grad():
            out = self.model.generate(**enc, **kwargs)
        prompt_len = enc["input_ids"].shape[1]
        sequences = out.sequences[:, prompt_len:]
        texts = self.tokenizer.batch_decode(sequences, skip_special_tokens=True)
        stops = self._stop_ids()
        lengths, reasons = [], []
        for row in sequences.tolist():
            ends = [k for k, t in enumerate(row) if t in stops]
            lengths.append(ends[0] if ends else len(row))
            # no end-of-sequence token within max_new_tokens: cut off, as a server's "length"
            reasons.append("stop" if ends else "length")
        logprobs = None
        if req.top_logprobs is not None and out.scores:
            steps = torch.stack(out.scores, dim=1).float().log_softmax(-1)  # (batch*n, steps, vocab)
            top = steps.topk(min(max(1, req.top_logprobs), steps.shape[-1]), dim=-1)
            logprobs = [
                [
                    by_text(
                        (self.tokenizer.decode([int(t)]), float(v))
                        for t, v in zip(top.indices[b, s], top.values[b, s])
                    )
                    for s in range(lengths[b])
                ]
                for b in range(steps.shape[0])
            ]
        broken = getattr(constraint, "errors", {})
        if broken:
            self.broken_rows += len(broken)
            if self.broken_rows == len(broken):  # the first: one warning per backend, counted in stats
                first = next(iter(broken.values())).strip().splitlines() or ["(no message)"]
                self.warn(
                    "JSON-schema decoding broke on some responses and the rest of each was written "
                    f"unconstrained; they are marked {BROKEN_GRAMMAR!r} in raw/ and counted as "
                    f"llm.broken_grammar (llguidance's first error: {first[0]})"
                )
        results = []
        for i in range(len(batch)):
            rows = range(i * req.n, (i + 1) * req.n)
            mode = None
            if batch[i].json_schema is not None and constraint is not None:
                mode = BROKEN_GRAMMAR if any(r in broken for r in rows) else "llguidance"
            results.append(
                Generation(
                    texts=[texts[r] for r in rows],
                    logprobs=[logprobs[r] for r in rows] if logprobs else None,
                    usage={
                        "prompt_tokens": len(prompts[i]),
                        "completion_tokens": sum(lengths[r] for r in rows),
                    },
                    finish_reasons=[reasons[r] for r in rows],
                    structured_output=mode,
                )
            )
        return results

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(requests):
            groups.setdefault((r.temperature, r.top_p, r.max_tokens, r.n, r.seed, r.top_logprobs), []).append(
                i
            )
        for (temperature, _, _, _, seed, _), indices in groups.items():
            # a seeded sample is drawn alone: one random stream serves a whole batch, so its
            # answer would change with batch_size and with the cache hits of a resumed run
            size = 1 if temperature > 0 and seed is not None else self.config.batch_size
            for k in range(0, len(indices), size):
                chunk = indices[k : k + size]
                for i, gen in zip(chunk, self._batch([requests[i] for i in chunk])):
                    results[i] = gen
                    if on_result:
                        on_result(i, gen)
        return [r if r is not None else Generation(error="no result") for r in results]

    # -- scoring -------------------------------------------------------------------------------

    def _forward_tail(self, sequences: list[list[int]], tail: int) -> torch.Tensor:
        """Log-softmax over the vocabulary at the last `tail` positions of each left-padded row.

        Left padding puts every row's end at the same column, so only those positions need
        logits (`logits_to_keep`), not a vocabulary-sized row per prompt token; position ids
        follow the attention mask so a padded row scores exactly as it would alone.
        """
        enc = self._pad_left(sequences)
        positions = (enc["attention_mask"].cumsum(-1) - 1).clamp(min=0)
        extra = {"logits_to_keep": tail} if self._keeps_logits else {}
        with torch.no_grad():
            logits = self.model(**enc, position_ids=positions, **extra).logits[:, -tail:, :]
        return logits.float().log_softmax(-1)

    def _next_token_logprobs(self, prompts: list[list[int]]) -> torch.Tensor:
        """(len(prompts), vocab) log-probabilities of the token after each prompt."""
        return self._forward_tail(prompts, 1)[:, -1, :]

    def _score_batch(self, pairs: list[tuple[list[int], list[int]]]) -> list[Loglikelihood]:
        """Sum of log P(continuation token | everything before it) for each (prompt, continuation)."""
        tail = max(len(c) for _, c in pairs) + 1
        logprobs = self._forward_tail([p + c for p, c in pairs], tail)
        out = []
        for row, (_, cont) in enumerate(pairs):
            n = len(cont)
            steps = logprobs[row, tail - 1 - n : tail - 1]  # the step before each continuation token
            target = torch.tensor(cont, device=steps.device)
            picked = steps.gather(-1, target[:, None]).squeeze(-1)
            greedy = bool((steps.argmax(-1) == target).all())
            out.append(Loglikelihood(logprob=float(picked.sum()), is_greedy=greedy))
        return out

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        """Log P(continuation | chat prompt with its generation prompt), batched by `batch_size`.

        The continuation is tokenized on its own, as the model would have to produce it right
        after the generation prompt (a reply starts a new token there); so " Yes", "No" and
        "Oui" are each scored over however many tokens they take. Continuations of one token
        (the usual labels) are read off a single pass over each distinct prompt, so P(Yes) and
        P(No) for a piece cost one forward pass, not two.
        """
        results: list[Loglikelihood | None] = [None] * len(requests)

        def done(i: int, result: Loglikelihood) -> None:
            results[i] = result
            if on_result:
                on_result(i, result)

        singles: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        multis: list[tuple[int, list[int], list[int]]] = []
        for i, req in enumerate(requests):
            cont = self.tokenizer(req.continuation, add_special_tokens=False)["input_ids"]
            if not cont:
                done(i, Loglikelihood(error=f"continuation {req.continuation!r} encodes to no tokens"))
            elif len(cont) == 1:
                singles.setdefault(tuple(self._prompt_ids(req.messages)), []).append((i, cont[0]))
            else:
                multis.append((i, self._prompt_ids(req.messages), cont))
        size = self.config.batch_size
        prompts = sorted(singles, key=len)  # similar lengths together: less padding
        for k in range(0, len(prompts), size):
            chunk = prompts[k : k + size]
            logprobs = self._next_token_logprobs([list(p) for p in chunk])
            for row, prompt in enumerate(chunk):
                greedy = int(logprobs[row].argmax())
                for i, token in singles[prompt]:
                    done(i, Loglikelihood(logprob=float(logprobs[row, token]), is_greedy=token == greedy))
        multis.sort(key=lambda t: len(t[1]) + len(t[2]))
        for k in range(0, len(multis), size):
            chunk = multis[k : k + size]
            for (i, _, _), score in zip(chunk, self._score_batch([(p, c) for _, p, c in chunk])):
                done(i, score)
        return [r if r is not None else Loglikelihood(error="no result") for r in results]
