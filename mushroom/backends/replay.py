"""Replays recorded responses: re-parse, re-score and debug without any model.

The file is JSONL, one line per recorded call; unknown fields are ignored, so any stage's raw
records can be replayed as they are. The fields read:

- `key`: the request key (e.g. "en-val-3#decompose"); `item_id` (or the old `id`): the item.
- `stage`: the stage that sent it; used only when matching by item, so a `decompose` line
  never answers a `verify` request of the same item.
- `texts` (list) or `response` (one text); `logprobs`: per text, a list of {token: logprob}
  per generated token (a single text's list is accepted too).
- `loglikelihood` (or `logprob`), `is_greedy`, `continuation`: a scored continuation.
- `temperature`, `model`: narrow the match when given.
- `error`: a line with an error and no text (or no score) is not an answer and is skipped.

A request is answered by the lines with its `key`; when none has it, by the lines of its item
(`item_id`, else the request key, against the line's `item_id` or `id`). Lines recorded at
the request's temperature are preferred, then lines without one; they are used in file order,
one text per sample. A request with no recorded answer gets an error, which the detector
counts instead of crashing.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from mushroom.backends.base import (
    Backend,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    OnResult,
    OnScore,
    TokenLogprobs,
)
from mushroom.backends.config import NEEDS_RESPONSES, ReplayConfig
from mushroom.backends.rawlog import RawRecord
from mushroom.backends.registry import register_backend
from mushroom.data.jsonl import load_records
from mushroom.data.records import Item
from mushroom.errors import REPLAY_MISS, DataError, MushroomError
from mushroom.util.words import close_match


class ReplayRecord(BaseModel):
    """One line of a replay file: the old `{"id", "response"}` form or a raw record.

    Strict: `"temperature": true` was read as 1.0 and `"0.05"` as 0.05, so an edited line
    answered another request, or none, and no message named it (an audit). Keys it does not
    know are kept (a raw record's own, or an older file's), but not one that looks like a
    misspelt key of its (`temperture`), which would leave that key unset.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    key: str | None = None
    item_id: str | None = None
    id: str | None = None
    stage: str | None = None
    temperature: float | None = None
    model: str | None = None
    texts: list[str] | None = None
    response: str | None = None
    logprobs: list[TokenLogprobs] | TokenLogprobs | None = None
    loglikelihood: float | None = None
    logprob: float | None = None
    is_greedy: bool | None = None
    continuation: str | None = None
    error: str | None = None
    usage: dict[str, Any] | None = None  # as the server sent it: nested details, nulls
    finish_reasons: list[str | None] | None = None
    max_tokens: int | None = None  # the budget the reply was made under (raw records keep it)

    @model_validator(mode="after")
    def _identified(self) -> ReplayRecord:
        if self.key is None and self.item_id is None and self.id is None:
            raise ValueError("a replay line needs `key`, `item_id` or `id`")
        return self

    @property
    def item(self) -> str | None:
        return self.item_id if self.item_id is not None else self.id

    def answers(self) -> list[tuple[str, TokenLogprobs | None]]:
        """(text, its token log-probabilities) for each recorded text."""
        texts = (
            self.texts if self.texts is not None else ([self.response] if self.response is not None else [])
        )
        lps = self.logprobs
        if lps and isinstance(lps[0], dict):  # one text's per-token list
            lps = [lps]
        return [(t, lps[k] if lps and k < len(lps) else None) for k, t in enumerate(texts)]

    def finish_reason(self, k: int) -> str | None:
        """Why the k-th recorded text ended, when the record says."""
        reasons = self.finish_reasons or []
        return reasons[k] if k < len(reasons) and isinstance(reasons[k], str) else None

    def tokens_per_answer(self) -> float | None:
        """The recorded completion tokens per text (a record of n texts counts them together)."""
        tokens = (self.usage or {}).get("completion_tokens")
        answers = len(self.answers())
        usable = isinstance(tokens, int) and not isinstance(tokens, bool)
        return tokens / answers if usable and answers else None

    @property
    def has_content(self) -> bool:
        """Whether the line holds anything to replay: texts, a log-likelihood or an error."""
        return bool(self.answers()) or self.score is not None or bool(self.error)

    @property
    def score(self) -> float | None:
        return self.loglikelihood if self.loglikelihood is not None else self.logprob


