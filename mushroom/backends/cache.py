"""A disk cache of generations, so that no call is ever made twice.

Entries are appended to a JSONL file and flushed one by one as results arrive; a run killed
at any point and started again reads them back, makes only the missing calls, and never
duplicates an entry. The key hashes backend kind, model, and the full request (messages
and sampling parameters); replayed responses are not cached (they are already on disk).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from mushroom.backends.base import (
    Backend,
    Generation,
    GenerationRequest,
    Loglikelihood,
    LoglikelihoodRequest,
    OnResult,
    OnScore,
    backend_warnings,
)
from mushroom.backends.config import answer_settings
from mushroom.data.jsonl import append_jsonl, first_line, mend_cut_line
from mushroom.parsing.reasoning import strip_reasoning
from mushroom.util.words import plural


def request_key(
    backend_kind: str,
    model: str,
    request: GenerationRequest | LoglikelihoodRequest,
    settings: dict[str, Any] | None = None,
) -> str:
    """Stable hash of everything that determines a generation.

    `settings` are the backend's answer-changing settings away from their defaults
    (`answer_settings`): prompt variants share one cache, and one that turned structured
    output off was answered with another's replies. None or empty keeps the older key.
    """
    key: dict[str, Any] = {"backend": backend_kind, "model": model, "request": request.cache_payload()}
    if settings:
        key["settings"] = settings
    blob = json.dumps(key, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _blank(generation: Generation) -> bool:
    """Whether every text of an answer is empty or white space, once a reasoning block is off.

    A reply of only `<think>...</think>` (or one cut off while thinking) failed as "only
    reasoning" and was cached: "run the same command again" read it back, and never asked.
    """
    return not any(strip_reasoning(text)[0].strip() for text in generation.texts)


def cache_file_problem(path: Path) -> str | None:
    """Why a response cache may not be kept at `path` (a user's `cache_path`); None where it may.

    The cache appends to whatever it is pointed at: a `cache_path` naming another run's
    prediction file, its `versions.json` or a file in the official data folder gained a cache
    line there, and that run no longer scored. So a cache is a `.jsonl` file, not named as a
    prediction file, outside the data folder, and either new, empty or a cache already.
    """
    from mushroom.data.predictions import prediction_file_lang
    from mushroom.data.splits import DEFAULT_DATA_DIR, in_data_dir

    if path.is_dir():
        return f"{path} is a folder; name a .jsonl file"
    if path.suffix != ".jsonl":
        return f"{path}: name a .jsonl file (a response cache is JSON lines)"
    if prediction_file_lang(path.name) is not None:
        return f"{path} is named as a prediction file; give the cache another name"
    if in_data_dir(path):
        return f"{path} is inside {DEFAULT_DATA_DIR}, the folder of the official data files"
    if not path.is_file():
        return None
    try:
        first = first_line(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror})"
    if first is None:
        return None
    try:
        row = json.loads(first)
    except ValueError:
        # a cache's own line cut by a kill during its first write: the cache mends and counts
        # it when it opens the file, and refusing it here refused that folder for good
        row = {"key": "", "generation": None} if first.startswith(b'{"key": ') else None
    if isinstance(row, dict) and "key" in row and ("generation" in row or "loglikelihood" in row):
        return None
    return f"{path} exists and is not a response cache; give another name, or delete it first"


class ResponseCache:
    """Key -> Generation, backed by an append-only JSONL file."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.entries: dict[str, Generation] = {}
        self.scores: dict[str, Loglikelihood] = {}
        self.corrupt_lines = 0  # inside the file: kept there, said at each open
        self.cut_line = False
        self._lock = threading.Lock()
        if self.path.exists():
            # a kill cut the last line: dropped, so that new entries start afresh and the
            # warning below is said once (kept, it was said on every later run: a review)
            self.cut_line = mend_cut_line(self.path, drop=True) is not None
            # read as bytes: a line cut mid-character (a kill during a non-ASCII reply's write)
            # raised UnicodeDecodeError from the file's iterator, and every item failed on it
            with self.path.open("rb") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                        if "loglikelihood" in row:
                            self.scores[row["key"]] = Loglikelihood.model_validate(row["loglikelihood"])
                            continue
                        self.entries[row["key"]] = Generation.model_validate(row["generation"])
                    except (ValueError, KeyError, TypeError):  # a JSON array or a string is a TypeError
                        # A line cut by a kill mid-write, or edited: that call is made again
                        # (`CachedBackend` says so: a sampled reply may then differ).
                        self.corrupt_lines += 1

    def unreadable_warning(self) -> str | None:
        """What a run is told of lines it could not read, whose calls are made again."""
        said = []
        if self.cut_line:
            said.append("its last line, cut by a kill mid-write, was dropped")
        if self.corrupt_lines:
            lines = plural(self.corrupt_lines, "line")
            said.append(f"{lines} could not be read (edited? kept: delete them to be rid of this warning)")
        if not said:
            return None
        return (
            f"{self.path}: {'; '.join(said)}. Their calls are made again, and a sampled reply may "
            "differ from the one recorded"
        )

    def get(self, key: str) -> Generation | None:
        hit = self.entries.get(key)
        return None if hit is not None and _blank(hit) else hit  # kept by an older version

    def put(self, key: str, generation: Generation) -> None:
        if generation.error is not None or _blank(generation):
            # Errors are retried next time, never cached; so are empty answers (a `content:
            # null` reply), which a re-run is advised to retry and would otherwise read back.
            return
        with self._lock:  # backends call back from worker threads
            known = self.entries.get(key)
            if known is not None and len(known.texts) >= len(generation.texts):
                return  # a fuller answer (one asked again for all n samples) is appended: last wins

            self.entries[key] = generation
            append_jsonl(self.path, {"key": key, "generation": generation.model_dump(exclude={"cached"})})

    def get_score(self, key: str) -> Loglikelihood | None:
        return self.scores.get(key)

    def put_score(self, key: str, score: Loglikelihood) -> None:
        if score.error is not None:
            return
        with self._lock:
            if key in self.scores:
                return
            self.scores[key] = score
            append_jsonl(self.path, {"key": key, "loglikelihood": score.model_dump(exclude={"cached"})})


class CachedBackend(Backend):
    """Wraps a backend: answers from the cache, sends only the misses, caches as they come.

    The wrapped backend may be given as a factory: it is then built on the first miss, so a
    run answered wholly from the cache never loads a model or opens a connection.

    The cache may be given as a function of no arguments that says where it is, asked at each
    batch: a detector's cache lives in the raw folder of the split it is running on, and one
    detector runs on test, then on val. Fixed when the backend was built, the cache was the
    first split's, so the val answers went to the test folder's cache, and a re-run in which
    test had nothing left to do looked for them in val's, and sent them again.
    """

    def __init__(
        self,
        inner: Backend | Callable[[], Backend],
        cache: ResponseCache | Callable[[], Path],
        config=None,
    ):
        if isinstance(inner, Backend):
            self._inner: Backend | None = inner
            self._factory = None
            config = inner.config
            self.kind = inner.kind
            self._model = inner.model_name
        else:
            if config is None:  # the factory's settings are what the cache keys on: needed
                raise TypeError("CachedBackend: a backend factory needs the backend's config")
            self._inner, self._factory = None, inner
            self.kind = config.kind
            self._model = config.model
        super().__init__(config)
        self._settings = answer_settings(config) if config is not None else {}
        self._where = None if isinstance(cache, ResponseCache) else cache
        self._caches: dict[Path, ResponseCache] = {}
        self._cache = cache if isinstance(cache, ResponseCache) else None
        self.hits = 0
        self.misses = 0

    @property
    def warnings(self) -> list[str]:
        """The cache's own and the inner backend's (none while every answer came from the cache)."""
        return super().warnings + backend_warnings(self._inner)

    def retry_tally(self) -> Counter[str]:
        """The inner backend's; none while every answer came from the cache (never built)."""
        return self._inner.retry_tally() if self._inner is not None else Counter()

    @property
    def cache(self) -> ResponseCache:
        """The cache of this batch: where the given function says, each file read once."""
        if self._where is not None:
            path = Path(self._where())
            if path not in self._caches:
                self._caches[path] = ResponseCache(path)
            self._cache = self._caches[path]
        assert self._cache is not None
        said = self._cache.unreadable_warning()
        if said is not None:
            self.warn(said)  # once per message
        return self._cache

    @property
    def inner(self) -> Backend:
        if self._inner is None:
            self._inner = self._factory()
        return self._inner

    @property
    def model_name(self) -> str:
        return self._model

    def generate(
        self, requests: list[GenerationRequest], on_result: OnResult | None = None
    ) -> list[Generation]:
        results: list[Generation | None] = [None] * len(requests)
        keys = [request_key(self.kind, self._model, r, self._settings) for r in requests]
        cache = self.cache  # one file for the whole batch
        missing: dict[str, list[int]] = {}  # identical requests in one batch are sent once
        for i, key in enumerate(keys):
            hit = cache.get(key)
            if hit is not None and not hit.error and len(hit.texts) < requests[i].n:
                hit = None  # kept from a server that ignored n: asked again for all n samples
            if hit is not None:
                results[i] = hit.model_copy(update={"cached": True})
                self.hits += 1
                if on_result:
                    on_result(i, results[i])
            else:
                missing.setdefault(key, []).append(i)
        self.misses += len(missing)
        if missing:
            unique = list(missing)

            def store(j: int, generation: Generation) -> None:
                key = unique[j]
                cache.put(key, generation)
                for i in missing[key]:
                    results[i] = generation
                    if on_result:
                        on_result(i, generation)

            fresh = self.inner.generate([requests[missing[k][0]] for k in unique], on_result=store)
            for j, generation in enumerate(fresh):
                if results[missing[unique[j]][0]] is None:
                    store(j, generation)
        return [r if r is not None else Generation(error="no result") for r in results]

    def loglikelihood(
        self, requests: list[LoglikelihoodRequest], on_result: OnScore | None = None
    ) -> list[Loglikelihood]:
        results: list[Loglikelihood | None] = [None] * len(requests)
        keys = [request_key(self.kind, self._model, r, self._settings) for r in requests]
        cache = self.cache  # one file for the whole batch
        missing: list[int] = []
        for i, key in enumerate(keys):
            hit = cache.get_score(key)
            if hit is None:
                missing.append(i)
                continue
            results[i] = hit.model_copy(update={"cached": True})
            self.hits += 1
            if on_result:
                on_result(i, results[i])
        self.misses += len(missing)
        if missing:

            def store(j: int, score: Loglikelihood) -> None:
                i = missing[j]
                cache.put_score(keys[i], score)
                results[i] = score
                if on_result:
                    on_result(i, score)

            fresh = self.inner.loglikelihood([requests[i] for i in missing], on_result=store)
            for j, score in enumerate(fresh):
                if results[missing[j]] is None:
                    store(j, score)
        return [r if r is not None else Loglikelihood(error="no result") for r in results]

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()


def build_cached(config, enabled: bool, path: Path | Callable[[], Path] | None) -> Backend:
    """Builds the backend for `config`, behind a disk cache at `path` unless disabled.

    Replayed responses are already on disk, so a replay backend is never cached; no `path`
    (a detector outside a run, see `Detector.cache_place`) is no cache either. A function for
    `path` is asked where the cache is at each batch (see `CachedBackend`).
    """
    from mushroom.backends import build_backend
    from mushroom.backends.config import parse_backend_config

    cfg = parse_backend_config(config)
    if not enabled or path is None or cfg.kind == "replay":
        return build_backend(cfg)
    cache = path if callable(path) else ResponseCache(path)
    return CachedBackend(lambda: build_backend(cfg), cache, cfg)
