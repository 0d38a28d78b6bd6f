"""The `pyes` detector: P("Yes") of several small LMs asked whether each piece is supported.

As in the multi-model P(Yes) Mu-SHROOM systems: every sentence or clause of the answer is put
to each model as a yes/no question with the context (prompts/pyes.md). With `scoring =
"loglikelihood"` (the default) the backend scores the exact label texts as continuations
of the prompt (as lm-evaluation-harness does), so P("Yes") and P("No") are exact for any
label wording and never missing; `"top_logprobs"` reads them from the first generated
token's top log-probabilities instead, summing the variants of each word (" Yes", "yes"),
for servers that cannot score a given text. Either way P(yes) / (P(yes) + P(no)).

Models disagree in scale (one says Yes to everything, another hedges), so each model's P(yes)
is z-normalised with its own mean and standard deviation, estimated on a calibration split and
saved with the run; the z scores are averaged over models. The piece's hallucination
probability is the normalised "No" side, sigmoid(-z); the answer-level support is the
harmonic mean of the pieces' sigmoid(z), which a single unsupported piece pulls down, and is
kept in each item's details. A model whose P(yes) does not vary (its calibration collapsed)
or pieces no model could score are reported as warnings and counted, never silently.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator, model_validator

from mushroom.backends.base import (
    Backend,
    BackendConfig,
    Generation,
    GenerationRequest,
    LoglikelihoodRequest,
    backend_warnings,
)
from mushroom.backends.cache import build_cached
from mushroom.data.contexts import support_contexts
from mushroom.data.jsonl import read_json_model
from mushroom.data.predictions import prediction_from_vectors
from mushroom.data.records import Context, Item
from mushroom.detectors.base import (
    Detector,
    DetectorOptions,
    Emit,
    HardThreshold,
    ItemResult,
    sharing_time,
)
from mushroom.detectors.llm import context_text
from mushroom.detectors.pieces import Unit, answer_pieces, paint
from mushroom.detectors.prompts import PromptTemplate, load_prompt
from mushroom.errors import NO_P_YES, NOT_SENT, MushroomError
from mushroom.util.files import FILE_DIGESTS, NAMES_A_FILE
from mushroom.util.words import plural


class ModelStats(BaseModel):
    """Mean and standard deviation of one model's P(yes) on the calibration split."""

    mean: float
    std: float = Field(gt=0.0)
    n: int


class PYesCalibration(BaseModel):
    """Per-model normalisation, saved with the run (`pyes_calibration.{lang}.json` when estimated there)."""

    models: dict[str, ModelStats]
    fitted_on: str = ""


class PYesOptions(DetectorOptions):
    """Options of the pyes detector."""

    models: list[BackendConfig] = Field(..., min_length=1, description="one backend per model")
    prompt: str = Field(
        "pyes", description="prompt file in prompts/ with {{context}}, {{question}}, {{piece}}"
    )
    unit: Unit = Field("sentence", description="sentence or clause")
    scoring: Literal["loglikelihood", "top_logprobs"] = Field(
        "loglikelihood", description="score the label texts exactly, or read the first token's top-k"
    )
    labels: tuple[str, str] = Field(("Yes", "No"), description="loglikelihood: the yes and no answers")
    yes_words: list[str] = Field(default_factory=lambda: ["yes"], description="first tokens meaning yes")
    no_words: list[str] = Field(default_factory=lambda: ["no"], description="first tokens meaning no")
    top_logprobs: int = Field(20, ge=1, le=20)
    max_context_chars: int = Field(6000, ge=100)
    calibration: str | None = Field(
        None,
        description="saved calibration JSON; without it the statistics are estimated per language on "
        "the items being detected (transductive) and saved with the run",
        json_schema_extra=NAMES_A_FILE,
    )
    threshold: HardThreshold = Field(0.5, description="hard label: No-side probability above this")
    cache: bool = Field(True, description="cache responses in the run folder (none from Python)")

    # Each of these made every piece 0.5, with no hard label, no counter and no warning.
    @field_validator("labels")
    @classmethod
    def _two_answers(cls, value: tuple[str, str]) -> tuple[str, str]:
        if not all(label.strip() for label in value) or value[0] == value[1]:
            raise ValueError(f"needs two different, non-empty answers (yes, no), got {list(value)}")
        return value

    @field_validator("yes_words", "no_words")
    @classmethod
    def _some_words(cls, value: list[str]) -> list[str]:
        words = [w.strip().lower() for w in value if w.strip()]  # tokens are compared so
        if not words:
            raise ValueError("needs at least one word")
        return words

    @model_validator(mode="after")
    def _words_apart(self) -> PYesOptions:
        both = sorted(set(self.yes_words) & set(self.no_words))
        if both:
            raise ValueError(
                f"yes_words and no_words share {', '.join(map(repr, both))}: a word means one answer"
            )
        return self


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


