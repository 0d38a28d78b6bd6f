"""Any OpenAI-compatible chat server: vllm serve, llama.cpp, Ollama, TGI, or a cluster.

A served cluster behind a load balancer is how mushroom scales past one machine.

Requests run with bounded concurrency; 429, 5xx, timeouts and connection errors are retried
with exponential backoff (honouring Retry-After); other 4xx are reported as the request's
error at once. The API key is read from the environment variable the config names and is
never logged or written into a run folder.
"""

from __future__ import annotations

import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from mushroom.backends.base import Backend, BackendConfig, Generation, GenerationRequest, OnResult
from mushroom.errors import MushroomError

RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIBackend(Backend):
    """Client for `POST {base_url}/chat/completions`."""

    kind = "openai"

    def __init__(self, config: BackendConfig):
        super().__init__(config)
        if not config.base_url:
            raise MushroomError("the openai backend needs `base_url`, e.g. http://127.0.0.1:8000/v1")
        if not config.model:
            raise MushroomError("the openai backend needs `model` (the served model's name)")
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(config.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.client = httpx.Client(
            base_url=config.base_url.rstrip("/"),
            headers=headers,
            timeout=httpx.Timeout(config.timeout_s),
            limits=httpx.Limits(max_connections=config.concurrency),
        )
        self.retries_made = 0
        self._lock = threading.Lock()

    def payload(self, req: GenerationRequest) -> dict[str, Any]:
        """The request body; the JSON schema travels as `response_format` when enabled."""
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [m.model_dump() for m in req.messages],
            "temperature": req.temperature,
            "top_p": req.top_p,
            "max_tokens": req.max_tokens,
            "n": req.n,
        }
        if req.seed is not None:
            body["seed"] = req.seed
        if req.json_schema is not None and self.config.structured_output:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": req.json_schema},
            }
        if req.top_logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = req.top_logprobs
        body.update(self.config.extra)
        return body

    @staticmethod
    def parse(data: dict[str, Any]) -> Generation:
        """Texts, top log-probabilities and usage from a chat completion response."""
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices:
            return Generation(error="response has no choices")
        texts, logprobs = [], []
        for choice in sorted(choices, key=lambda c: c.get("index", 0)):
            message = choice.get("message") or {}
            texts.append(message.get("content") or "")
            content = (choice.get("logprobs") or {}).get("content")
            if content:
                logprobs.append(
                    [
                        {t["token"]: t["logprob"] for t in (tok.get("top_logprobs") or [tok])}
                        for tok in content
                    ]
                )
        usage = {k: v for k, v in (data.get("usage") or {}).items() if isinstance(v, int)}
        return Generation(texts=texts, logprobs=logprobs or None, usage=usage)

    def _delay(self, attempt: int, response: httpx.Response | None) -> float:
        if response is not None:
            retry_after = response.headers.get("retry-after")
            if retry_after:
                try:
                    return min(float(retry_after), 60.0)
                except ValueError:
                    pass
        return min(0.5 * 2**attempt, 30.0) * (0.5 + random.random() / 2)

    def _one(self, req: GenerationRequest) -> Generation:
        body = self.payload(req)
        last_error = "no attempt made"
        for attempt in range(self.config.max_retries + 1):
            response = None
            try:
                response = self.client.post("/chat/completions", json=body)
            except httpx.TimeoutException:
                last_error = f"timeout after {self.config.timeout_s} s"
            except httpx.TransportError as exc:
                last_error = f"connection error: {type(exc).__name__}"
            else:
                if response.status_code == 200:
                    try:
                        return self.parse(response.json())
                    except ValueError:
                        return Generation(error="server answered 200 with a body that is not JSON")
                last_error = f"HTTP {response.status_code}: {response.text[:200]}"
                if response.status_code not in RETRY_STATUS:
                    return Generation(error=last_error)
            if attempt < self.config.max_retries:
                with self._lock:
                    self.retries_made += 1
                time.sleep(self._delay(attempt, response))
        return Generation(error=f"gave up after {self.config.max_retries + 1} attempts: {last_error}")

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)

        def work(i: int) -> None:
            gen = self._one(requests[i])
            results[i] = gen
            if on_result:
                on_result(i, gen)

        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            list(pool.map(work, range(len(requests))))
        return [r if r is not None else Generation(error="no result") for r in results]

    def close(self) -> None:
        self.client.close()