_ANSWER_KEYS = ["texts", "response", "loglikelihood", "logprob", "error"]
_OWN_KEYS = sorted(ReplayRecord.model_fields)
# keys of other records a replay line may carry, never taken for a misspelt key of its own
# (`model_input` was "did you mean 'model'" at difflib's usual cutoff: a review)
_KNOWN_OTHER_KEYS = frozenset(RawRecord.model_fields) | frozenset(Item.model_fields) | {"finish_reason"}


def load_replay_file(path: Path) -> list[ReplayRecord]:
    """The file's lines; a line with nothing to replay is an error naming it.

    Such a line (a typo'd `respone`) would otherwise be kept and make its item fail later
    with "no recorded response", far from the line that is wrong. A file in which no line
    has anything (contexts given as responses) is named as a whole instead of line by line.

    The lines are validated once per content: a run checks the file before its folder
    exists and the backend then reads the same lines, as does every variant of a run
    config. The records are shared, so callers must not change them.
    """
    try:
        digest = hashlib.blake2b(path.read_bytes(), digest_size=16).hexdigest()
    except OSError:
        return _read_replay_file(path)  # load_records names what is wrong with the path
    return _cached_replay_file(str(path), str(path.resolve()), digest)


@lru_cache(maxsize=8)
def _cached_replay_file(path: str, _resolved: str, _digest: str) -> list[ReplayRecord]:
    # keyed by the path as given too, so that messages name the file as the user wrote it
    return _read_replay_file(Path(path))


def _read_replay_file(path: Path) -> list[ReplayRecord]:
    counts = {"usable": 0, "empty": 0}

    def check(record: ReplayRecord) -> list[tuple[str, str]]:
        if record.has_content:
            counts["usable"] += 1
            misspelt = [
                (key, match)
                for key in sorted(record.model_extra or {})
                if key not in _KNOWN_OTHER_KEYS and (match := close_match(key, _OWN_KEYS, cutoff=0.9))
            ]
            return [
                (key, f"unknown key {key!r}: did you mean {match!r}? (its value would be left unread)")
                for key, match in misspelt[:1]
            ]
        counts["empty"] += 1
        close = [
            (key, match)
            for key in sorted(record.model_extra or {})
            if (match := close_match(key, _ANSWER_KEYS))
        ]
        return [
            (
                "response",
                "nothing to replay: no `texts`, `response`, log-likelihood or `error`"
                + (f" (did you mean {close[0][1]!r} for {close[0][0]!r}?)" if close else ""),
            )
        ]

    try:
        records = load_records(path, ReplayRecord, unique_ids=False, extra_check=check)
    except DataError as exc:
        if counts["usable"] == 0 and counts["empty"] == len(exc.problems):
            raise DataError.single(
                str(path),
                1,
                "response",
                "no line has a non-empty `texts`, a `response` or a log-likelihood: not a file of recorded "
                "responses (a run's raw/<lang>.raw.jsonl or {id, response} lines)",
            ) from None
        raise
    if not records:  # every item would fail with "no recorded response"
        raise DataError.single(str(path), None, None, "no lines: an empty file of recorded responses")
    return records


