"""The `chain` detector: decompose, verify, locate (several prompts per item).

Prompt 1 (prompts/decompose.md) splits the answer into atomic claims, each with its exact
substring of the answer; prompt 2 (prompts/verify.md) checks every claim against the context
as supported, contradicted or not in the context (`mushroom.parsing.verdict`; the older
`supported: true|false` replies still read) and, for a contradicted one, names the minimal
wrong substrings with a probability; the repair parser places those substrings in the
answer. A contradicted claim whose wrong parts cannot be placed falls back to its own
substring at `fallback_probability`, so a verdict is never silently lost; one whose claim is
not in the answer either makes the whole answer "could not check" (`chain.contradicted_unplaced`,
at `unverifiable_probability`), never "nothing wrong". A claim the
context neither confirms nor contradicts is "unverifiable": its substring is painted at
`unverifiable_probability`, kept as the `unverifiable` evidence channel (a stack feature of
its own), counted (`chain.unverifiable`) and listed with the model's reason in the item's
record (`detail["unverifiable"]`). An item with no usable context (none, or only empty
ones, as when `mushroom contexts --grade` found nothing relevant) is not verified at all: every
claim is unverifiable and `context.none` counts the item, since a verdict against nothing
would be the model's guess.

A stage whose output is unusable (no JSON, wrong shape) is retried once, with the model's
previous output and the error shown to it; what is still unusable after that is the model's
answer (counted per stage: `decompose.invalid_json`, `verify.wrong_shape`, ...). A failed
model call fails the item (retried on the next run), never an empty prediction. Per stage,
`requests == ok + invalid_json + wrong_shape + empty + cut_empty + backend_errors` (a request
a tripped circuit breaker kept back is none of them: `not_sent`), where
`cut_empty` is a reply cut off at max_tokens before its first entry (retried, then unusable;
cut-off replies are counted as `chain.truncated`) and `empty` a reply with no text. An item
whose every reply of a stage was empty or cut off fails. Same backends, cache and raw
records as `llm`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from mushroom.backends.base import (
    MAX_TEMPERATURE,
    Backend,
    BackendConfig,
    Generation,
    GenerationRequest,
    Message,
)
from mushroom.data.languages import language_name
from mushroom.data.predictions import prediction_from_vectors
from mushroom.data.records import Context, Item
from mushroom.detectors.base import (
    DetectorOptions,
    Emit,
    GeneratingDetector,
    HardThreshold,
    ItemResult,
    replays,
    sharing_time,
    skip_blank_answers,
)
from mushroom.detectors.llm import context_text
from mushroom.detectors.prompts import PromptTemplate, load_prompt
from mushroom.errors import CUT_OFF, NOT_SENT, RECORDED_CUT, UNREADABLE
from mushroom.parsing.json_repair import extract_json
from mushroom.parsing.locate import SpanLocator
from mushroom.parsing.parser import read_claims
from mushroom.parsing.verdict import read_verdict


class ChainOptions(DetectorOptions):
    """Options of the decompose-verify-locate detector."""

    backend: BackendConfig = Field(default_factory=lambda: BackendConfig(kind="replay"))
    decompose_prompt: str = Field("decompose", description="prompt file for stage 1")
    verify_prompt: str = Field("verify", description="prompt file for stage 2")
    temperature: float = Field(0.0, ge=0.0, le=MAX_TEMPERATURE)
    max_tokens: int = Field(1024, ge=16)
    max_context_chars: int = Field(12000, ge=100)  # 0 sent " [...]" for every context
    retry: bool = Field(True, description="retry a failed stage once with the error shown")
    fallback_probability: float = Field(0.5, ge=0.0, le=1.0, description="false claim, no placeable span")
    # 0.4: on val, 0.43 of the answer characters' gold probability mass is hallucinated (the
    # prior of a claim nothing checked); kept below the 0.5 hard threshold so an unchecked
    # claim alone is never a hard span (see docs/reference/detectors.md)
    unverifiable_probability: float = Field(
        0.4, ge=0.0, le=1.0, description="claim the context neither supports nor contradicts"
    )
    threshold: HardThreshold = Field(0.5, description="hard label: probability above this")
    cache: bool = Field(True, description="cache responses in the run folder (none from Python)")
    structured_output: bool = Field(True, description="send each stage's JSON schema (constrained decoding)")


class Claim(BaseModel):
    """One atomic claim of the answer, with its exact substring."""

    claim: str
    substring: str


class Decomposition(BaseModel):
    """What the decompose prompt asks for."""

    claims: list[Claim]


class WrongSpan(BaseModel):
    """A minimal wrong substring of a false claim."""

    text: str
    probability: float


class Verdict(BaseModel):
    """One claim judged against the context."""

    claim: int
    verdict: Literal["supported", "contradicted", "not_in_context"]
    incorrect_spans: list[WrongSpan]
    reason: str | None = None


class Verification(BaseModel):
    """What the verify prompt asks for."""

    verdicts: list[Verdict]


_SCHEMAS = {"decompose": Decomposition, "verify": Verification}


class ClaimList(list):
    """A decomposition's readable claims; `unreadable` counts the entries left out.

    An entry with no answer text (`{"claim": ..., "span": ...}`) was dropped unsaid: that part
    of the answer was never verified, and the item read as "nothing wrong" (a review).
    """

    unreadable: int = 0


def _claims(value) -> ClaimList | None:
    """The claim list of a decomposition, or None if the shape is wrong."""
    if isinstance(value, dict):
        value = value.get("claims")
    if not isinstance(value, list):
        return None
    out = ClaimList()
    for entry in value:
        if isinstance(entry, dict) and isinstance(entry.get("substring", entry.get("text")), str):
            out.append(
                {"claim": str(entry.get("claim", "")), "substring": entry.get("substring", entry.get("text"))}
            )
    out.unreadable = len(value) - len(out)
    return out if out or not value else None


def _claim_number(value: object) -> int | None:
    """A verdict's claim number: an int, or digits in a string ("1", as a model often writes it)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _verdicts(value) -> list[dict] | None:
    """The verdict list of a verification, or None if the shape is wrong."""
    if isinstance(value, dict):
        value = value.get("verdicts", value.get("claims"))
    if not isinstance(value, list):
        return None
    return [v for v in value if isinstance(v, dict)]


