"""What every detector is, and the contract the run service relies on.

The contract, checked for every registered detector by tests/test_detector_contract.py:

- **Options**: a pydantic model (`Options`), unknown keys rejected; `describe()` is what a run
  records in config.json and hashes to refuse resuming with other settings.
- **Calling**: `run(items, contexts, emit)` gets a batch of items of ONE language (the run
  service sends a whole language, or `batch_items` at a time) and calls `emit` once per item,
  as soon as that item is finished, with an `ItemResult`: `ok` with its prediction, or
  `failed` with the error. Items may be emitted in any order; every item must be emitted.
  A model-backed detector sends the batch's requests together (throughput) and emits each
  item when its last response has arrived, so a kill loses at most the items in flight. An
  item is `failed` when any model call it needed failed (after the backend's retries): it is
  never turned into an empty prediction, and a re-run retries it (successful calls come
  from the response cache). A `MushroomError` (bad option, missing model) is raised, not
  emitted: it concerns the whole run, not an item.
- **Stats**: each ItemResult carries flat integer counters (`stats`), named
  `<stage>.<counter>` (e.g. `llm.requests`, `llm.parsed`, `verify.backend_errors`). The
  service sums them per language and split (`<split>/stats.json`); an LLM stage keeps
  `requests == parsed + repaired + unparseable + backend_errors`.
- **Raw records**: a detector that calls models wraps its backend with `recording()`, so every
  call lands in `raw/<lang>.raw.jsonl` as a `mushroom.backends.rawlog.RawRecord` (one schema for all
  stages, error rows included) that `--backend replay` can answer from. Per-item parse
  details go into `ItemResult.detail`.
- **Evidence channels**: per-character vectors beyond the final probabilities (for `stack`)
  travel in `ItemResult.channels`.

`detect(items, contexts)` is the plain Python form: predictions in item order, or
`RunFailed` when any item failed.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, get_args, get_origin

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from mushroom.backends.base import Backend, backend_warnings
from mushroom.data.contexts import support_contexts
from mushroom.data.predictions import THRESHOLD_1
from mushroom.data.records import Context, Item, Prediction, SoftSpan
from mushroom.errors import DataError, MushroomError, RunFailed, error_text, model_advice
from mushroom.util.words import plural

if TYPE_CHECKING:
    from mushroom.backends.config import BackendSettings
    from mushroom.detectors.prompts import PromptTemplate


def _marks_something(value: float) -> float:
    if value == 1.0:
        raise ValueError(THRESHOLD_1)
    return value


HardThreshold = Annotated[float, Field(ge=0.0, le=1.0), AfterValidator(_marks_something)]
"""A hard-label threshold: characters whose probability (or vote share) is above it are marked."""


def replays(backend: Any, config: Any) -> bool:
    """Whether a detector's replies come from a recording: raising max_tokens then changes nothing.

    The backend built (whatever the options say: a test's scripted one), else the configured kind.
    """
    return (backend.kind if backend is not None else config.kind) == "replay"


class DetectorOptions(BaseModel):
    """Base for detector options: unknown keys are an error, not silently ignored.

    So are NaN and infinity, and true/false where a number is wanted: pydantic reads `True`
    as 1 (`threshold=True` flagged nothing), and NaN failed with "should be less than or
    equal to 1", which names the wrong mistake.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_truth_values_for_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                field = cls.model_fields.get(key) if isinstance(key, str) else None
                if isinstance(value, bool) and field is not None and _takes_numbers(field.annotation):
                    raise ValueError(f"{key}: give a number, not {str(value).lower()}")
                # in a list or table too: temperatures = [true, 0.1] ran at temperature 1.0,
                # source_weights = {x = true} weighed x 1.0, without a word
                if field is not None and _numbers_inside(field.annotation):
                    inner = (
                        value.items()
                        if isinstance(value, dict)
                        else enumerate(value)
                        if isinstance(value, list | tuple)
                        else ()
                    )
                    for k, one in inner:
                        if isinstance(one, bool):
                            raise ValueError(f"{key}.{k}: give a number, not {str(one).lower()}")
        return data


def _numbers_inside(annotation: Any) -> bool:
    """Whether an option is a list, tuple or table of numbers (`temperatures`, `source_weights`)."""
    for kind in (annotation, *get_args(annotation)):
        if get_origin(kind) in (list, tuple, dict):
            held = get_args(kind)[1:] if get_origin(kind) is dict else get_args(kind)
            bare = [get_args(a)[0] if get_origin(a) is Annotated else a for a in held]
            return any(_takes_numbers(a) for a in bare if a is not Ellipsis)
    return False


def _takes_numbers(annotation: Any) -> bool:
    """Whether an option's type takes numbers and not true/false (`float`, `int | None`, ...)."""
    args = get_args(annotation) or (annotation,)
    return bool not in args and any(a in (int, float) for a in args)


class ItemResult(BaseModel):
    """The outcome of one item: what the run folder's item ledger stores, one line each."""

    model_config = ConfigDict(extra="forbid")

    id: str
    status: Literal["ok", "failed"]
    prediction: Prediction | None = None
    error: str | None = None
    channels: dict[str, list[SoftSpan]] = Field(default_factory=dict)
    stored_channels: bool = Field(
        False,
        description="in the ledger: the item wrote evidence channels to its language's channel store "
        "(they go there, not here); a store that lacks them was cut, damaged or deleted, and a "
        "stack would read the item as having no evidence",
    )
    stats: dict[str, int] = Field(default_factory=dict)
    detail: dict[str, Any] = Field(default_factory=dict)
    input_digest: str | None = Field(
        None,
        description="a hash of what the item was run on (answer, question, tokens, logits, contexts): "
        "a re-run of the folder computes again an item whose inputs changed since",
    )
    answer_digest: str | None = Field(
        None,
        description="a hash of the answer the prediction's spans are of: a stack, vote or report "
        "given an items file whose answer has changed since refuses the item",
    )
    seconds: float | None = Field(
        None,
        description="wall time since the previous item finished (the first of a language: since its "
        "work began); a detector that answers a batch at once (chain, pyes) gives each of its items an "
        "equal share of the batch's time, so per-item figures are exact only summed",
    )

    @model_validator(mode="after")
    def _ok_holds_its_prediction(self) -> ItemResult:
        # A ledger line edited to "ok" with no prediction was written out as an empty one,
        # a "nothing wrong" nobody computed; unreadable, the line's item is computed again.
        if self.status == "ok" and self.prediction is None:
            raise ValueError("an ok result holds its prediction")
        if self.prediction is not None and self.prediction.id != self.id:
            raise ValueError(f"the prediction is of {self.prediction.id!r}, not {self.id!r}")
        return self

    @classmethod
    def ok(
        cls,
        prediction: Prediction,
        channels: dict[str, np.ndarray] | None = None,
        stats: dict[str, int] | None = None,
        detail: dict[str, Any] | None = None,
    ) -> ItemResult:
        from mushroom.data.spans import vector_to_soft

        return cls(
            id=prediction.id,
            status="ok",
            prediction=prediction,
            channels={k: vector_to_soft(np.clip(v, 0.0, 1.0)) for k, v in (channels or {}).items()},
            stats=dict(stats or {}),
            detail=dict(detail or {}),
        )

    @classmethod
    def failed(
        cls, item_id: str, error: str, stats: dict[str, int] | None = None, detail: dict | None = None
    ) -> ItemResult:
        return cls(
            id=item_id, status="failed", error=error, stats=dict(stats or {}), detail=dict(detail or {})
        )


Emit = Callable[[ItemResult], None]


def sharing_time(emit: Emit, n: int) -> Emit:
    """`emit` for a batch answered at once: each of its `n` results gets an equal share of its time.

    Timed from one result to the next, the first item of a chain or pyes batch carried the
    whole batch (85 s, then 0.002 s for each other item).
    """
    start = time.perf_counter()

    def shared(result: ItemResult) -> None:
        if result.seconds is None:
            result.seconds = round((time.perf_counter() - start) / max(n, 1), 4)
        emit(result)

    return shared


def skip_blank_answers(items: list[Item], emit: Emit, counter: str) -> list[Item]:
    """Emits an empty prediction for each answer with no text, and returns the other items.

    An empty answer has no character a span could mark: its model call (one per temperature,
    or a chain's three stages) cost a request for nothing, and warned "claimed spans were not
    found". Each is counted under `counter`.
    """
    rest = []
    for item in items:
        if item.model_output_text.strip():
            rest.append(item)
        else:
            emit(ItemResult.ok(Prediction(id=item.id), stats={counter: 1}))
    return rest


def options_hold_backend(options: type[BaseModel]) -> bool:
    """Whether an options class has a field of backend settings, alone, optional or in a list."""
    from mushroom.backends.config import BackendSettings

    def holds(annotation: Any) -> bool:
        if isinstance(annotation, type) and issubclass(annotation, BackendSettings):
            return True
        return any(holds(arg) for arg in get_args(annotation))

    return any(holds(field.annotation) for field in options.model_fields.values())


def backend_settings(options: BaseModel) -> Iterator[tuple[str, int | None, BackendSettings]]:
    """Each backend's settings among a detector's options: (option, index in its list or None, settings).

    One option holds one backend (`backend`) or a list of them (pyes' `models`); the checks
    of readiness, of installed packages and of a reachable server each walk them.
    """
    from mushroom.backends.config import BackendSettings

    for field, value in options.__dict__.items():
        listed = isinstance(value, list | tuple)
        for k, setting in enumerate(value if listed else [value]):
            if isinstance(setting, BackendSettings):
                yield field, (k if listed else None), setting


class Detector(ABC):
    """A hallucination detector; see the module docstring for the contract."""

    name: ClassVar[str]
    Options: ClassVar[type[DetectorOptions]] = DetectorOptions
    # Items per `run` call: 0 sends a whole language at once (model-backed detectors batch
    # their requests); vector detectors work item by item anyway.
    batch_items: ClassVar[int] = 0
    # Whether its backends write answers (llm, chain) rather than score given text (pyes): a
    # base model without a chat template is refused for it before a run.
    generates: ClassVar[bool] = False
    # Whether it checks answers against contexts, so that an item without any gets nothing
    # flagged (the library API warns then); llm judges from the model's own knowledge too.
    needs_contexts: ClassVar[bool] = False
    # whether its prompts show only the contexts that can support an answer (no fact-checks):
    # what the run counts against its max_context_chars
    prompts_support_only: ClassVar[bool] = False
    # What it makes of an item no context supports, in the run's warning about such items.
    without_context: ClassVar[str] = "judges them on its model's own knowledge"
    # Whether it calls a model through a backend (llm, chain, pyes): the costly kind, which the
    # cascade sends only the uncertain items and the stack may leave out when it does not help.
    # Set for each class from its options (any field holding backend settings) unless the class
    # sets it itself, so that a run folder's detector name is enough to know it.
    calls_model: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "calls_model" not in cls.__dict__:
            cls.calls_model = options_hold_backend(cls.Options)

    def __init__(self, options: DetectorOptions):
        self.options = options
        # Where a detector keeps caches (response cache, calibration); set by the run service.
        self.workdir: Path | None = None
        self.last_stats: dict[str, int] = {}
        # The current language's raw-record file; set by the run service per language.
        self.raw_log = None
        # Evidence beyond the final probabilities (item id -> name -> per-character vector),
        # filled by vector detectors that have any; `run` copies it into each ItemResult.
        self.channels: dict[str, dict[str, np.ndarray]] = {}
        # Per-item counters and records (`ItemResult.stats`, `.detail`) of vector detectors
        # that have any, copied by `run` like the channels; empty for most.
        self.item_stats: dict[str, dict[str, int]] = {}
        self.item_details: dict[str, dict[str, Any]] = {}
        # Told (what, done, total) of work done between items, such as encoding a chunk's
        # texts before any of its items is finished, so a progress bar moves meanwhile;
        # set by the run service.
        self.on_work: Callable[[str, int, int], None] | None = None

    @abstractmethod
    def run(self, items: list[Item], contexts: dict[str, list[Context]], emit: Emit) -> None:
        """Calls `emit` once per item with its ItemResult, as each item is finished."""

    def detect(
        self,
        items: list[Item],
        contexts: dict[str, list[Context]],
        advance: Callable[[int], None] | None = None,
    ) -> list[Prediction]:
        """Predictions in item order; raises RunFailed naming the failed items.

        The call's summed counters are left in `last_stats` (what the run service warns from).
        """
        results: dict[str, ItemResult] = {}
        lock = threading.Lock()

        def collect(result: ItemResult) -> None:
            with lock:
                results[result.id] = result
            if advance is not None:
                advance(1)

        self.run(items, contexts, collect)
        self.last_stats = dict(sum((Counter(r.stats) for r in results.values()), Counter()))
        failed = [r for r in results.values() if r.status == "failed"]
        missing = [it.id for it in items if it.id not in results]
        if failed or missing:
            first = failed[0].error if failed else "no result emitted"
            raise RunFailed(
                f"{self.name}: {len(failed) + len(missing)} of {plural(len(items), 'item')} failed "
                f"(first: {(failed[0].id if failed else missing[0])}: {first}); the others are in "
                "the exception's `predictions`",
                predictions={r.id: r.prediction for r in results.values() if r.status == "ok"},
                errors={
                    **{r.id: r.error or "failed" for r in failed},
                    **dict.fromkeys(missing, "no result emitted"),
                },
            )
        return [results[it.id].prediction for it in items]

    def check_ready(self, sources: Sequence[str] | None = None, out: Path | None = None) -> None:
        """Raises MushroomError for a setting that would fail, or do nothing, in this run.

        Backends are built lazily, once the run folder exists and the first item needs one;
        the run commands call this first, so a missing URL, responses file or model file
        stops the command before it makes a folder. A run that may be answered from a
        response cache (a resumed folder, or an existing shared `cache_path`) builds no
        backend at all, so its settings are not checked then.

        Args:
            sources: the names of the run's context sources (a file's stem for context
                files), for options that refer to them; None when not known.
            out: the run folder asked for; None for a new one (no cached responses there).
        """
        shared = self._shared_cache()
        if shared is not None:
            from mushroom.backends.cache import cache_file_problem

            # a mistyped folder was made silently, and the next run (typed right) found no cache
            problem = cache_file_problem(shared)
            if problem is not None:
                raise MushroomError(f"{self.name} option cache_path: {problem}")
            if not shared.parent.is_dir():
                raise MushroomError(
                    f"{self.name} option cache_path: folder {shared.parent} does not exist (make it first; "
                    "the cache file itself is created)"
                )
        if self.may_answer_from_cache(out):
            return
        for field, k, setting in backend_settings(self.options):
            try:
                setting.check_ready()
                if self.generates:
                    setting.check_answers()
            except DataError:
                raise  # a bad responses file: it names the file and line itself
            except MushroomError as exc:
                where = field if k is None else f"{field}[{k}]"
                said = str(exc) if k is None else model_advice(str(exc), f'"model" of {where}')
                raise MushroomError(f"{self.name} option {where}: {said}") from None

    def may_answer_from_cache(self, out: Path | None) -> bool:
        """Whether a run may be answered from a response cache, with no model or server.

        A resumed folder keeps its cache; a shared `cache_path` that exists serves a new one.
        """
        if not getattr(self.options, "cache", False):
            return False
        shared = self._shared_cache()
        return (out is not None and out.exists()) or (shared is not None and shared.is_file())

    def _shared_cache(self) -> Path | None:
        """The response cache file the `cache_path` option shares across runs, when caching is on."""
        cache_path = getattr(self.options, "cache_path", None)
        return Path(cache_path).expanduser() if getattr(self.options, "cache", False) and cache_path else None

    def cache_place(self, name: str) -> Callable[[], Path] | None:
        """Where the response cache `name` lives at each batch: the run's raw folder; none outside a run.

        Outside a run it went to the current folder, where it outlived the session and answered
        a later call from another server that serves a model of the same name. A cache there is
        asked for with a detector's `cache_path`. A function, not a path: the run service points
        `workdir` at each split's raw folder in turn, and a backend is built once, on the first.
        """
        first = self.workdir
        if first is None:
            return None
        return lambda: (self.workdir or first) / name

    def describe(self) -> dict[str, Any]:
        """Name and options, recorded in every run's config, with the files its options name.

        A file named by an option (a calibration table, a replay file) is recorded by content:
        by its path alone, an edited file resumed the folder with the old predictions.
        """
        from mushroom.util.files import FILE_DIGESTS, option_file_digests

        out: dict[str, Any] = {"detector": self.name, "options": self.options.model_dump(mode="json")}
        digests = option_file_digests(self.options)
        if digests:  # only then: the folders of runs that name no file resume as before
            out[FILE_DIGESTS] = digests
        prompts = self.prompt_templates()
        if prompts:  # where each came from, for a reader (not hashed: its text's sha256 is)
            out["prompt_files"] = {option: t.source for option, t in prompts.items()}
        return out

    def prompt_templates(self) -> dict[str, PromptTemplate]:
        """The prompts it sends, by the option that names each; none for a detector with no prompt."""
        return {}

    def recording(self, backend):
        """Wraps a backend so that each call is written to the current language's raw log."""
        from mushroom.backends.rawlog import RecordingBackend

        return RecordingBackend(backend, lambda: self.raw_log)

    def new_call(self) -> None:  # noqa: B027 - optional hook
        """Forgets what an earlier library call learnt from its items (a run keeps it).

        The Python API keeps a built detector between calls; statistics estimated on one
        call's items (pyes) made the next call's answers depend on it.
        """

    def built_backends(self) -> list[Any]:
        """The backends built (or given) so far, for their counters: none for a CPU detector."""
        return []

    def close(self) -> None:  # noqa: B027 - optional hook
        """Releases models and connections; a no-op by default."""


class GeneratingDetector(Detector):
    """A detector that asks one generation backend, built from its options or given by the caller.

    The llm and chain detectors share how that backend is built (cached, recorded to the raw
    log), closed (only one it built: a given one is the caller's) and reported (its warnings).
    """

    generates = True
    cache_file: ClassVar[str] = "responses.cache.jsonl"

    def __init__(self, options: DetectorOptions, backend: Backend | None = None):
        super().__init__(options)
        self._backend = self.recording(backend) if backend is not None else None
        self._owns_backend = backend is None

    def cache_path(self) -> Path | Callable[[], Path] | None:
        """Where its response cache lives: the run's raw folder (see `cache_place`)."""
        return self.cache_place(self.cache_file)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            from mushroom.backends.cache import build_cached

            self._backend = self.recording(
                build_cached(self.options.backend, self.options.cache, self.cache_path())
            )
        return self._backend

    @property
    def warnings(self) -> list[str]:
        """The backend's warnings (unconstrained or broken JSON decoding), for the run's summary."""
        return backend_warnings(self._backend)

    def built_backends(self) -> list[Backend]:
        return [self._backend] if self._backend is not None else []

    def close(self) -> None:
        """Closes the backend it built (a server's connection pool, a loaded model)."""
        if self._backend is not None and self._owns_backend:
            self._backend.close()
            self._backend = None


class VectorDetector(Detector):
    """A detector that scores one item at a time as a per-character probability vector.

    Hard labels are the characters above the `threshold` option, which every subclass's
    options carry. An exception while scoring one item fails that item only.
    """

    batch_items: ClassVar[int] = 0

    @abstractmethod
    def item_vector(self, item: Item, contexts: list[Context]) -> np.ndarray:
        """Per-character hallucination probability of one answer."""

    def run(self, items: list[Item], contexts: dict[str, list[Context]], emit: Emit) -> None:
        from mushroom.data.predictions import prediction_from_vectors

        threshold = self.options.threshold
        self.channels = {}  # this batch's evidence; kept until the next call for callers to read
        self.item_stats = {}  # counters and records a detector has for some items (nli's verdicts)
        self.item_details = {}
        for item in items:
            try:
                vec = self.item_vector(item, contexts.get(item.id, []))
                stats = self.item_stats.get(item.id)
                if self.needs_contexts and not support_contexts(contexts.get(item.id, [])):
                    if item.model_output_text.strip():  # an empty answer needs nothing checked
                        stats = {**(stats or {}), "context.none": 1}
                result = ItemResult.ok(  # a NaN probability or channel fails the item
                    prediction_from_vectors(item.id, vec, vec > threshold),
                    self.channels.get(item.id),
                    stats,
                    self.item_details.get(item.id),
                )
            except MushroomError:
                raise
            except ImportError as exc:  # an install short of a package: every item would fail
                from mushroom.util.registry import stop_for_import

                stop_for_import(exc, f"detector {self.name!r}")
            except Exception as exc:  # one item's failure is recorded, the others go on
                result = ItemResult.failed(item.id, error_text(exc))
            emit(result)