MIN_STD = 1e-3


def no_logprobs(whose: str) -> str:
    """Why no P(yes) was read when `whose` ("its", "the") replies held no log-probabilities at all."""
    return (
        f"none of {whose} replies carried log-probabilities (the server ignores `logprobs`; "
        "-o scoring=loglikelihood scores through /completions instead)"
    )


def fit_stats(values: dict[str, list[float]], fitted_on: str = "") -> PYesCalibration:
    """Per-model mean and std of P(yes) (std floored so a constant model does not divide by 0).

    A floored std means the model said the same thing to every piece: its z scores carry no
    information, which `collapsed_models` reports so the run can say so.
    """
    models = {}
    for name, vals in values.items():
        if not vals:
            raise MushroomError(f"pyes: model {name!r} {NO_P_YES} on the calibration items")
        arr = np.array(vals)
        models[name] = ModelStats(mean=float(arr.mean()), std=max(float(arr.std()), MIN_STD), n=len(vals))
    return PYesCalibration(models=models, fitted_on=fitted_on)


def collapsed_models(calibration: PYesCalibration) -> list[str]:
    """Models whose P(yes) did not vary on the calibration items (std at the floor)."""
    return [name for name, st in calibration.models.items() if st.std <= MIN_STD]


@dataclass
class RawScores:
    """P(yes) per (piece, model) of a batch, and what became of each piece's requests.

    NaN marks a piece a model gave no usable score for; `errors` holds a piece's first
    error (None when every call for it worked). A request a tripped circuit breaker kept
    back cost nothing: it is counted apart from those sent that failed.
    """

    pieces: list[list]
    scores: np.ndarray
    errors: list[str | None]
    not_sent: np.ndarray  # per piece
    sent_failed: np.ndarray  # per piece
    errored: np.ndarray  # per (piece, model): a call failed, so its NaN is no unusable answer
    bare: np.ndarray  # per (piece, model): the reply carried no log-probabilities at all

    @classmethod
    def empty(cls, pieces: list[list], models: int) -> RawScores:
        n = sum(len(p) for p in pieces)
        return cls(
            pieces,
            np.full((n, models), np.nan),
            [None] * n,
            np.zeros(n, dtype=int),
            np.zeros(n, dtype=int),
            np.zeros((n, models), dtype=bool),
            np.zeros((n, models), dtype=bool),
        )

    def failed(self, row: int, model: int, errors: list[str]) -> None:
        """A model's calls for a piece failed with `errors` (the piece keeps its first error)."""
        self.errors[row] = self.errors[row] or errors[0]
        self.errored[row, model] = True
        unsent = sum(e.startswith(NOT_SENT) for e in errors)
        self.not_sent[row] += unsent
        self.sent_failed[row] += len(errors) - unsent

    def counts(self, rows: slice, requests: int) -> dict[str, int]:
        """The counters of one item (its pieces' rows), `requests` the calls its pieces needed."""
        not_sent, failed = int(self.not_sent[rows].sum()), int(self.sent_failed[rows].sum())
        st = {
            "pyes.pieces": rows.stop - rows.start,
            "pyes.requests": requests - not_sent,
            # (piece, model) cells answered: what a share of unusable answers is of
            "pyes.answers": int((~self.errored[rows]).sum()),
            "pyes.unusable": int((np.isnan(self.scores[rows]) & ~self.errored[rows]).sum()),
        }
        if not_sent:
            st["pyes.not_sent"] = not_sent
        if failed:
            st["pyes.backend_errors"] = failed
        return st


