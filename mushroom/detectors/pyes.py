"""The `pyes` detector: P("Yes") of several small LMs asked whether each piece is supported.

As in the multi-model P(Yes) Mu-SHROOM systems: every sentence or clause of the answer is put
to each model as a yes/no question with the context (prompts/pyes.md), and the probability
of "Yes" as the first generated token is read from the top log-probabilities (transformers,
vLLM, or an OpenAI-compatible server that returns `top_logprobs`): P(yes) / (P(yes) + P(no)),
summing the variants of each word (" Yes", "yes", "YES"). Models disagree in scale (one says
Yes to everything, another hedges), so each model's P(yes) is z-normalised with its own mean
and standard deviation, estimated on a calibration split and saved with the run; the z scores
are averaged over models. The piece's hallucination probability is the normalised "No" side,
sigmoid(-z); the answer-level support is the harmonic mean of the pieces' sigmoid(z), which
a single unsupported piece pulls down, and is recorded in the raw outputs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from pydantic import BaseModel, Field

from mushroom.backends.base import Backend, BackendConfig, Generation, GenerationRequest
from mushroom.backends.cache import build_cached
from mushroom.detectors.base import Detector, DetectorOptions
from mushroom.detectors.llm import context_text
from mushroom.detectors.pieces import Unit, answer_pieces, paint
from mushroom.errors import MushroomError
from mushroom.jsonl import write_jsonl
from mushroom.predictions import prediction_from_vectors
from mushroom.prompts import load_prompt
from mushroom.records import Context, Item, Prediction


class ModelStats(BaseModel):
    """Mean and standard deviation of one model's P(yes) on the calibration split."""

    mean: float
    std: float = Field(gt=0.0)
    n: int


class PYesCalibration(BaseModel):
    """Per-model normalisation, saved with the run (`pyes_calibration.json`)."""

    models: dict[str, ModelStats]
    fitted_on: str = ""


class PYesOptions(DetectorOptions):
    """Options of the pyes detector."""

    models: list[BackendConfig] = Field(..., min_length=1, description="one backend per model")
    prompt: str = Field(
        "pyes", description="prompt file in prompts/ with {{context}}, {{question}}, {{piece}}"
    )
    unit: Unit = Field("sentence", description="sentence or clause")
    yes_words: list[str] = Field(default_factory=lambda: ["yes"], description="first tokens meaning yes")
    no_words: list[str] = Field(default_factory=lambda: ["no"], description="first tokens meaning no")
    top_logprobs: int = Field(20, ge=1, le=20)
    max_context_chars: int = Field(6000, ge=100)
    calibration: str | None = Field(
        None,
        description="saved calibration JSON; without it the statistics are estimated on the items "
        "being detected (transductive) and saved with the run",
    )
    threshold: float = Field(0.5, ge=0.0, le=1.0, description="hard label: No-side probability above this")
    cache: bool = Field(True, description="cache responses in the run folder")


def p_yes(generation: Generation, yes_words: list[str], no_words: list[str]) -> float | None:
    """P(yes) / (P(yes) + P(no)) from the first token's top log-probabilities; None if neither shows."""
    if generation.error or not generation.logprobs or not generation.logprobs[0]:
        return None
    first = generation.logprobs[0][0]
    yes = sum(math.exp(lp) for tok, lp in first.items() if tok.strip().lower() in yes_words)
    no = sum(math.exp(lp) for tok, lp in first.items() if tok.strip().lower() in no_words)
    if yes + no <= 0:
        return None
    return yes / (yes + no)


def harmonic_mean(values: list[float], eps: float = 1e-6) -> float:
    """Harmonic mean of probabilities (1.0 for no values: nothing to doubt)."""
    if not values:
        return 1.0
    return len(values) / sum(1.0 / max(v, eps) for v in values)


def fit_stats(values: dict[str, list[float]], fitted_on: str = "") -> PYesCalibration:
    """Per-model mean and std of P(yes) (std floored so a constant model does not divide by 0)."""
    models = {}
    for name, vals in values.items():
        if not vals:
            raise MushroomError(f"pyes: model {name!r} gave no usable P(yes) on the calibration items")
        arr = np.array(vals)
        models[name] = ModelStats(mean=float(arr.mean()), std=max(float(arr.std()), 1e-3), n=len(vals))
    return PYesCalibration(models=models, fitted_on=fitted_on)