@register_backend("replay", config=ReplayConfig)
class ReplayBackend(Backend):
    """Answers from a JSONL file of recorded responses and scores."""

    config: ReplayConfig

    @classmethod
    def check_config(cls, config: ReplayConfig) -> None:
        """Every line of the responses file must hold something to replay: named now, not per item."""
        load_replay_file(Path(config.responses))

    def __init__(self, config: ReplayConfig):
        super().__init__(config)
        if not config.responses:
            raise MushroomError(NEEDS_RESPONSES)
        records = load_replay_file(Path(config.responses))
        self.by_key: dict[str, list[ReplayRecord]] = {}
        self.by_item: dict[str, list[ReplayRecord]] = {}
        self.records = records  # every line read (one per non-blank line of the file)
        for rec in records:
            if config.model and rec.model and rec.model != config.model:
                continue
            # An old line's `id` was the request key ("v-1#decompose"), so it is one here too.
            key = rec.key if rec.key is not None else rec.id
            if key is not None:
                self.by_key.setdefault(key, []).append(rec)
            if rec.item is not None:
                self.by_item.setdefault(rec.item, []).append(rec)
        self._used: dict[tuple, int] = {}
        self._warned_temperatures = False
        self._warned_max_tokens = False
        self._warned_prompt = False

    def _lines(self, key: str, item_id: str | None, stage: str) -> tuple[tuple, list[ReplayRecord]]:
        """The lines that may answer a request, and a name for that pool."""
        if key in self.by_key:
            return ("key", key), self.by_key[key]
        item = item_id if item_id is not None else key
        lines = [r for r in self.by_item.get(item, []) if not (stage and r.stage and r.stage != stage)]
        return ("item", item, stage), lines

    def _take_texts(
        self, req: GenerationRequest
    ) -> list[tuple[str, TokenLogprobs | None, float | None, str | None]]:
        pool_name, lines = self._lines(req.key, req.item_id, req.stage)
        lines = [r for r in lines if r.answers()]  # error rows are not answers
        # Prompt variants of one item share its id: the second variant was given the first's
        # reply. Lines that recorded this very prompt answer it; with none, any line does
        # (an older file, or another prompt, which `_other_prompts` warns of).
        asked = [m.model_dump() for m in req.messages]
        own = [r for r in lines if _recorded_messages(r) == asked]
        if own and len(own) < len(lines):
            lines = own
            pool_name = (*pool_name, hashlib.sha256(json.dumps(asked, sort_keys=True).encode()).hexdigest())
        exact = [
            r for r in lines if r.temperature is not None and abs(r.temperature - req.temperature) < 1e-9
        ]
        chosen = exact or [r for r in lines if r.temperature is None]
        answers = [
            (text, lp, r.tokens_per_answer(), r.finish_reason(k))
            for r in chosen
            for k, (text, lp) in enumerate(r.answers())
        ]
        slot = (*pool_name, req.temperature if exact else None)
        k = self._used.get(slot, 0)
        taken = answers[k : k + req.n]
        self._used[slot] = k + len(taken)
        return taken

    def _missing(self, req: GenerationRequest) -> str:
        """Why a request has no answer: none recorded, none left, or none at its temperature."""
        _, lines = self._lines(req.key, req.item_id, req.stage)
        temps = sorted({r.temperature for r in lines if r.answers() and r.temperature is not None})
        if temps and not any(abs(t - req.temperature) < 1e-9 for t in temps):
            shown = ",".join(f"{t:g}" for t in temps)
            return (
                f"{REPLAY_MISS} for {req.key!r} at temperature {req.temperature:g}; the file has it "
                f"at {shown} (ask for those: detect --temperatures {shown}; in a run config, "
                f"temperatures = [{shown.replace(',', ', ')}])"
            )
        if any(r.answers() for r in lines):
            return f"{REPLAY_MISS} left for {req.key!r} (each recorded answer is replayed once)"
        return f"{REPLAY_MISS} for {req.key!r}"

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        out = []
        for i, req in enumerate(requests):
            taken = self._take_texts(req)
            if 0 < len(taken) < req.n:  # voting over fewer samples than the config says is not a replay
                gen = Generation(
                    error=f"{REPLAY_MISS} for {req.n - len(taken)} of the {req.n} samples asked for "
                    f"{req.key!r}: the file holds {len(taken)}"
                )
            elif taken:
                lps = [lp for _, lp, _, _ in taken]
                tokens = [n for _, _, n, _ in taken]
                reasons = [r for _, _, _, r in taken]
                # The recorded usage, so that a reply cut off at max_tokens counts as such on replay;
                # floored: a text's share of its record's total must not round up to the budget.
                usable = all(n is not None for n in tokens)
                usage = {"completion_tokens": math.floor(sum(tokens) + 1e-9)} if usable else {}
                gen = Generation(
                    texts=[t for t, _, _, _ in taken],
                    logprobs=lps if all(lp is not None for lp in lps) else None,
                    usage=usage,
                    finish_reasons=reasons if any(reasons) else [],
                )
            else:
                gen = Generation(error=self._missing(req))
            out.append(gen)
            if on_result:
                on_result(i, gen)
        self._unasked_temperatures(requests)
        self._other_max_tokens(requests)
        self._other_prompts(requests)
        return out

    def _first_unrecorded(
        self,
        requests: list[GenerationRequest],
        asked: Callable[[GenerationRequest], Any],
        recorded: Callable[[ReplayRecord], Any],
    ) -> tuple[GenerationRequest, list[Any]] | None:
        """The first request whose `asked` value none of its answering lines recorded, with theirs.

        Lines that recorded nothing (None: an older file) are no evidence either way.
        """
        for req in requests:
            _, lines = self._lines(req.key, req.item_id, req.stage)
            values = [v for r in lines if r.answers() and (v := recorded(r)) is not None]
            if values and asked(req) not in values:
                return req, values
        return None

    def _other_prompts(self, requests: list[GenerationRequest]) -> None:
        """Warns when a reply was recorded for another prompt than this run sends for its key.

        A raw record keeps its prompt; a chain replayed with another --contexts (or prompt file)
        reused verify replies made against the first contexts, a score for a prompt never asked.
        """
        if self._warned_prompt:  # once per run
            return
        found = self._first_unrecorded(
            requests,
            lambda req: [m.model_dump() for m in req.messages],
            _recorded_messages,
        )
        if found is not None:
            self._warned_prompt = True
            self.warn(
                f"{self.config.responses} answers {found[0].key!r} (and perhaps others) to another prompt "
                "than this run sends: its context, prompt file or answer differ; the replies are "
                "replayed as they are. Give the recorded run's --contexts and prompt to replay it"
            )

    def _other_max_tokens(self, requests: list[GenerationRequest]) -> None:
        """Warns when the replies were recorded under another max_tokens than this run asks for.

        A reply cut at the recorded budget was said to be cut "at max_tokens (1024): raise
        max_tokens", a budget no replay can change; the counters then speak of the wrong one.
        """
        if self._warned_max_tokens:  # once per run
            return
        found = self._first_unrecorded(requests, lambda req: req.max_tokens, lambda r: r.max_tokens)
        if found is not None:
            req, values = found
            recorded = sorted(set(values))
            self._warned_max_tokens = True
            shown = ",".join(map(str, recorded))
            self.warn(
                f"{self.config.responses} was recorded with max_tokens {shown}; this run asks for "
                f"{req.max_tokens} (e.g. {req.key!r}): a reply cut off is said to be cut at this "
                f"budget, which a replay cannot change; give -o max_tokens={recorded[0]} to read "
                "the replies as they were made"
            )

    def _unasked_temperatures(self, requests: list[GenerationRequest]) -> None:
        """Warns when the file answers this call's items at temperatures the call did not ask for.

        A run with fewer `--temperatures` than were recorded replayed the ones asked and voted
        over them without a word, so its predictions differed from the recorded run's.
        """
        if self._warned_temperatures:  # once per run, not once per language
            return
        asked: dict[tuple, tuple[set[float], list[ReplayRecord]]] = {}
        for req in requests:
            pool_name, lines = self._lines(req.key, req.item_id, req.stage)
            asked.setdefault(pool_name, (set(), lines))[0].add(round(req.temperature, 9))
        for pool_name, (temps, lines) in asked.items():
            have = {round(r.temperature, 9) for r in lines if r.answers() and r.temperature is not None}
            if have - temps:
                self._warned_temperatures = True
                listed = ",".join(f"{t:g}" for t in sorted(have))
                self.warn(
                    f"{self.config.responses} also holds answers at temperature "
                    f"{','.join(f'{t:g}' for t in sorted(have - temps))}, which this run does not ask for "
                    f"(e.g. {pool_name[1]!r}): asking for temperatures {listed} replays them all "
                    f"(llm's temperatures option: detect --temperatures {listed}; in a config, "
                    f"temperatures = [{listed.replace(',', ', ')}]; "
                    "chain takes one temperature)"
                )
                return

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        out = []
        for i, req in enumerate(requests):
            pool_name, lines = self._lines(req.key, req.item_id, req.stage)
            lines = [
                r
                for r in lines
                if r.score is not None and (r.continuation is None or r.continuation == req.continuation)
            ]
            slot = (*pool_name, "loglikelihood", req.continuation)
            k = self._used.get(slot, 0)
            if k < len(lines):
                self._used[slot] = k + 1
                score = Loglikelihood(logprob=lines[k].score, is_greedy=lines[k].is_greedy)
            else:
                score = Loglikelihood(error=f"no recorded log-likelihood for {req.key!r}")
            out.append(score)
            if on_result:
                on_result(i, score)
        return out


def _recorded_messages(record: ReplayRecord) -> list | None:
    """The prompt a raw record kept (None: a line that kept none, as older files and plain replies)."""
    messages = (record.model_extra or {}).get("messages")
    return messages if isinstance(messages, list) else None