class PYesDetector(Detector):
    """Multi-model yes/no verification of answer pieces.

    How, and why so, is in the module docstring.
    """

    name = "pyes"
    needs_contexts = True
    prompts_support_only = True
    without_context = "asks its models about them with no context"
    Options = PYesOptions
    options: PYesOptions

    def __init__(self, options: PYesOptions, backends: list[Backend] | None = None):
        super().__init__(options)
        self.prompt = load_prompt(options.prompt)
        self.prompt.check(("context", "question", "piece"), required=("piece",))
        self._backends = [self.recording(b) for b in backends] if backends is not None else None
        self._owns_backends = backends is None  # ones given by the caller are the caller's to close
        self.calibration: PYesCalibration | None = None
        if options.calibration:
            # a wrong file named itself nowhere ("invalid value: models: Field required")
            self.calibration = read_json_model(Path(options.calibration), PYesCalibration)
        self.unusable = 0  # pieces a model gave no usable P(yes) for
        self.warnings: list[str] = []
        # (run folder, language) -> statistics estimated on its items: one detector runs the
        # test split and then val, and each split's languages get their own
        self._fitted: dict[tuple[str, str], PYesCalibration] = {}

    def describe(self) -> dict:
        out = super().describe()
        # by content, as a file an option names: by its name alone, an edited prompts/pyes.md
        # resumed a folder with the answers to the old question
        out.setdefault(FILE_DIGESTS, {})["prompt"] = self.prompt.sha256
        return out

    def prompt_templates(self) -> dict[str, PromptTemplate]:
        return {"prompt": self.prompt}

    @staticmethod
    def model_key(config: BackendConfig, k: int) -> str:
        return f"{k}:{config.kind}:{config.model}"

    def close(self) -> None:
        """Closes the backends it built; ones given to it are left to the caller."""
        if self._backends is not None and self._owns_backends:
            for backend in self._backends:
                backend.close()
            self._backends = None

    def new_call(self) -> None:
        """Outside a run (no workdir), each library call estimates its own statistics."""
        if self.workdir is None:
            self._fitted.clear()

    def built_backends(self) -> list[Backend]:
        return list(self._backends or [])

    @property
    def backends(self) -> list[Backend]:
        if self._backends is None:
            self._backends = [
                self.recording(
                    build_cached(cfg, self.options.cache, self.cache_place(f"pyes.model{k}.cache.jsonl"))
                )
                for k, cfg in enumerate(self.options.models)
            ]
        return self._backends

    def _requests(self, messages: list, item: Item, k: int) -> list:
        """The requests for one piece (the same for every model)."""
        key = f"{item.id}#{k}"
        if self.options.scoring == "top_logprobs":
            return [
                GenerationRequest(
                    key=key,
                    item_id=item.id,
                    stage="pyes",
                    messages=messages,
                    temperature=0.0,
                    max_tokens=1,
                    top_logprobs=self.options.top_logprobs,
                )
            ]
        return [
            LoglikelihoodRequest(
                key=f"{key}#{label}", item_id=item.id, stage="pyes", messages=messages, continuation=label
            )
            for label in self.options.labels
        ]

    def raw_scores(self, items: list[Item], contexts: dict[str, list[Context]]) -> RawScores:
        """Each item's pieces, their P(yes) per model, and what became of their requests."""
        pieces = [answer_pieces(it.model_output_text, self.options.unit) for it in items]
        prompts = []
        for item, item_pieces in zip(items, pieces):
            # A fact-check repeats the claims it corrects: a yes/no support question would
            # find them there (as NLI would), so P("Yes") reads the other contexts only.
            ctx = context_text(support_contexts(contexts.get(item.id, [])), self.options.max_context_chars)
            for k, piece in enumerate(item_pieces):
                prompts.append(
                    (item, k, self.prompt.render(context=ctx, question=item.model_input, piece=piece.text))
                )
        raw = RawScores.empty(pieces, len(self.options.models))
        scores = raw.scores
        reqs = [r for item, k, msgs in prompts for r in self._requests(msgs, item, k)]
        for m, backend in enumerate(self.backends):
            if self.options.scoring == "top_logprobs":
                for r, gen in enumerate(backend.generate(reqs)):
                    if gen.error is not None:
                        raw.failed(r, m, [gen.error])
                        continue
                    value = p_yes(gen, self.options.yes_words, self.options.no_words)
                    if value is None:
                        self.unusable += 1
                        raw.bare[r, m] = not (gen.logprobs and gen.logprobs[0])
                    else:
                        scores[r, m] = value
                continue
            results = backend.loglikelihood(reqs)
            for r in range(len(prompts)):
                yes, no = results[2 * r], results[2 * r + 1]
                if yes.error is not None or no.error is not None:
                    raw.failed(r, m, [x.error for x in (yes, no) if x.error is not None])
                elif (
                    yes.logprob is None
                    or no.logprob is None
                    or not math.isfinite(max(yes.logprob, no.logprob))
                ):
                    self.unusable += 1
                else:
                    top = max(yes.logprob, no.logprob)
                    a, b = math.exp(yes.logprob - top), math.exp(no.logprob - top)
                    scores[r, m] = a / (a + b)
        return raw

    def calibrate(
        self, items: list[Item], contexts: dict[str, list[Context]], fitted_on: str = ""
    ) -> PYesCalibration:
        """Estimates each model's P(yes) mean and std on these items and keeps it."""
        raw = self.raw_scores(items, contexts)
        self.calibration = self._fit(raw.scores, fitted_on, raw.bare)
        return self.calibration

    def _fit(self, scores: np.ndarray, fitted_on: str, bare: np.ndarray | None = None) -> PYesCalibration:
        keys = [self.model_key(c, k) for k, c in enumerate(self.options.models)]
        values = {key: [v for v in scores[:, m] if not np.isnan(v)] for m, key in enumerate(keys)}
        for m, key in enumerate(keys):
            if not values[key] and bare is not None and bare[:, m].any():
                # "no usable P(yes)" alone sent users to re-run, which reads the same replies
                raise MushroomError(
                    f"pyes: model {key!r} {NO_P_YES} on the calibration items: "
                    + (
                        no_logprobs("its")
                        if bare[:, m].all()
                        else "its replies' top log-probabilities held no yes or no word (see yes_words, "
                        "no_words, top_logprobs)"
                    )
                )
        calibration = fit_stats(values, fitted_on)
        for name in collapsed_models(calibration):
            self.warnings.append(
                f"pyes: model {name} gave the same P(yes) to every piece ({fitted_on}): its calibration "
                "collapsed and its votes carry no information"
            )
        return calibration

    def _calibration_path(self, lang: str) -> Path | None:
        return self.workdir / f"pyes_calibration.{lang}.json" if self.workdir is not None else None

    def _language_calibration(
        self,
        items: list[Item],
        scores: np.ndarray,
        errors: list[str | None],
        emit: Emit,
        counts: list[dict[str, int]],
        own_errors: list[str | None],
        bare: np.ndarray | None = None,
    ) -> PYesCalibration | None:
        """The statistics for these items: given, kept from an earlier batch or run, or estimated.

        Estimated per language, on the items being detected: a model's P(yes) differs from
        language to language, and one language's statistics applied to another made a
        language's scores depend on which others were in the run. When they cannot be
        estimated (a dead server, a model with no usable answer), every item fails with its
        own first error, else the language's (an item whose requests a tripped breaker kept
        back says "not sent", as the cascade counts it), so the run ends with its failures
        listed and a re-run retries them.
        """
        if self.calibration is not None:
            return self.calibration
        lang = items[0].lang if items else "?"
        saved = self._calibration_path(lang)
        key = (str(self.workdir), lang)
        if key not in self._fitted and saved is not None:
            # A resumed run keeps the statistics it was started with; a folder of a version
            # that kept one file for every language resumes with that file.
            older = saved.with_name("pyes_calibration.json")
            found = saved if saved.is_file() else older if older.is_file() else None
            if found is not None:
                self._fitted[key] = read_json_model(found, PYesCalibration)
        if key not in self._fitted:
            try:
                fitted = self._fit(
                    scores, f"transductive: {plural(len(items), lang + ' item')} being detected", bare
                )
            except MushroomError as exc:
                reason = next((e for e in errors if e is not None), None) or str(exc)
                for item, st, own in zip(items, counts, own_errors):
                    failed = ItemResult.failed(
                        item.id, own or reason, {**st, "pyes.calibration_failures": 1}, {}
                    )
                    emit(failed)
                return None
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                saved.write_text(
                    json.dumps(fitted.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8"
                )
            self._fitted[key] = fitted
        return self._fitted[key]

    def run(self, items: list[Item], contexts: dict[str, list[Context]], emit: Emit) -> None:
        emit = sharing_time(emit, len(items))  # every item is answered at the end
        raw = self.raw_scores(items, contexts)
        pieces, scores, errors = raw.pieces, raw.scores, raw.errors
        keys = [self.model_key(c, k) for k, c in enumerate(self.options.models)]
        ends = np.cumsum([len(p) for p in pieces])
        rows = [slice(int(end) - len(p), int(end)) for end, p in zip(ends, pieces)]
        z = np.full_like(scores, np.nan)
        usable = set()
        per_piece = len(keys) * (1 if self.options.scoring == "top_logprobs" else 2)
        counts = [raw.counts(sl, len(p) * per_piece) for p, sl in zip(pieces, rows)]
        for item, item_pieces, st in zip(items, pieces, counts):
            # asked with "(no context available)": the models' own word, said apart
            if item_pieces and not support_contexts(contexts.get(item.id, [])):
                st["context.none"] = 1
        for lang in dict.fromkeys(it.lang for it in items):  # each language its own statistics
            ks = [k for k, it in enumerate(items) if it.lang == lang]
            picked = np.concatenate([np.arange(rows[k].start, rows[k].stop) for k in ks]).astype(int)
            if picked.size == 0:  # only empty answers: nothing was asked, nothing to normalise
                usable.update(ks)
                continue
            lang_errors = [errors[r] for r in picked]
            own = [next((e for e in errors[rows[k]] if e is not None), None) for k in ks]
            calibration = self._language_calibration(
                [items[k] for k in ks],
                scores[picked],
                lang_errors,
                emit,
                [counts[k] for k in ks],
                own,
                raw.bare[picked],
            )
            if calibration is None:  # its items were emitted as failed
                continue
            missing = [k for k in keys if k not in calibration.models]
            if missing:
                raise MushroomError(f"pyes calibration has no statistics for models {missing}")
            mean = np.array([calibration.models[k].mean for k in keys])
            std = np.array([calibration.models[k].std for k in keys])
            z[picked] = (scores[picked] - mean) / std
            usable.update(ks)
        for b in self._backends or []:
            self.warnings.extend(w for w in backend_warnings(b) if w not in self.warnings)
        for k, (item, item_pieces) in enumerate(zip(items, pieces)):
            if k not in usable:
                continue
            sl = rows[k]
            st = counts[k]
            piece_errors = [e for e in errors[sl] if e is not None]
            detail = {
                "pieces": [
                    {"start": p.start, "end": p.end, "p_yes": [None if np.isnan(v) else float(v) for v in s]}
                    for p, s in zip(item_pieces, scores[sl])
                ]
            }
            if piece_errors:
                emit(ItemResult.failed(item.id, piece_errors[0], dict(st), detail))
                continue
            z_item = z[sl]
            if item_pieces and np.isnan(z_item).all():
                # no model gave a usable P(yes) for any piece (a server without logprobs, with a
                # calibration given): its 0.5 everywhere read as a checked answer, exit 0 (an audit)
                why = (
                    no_logprobs("the")
                    if raw.bare[sl].all()
                    else "no reply's top log-probabilities held a yes or no word"
                    if self.options.scoring == "top_logprobs"
                    else "the server gave no finite log-likelihood of the labels"
                )
                emit(
                    ItemResult.failed(
                        item.id, f"pyes: every model {NO_P_YES} for this answer: {why}", dict(st), detail
                    )
                )
                continue
            # A piece no model answered stays unjudged (z = 0: the models' average).
            z_mean = np.array([np.nanmean(r) if not np.all(np.isnan(r)) else 0.0 for r in z_item])
            support = 1.0 / (1.0 + np.exp(-z_mean))
            vec = paint(len(item.model_output_text), item_pieces, list(1.0 - support))
            detail["answer_support"] = harmonic_mean(list(support))
            pred = prediction_from_vectors(item.id, vec, vec > self.options.threshold)
            emit(ItemResult.ok(pred, {"piece": vec}, dict(st), detail))
