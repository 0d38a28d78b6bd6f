"""Raw model outputs: one typed record per model call, for every LLM stage.

`llm`, `chain`, `pyes` and `contexts` all talk to models through the same batch interface,
so their raw outputs are recorded at that interface, by one wrapper, in one schema: a run's
`raw/<lang>.raw.jsonl` holds every request's key, item, stage, model, the messages sent, its
sampling settings and outcome (texts, log-probabilities, a log-likelihood, or the error),
cache hits included. The replay backend answers from these files, so any run can be
re-parsed without a model.
"""

from __future__ import annotations

import json
import os
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from mushroom.backends.base import (
    Backend,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    Message,
    OnResult,
    OnScore,
    backend_warnings,
)

RAW_SCHEMA_VERSION = 2
"""2 added what was sent (`messages`, `max_tokens`, `top_p`, `seed`); version-1 lines still load."""


class RawRecord(BaseModel):
    """One model call and its outcome, exactly as the model answered (untrusted text)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = RAW_SCHEMA_VERSION
    id: str | None = Field(None, description="the item the call served")
    key: str = Field(description="the request key; replay matches on it")
    stage: str = ""
    call: Literal["generate", "loglikelihood"] = "generate"
    backend: str = ""
    model: str = ""
    temperature: float | None = None
    n: int = 1
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    texts: list[str] = Field(default_factory=list)
    logprobs: list[list[dict[str, float]]] | None = None
    continuation: str | None = None
    logprob: float | None = None
    is_greedy: bool | None = None
    error: str | None = None
    cached: bool = False
    usage: dict[str, int] = Field(default_factory=dict)
    finish_reasons: list[str | None] | None = Field(
        None, description="why each text ended ('length': cut off at max_tokens), when the engine says"
    )
    structured_output: str | None = Field(None, description="the output constraint the server accepted")
    # last, so that a reader of the line sees the outcome before the (long) prompt
    messages: list[Message] | None = Field(
        None, description="the prompt as sent (for scoring: before the continuation)"
    )

    @property
    def response(self) -> str | None:
        """The first text, as older replay files call it."""
        return self.texts[0] if self.texts else None


def raw_file(raw_dir: Path, lang: str) -> Path:
    """Where a run keeps one language's raw model outputs."""
    from mushroom.util.names import safe_name

    return raw_dir / f"{safe_name(lang, 'language code')}.raw.jsonl"


class RawLog:
    """An append-only JSONL file of RawRecords, safe to write from backend worker threads.

    Each record is flushed as it is written, so a killed run keeps every call it made. A last
    line a kill cut is dropped when the log is opened again: the next record was glued to it,
    and the file no longer replayed (the call it was writing is asked again or read from the cache).
    """

    def __init__(self, path: Path):
        from mushroom.data.jsonl import mend_cut_line

        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        mend_cut_line(self.path, drop=True)
        self._lock = threading.Lock()
        self.written = 0

    def write(self, record: RawRecord) -> None:
        line = json.dumps(record.model_dump(mode="json", exclude_defaults=True), ensure_ascii=False)
        with self._lock, self.path.open("a", encoding="utf-8") as out:
            out.write(line + "\n")
            out.flush()
            os.fsync(out.fileno())
            self.written += 1


class RecordingBackend(Backend):
    """Wraps a backend (usually the cached one): every outcome is written to the current RawLog.

    The log is looked up per call through `sink`, so one backend serves a detector across
    languages while each language's calls land in that language's file.
    """

    def __init__(
        self,
        inner: Backend,
        sink: Any,
        on_each: Callable[[], None] | None = None,
        on_batch: Callable[[int], None] | None = None,
    ):
        super().__init__(inner.config)
        self.inner = inner
        self.kind = inner.kind
        self.sink = sink
        self.on_each = on_each  # a progress bar's advance: `contexts` had none, and looked hung
        # a batch's size as it is sent: a bar's total grows by it, as the calls to come are known
        self.on_batch = on_batch

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def warnings(self) -> list[str]:
        """The recorded backend's warnings, for the run's summary."""
        return backend_warnings(self.inner)

    def retry_tally(self) -> Counter[str]:
        return self.inner.retry_tally()

    def _log(self) -> RawLog | None:
        return self.sink() if callable(self.sink) else self.sink

    def _hook(self, requests: list, on_result, fields) -> Any:
        """A callback that records each outcome (its fields from `fields(request, outcome)`)."""
        log = self._log()
        if self.on_batch is not None and requests:
            self.on_batch(len(requests))

        def hook(i: int, outcome) -> None:
            if log is not None:
                req = requests[i]
                log.write(
                    RawRecord(
                        id=req.item_id,
                        key=req.key,
                        stage=req.stage,
                        backend=self.kind,
                        model=self.model_name,
                        error=outcome.error,
                        cached=outcome.cached,
                        **fields(req, outcome),
                    )
                )
            if self.on_each is not None:
                self.on_each()
            if on_result is not None:
                on_result(i, outcome)

        return hook

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        def fields(req: GenerationRequest, gen: Generation) -> dict[str, Any]:
            return {
                "temperature": req.temperature,
                "n": req.n,
                "top_p": req.top_p,
                "max_tokens": req.max_tokens,
                "seed": req.seed,
                "messages": req.messages,
                "texts": gen.texts,
                "logprobs": gen.logprobs,
                "usage": gen.usage,
                "finish_reasons": gen.finish_reasons or None,
                "structured_output": getattr(gen, "structured_output", None),
            }

        return self.inner.generate(requests, on_result=self._hook(requests, on_result, fields))

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        def fields(req: LoglikelihoodRequest, res: Loglikelihood) -> dict[str, Any]:
            return {
                "call": "loglikelihood",
                "messages": req.messages,
                "continuation": req.continuation,
                "logprob": res.logprob,
                "is_greedy": res.is_greedy,
            }

        return self.inner.loglikelihood(requests, on_result=self._hook(requests, on_result, fields))

    def close(self) -> None:
        self.inner.close()
