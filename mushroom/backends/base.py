"""The one interface every LLM backend implements: a whole batch in, raw texts out.

Like lm-evaluation-harness's `LM` and inspect_ai's `ModelAPI`, a backend sees every request
of a stage at once, so an offline engine (vLLM) can schedule them together and a server
client can keep a bounded number in flight. Results come back in request order; a callback
sees each one as soon as it exists, which is what lets the cache make a killed run resumable.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mushroom.backends.config import BackendConfig, BackendSettings
from mushroom.text.normalize import whole_characters
from mushroom.util.warn import say
from mushroom.util.words import plural

__all__ = [
    "Backend",
    "BackendConfig",
    "BackendSettings",
    "Generation",
    "GenerationRequest",
    "Loglikelihood",
    "LoglikelihoodRequest",
    "Message",
]


class Message(BaseModel):
    """One chat message."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant"]
    content: str


# The OpenAI API refuses a temperature above 2 (every request would fail), and the servers
# that accept one sample noise there: no span detector asks for it.
MAX_TEMPERATURE = 2.0


class GenerationRequest(BaseModel):
    """What to generate for one prompt; `key` is the caller's label (e.g. the item id)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    messages: list[Message]
    item_id: str | None = Field(None, description="the item this request serves (raw records, accounting)")
    stage: str = Field("", description="the detector stage that sent it, e.g. 'llm', 'decompose'")
    temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(1024, ge=1)
    seed: int | None = None
    n: int = Field(1, ge=1)
    json_schema: dict[str, Any] | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)

    def cache_payload(self) -> dict[str, Any]:
        """Everything that changes the answer (the caller's key does not)."""
        return self.model_dump(mode="json", exclude={"key", "item_id", "stage"})


TokenLogprobs = list[dict[str, float]]  # per generated token: top-k token -> logprob


def by_text(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """One step's top log-probabilities keyed by the text each token reads as.

    Two tokens can read the same: the byte pieces of one character each decode to '' (seen
    with vLLM on a byte-level model), and a word can be one token or its bytes. Keyed by text,
    the last one replaced the others, dropping their probability from P("Yes"). Their
    probabilities add, as the probability of that text being next does.
    """
    out: dict[str, float] = {}
    for text, logprob in pairs:
        before = out.get(text)
        if before is None or before == -math.inf:
            out[text] = logprob
        elif logprob != -math.inf:
            top = max(before, logprob)
            out[text] = top + math.log1p(math.exp(-abs(before - logprob)))
    return out


BROKEN_GRAMMAR = "llguidance: broke"
"""`Generation.structured_output` of a response whose JSON-schema grammar failed mid-answer."""


class Generation(BaseModel):
    """The raw outcome of one request: n texts, optional log-probabilities, or an error."""

    texts: list[str] = Field(default_factory=list)
    logprobs: list[TokenLogprobs] | None = None
    error: str | None = None
    cached: bool = False
    usage: dict[str, int] = Field(default_factory=dict)
    finish_reasons: list[str | None] = Field(
        default_factory=list,
        description="why each text ended, as the engine says it: 'stop', or 'length' for one cut "
        "off at max_tokens (empty when the backend does not say)",
    )
    structured_output: str | None = Field(
        None,
        description="how the JSON schema was sent or enforced (openai: json_schema, json_object, ...; "
        "transformers: llguidance, or 'llguidance: broke' when the grammar failed mid-answer)",
    )

    @field_validator("texts")
    @classmethod
    def _writable(cls, texts: list[str]) -> list[str]:
        # a reply with half a character ("\udc00" in the server's JSON) failed its item when
        # written to the raw log; U+FFFD keeps the rest of it, which parses as before
        return [whole_characters(t) for t in texts]

    @field_validator("error")
    @classmethod
    def _writable_error(cls, error: str | None) -> str | None:
        return None if error is None else whole_characters(error)

    @field_validator("logprobs")
    @classmethod
    def _writable_tokens(cls, logprobs: list[TokenLogprobs] | None) -> list[TokenLogprobs] | None:
        if logprobs is None:
            return None
        # only a step with a non-ASCII token is rebuilt: 4 x 4,096 tokens x top-20 took 64 ms, not 17
        return [
            [
                top if "".join(top).isascii() else {whole_characters(k): v for k, v in top.items()}
                for top in step
            ]
            for step in logprobs
        ]

    def used_budget(self, max_tokens: int) -> bool | None:
        """Whether a text was cut off at `max_tokens` instead of finishing.

        The engine's own word comes first: `finish_reason == "length"` on any text, whatever
        `usage` says (a server may count tokens differently, or not at all). Without finish
        reasons, every text using its whole budget by the token count says the same. None when
        the backend said neither (a replay file without them, a scripted backend): the caller
        then has only the text itself to go by.
        """
        if any(reason == "length" for reason in self.finish_reasons):
            return True
        if self.texts and len(self.finish_reasons) == len(self.texts) and all(self.finish_reasons):
            return False
        tokens = self.usage.get("completion_tokens")
        if not self.texts or tokens is None:
            return None
        return tokens >= max_tokens * len(self.texts)


OnResult = Callable[[int, Generation], None]


class LoglikelihoodRequest(BaseModel):
    """log P(continuation | prompt): the chat prompt (with its generation prompt) then the continuation.

    As lm-evaluation-harness's `loglikelihood`: the score of a given text rather than of
    whatever the model happens to put in its top-k, so P("Yes") and P("No") are exact for any
    label wording.
    """

    model_config = ConfigDict(extra="forbid")

    key: str
    messages: list[Message]
    continuation: str = Field(min_length=1)
    item_id: str | None = None
    stage: str = ""

    def cache_payload(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude={"key", "item_id", "stage"})


class Loglikelihood(BaseModel):
    """The outcome of one LoglikelihoodRequest: the summed log-probability, or an error."""

    logprob: float | None = None
    is_greedy: bool | None = None
    error: str | None = None
    cached: bool = False


OnScore = Callable[[int, Loglikelihood], None]


class Backend(ABC):
    """A model that answers a batch of chat requests."""

    kind: str = "base"
    config_class: ClassVar[type[BackendSettings]] = BackendSettings

    def __init__(self, config: BackendSettings):
        self.config = config
        self._warnings: list[str] = []

    @classmethod  # noqa: B027 - an optional hook: most backends have nothing to check
    def check_config(cls, config: BackendSettings) -> None:
        """Checks that need the backend's own code (a server's model list, a responses file).

        Called by the settings' `check_ready` before any item is sent; settings models hold
        no code of a backend, so listing and validating them imports none.
        """

    @property
    def warnings(self) -> list[str]:
        """What this backend warned of, for the run's summary (wrappers pass on their inner one's)."""
        return list(getattr(self, "_warnings", []))

    def retry_tally(self) -> Counter[str]:
        """Attempts sent again, by why, and `RECOVERED`: requests answered only after one.

        A request that failed is counted with its item; one a retry saved is not, and a flaky
        server would pass unseen (a run twice as long, with nothing said). Wrappers pass on
        their inner backend's; backends that never retry have none.
        """
        return Counter()

    def warn(self, message: str) -> None:
        """Warns once per backend: shown now and kept in `warnings` for the run's record.

        Shown through the sink `warnings_to` sets (the CLI's `warning:` line, a run's own
        list) or else with `warnings.warn`, for a caller from Python.
        """
        if message not in self._warnings:
            self._warnings.append(message)
            say(message, stacklevel=3)

    @property
    def model_name(self) -> str:
        return self.config.model

    @abstractmethod
    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        """One Generation per request, in order; `on_result(index, generation)` as each is ready."""

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        """Log P(continuation | prompt) per request, in order; backends that cannot score say so."""
        from mushroom.errors import MushroomError

        raise MushroomError(f"the {self.kind!r} backend cannot score log-likelihoods")

    def close(self) -> None:  # noqa: B027 - optional hook, most backends hold nothing
        """Releases engines or connections; a no-op by default."""


RECOVERED = "answered after a retry"  # the key of `Backend.retry_tally` that counts requests


def retry_note(tally: Counter[str]) -> str | None:
    """One line on the attempts a server failed and sent again, and the requests that saved.

    The count of attempts includes those of requests that failed in the end (listed with their
    items). None when no retry saved a request: then the failures say it all.
    """
    why = {k: n for k, n in tally.items() if k != RECOVERED and n > 0}
    if not why or not tally[RECOVERED]:
        return None
    reasons = ", ".join(f"{k} x{n}" for k, n in sorted(why.items(), key=lambda kv: (-kv[1], kv[0])))
    return (
        f"{plural(sum(why.values()), 'failed attempt')} sent again ({reasons}); "
        f"{plural(tally[RECOVERED], 'request')} answered that way (a request that still failed "
        "is counted with its item)"
    )


def backend_warnings(backend: Backend | None) -> list[str]:
    """What a backend warned of (e.g. unconstrained decoding); none for no backend (never built).

    Backends warn once, as they happen (see `Backend.warn`); a detector hands these to the run
    so that they reach its summary too.
    """
    return backend.warnings if backend is not None else []
