"""The `chain` detector: decompose, verify, locate (several prompts per item).

Prompt 1 (prompts/decompose.md) splits the answer into atomic claims, each with its exact
substring of the answer; prompt 2 (prompts/verify.md) checks every claim against the context
and, for a false one, names the minimal wrong substrings with a probability; the repair
parser places those substrings in the answer. A false claim whose wrong parts cannot be
placed falls back to its own substring at `fallback_probability`, so a verdict is never
silently lost.

A stage whose output is unusable (no JSON, wrong shape) is retried once, with the model's
previous output and the error shown to it. Every failure is counted per stage and written to
the run folder: decomposition failures, invalid JSON, claims whose substring is not in the
answer, spans that could not be located. Same backends, cache and config as `llm`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from pydantic import Field

from mushroom.backends.base import Backend, BackendConfig, Generation, GenerationRequest, Message
from mushroom.backends.cache import build_cached
from mushroom.detectors.base import Detector, DetectorOptions
from mushroom.detectors.llm import context_text
from mushroom.jsonl import write_jsonl
from mushroom.languages import language_name
from mushroom.parsing.json_repair import extract_json
from mushroom.parsing.locate import SpanLocator
from mushroom.parsing.parser import coerce_claims
from mushroom.predictions import prediction_from_vectors
from mushroom.prompts import load_prompt
from mushroom.records import Context, Item, Prediction


class ChainOptions(DetectorOptions):
    """Options of the decompose-verify-locate detector."""

    backend: BackendConfig = Field(default_factory=lambda: BackendConfig(kind="replay"))
    decompose_prompt: str = Field("decompose", description="prompt file for stage 1")
    verify_prompt: str = Field("verify", description="prompt file for stage 2")
    temperature: float = Field(0.0, ge=0.0)
    max_tokens: int = Field(1024, ge=16)
    max_context_chars: int = Field(12000, ge=0)
    retry: bool = Field(True, description="retry a failed stage once with the error shown")
    fallback_probability: float = Field(0.5, ge=0.0, le=1.0, description="false claim, no placeable span")
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="hard label: probability above this")
    cache: bool = Field(True, description="cache responses in the run folder")


@dataclass
class ChainStats:
    """Failure accounting per stage."""

    items: int = 0
    requests: int = 0
    prompt_chars: int = 0
    response_chars: int = 0
    retries: int = 0
    backend_errors: int = 0
    decompose_invalid_json: int = 0
    decomposition_failures: int = 0
    claims: int = 0
    claims_not_in_answer: int = 0
    verify_invalid_json: int = 0
    verify_failures: int = 0
    false_claims: int = 0
    spans: int = 0
    spans_not_located: int = 0
    fallbacks: int = 0

    def to_dict(self) -> dict:
        return asdict(self)


def _claims(value) -> list[dict] | None:
    """The claim list of a decomposition, or None if the shape is wrong."""
    if isinstance(value, dict):
        value = value.get("claims")
    if not isinstance(value, list):
        return None
    out = []
    for entry in value:
        if isinstance(entry, dict) and isinstance(entry.get("substring", entry.get("text")), str):
            out.append(
                {"claim": str(entry.get("claim", "")), "substring": entry.get("substring", entry.get("text"))}
            )
    return out if out or not value else None


def _verdicts(value) -> list[dict] | None:
    """The verdict list of a verification, or None if the shape is wrong."""
    if isinstance(value, dict):
        value = value.get("verdicts", value.get("claims"))
    if not isinstance(value, list):
        return None
    return [v for v in value if isinstance(v, dict)]


def _render(template, **values: str) -> list[Message]:
    """Fills a prompt with the values it names: user prompts may leave out e.g. {{language}}."""
    return template.render(**{k: v for k, v in values.items() if k in template.placeholders})


class ChainDetector(Detector):
    """Decompose into claims, verify each, locate the wrong substrings."""

    name = "chain"
    Options = ChainOptions
    options: ChainOptions

    def __init__(self, options: ChainOptions, backend: Backend | None = None):
        super().__init__(options)
        self.decompose_prompt = load_prompt(options.decompose_prompt)
        self.verify_prompt = load_prompt(options.verify_prompt)
        self._backend = backend
        self.stats = ChainStats()

    def describe(self) -> dict:
        out = super().describe()
        out["prompt_sha256"] = {
            "decompose": self.decompose_prompt.sha256,
            "verify": self.verify_prompt.sha256,
        }
        return out

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            path = (self.workdir or Path(".")) / "chain.cache.jsonl"
            self._backend = build_cached(self.options.backend, self.options.cache, path)
        return self._backend

    def _request(self, key: str, messages: list[Message]) -> GenerationRequest:
        self.stats.requests += 1
        self.stats.prompt_chars += sum(len(m.content) for m in messages)
        return GenerationRequest(
            key=key,
            messages=messages,
            temperature=self.options.temperature,
            max_tokens=self.options.max_tokens,
        )

    def _run_stage(
        self, keys: list[str], messages: list[list[Message]], check: Callable[[object], object | None]
    ) -> tuple[list[object | None], list[list[str]], list[bool]]:
        """Sends a stage, parses each output with `check`, retries failures once.

        Returns:
            Parsed values (None: failed), raw outputs per item, and whether JSON was invalid.
        """
        gens = self.backend.generate([self._request(k, m) for k, m in zip(keys, messages)])
        values: list[object | None] = []
        raws: list[list[str]] = []
        invalid: list[bool] = []
        retry_idx, retry_req = [], []
        for k, gen in enumerate(gens):
            value, error, text = self._parse(gen, check)
            values.append(value)
            raws.append([text])
            invalid.append(error is not None and error.startswith("invalid JSON"))
            if value is None and self.options.retry and error is not None and gen.error is None:
                self.stats.retries += 1
                follow = [
                    *messages[k],
                    Message(role="assistant", content=text),
                    Message(
                        role="user",
                        content=f"Your answer could not be used: {error}. Answer again with JSON only, "
                        "in exactly the format asked for.",
                    ),
                ]
                retry_idx.append(k)
                retry_req.append(self._request(f"{keys[k]}#retry", follow))
        if retry_req:
            for k, gen in zip(retry_idx, self.backend.generate(retry_req)):
                value, _, text = self._parse(gen, check)
                values[k] = value
                raws[k].append(text)
        return values, raws, invalid

    def _parse(self, gen: Generation, check) -> tuple[object | None, str | None, str]:
        if gen.error is not None or not gen.texts:
            self.stats.backend_errors += 1
            return None, gen.error or "no output", ""
        text = gen.texts[0]
        self.stats.response_chars += len(text)
        value, _ = extract_json(text)
        if value is None:
            return None, "invalid JSON: no JSON object found", text
        checked = check(value)
        if checked is None:
            return None, "the JSON does not have the fields asked for", text
        return checked, None, text

    def detect(
        self,
        items: list[Item],
        contexts: dict[str, list[Context]],
        advance: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        opts = self.options
        st = self.stats
        st.items += len(items)
        # Stage 1: decompose.
        dec_msgs = [
            _render(
                self.decompose_prompt,
                question=it.model_input,
                answer=it.model_output_text,
                language=language_name(it.lang),
            )
            for it in items
        ]
        claims, dec_raw, dec_invalid = self._run_stage(
            [f"{it.id}#decompose" for it in items], dec_msgs, _claims
        )
        st.decompose_invalid_json += sum(dec_invalid)
        st.decomposition_failures += sum(c is None for c in claims)
        # Stage 2: verify the items that have claims.
        todo = [k for k, c in enumerate(claims) if c]
        ver_msgs = []
        for k in todo:
            item = items[k]
            numbered = "\n".join(
                f'{n + 1}. {c["claim"] or c["substring"]}  [answer text: "{c["substring"]}"]'
                for n, c in enumerate(claims[k])
            )
            ver_msgs.append(
                _render(
                    self.verify_prompt,
                    context=context_text(contexts.get(item.id, []), opts.max_context_chars),
                    question=item.model_input,
                    answer=item.model_output_text,
                    claims=numbered,
                    language=language_name(item.lang),
                )
            )
        verdicts, ver_raw, ver_invalid = (
            self._run_stage([f"{items[k].id}#verify" for k in todo], ver_msgs, _verdicts)
            if todo
            else ([], [], [])
        )
        st.verify_invalid_json += sum(ver_invalid)
        st.verify_failures += sum(v is None for v in verdicts)
        by_item = dict(zip(todo, zip(verdicts, ver_raw)))
        out, raw_rows = [], []
        for k, item in enumerate(items):
            answer = item.model_output_text
            vec = np.zeros(len(answer))
            locator = SpanLocator(answer)
            item_claims = claims[k] or []
            st.claims += len(item_claims)
            claim_spans = []
            for c in item_claims:
                span = locator.locate(c["substring"], 1.0)
                if span is None:
                    st.claims_not_in_answer += 1
                claim_spans.append(span)
            item_verdicts, raw_ver = by_item.get(k, (None, []))
            # One locator for all wrong spans of the item: a text named twice goes to its
            # next occurrence, as in the single-prompt parser.
            span_locator = SpanLocator(answer)
            for v in item_verdicts or []:
                if v.get("supported") is not False:
                    continue
                st.false_claims += 1
                spans, _ = coerce_claims({"incorrect_spans": v.get("incorrect_spans") or []})
                placed = 0
                for claim in spans:
                    st.spans += 1
                    span = span_locator.locate(claim.text, claim.probability)
                    if span is None:
                        st.spans_not_located += 1
                        continue
                    placed += 1
                    vec[span.start : span.end] = np.maximum(vec[span.start : span.end], span.prob)
                idx = v.get("claim")
                if (
                    not placed
                    and isinstance(idx, int)
                    and 1 <= idx <= len(claim_spans)
                    and claim_spans[idx - 1]
                ):
                    st.fallbacks += 1
                    cs = claim_spans[idx - 1]
                    vec[cs.start : cs.end] = np.maximum(vec[cs.start : cs.end], opts.fallback_probability)
            out.append(prediction_from_vectors(item.id, vec, vec > opts.threshold))
            raw_rows.append(
                {
                    "id": item.id,
                    "decompose": dec_raw[k],
                    "verify": raw_ver,
                    "claims": item_claims,
                    "verdicts": item_verdicts,
                }
            )
            if advance is not None:
                advance(1)
        if self.workdir is not None and items:
            lang = items[0].lang
            write_jsonl(self.workdir / f"{lang}.chain.jsonl", raw_rows)
            (self.workdir / f"{lang}.chain_stats.json").write_text(
                json.dumps(self.stats.to_dict(), indent=2) + "\n", encoding="utf-8"
            )
        return out
