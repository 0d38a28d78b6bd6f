"""The `llm` detector: an open LLM reads context + question + answer and lists wrong spans.

One prompt (a file in prompts/) per item; one run per temperature (and sample); every
response goes through the repair parser, and the runs vote per character (each run is one
annotator, as in the best open Mu-SHROOM system). Responses are cached on disk keyed on the
full request, so a killed run resumes without repeating a call, and they are also written in
replay format next to the predictions so any run can be re-parsed without a model.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, field_validator, model_validator

from mushroom.backends.base import (
    BROKEN_GRAMMAR,
    MAX_TEMPERATURE,
    Backend,
    BackendConfig,
    Generation,
    GenerationRequest,
)
from mushroom.data.languages import language_name
from mushroom.data.predictions import SoftMode, vote
from mushroom.data.records import Context, Item
from mushroom.detectors.base import (
    DetectorOptions,
    Emit,
    GeneratingDetector,
    HardThreshold,
    ItemResult,
    replays,
    skip_blank_answers,
)
from mushroom.detectors.prompts import PromptTemplate, load_prompt
from mushroom.errors import (
    CONTEXT_FULL,
    CUT_OFF,
    FILTERED,
    NAMED_ELSEWHERE,
    NOT_SENT,
    RECORDED_CUT,
    UNREADABLE,
)
from mushroom.parsing.json_repair import decode_prefix
from mushroom.parsing.parser import SpanList, parse_response
from mushroom.parsing.reasoning import strip_reasoning

"""How the error of an item whose every reply named only text the answer does not hold begins."""


# finish reasons of a reply that stopped before the model ended it
_CUT_REASONS = frozenset({"length", "content_filter"})


def _whole_then_blank(text: str) -> bool:
    """Whether a reply is one whole JSON value followed by whitespace alone."""
    body = text.strip()
    if body == text.lstrip() or not body.startswith(("{", "[")):
        return False  # no padding after it: nothing to tell apart from a cut
    try:
        _, end = decode_prefix(body)  # depth-bounded: "[" * 5000 from a babbling model
    except ValueError:
        return False
    return end == len(body)


class LLMOptions(DetectorOptions):
    """Options of the single-prompt LLM detector."""

    backend: BackendConfig = Field(default_factory=lambda: BackendConfig(kind="replay"))
    prompt: str = Field("single_few_shot", description="prompt file in prompts/ (or a path)")
    # each >= 0, as a request takes it: a -1.0 passed here and failed every item at its request
    temperatures: list[Annotated[float, Field(ge=0.0, le=MAX_TEMPERATURE)]] = Field(
        default_factory=lambda: [0.0], min_length=1
    )
    samples: int = Field(1, ge=1, description="samples per temperature")
    max_tokens: int = Field(1024, ge=16)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    seed: int | None = 0
    structured_output: bool = Field(True, description="ask for the span JSON schema")
    run_threshold: float = Field(0.5, ge=0.0, le=1.0, description="a run marks a span when prob >= this")
    threshold: HardThreshold = Field(0.5, description="hard label when the vote share > this")
    soft: Literal["vote", "mean"] = Field("vote", description="soft label: vote share or mean probability")
    max_context_chars: int = Field(12000, ge=100, description="contexts are cut to this many characters")
    default_probability: float = Field(1.0, ge=0.0, le=1.0, description="for spans given without one")
    cache: bool = Field(
        True, description="cache responses on disk (in the run folder; from Python only with cache_path)"
    )
    cache_path: str | None = Field(None, description="share one cache file across runs")

    @field_validator("temperatures", mode="before")
    @classmethod
    def _one_temperature(cls, value: Any) -> Any:
        # `-o temperatures=0.3` (or temperatures=0.3 from Python) is one temperature, not an error,
        # and `-o temperatures=0.1,0.2` is written as `--temperatures 0.1,0.2` is
        if isinstance(value, str) and "," in value and not value.lstrip().startswith("["):
            return [part.strip() for part in value.split(",")]
        return [value] if isinstance(value, int | float) and not isinstance(value, bool) else value

    @model_validator(mode="after")
    def _distinct_temperatures(self) -> LLMOptions:
        # With a seed, or with the response cache, a request differing only in a repeated
        # temperature is the same request: its answer would be a copy of the first, one
        # vote counted twice. Without both, repeats are independent samples.
        repeated = sorted({t for t in self.temperatures if self.temperatures.count(t) > 1})
        if repeated and (self.seed is not None or self.cache):
            raise ValueError(
                f"temperature {repeated[0]:g} is given twice; for more answers at one temperature "
                "set samples (-o samples=N)"
            )
        if self.samples > 1 and 0.0 in self.temperatures:
            raise ValueError(
                f"samples={self.samples} at temperature 0 are {self.samples} copies of one greedy answer "
                "(one vote counted that many times): give samples only temperatures above 0"
            )
        return self


PROMPT_VALUES = ("language", "context", "question", "answer")
"""What the detector fills its prompt with (a prompt of one's own may leave some out)."""
LLM_PROMPTS = ("single_few_shot", "single_few_shot_plain", "single_zero_shot")
"""The shipped prompts of the llm detector (a prompt of one's own has its own name)."""


def context_text(contexts: list[Context], limit: int) -> str:
    """Contexts joined (with their source names when several), cut to `limit` characters."""
    if not contexts:
        return "(no context available)"
    if len(contexts) == 1:
        text = contexts[0].text
    else:
        text = "\n\n".join(f"[{c.source}]\n{c.text}" for c in contexts)
    return text if len(text) <= limit else text[:limit] + " [...]"


class LLMDetector(GeneratingDetector):
    """Single-prompt LLM detector with temperature/sample ensembles."""

    name = "llm"
    Options = LLMOptions
    options: LLMOptions
    shipped_prompts = LLM_PROMPTS  # the only shipped prompts a missing one's message offers

    def __init__(self, options: LLMOptions, backend: Backend | None = None):
        super().__init__(options, backend)
        self.prompt: PromptTemplate = load_prompt(options.prompt, self.shipped_prompts)
        self.prompt.check(PROMPT_VALUES, required=("answer",))
        self.prompt.check_not_of_another_stage("the llm detector", self.shipped_prompts)

    def describe(self) -> dict:
        out = super().describe()
        out["prompt_name"] = self.prompt.name
        out["prompt_sha256"] = self.prompt.sha256
        return out

    def prompt_templates(self) -> dict[str, PromptTemplate]:
        return {"prompt": self.prompt}

    @property
    def _asked_again(self) -> str:
        """What asking again gives, for the advice on an unusable reply: from a cache, or not."""
        cached = self.options.cache and (self.options.cache_path or self.workdir is not None)
        if cached:
            return "a re-run reads the same reply from the cache"
        return "asked again, the model may well answer the same"

    def _stopped_by_server(self, gen: Generation) -> float | None:
        """The tokens of all its replies when together they are under half of max_tokens, else None.

        The total, not the mean: with several samples, one cut at max_tokens among short ones
        averaged under half, and was told to raise the server's context.
        """
        tokens = gen.usage.get("completion_tokens")
        if not isinstance(tokens, int | float) or not gen.texts:
            return None
        return tokens if tokens < self.options.max_tokens / 2 else None

    def _cut_error(self, gen: Generation, said: str | None) -> str:
        """Why a reply (`said`: its own finish reason) stopped before it named a span, and what to raise.

        A reply of 5 tokens against max_tokens 1024 was told to raise max_tokens; it stopped
        because the prompt filled the server's context, which max_tokens does not change.
        """
        max_tokens = self.options.max_tokens
        if said == "content_filter":  # this sample's: another's filter stop is not this one's cut
            return (
                f"{FILTERED} before it named a span: it stops the same request again; try another "
                "model, or the server without its filter"
            )
        if replays(self._backend, self.options.backend):
            return f"{CUT_OFF} ({max_tokens}) before it named a span found in the answer: {RECORDED_CUT}"
        each = self._stopped_by_server(gen)
        if each is not None:
            return (
                f"{CONTEXT_FULL} ({each:.0f} of {max_tokens} tokens), before it named a span: the prompt "
                "nearly fills the server's context, or the server caps replies; raise its context length, "
                "or shorten the contexts (max_context_chars)"
            )
        return f"{CUT_OFF} ({max_tokens}) before it named a span found in the answer: raise max_tokens"

    def cache_path(self) -> Path | Callable[[], Path] | None:
        """The `cache_path` option's file, else the run's raw folder."""
        if self.options.cache_path:
            return Path(self.options.cache_path).expanduser()
        return super().cache_path()

    def requests(self, items: list[Item], contexts: dict[str, list[Context]]) -> list[GenerationRequest]:
        """One request per item and temperature, in that order."""
        opts = self.options
        schema = SpanList.model_json_schema() if opts.structured_output else None
        out = []
        for item in items:
            messages = self.prompt.render(
                language=language_name(item.lang),
                context=context_text(contexts.get(item.id, []), opts.max_context_chars),
                question=item.model_input,
                answer=item.model_output_text,
            )
            for temperature in opts.temperatures:
                out.append(
                    GenerationRequest(
                        key=item.id,
                        item_id=item.id,
                        stage="llm",
                        messages=messages,
                        temperature=temperature,
                        top_p=opts.top_p,
                        max_tokens=opts.max_tokens,
                        seed=opts.seed,
                        n=opts.samples,
                        json_schema=schema,
                    )
                )
        return out

    def _item_result(self, item: Item, gens: list[Generation]) -> ItemResult:
        """Parses an item's responses and votes them.

        Failed when any call failed, or when every reply was cut off at max_tokens before it
        named a span, was empty (a server's `content: null`, a model that stopped at once), or
        named only text the answer does not hold (SmolLM2 echoing the prompt's examples):
        such a reply is no vote for "nothing wrong", and one among others is left out of the
        vote. Empty replies are not cached, so a re-run asks again.
        """
        opts = self.options
        n = len(item.model_output_text)
        stats: Counter[str] = Counter()
        errors = [g.error for g in gens if g.error is not None]
        # a request the breaker kept back cost nothing: "requests" are those the model answered
        # or failed, so that a share of them (cut off, unparseable) means what it says
        unsent = sum(e.startswith(NOT_SENT) for e in errors)
        stats["llm.requests"] += len(gens) - unsent
        if unsent:
            stats["llm.not_sent"] += unsent
        stats["llm.backend_errors"] += len(errors) - unsent
        masks, softs, parsed = [], [], []
        unread: list[str] = []  # replies empty, or cut off before they named anything
        for j, gen in enumerate(gens):
            if gen.error is not None:
                continue
            if not gen.texts:  # a third-party backend's answer with neither: no vote either way
                errors.append("the backend returned no reply and no error; a re-run asks again")
                stats["llm.backend_errors"] += 1
                continue
            if gen.structured_output == BROKEN_GRAMMAR:
                stats["llm.broken_grammar"] += 1  # finished unconstrained after its grammar failed
            budget_used = gen.used_budget(opts.max_tokens)
            by_server = self._stopped_by_server(gen) is not None
            for sample, text in enumerate(gen.texts):
                reasons = gen.finish_reasons
                said = reasons[sample] if sample < len(reasons) else None
                # a filter's stop ends the reply where it is, as the budget does
                cut = said in _CUT_REASONS if said is not None else budget_used
                # shares of bad replies are of the replies received (each sample is one; a
                # failed request is none), not of the requests
                stats["llm.replies"] += 1
                # a reply of reasoning alone (`<think>...</think>`) is empty too: it was called
                # unreadable and "read again from the cache", which keeps no such reply
                answer, thought = strip_reasoning(text)
                if not answer.strip() and not cut:  # an empty reply cut off is counted as cut off below
                    stats["llm.empty_replies"] += 1
                    parsed.append({"temperature": opts.temperatures[j], "sample": sample, "empty": True})
                    what = "held only reasoning" if thought else "was empty"
                    unread.append(f"the model's reply {what} (finish_reason: {said or 'not given'})")
                    continue
                result = parse_response(item.model_output_text, text, opts.default_probability)
                if cut is None:
                    # neither a finish reason nor a token count (a server that sends neither, a
                    # replay file): a reply whose JSON the parser had to close was cut off, as the
                    # chain reads it. `{"incorrect_spans": [` read as "nothing wrong" (an audit).
                    cut = "truncated" in result.repairs
                if said == "content_filter":  # no length at all: "raise max_tokens" was wrong advice
                    stats["llm.content_filtered"] += 1
                elif cut:  # at max_tokens, or by the server far below it (its context was full)
                    stats["llm.stopped_by_server" if by_server else "llm.truncated"] += 1
                stats.update({f"llm.{k}": v for k, v in result.counts().items()})
                # cut off with no span named: no vote, even after a whole `{"incorrect_spans": []}`
                # that went on (a model looping until max_tokens); one followed by blanks alone
                # said it in full (llama.cpp's grammar pads with whitespace to the limit)
                dropped = cut and not result.spans and not _whole_then_blank(text)
                parsed.append(
                    {
                        "temperature": opts.temperatures[j],
                        "sample": sample,
                        "parsed": result.parsed,
                        "spans": [[s.start, s.end, s.prob, s.method] for s in result.spans],
                        "lost": result.lost,
                        **({"cut_off": True} if dropped else {}),
                    }
                )
                if dropped:
                    # the reply stopped before it placed a span: no vote for "nothing wrong";
                    # with no other reply to go by, the item failed
                    stats["llm.cut_before_any_span"] += 1
                    unread.append(self._cut_error(gen, said))
                    continue
                if not result.parsed:
                    # prose where the prompt asks for spans ("I'm sorry, I can't help"): no vote
                    # for "nothing wrong"; a model that never answers in form fails its items
                    shown = " ".join(text.split())[:60]
                    unread.append(
                        f"{UNREADABLE} as spans (it begins {shown!r}): {self._asked_again}; try another "
                        "prompt or model"
                    )
                    continue
                if result.lost and not result.spans:
                    # it said something is wrong but named only text the answer does not hold
                    # (an echoed example, a paraphrase): no vote for "nothing wrong", which its
                    # empty prediction read as
                    stats["llm.lost_replies"] += 1
                    named = ", ".join(repr(t[:40]) for t in result.lost[:2])
                    unread.append(
                        f"{NAMED_ELSEWHERE} ({named}): {self._asked_again}; try another prompt or model"
                    )
                    continue
                soft = np.zeros(n)
                mask = np.zeros(n, dtype=bool)
                for span in result.spans:
                    soft[span.start : span.end] = np.maximum(soft[span.start : span.end], span.prob)
                    if span.prob >= opts.run_threshold:
                        mask[span.start : span.end] = True
                masks.append(mask)
                softs.append(soft)
        if unread and not masks:
            if stats["llm.lost_replies"] and not errors:
                # failed only since such replies are no vote: read as votes before 2026-11-27
                stats["llm.failed_named_elsewhere"] += 1
            errors += unread
        if errors:  # retried on the next run; the calls that worked come from the cache then
            return ItemResult.failed(item.id, errors[0], dict(stats), {"responses": parsed})
        pred = vote(item.id, softs, masks, opts.threshold, SoftMode(opts.soft))
        return ItemResult.ok(pred, stats=dict(stats), detail={"responses": parsed})

    def run(self, items: list[Item], contexts: dict[str, list[Context]], emit: Emit) -> None:
        items = skip_blank_answers(items, emit, "llm.blank_answers")
        if not items:
            return
        requests = self.requests(items, contexts)
        per_item = len(self.options.temperatures)
        gens: list[Generation | None] = [None] * len(requests)
        done = [0] * len(items)
        lock = threading.Lock()

        def on_result(i: int, generation: Generation) -> None:
            k = i // per_item
            with lock:
                if gens[i] is None:
                    done[k] += 1
                gens[i] = generation
                finished = done[k] == per_item
            if finished:
                emit(self._item_result(items[k], gens[k * per_item : (k + 1) * per_item]))

        final = self.backend.generate(requests, on_result=on_result)
        # A backend that returned results without calling back for some of them.
        for i, generation in enumerate(final):
            if gens[i] is None:
                on_result(i, generation)