NO_CONTEXT = "no usable context"
"""The reason given for every claim of an item that had no context to check it against."""
NO_CLAIMS = "the decomposition named no claim: nothing in the answer was checked"
"""The reason given over a whole answer that the model decomposed into no claims."""
NO_CLAIM_PLACED = "no claim of the decomposition is text of the answer: nothing in it was checked"
"""The reason given over a whole answer whose claims the locator placed nowhere in it."""
NO_VERDICT = "the verify reply gave no readable verdict on this claim"
"""The reason given for a claim that no readable verdict of its item named."""
UNPLACED = "called contradicted, but no wrong text or claim of it could be placed in the answer"
"""The reason given over a whole answer for a contradiction that could be placed nowhere in it."""


def _broke_off(max_tokens: int) -> str:
    """Why a reply cut off at max_tokens before its first entry is unusable (shown to the model on retry)."""
    return f"the reply broke off (max_tokens is {max_tokens}) before any entry"


def _unread(st: Counter, stage: str, max_tokens: int, replayed: bool = False) -> str:
    """Why no reply of an item's stage (its retry included) could be read: empty, cut off, or prose.

    Each is a failed item, not "nothing wrong": a model that never answers in form (prose
    where the prompt asks for claims) made a submission of empty predictions, exit 0.
    """
    replies = [stage, f"{stage}.retry"] if st[f"{stage}.retries"] else [stage]
    if not all(st[f"{r}.empty"] or st[f"{r}.cut_empty"] for r in replies):
        entries = "claims" if stage == "decompose" else "verdicts"
        return (
            f"every {stage} reply: {UNREADABLE} as {entries}: a re-run reads the same replies from the "
            "cache; try another prompt or model"
        )
    if any(st[f"{r}.cut_empty"] for r in replies):
        # CUT_OFF in the error: the advice says a re-run reads the same replies from the cache
        advice = RECORDED_CUT if replayed else "raise max_tokens"
        return f"every {stage} reply was cut off: {CUT_OFF} ({max_tokens}); {advice}"
    return f"every {stage} reply was empty: a re-run asks again"