class PYesDetector(Detector):
    """Multi-model yes/no verification of answer pieces; see the module docstring."""

    name = "pyes"
    Options = PYesOptions
    options: PYesOptions

    def __init__(self, options: PYesOptions, backends: list[Backend] | None = None):
        super().__init__(options)
        self.prompt = load_prompt(options.prompt)
        self._backends = backends
        self.calibration: PYesCalibration | None = None
        if options.calibration:
            path = Path(options.calibration)
            self.calibration = PYesCalibration.model_validate_json(path.read_text(encoding="utf-8"))
        self.unusable = 0  # answers with neither yes nor no among the top tokens

    @staticmethod
    def model_key(config: BackendConfig, k: int) -> str:
        return f"{k}:{config.kind}:{config.model}"

    @property
    def backends(self) -> list[Backend]:
        if self._backends is None:
            root = self.workdir or Path(".")
            self._backends = [
                build_cached(cfg, self.options.cache, root / f"pyes.model{k}.cache.jsonl")
                for k, cfg in enumerate(self.options.models)
            ]
        return self._backends

    def raw_scores(self, items: list[Item], contexts: dict[str, list[Context]]) -> tuple[list, np.ndarray]:
        """Pieces per item and P(yes) per (piece, model) in item order (NaN: unusable)."""
        pieces = [answer_pieces(it.model_output_text, self.options.unit) for it in items]
        requests = []
        for item, item_pieces in zip(items, pieces):
            ctx = context_text(contexts.get(item.id, []), self.options.max_context_chars)
            for k, piece in enumerate(item_pieces):
                requests.append(
                    GenerationRequest(
                        key=f"{item.id}#{k}",
                        messages=self.prompt.render(context=ctx, question=item.model_input, piece=piece.text),
                        temperature=0.0,
                        max_tokens=1,
                        top_logprobs=self.options.top_logprobs,
                    )
                )
        scores = np.full((len(requests), len(self.options.models)), np.nan)
        for m, backend in enumerate(self.backends):
            for r, gen in enumerate(backend.generate(requests)):
                value = p_yes(gen, self.options.yes_words, self.options.no_words)
                if value is None:
                    self.unusable += 1
                else:
                    scores[r, m] = value
        return pieces, scores

    def calibrate(
        self, items: list[Item], contexts: dict[str, list[Context]], fitted_on: str = ""
    ) -> PYesCalibration:
        """Estimates each model's P(yes) mean and std on these items and keeps it."""
        _, scores = self.raw_scores(items, contexts)
        keys = [self.model_key(c, k) for k, c in enumerate(self.options.models)]
        values = {key: [v for v in scores[:, m] if not np.isnan(v)] for m, key in enumerate(keys)}
        self.calibration = fit_stats(values, fitted_on)
        return self.calibration

    def detect(
        self,
        items: list[Item],
        contexts: dict[str, list[Context]],
        advance: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        pieces, scores = self.raw_scores(items, contexts)
        keys = [self.model_key(c, k) for k, c in enumerate(self.options.models)]
        if self.calibration is None:
            values = {key: [v for v in scores[:, m] if not np.isnan(v)] for m, key in enumerate(keys)}
            lang = items[0].lang if items else "?"
            self.calibration = fit_stats(values, f"transductive: {len(items)} {lang} items being detected")
        missing = [k for k in keys if k not in self.calibration.models]
        if missing:
            raise MushroomError(f"pyes calibration has no statistics for models {missing}")
        mean = np.array([self.calibration.models[k].mean for k in keys])
        std = np.array([self.calibration.models[k].std for k in keys])
        z = (scores - mean) / std
        out, raw = [], []
        row = 0
        for item, item_pieces in zip(items, pieces):
            z_item = z[row : row + len(item_pieces)]
            row += len(item_pieces)
            # A piece no model answered stays unjudged (z = 0: the models' average).
            z_mean = np.array([np.nanmean(r) if not np.all(np.isnan(r)) else 0.0 for r in z_item])
            support = 1.0 / (1.0 + np.exp(-z_mean))
            vec = paint(len(item.model_output_text), item_pieces, list(1.0 - support))
            self.channels[item.id] = {"piece": vec}
            pred = prediction_from_vectors(item.id, vec, vec > self.options.threshold)
            out.append(pred)
            raw.append(
                {
                    "id": item.id,
                    "answer_support": harmonic_mean(list(support)),
                    "pieces": [
                        {"start": p.start, "end": p.end, "p_yes": [None if np.isnan(v) else v for v in s]}
                        for p, s in zip(item_pieces, scores[row - len(item_pieces) : row])
                    ],
                }
            )
            if advance is not None:
                advance(1)
        if self.workdir is not None and items:
            lang = items[0].lang
            write_jsonl(self.workdir / f"{lang}.pyes.jsonl", raw)
            (self.workdir / "pyes_calibration.json").write_text(
                json.dumps(self.calibration.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8"
            )
        return out
