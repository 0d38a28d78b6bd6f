"""transformers: batched generation with the model's chat template, on CPU or GPU.

Prompts are grouped by sampling parameters and sent in batches of `batch_size` with left
padding; temperature 0 means greedy decoding. Top log-probabilities come from the scores
of each generated step. Needs `pip install 'mushroom[transformers]'`.
"""

from __future__ import annotations

from typing import Any

import torch  # this module is imported only when the transformers backend is chosen
from transformers import AutoModelForCausalLM, AutoTokenizer

from mushroom.backends.base import Backend, BackendConfig, Generation, GenerationRequest, OnResult


class TransformersBackend(Backend):
    """A causal LM from transformers (a hub name or a local folder)."""

    kind = "transformers"

    def __init__(self, config: BackendConfig, model: Any = None, tokenizer: Any = None):
        super().__init__(config)
        self.device = config.device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = tokenizer or AutoTokenizer.from_pretrained(config.model)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        dtype = getattr(torch, config.dtype) if config.dtype else None
        self.model = model or AutoModelForCausalLM.from_pretrained(
            config.model, torch_dtype=dtype, **config.extra
        )
        self.model.to(self.device)
        self.model.eval()

    def _prompt(self, req: GenerationRequest) -> str:
        messages = [m.model_dump() for m in req.messages]
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "\n\n".join(f"{m['role']}: {m['content']}" for m in messages) + "\n\nassistant:"

    def _batch(self, batch: list[GenerationRequest]) -> list[Generation]:
        req = batch[0]
        enc = self.tokenizer([self._prompt(r) for r in batch], return_tensors="pt", padding=True).to(
            self.device
        )
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
            kwargs.update(do_sample=False)
        if req.seed is not None:
            torch.manual_seed(req.seed)
        with torch.no_grad():
            out = self.model.generate(**enc, **kwargs)
        prompt_len = enc["input_ids"].shape[1]
        sequences = out.sequences[:, prompt_len:]
        texts = self.tokenizer.batch_decode(sequences, skip_special_tokens=True)
        logprobs = None
        if req.top_logprobs is not None and out.scores:
            steps = torch.stack(out.scores, dim=1).float().log_softmax(-1)  # (batch*n, steps, vocab)
            top = steps.topk(min(max(1, req.top_logprobs), steps.shape[-1]), dim=-1)
            logprobs = [
                [
                    {
                        self.tokenizer.decode([int(t)]): float(v)
                        for t, v in zip(top.indices[b, s], top.values[b, s])
                    }
                    for s in range(steps.shape[1])
                ]
                for b in range(steps.shape[0])
            ]
        results = []
        for i in range(len(batch)):
            rows = range(i * req.n, (i + 1) * req.n)
            results.append(
                Generation(
                    texts=[texts[r] for r in rows],
                    logprobs=[logprobs[r] for r in rows] if logprobs else None,
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
        size = self.config.batch_size
        for indices in groups.values():
            for k in range(0, len(indices), size):
                chunk = indices[k : k + size]
                for i, gen in zip(chunk, self._batch([requests[i] for i in chunk])):
                    results[i] = gen
                    if on_result:
                        on_result(i, gen)
        return [r if r is not None else Generation(error="no result") for r in results]