def _has_context(contexts: list[Context]) -> bool:
    """Whether any context has text.

    Without one (none at all, or only empty ones) there is no usable context, as for an item
    whose every context `mushroom contexts --grade` rejected.
    """
    return any(c.text.strip() for c in contexts)


DECOMPOSE_VALUES = ("question", "answer", "language")
VERIFY_VALUES = ("context", "question", "answer", "claims", "language")


class ChainDetector(GeneratingDetector):
    """Decompose into claims, verify each, locate the wrong substrings."""

    name = "chain"
    cache_file = "chain.cache.jsonl"
    needs_contexts = True
    without_context = "leaves their claims unverifiable"
    Options = ChainOptions
    options: ChainOptions

    def __init__(self, options: ChainOptions, backend: Backend | None = None):
        super().__init__(options, backend)
        self.decompose_prompt = load_prompt(options.decompose_prompt)
        self.verify_prompt = load_prompt(options.verify_prompt)
        self.decompose_prompt.check(DECOMPOSE_VALUES, required=("answer",))
        self.verify_prompt.check(VERIFY_VALUES, required=("claims",))

    def describe(self) -> dict:
        out = super().describe()
        out["prompt_sha256"] = {
            "decompose": self.decompose_prompt.sha256,
            "verify": self.verify_prompt.sha256,
        }
        return out

    def prompt_templates(self) -> dict[str, PromptTemplate]:
        return {"decompose_prompt": self.decompose_prompt, "verify_prompt": self.verify_prompt}

    def _request(self, item: Item, stage: str, messages: list[Message]) -> GenerationRequest:
        return GenerationRequest(
            key=f"{item.id}#{stage.replace('.', '#')}",
            item_id=item.id,
            stage=stage,
            messages=messages,
            temperature=self.options.temperature,
            max_tokens=self.options.max_tokens,
            json_schema=(
                _SCHEMAS[stage.split(".")[0]].model_json_schema() if self.options.structured_output else None
            ),
        )

    def _run_stage(
        self,
        stage: str,
        items: list[Item],
        messages: list[list[Message]],
        stats: list[Counter],
        check: Callable[[object], object | None],
    ) -> tuple[list[object | None], list[list[str]], list[str | None]]:
        """Sends a stage, parses each output with `check`, retries unusable output once.

        Returns:
            Parsed values (None: unusable), raw outputs per item, and the backend error per
            item (None when every call of the stage worked).
        """
        requests = [self._request(it, stage, m) for it, m in zip(items, messages)]
        gens = self.backend.generate(requests)
        values: list[object | None] = []
        raws: list[list[str]] = []
        errors: list[str | None] = []
        retry_idx, retry_req = [], []
        for k, gen in enumerate(gens):
            value, error, text = self._parse(stage, gen, check, stats[k], requests[k])
            values.append(value)
            raws.append([text])
            errors.append(gen.error or (None if gen.texts else "no output"))
            if value is None and self.options.retry and errors[k] is None:
                stats[k][f"{stage}.retries"] += 1
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
                retry_req.append(self._request(items[k], f"{stage}.retry", follow))
        if retry_req:
            for k, req, gen in zip(retry_idx, retry_req, self.backend.generate(retry_req)):
                value, _, text = self._parse(f"{stage}.retry", gen, check, stats[k], req)
                values[k] = value
                raws[k].append(text)
                if gen.error is not None or not gen.texts:
                    errors[k] = gen.error or "no output"
        return values, raws, errors

    def _parse(
        self, stage: str, gen: Generation, check, st: Counter, request: GenerationRequest
    ) -> tuple[object | None, str | None, str]:
        if gen.error is not None and gen.error.startswith(NOT_SENT):
            # kept back by a tripped breaker: it cost nothing, so it is no request
            st[f"{stage}.not_sent"] += 1
            return None, gen.error, ""
        st[f"{stage}.requests"] += 1
        st["chain.requests"] += 1
        st["chain.prompt_chars"] += sum(len(m.content) for m in request.messages)
        if gen.error is not None or not gen.texts:
            st[f"{stage}.backend_errors"] += 1
            return None, gen.error or "no output", ""
        text = gen.texts[0]
        st["chain.replies"] += 1  # what a share of cut-off replies is of
        st["chain.response_chars"] += len(text)
        cut = gen.used_budget(self.options.max_tokens)
        empty = not text.strip()
        if empty and not cut:  # a server's `content: null`, a model that stopped at once
            st[f"{stage}.empty"] += 1
            return None, "the reply was empty", text
        # A reply cut off at max_tokens (a small model repeating itself) is closed by the
        # repair parser, often into an empty list: read as "no claims" or "no verdicts", the
        # item became a quiet "nothing wrong". It is counted, and unusable when nothing in it
        # survived, so it is retried and then counted among the stage's failures. So is an
        # empty reply cut off (a reasoning model's content is null when it used max_tokens).
        # The server's token count says so; without one (a replay file, a scripted backend) a
        # reply whose JSON the parser had to close is taken as cut off.
        value, repairs = extract_json(text)
        if cut is None:
            cut = "truncated" in repairs
        if cut:
            st[f"{stage}.truncated"] += 1
            st["chain.truncated"] += 1
        checked = None
        if not empty:
            if value is None:
                st[f"{stage}.invalid_json"] += 1
                return None, "invalid JSON: no JSON object found", text
            checked = check(value)
            if checked is None:
                st[f"{stage}.wrong_shape"] += 1
                return None, "the JSON does not have the fields asked for", text
        if empty or (cut and not checked):
            st[f"{stage}.cut_empty"] += 1
            return None, _broke_off(self.options.max_tokens), text
        st[f"{stage}.ok"] += 1
        return checked, None, text

    def run(self, items: list[Item], contexts: dict[str, list[Context]], emit: Emit) -> None:
        items = skip_blank_answers(items, emit, "chain.blank_answers")
        if not items:
            return
        emit = sharing_time(emit, len(items))  # every item is answered at the end
        opts = self.options
        stats = [Counter({"chain.items": 1}) for _ in items]
        # Stage 1: decompose.
        dec_msgs = [
            self.decompose_prompt.render(
                question=it.model_input,
                answer=it.model_output_text,
                language=language_name(it.lang),
            )
            for it in items
        ]
        claims, dec_raw, dec_err = self._run_stage("decompose", items, dec_msgs, stats, _claims)
        # Stage 2: verify the items that have claims and a context to check them against.
        usable = [_has_context(contexts.get(it.id, [])) for it in items]
        todo = [k for k, c in enumerate(claims) if c and usable[k]]
        ver_msgs = []
        for k in todo:
            item = items[k]
            numbered = "\n".join(
                f'{n + 1}. {c["claim"] or c["substring"]}  [answer text: "{c["substring"]}"]'
                for n, c in enumerate(claims[k])
            )
            ver_msgs.append(
                self.verify_prompt.render(
                    context=context_text(contexts.get(item.id, []), opts.max_context_chars),
                    question=item.model_input,
                    answer=item.model_output_text,
                    claims=numbered,
                    language=language_name(item.lang),
                )
            )
        verdicts, ver_raw, ver_err = (
            self._run_stage("verify", [items[k] for k in todo], ver_msgs, [stats[k] for k in todo], _verdicts)
            if todo
            else ([], [], [])
        )
        by_item = dict(zip(todo, zip(verdicts, ver_raw, ver_err)))
        for k, item in enumerate(items):
            st = stats[k]
            item_verdicts, raw_ver, v_err = by_item.get(k, (None, [], None))
            detail = {
                "decompose": dec_raw[k],
                "verify": raw_ver,
                "claims": claims[k],
                "verdicts": item_verdicts,
            }
            st["chain.unreadable_claims"] += getattr(claims[k], "unreadable", 0)
            error = dec_err[k] or v_err
            # every reply of a stage empty, cut off at max_tokens or unreadable: no claims read
            # as "nothing wrong" (exit 0, an empty prediction); the item fails, as the llm
            # detector's does
            for stage, lacking, counter in (
                ("decompose", claims[k] is None, "chain.decomposition_failures"),
                # an item with no usable context is not sent to verify: its claims are unverifiable
                ("verify", bool(claims[k]) and usable[k] and item_verdicts is None, "chain.verify_failures"),
            ):
                why = (
                    _unread(st, stage, opts.max_tokens, replays(self._backend, self.options.backend))
                    if error is None and lacking
                    else None
                )
                if why is not None:
                    st[counter] += 1
                    error = why
            if error is not None:
                emit(ItemResult.failed(item.id, error, dict(st), detail))
                continue
            if not usable[k]:
                st["context.none"] += 1
                item_verdicts = [
                    {"claim": n + 1, "verdict": "not_in_context", "reason": NO_CONTEXT}
                    for n in range(len(claims[k] or []))
                ]
            vec, unverifiable, unchecked = self._paint(item, claims[k] or [], item_verdicts or [], st)
            detail["unverifiable"] = unchecked
            pred = prediction_from_vectors(item.id, vec, vec > opts.threshold)
            emit(ItemResult.ok(pred, {"unverifiable": unverifiable}, stats=dict(st), detail=detail))

    def _paint(
        self, item: Item, item_claims: list[dict], verdicts: list[dict], st: Counter
    ) -> tuple[np.ndarray, np.ndarray, list[dict]]:
        """Per-character probabilities from the verdicts of one item.

        Returns:
            The probabilities, the `unverifiable` channel (1 over each claim the context
            neither supports nor contradicts) and those claims as records (claim number,
            text, place in the answer or None, the model's reason).
        """
        answer = item.model_output_text
        vec = np.zeros(len(answer))
        unverifiable = np.zeros(len(answer))
        unchecked: list[dict] = []

        def whole_unchecked(idx: int | None, text: str | None, reason: str) -> None:
            """The whole answer is "could not check", not "nothing wrong", said with its reason."""
            unverifiable[:] = 1.0
            vec[:] = np.maximum(vec, self.options.unverifiable_probability)
            unchecked.append({"claim": idx, "text": text, "start": 0, "end": len(answer), "reason": reason})

        if not item_claims:
            # An empty decomposition checked nothing (blank answers never get here).
            st["chain.no_claims"] += 1
            whole_unchecked(None, None, NO_CLAIMS)
            return vec, unverifiable, unchecked
        locator = SpanLocator(answer)
        st["chain.claims"] += len(item_claims)
        claim_spans = []
        for c in item_claims:
            span = locator.locate(c["substring"], 1.0)
            if span is None:
                st["chain.claims_not_in_answer"] += 1
            claim_spans.append(span)
        # One locator for all wrong spans of the item: a text named twice goes to its next
        # occurrence, as in the single-prompt parser.
        span_locator = SpanLocator(answer)

        def leave_unchecked(idx: int | None, reason: object, unlocated: str) -> None:
            cs = claim_spans[idx - 1] if idx is not None else None
            unchecked.append(
                {
                    "claim": idx,
                    "text": item_claims[idx - 1]["substring"] if idx is not None else None,
                    "start": cs.start if cs else None,
                    "end": cs.end if cs else None,
                    "reason": reason if isinstance(reason, str) else None,
                }
            )
            if cs is None:
                st[unlocated] += 1  # counted, not painted anywhere
                return
            unverifiable[cs.start : cs.end] = 1.0
            prob = self.options.unverifiable_probability
            vec[cs.start : cs.end] = np.maximum(vec[cs.start : cs.end], prob)

        judged: set[int] = set()
        numbers = [_claim_number(v.get("claim")) for v in verdicts]
        if all(n is None for n in numbers) and len(verdicts) == len(item_claims):
            # verdicts with no claim number, one per claim: read in the claims' order
            numbers = list(range(1, len(verdicts) + 1))
        elif sorted(n for n in numbers if n is not None) == list(range(len(item_claims))):
            # numbered from 0, as a programmer counts: claim 0 was dropped as unknown, and every
            # other verdict fell on the claim before the one meant (an audit). Only a reply that
            # numbers every claim once, 0 to n-1: a stray 0 among 1-based numbers is no such reply
            st["chain.zero_based_claims"] += 1
            numbers = [n + 1 for n in numbers]  # type: ignore[operator]
        for v, idx in zip(verdicts, numbers):
            verdict = read_verdict(v)
            if verdict is None:
                st["chain.unreadable_verdicts"] += 1  # no verdict that can be read: not a finding
                continue
            if idx is not None and not 1 <= idx <= len(item_claims):
                st["chain.unknown_claim_verdicts"] += 1  # a verdict on a claim never made
                continue
            if idx is not None:  # a claim of this item (one without a number names none)
                judged.add(idx)
            if verdict == "supported":
                continue
            if verdict == "unverifiable":
                st["chain.unverifiable"] += 1
                leave_unchecked(idx, v.get("reason"), "chain.unverifiable_not_located")
                continue
            st["chain.false_claims"] += 1
            found = read_claims({"incorrect_spans": v.get("incorrect_spans") or []})
            st["chain.bad_probabilities"] += found.bad_probabilities
            st["chain.invalid_entries"] += found.invalid_entries  # a wrong span that could not be read
            spans = found.claims
            placed = 0
            for claim in spans:
                st["chain.spans"] += 1
                span = span_locator.locate(claim.text, claim.probability)
                if span is None:
                    st["chain.spans_not_located"] += 1
                    continue
                placed += 1
                vec[span.start : span.end] = np.maximum(vec[span.start : span.end], span.prob)
            if not placed and idx is not None and claim_spans[idx - 1]:
                st["chain.fallbacks"] += 1
                cs = claim_spans[idx - 1]
                vec[cs.start : cs.end] = np.maximum(vec[cs.start : cs.end], self.options.fallback_probability)
            elif not placed:
                # something is wrong, but where is not known: painted nowhere, it read as
                # "nothing wrong"; the whole answer is "could not check", as an empty decomposition is
                st["chain.contradicted_unplaced"] += 1
                whole_unchecked(idx, item_claims[idx - 1]["substring"] if idx is not None else None, UNPLACED)
        # A claim that no readable verdict names was not checked: "could not check", not "supported".
        for idx in range(1, len(item_claims) + 1):
            if idx not in judged:
                st["chain.claims_unjudged"] += 1
                leave_unchecked(idx, NO_VERDICT, "chain.unjudged_not_located")
        if not any(claim_spans) and not vec.any():
            # claims none of which is in the answer (SmolLM2 echoed the prompt's placeholder
            # claim) checked none of it: "could not check", as an empty decomposition, where
            # it read as "nothing wrong" and scored 1 on answers gold marks nothing in (an audit).
            # Not when a verdict marked something: a wrong span placed is a finding (a review)
            st["chain.no_claims_in_answer"] += 1
            whole_unchecked(None, None, NO_CLAIM_PLACED)
        return vec, unverifiable, unchecked
