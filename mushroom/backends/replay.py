"""Replays recorded responses: re-parse, re-score and debug without any model.

The file has one line per call: `{"id": <item id>, "response": <raw text>}` with optional
`"temperature"` and `"model"`. A request is answered by the lines of its item id (and its
temperature, when lines give one), in file order, one per sample; a request without a
recorded response gets an error, which the detector counts instead of crashing.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from mushroom.backends.base import Backend, BackendConfig, Generation, GenerationRequest, OnResult
from mushroom.errors import MushroomError
from mushroom.jsonl import load_records


class RecordedResponse(BaseModel):
    """One line of a replay file."""

    model_config = ConfigDict(extra="allow")

    id: str
    response: str
    temperature: float | None = None
    model: str | None = None


class ReplayBackend(Backend):
    """Answers from a JSONL file of recorded responses."""

    kind = "replay"

    def __init__(self, config: BackendConfig):
        super().__init__(config)
        if not config.responses:
            raise MushroomError("the replay backend needs `responses` (a JSONL file of recorded responses)")
        records = load_records(Path(config.responses), RecordedResponse, unique_ids=False)
        self.by_id: dict[str, list[RecordedResponse]] = {}
        for rec in records:
            if config.model and rec.model and rec.model != config.model:
                continue
            self.by_id.setdefault(rec.id, []).append(rec)
        self._used: dict[tuple[str, float | None], int] = {}

    def _take(self, key: str, temperature: float) -> str | None:
        lines = self.by_id.get(key, [])
        exact = [r for r in lines if r.temperature is not None and abs(r.temperature - temperature) < 1e-9]
        pool = exact or [r for r in lines if r.temperature is None]
        slot = (key, temperature if exact else None)
        k = self._used.get(slot, 0)
        if k >= len(pool):
            return None
        self._used[slot] = k + 1
        return pool[k].response

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        out = []
        for i, req in enumerate(requests):
            texts = []
            for _ in range(req.n):
                text = self._take(req.key, req.temperature)
                if text is None:
                    break
                texts.append(text)
            gen = (
                Generation(texts=texts)
                if texts
                else Generation(error=f"no recorded response for {req.key!r}")
            )
            out.append(gen)
            if on_result:
                on_result(i, gen)
        return out
