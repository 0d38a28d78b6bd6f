"""vLLM in-process offline batch: every prompt of a stage in one `LLM.chat` call.

Thin on purpose: vLLM does the scheduling, prefix caching (on, since all prompts of a
detector share their instructions) and guided JSON decoding. Log-likelihoods come from
`prompt_logprobs` over the chat prompt followed by the continuation (split at the context's
token count, as lm-evaluation-harness does). Needs a GPU and `pip install -e '.[vllm]'`;
its test runs only where both exist.
"""

from __future__ import annotations

from typing import Any

from vllm import LLM, SamplingParams  # this module is imported only when vllm is chosen

from mushroom.backends.base import (
    Backend,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    OnResult,
    OnScore,
    by_text,
)
from mushroom.backends.config import VLLMConfig
from mushroom.backends.registry import register_backend
from mushroom.errors import MushroomError, load_failure


def _structured(schema: dict[str, Any]) -> dict[str, Any]:
    """Sampling-parameter keyword for JSON-schema decoding across vLLM versions.

    The schema is made strict (no keys beyond those listed) as the transformers backend's
    is: under a plain pydantic schema a small model can invent keys until max_tokens.
    """
    from mushroom.backends.grammar import strict  # torch and transformers: vLLM has both

    schema = strict(schema)
    try:  # vLLM >= 0.10
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(json=schema)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}


def _compact_json() -> dict[str, Any]:
    """Engine keyword for JSON without blanks between tokens, where this vLLM has it.

    On an H100 with vLLM 0.26 and its default (any whitespace between JSON tokens), a small
    random model padded the schema's JSON with tabs and line breaks until max_tokens cut it
    off. The transformers backend's grammar allows only json.dumps' separators. vLLM takes
    the setting only with a named backend: xgrammar, the one its "auto" picked in that run
    (guidance refuses Mistral tokenizers). `extra={"structured_outputs_config": {...}}`
    replaces it, e.g. `{"backend": "auto"}` for vLLM's own choice and fallbacks.
    """
    try:
        from vllm.config import StructuredOutputsConfig
    except ImportError:  # vLLM before 0.10 names it otherwise: left to its default
        return {}
    if "disable_any_whitespace" not in getattr(StructuredOutputsConfig, "__dataclass_fields__", {}):
        return {}
    return {"structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True}}


def _step(step: dict[int, Any]) -> dict[str, float]:
    """One generated token's top log-probabilities (vLLM keys them by token id) by text."""
    return by_text((lp.decoded_token or "", lp.logprob) for lp in step.values())


@register_backend("vllm", config=VLLMConfig)
class VLLMBackend(Backend):
    """Offline batch generation with vLLM."""

    config: VLLMConfig

    def __init__(self, config: VLLMConfig):
        super().__init__(config)
        from mushroom.models.zoo import resolve_model

        resolved = resolve_model(config.model)  # a registry name (`smollm2`) is its GGUF file
        model = str(resolved.file or resolved.source)
        kwargs: dict[str, Any] = {"model": model, "enable_prefix_caching": True, **_compact_json()}
        if config.dtype:
            kwargs["dtype"] = config.dtype
        kwargs.update(config.extra)
        try:
            self.llm = LLM(**kwargs)
        except Exception as exc:  # out of GPU memory, a model vLLM cannot read: no item can run
            raise MushroomError(load_failure("vLLM model", config.model, exc)) from exc

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        params = []
        for req in requests:
            extra = _structured(req.json_schema) if req.json_schema and self.config.structured_output else {}
            params.append(
                SamplingParams(
                    temperature=req.temperature,
                    top_p=req.top_p,
                    max_tokens=req.max_tokens,
                    seed=req.seed,
                    n=req.n,
                    logprobs=req.top_logprobs,
                    **extra,
                )
            )
        conversations = [[m.model_dump() for m in req.messages] for req in requests]
        outputs = self.llm.chat(conversations, sampling_params=params, use_tqdm=True)
        results = []
        for i, out in enumerate(outputs):
            logprobs = None
            if requests[i].top_logprobs is not None:
                logprobs = [[_step(step) for step in c.logprobs or []] for c in out.outputs]
            # vLLM says why each completion ended: "length" is one cut off at max_tokens
            reasons = [getattr(c, "finish_reason", None) for c in out.outputs]
            gen = Generation(
                texts=[c.text for c in out.outputs],
                logprobs=logprobs,
                finish_reasons=[r if isinstance(r, str) else None for r in reasons],
            )
            results.append(gen)
            if on_result:
                on_result(i, gen)
        return results

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        tokenizer = self.llm.get_tokenizer()
        prompts, spans = [], []
        for req in requests:
            context = tokenizer.apply_chat_template(
                [m.model_dump() for m in req.messages], tokenize=False, add_generation_prompt=True
            )
            whole = tokenizer(context + req.continuation, add_special_tokens=False).input_ids
            n_context = len(tokenizer(context, add_special_tokens=False).input_ids)
            prompts.append({"prompt_token_ids": whole})
            spans.append((n_context, len(whole)))
        params = SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=1)
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=True)
        results = []
        for i, out in enumerate(outputs):
            start, end = spans[i]
            ids = prompts[i]["prompt_token_ids"]
            if start >= end:
                score = Loglikelihood(error="the continuation adds no token to the prompt")
            else:
                steps = out.prompt_logprobs or []
                picked = [
                    steps[j][ids[j]] if j < len(steps) and steps[j] else None for j in range(start, end)
                ]
                if any(p is None for p in picked):
                    score = Loglikelihood(error="vLLM returned no log-probability for a continuation token")
                else:
                    score = Loglikelihood(
                        logprob=float(sum(p.logprob for p in picked)),
                        is_greedy=all(getattr(p, "rank", None) == 1 for p in picked),
                    )
            results.append(score)
            if on_result:
                on_result(i, score)
        return results
