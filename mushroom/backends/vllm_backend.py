"""vLLM in-process offline batch: every prompt of a stage in one `LLM.chat` call.

Thin on purpose: vLLM does the scheduling, prefix caching (on, since all prompts of a
detector share their instructions) and guided JSON decoding. Needs a GPU and
`pip install 'mushroom[vllm]'`; its test runs only where both exist.
"""

from __future__ import annotations

from typing import Any

from vllm import LLM, SamplingParams  # this module is imported only when vllm is chosen

from mushroom.backends.base import Backend, BackendConfig, Generation, GenerationRequest, OnResult


def _structured(schema: dict[str, Any]) -> dict[str, Any]:
    """Sampling-parameter keyword for JSON-schema decoding across vLLM versions."""
    try:  # vLLM >= 0.10
        from vllm.sampling_params import StructuredOutputsParams

        return {"structured_outputs": StructuredOutputsParams(json=schema)}
    except ImportError:
        from vllm.sampling_params import GuidedDecodingParams

        return {"guided_decoding": GuidedDecodingParams(json=schema)}


class VLLMBackend(Backend):
    """Offline batch generation with vLLM."""

    kind = "vllm"

    def __init__(self, config: BackendConfig):
        super().__init__(config)
        kwargs: dict[str, Any] = {"model": config.model, "enable_prefix_caching": True}
        if config.dtype:
            kwargs["dtype"] = config.dtype
        kwargs.update(config.extra)
        self.llm = LLM(**kwargs)

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
                logprobs = [
                    [{lp.decoded_token: lp.logprob for lp in step.values()} for step in (c.logprobs or [])]
                    for c in out.outputs
                ]
            gen = Generation(texts=[c.text for c in out.outputs], logprobs=logprobs)
            results.append(gen)
            if on_result:
                on_result(i, gen)
        return results
