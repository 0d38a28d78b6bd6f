"""The run service: the one place that opens run folders, runs detectors and writes results.

Every entry point (the main job, `detect`, `run CONFIG`, `stack apply`) goes through it, so
they all resume, account and fail the same way:

- **Per-item ledger.** Each split folder has `items/<lang>.jsonl`, one `ItemResult` line per
  finished item (ok with its prediction, or failed with its error), appended and flushed as
  the detector emits it. A re-run of the same command on the same folder sends only the
  items that are missing or failed; a kill -9 loses at most the items in flight.
- **Loud failures.** Failed items are grouped by error, printed, written to
  `failures.jsonl`, counted in `summary.json`; no prediction file is written for a language
  with failed items and nothing is zipped, and the run ends with `RunFailed` (exit 3),
  unless `allow_failures` is set: then failed items are written as empty predictions and
  listed in `failures.jsonl` and the printed summary.
- **Config lock.** A folder holds one config (hashed without transport settings such as
  the server URL or concurrency, which do not change answers); another config is refused,
  except when the folder has no finished item yet (a run that failed before its first item
  does not lock the folder).
- **Honest timings.** `stages.json` keeps each stage's time from the run that computed it and
  marks stages a re-run reused.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from mushroom.backends.base import warnings_to
from mushroom.data.contexts import DEFAULT_SOURCES, load_context_files, load_contexts, support_contexts
from mushroom.data.jsonl import write_jsonl
from mushroom.data.predictions import mark_all, submission_name
from mushroom.data.records import ChannelRecord, Item, Prediction
from mushroom.data.runfolder import timestamp, versions, write_json
from mushroom.data.splits import load_split
from mushroom.detectors.base import Detector, ItemResult
from mushroom.errors import Interrupted, MushroomError, RunFailed, error_text, retry_advice
from mushroom.evaluation.submission import write_predictions, write_zip
from mushroom.runs.reporter import PlainReporter, Reporter, Table
from mushroom.util.words import plural

# Settings that change how answers are fetched, not what they are: a re-run may change
# them (a restarted server on another port, more concurrency) and still resume.
TRANSPORT_KEYS = frozenset(
    {"base_url", "concurrency", "timeout_s", "max_retries", "api_key_env", "batch_size", "device", "retry"}
)


def _strip_transport(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_transport(v) for k, v in value.items() if k not in TRANSPORT_KEYS}
    if isinstance(value, list):
        return [_strip_transport(v) for v in value]
    return value


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of what determines a run's answers."""
    blob = json.dumps(_strip_transport(config), sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def score_file(split: str, lang: str, path: Path, items: list[Item] | None = None):
    """One prediction file's ScoreResult, by the official path unless `items` are given.

    A run on part of a language (`limit`) is scored against those items' own labels, since
    the split's gold file has items the run never predicted.
    """
    from mushroom.data.predictions import load_predictions
    from mushroom.evaluation.score import score_files, score_predictions

    if items is None:
        from mushroom.data.splits import split_files

        return score_files(split_files(split)[lang], path)
    return score_predictions(items, list(load_predictions(path).values()))


ABSENT = object()
MAX_CHANGES_SHOWN = 10
# What a run writes at the top of its folder: a folder holding only these (a run whose
# config.json was lost) is no folder of the user's own files.
RUN_FILES = frozenset(
    "config.json versions.json stages.json summary.json failures.jsonl scores.json scores.md "
    "submission.zip stack.json items predictions raw val members responses.cache.jsonl".split()
)


def config_changes(old: Any, new: Any, key: str = "") -> list[str]:
    """Each setting that differs between two configs: `options.threshold: 0.25 -> 0.3`.

    A refused folder must say what differs, or the user has to diff two JSON files by hand
    to learn that a default moved. Transport settings are left out (they may change);
    lists of settings records (the main job's members) are compared item by item, other
    lists whole, since a source list that changed order is one change.
    """
    old, new = _strip_transport(old), _strip_transport(new)
    if isinstance(old, dict) and isinstance(new, dict):
        changes = []
        for name in list(old) + [k for k in new if k not in old]:
            sub = f"{key}.{name}" if key else str(name)
            changes += config_changes(old.get(name, ABSENT), new.get(name, ABSENT), sub)
        return changes
    if isinstance(old, list) and isinstance(new, list) and all(isinstance(v, dict) for v in old + new):
        # record by record, one added or dropped at the end named as such (a variant added to a
        # run config showed only the lists' common beginning, cut at 80 characters)
        pairs = itertools.zip_longest(old, new, fillvalue=ABSENT)
        return [c for k, (a, b) in enumerate(pairs) for c in config_changes(a, b, f"{key}[{k}]")]
    if old == new:
        return []
    return [f"{key or '(config)'}: {_shown(old)} -> {_shown(new)}"]


def _shown(value: Any) -> str:
    if value is ABSENT:
        return "(not set)"
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 80 else text[:77] + "..."


def fingerprint(inputs: list[Path], extra: dict[str, Any]) -> str:
    """Hash of files' contents and settings: a stage whose fingerprint is unchanged is reused."""
    digest = hashlib.sha256(json.dumps(extra, sort_keys=True, default=str).encode())
    for path in sorted(inputs):
        digest.update(str(path.name).encode())
        digest.update(path.read_bytes() if path.is_file() else b"<missing>")
    return digest.hexdigest()[:16]


class Ledger:
    """One language's item outcomes: an append-only JSONL file, the last line per id wins."""

    def __init__(self, path: Path):
        self.path = path
        self.results: dict[str, ItemResult] = {}
        self.unreadable = 0
        self._lock = threading.Lock()
        if path.exists():
            with path.open("rb+") as raw:
                raw.seek(0, 2)
                if raw.tell() and (raw.seek(-1, 2), raw.read(1))[1] != b"\n":
                    raw.write(b"\n")  # a kill cut the last line: later lines start afresh
            with path.open(encoding="utf-8") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    try:
                        result = ItemResult.model_validate_json(line)
                    except ValidationError:
                        self.unreadable += 1  # that item is simply done again
                        continue
                    self.results[result.id] = result

    def add(self, result: ItemResult) -> None:
        line = result.model_dump_json(exclude_defaults=True)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write(line + "\n")
                out.flush()
            self.results[result.id] = result

    def ok(self, item_id: str) -> bool:
        res = self.results.get(item_id)
        return res is not None and res.status == "ok"


@dataclass
class Failure:
    """One failed item of a run."""

    split: str
    lang: str
    id: str
    error: str
    detector: str

    def row(self) -> dict[str, str]:
        return {
            "split": self.split,
            "lang": self.lang,
            "id": self.id,
            "detector": self.detector,
            "error": self.error,
        }


@dataclass
class SplitOutput:
    """What one detector left for one split: prediction files, items, outcomes and counts."""

    split: str
    files: dict[str, Path] = field(default_factory=dict)
    items: dict[str, list[Item]] = field(default_factory=dict)
    predictions: dict[str, list[Prediction]] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    contexts_missing: dict[str, dict[str, int]] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] = field(default_factory=dict)
    done_now: int = 0
    reused: int = 0


_FALL_BACK = (
    "; those items' predictions are empty or fall back, so the scores say little about the method: "
    "check the model, prompt and server"
)
_RAW_HINT = " (raw/ has every response; `--backend replay` re-parses them)"  # in a run folder
# (unusable counter, out of counter, what they count): a model that answers every request
# with text the parser cannot read leaves every prediction empty, which scores like a quiet
# "nothing hallucinated" unless someone says so. A failed request is not among them: it
# fails its item, which the run reports as failed (a warning that its prediction "is empty
# or falls back" said the opposite). What each means is _FALL_BACK, or _MEANING's line:
_UNUSABLE = (
    ("llm.unparseable", "llm.requests", "LLM responses were unparseable"),
    ("chain.decomposition_failures", "chain.items", "answers could not be decomposed into claims"),
    ("chain.verify_failures", "chain.items", "answers' claims could not be verified"),
    ("pyes.unusable", "pyes.requests", "P(Yes) requests gave no usable score"),
    # parsed, but what the model named is not in the answer (an echoed template, a paraphrase)
    ("llm.lost", "llm.claims", "claimed spans were not found in the answer"),
    ("chain.claims_not_in_answer", "chain.claims", "decomposed claims were not found in the answer"),
    ("chain.spans_not_located", "chain.spans", "wrong spans were not found in the answer"),
    ("llm.truncated", "llm.requests", "LLM responses used their whole max_tokens budget and were cut off"),
    (
        "chain.truncated",
        "chain.requests",
        "chain responses used their whole max_tokens budget and were cut off",
    ),
)
_CUT = " (the repair parser closed what it could): raise max_tokens, or the model is repeating itself"
_MEANING = {"llm.truncated": _CUT, "chain.truncated": _CUT}
UNUSABLE_SHARE = 0.5


def unusable_warnings(where: str, stats: dict[str, int], in_run: bool = True) -> list[str]:
    """Warnings for counters saying that most model output of a language was unusable or cut off.

    Outside a run (`in_run` False: the Python API) the advice names no run folder.
    """
    out = []
    for bad, total, what in _UNUSABLE:
        n, of = stats.get(bad, 0), stats.get(total, 0)
        if of and n / of >= UNUSABLE_SHARE:
            meaning = _MEANING.get(bad) or _FALL_BACK + (_RAW_HINT if in_run else "")
            out.append(f"{where}: {n} of {of} {what}{meaning}")
    return out


def _sum_stats(results: list[ItemResult]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for r in results:
        total.update(r.stats)
        total["items.ok" if r.status == "ok" else "items.failed"] += 1
    return dict(sorted(total.items()))


_HELD: dict[Path, list[Any]] = {}  # folders this process has locked -> [open lock file, holders]


class RunService:
    """Opens (or resumes) one run folder and does every run's bookkeeping there."""

    def __init__(
        self,
        out: Path,
        config: dict[str, Any],
        reporter: Reporter | None = None,
        quiet: bool = False,
        allow_failures: bool = False,
    ):
        self.out = Path(out)
        self.config = config
        self.reporter: Reporter = reporter or PlainReporter()
        self.quiet = quiet
        self.allow_failures = allow_failures
        self.failures: list[Failure] = []
        self.warnings: list[str] = []
        self.started = time.perf_counter()
        self._lock_key: Path | None = None
        if self.out.exists() and not self.out.is_dir():
            raise MushroomError(f"--out {self.out} is a file; give a folder for the run")
        self.stages = self._read_json(self.out / "stages.json") or {}
        try:
            self.resumed = self._open()
        except BaseException:  # a refused folder is not kept locked by this process
            self.release()
            raise
        if self.resumed:
            self.reporter.message(f"the run in {self.out}", lead="resuming")

    # -- the folder -------------------------------------------------------------------------

    @staticmethod
    def _read_json(path: Path) -> Any:
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as exc:
            raise MushroomError(f"{path}: unreadable ({exc.msg}); delete it or choose another --out") from exc

    def has_results(self) -> bool:
        """Whether any item has finished in this folder (then its config is locked)."""
        return any(p.stat().st_size > 0 for p in self.out.glob("**/items/*.jsonl"))

    def _lock(self) -> None:
        """Holds the folder's lock for this process, or says which process holds it.

        Two runs on one folder would each call the model for every item, append to the same
        ledgers and overwrite each other's config. The lock is `flock` on `<out>/.lock`, so a
        killed run frees it. Services of one process on one folder (a resumed run in a
        notebook) share it, counted, so the last one to finish frees it. Where the file
        system cannot lock (some network mounts) or there is no `fcntl` (Windows), the run
        goes on unlocked, with a warning.
        """
        self._lock_key = key = self.out.resolve()
        if key in _HELD:
            _HELD[key][1] += 1
            return
        try:
            import fcntl
        except ImportError:
            self.warn(
                f"{self.out}: no file locks on this system; do not run two commands on this folder at once"
            )
            self._lock_key = None
            return
        handle = open(key / ".lock", "a+", encoding="utf-8")  # noqa: SIM115 (held until release)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            handle.close()
            raise MushroomError(
                f"{self.out} is in use by another mushroom run{f' (pid {holder})' if holder else ''}; "
                "wait for it to end, or choose another --out"
            ) from None
        except OSError as exc:
            handle.close()
            self.warn(
                f"{self.out}: cannot lock the folder ({exc.strerror}); do not run two commands on it at once"
            )
            self._lock_key = None
            return
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        _HELD[key] = [handle, 1]

    def release(self) -> None:
        """Frees this service's hold on the folder's lock (the end of a process frees it too)."""
        key, self._lock_key = self._lock_key, None
        if key is None or key not in _HELD:
            return
        _HELD[key][1] -= 1
        if _HELD[key][1] == 0:
            _HELD.pop(key)[0].close()

    def _open(self) -> bool:
        cfg_path = self.out / "config.json"
        if self.out.is_dir() and not cfg_path.exists():
            # A folder of the user's own files silently became a run folder. Said, not refused:
            # a shell's `> OUT/log.txt` or a stack.json beside `stack apply`'s --out is there first.
            others = sorted(
                p.name
                for p in self.out.iterdir()
                if not p.name.startswith((".", "mushroom.")) and p.name not in RUN_FILES
            )
            if others:
                self.reporter.message(
                    f"{self.out} holds files and no run "
                    f"({', '.join(others[:3])}{', ...' if len(others) > 3 else ''}): "
                    "the run is written beside them",
                    lead="note:",
                )
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock()
        wanted = {"config": self.config, "config_hash": config_hash(self.config)}
        existing = self._read_json(cfg_path)
        if existing is not None:
            if existing.get("config_hash") == wanted["config_hash"]:
                if existing.get("config") != self.config:  # transport settings changed
                    write_json(cfg_path, wanted)
                return True
            if self.has_results():
                changes = config_changes(existing.get("config", {}), self.config) or [
                    "(no setting differs: the folder's config hash was computed by another mushroom version)"
                ]
                shown = "".join(f"\n  {c}" for c in changes[:MAX_CHANGES_SHOWN])
                more = len(changes) - MAX_CHANGES_SHOWN
                tail = f"\n  ... and {more} more" if more > 0 else ""
                raise MushroomError(
                    f"{self.out} holds a run with another config; choose another --out folder, or "
                    f"run again with its settings. What differs (folder -> this command):{shown}{tail}"
                )
            self.reporter.message(
                f"{self.out} held a run that stopped before its first item; "
                "starting it again with this config",
                lead="note:",
            )
        write_json(cfg_path, wanted)
        write_json(self.out / "versions.json", versions())
        return False

    def record_stage(self, name: str, seconds: float, reused: bool, **extra: Any) -> None:
        """Keeps a stage's time from the run that computed it; a reused stage keeps the old time."""
        old = self.stages.get(name)
        if reused and old is not None:
            old["reused"] = True
        else:
            self.stages[name] = {"seconds": round(seconds, 2), "reused": reused, "at": timestamp(), **extra}
        write_json(self.out / "stages.json", self.stages)

    def reusable(self, name: str, inputs: list[Path], extra: dict[str, Any], outputs: list[Path]) -> bool:
        """Whether a stage can be skipped: same inputs (by content) and settings, outputs there.

        The fingerprint is saved with the stage by `record_stage(..., fingerprint=...)`; see
        `fingerprint`.
        """
        old = self.stages.get(name) or {}
        return old.get("fingerprint") == fingerprint(inputs, extra) and all(p.exists() for p in outputs)

    # -- detection --------------------------------------------------------------------------

    def detect_split(
        self,
        detector: Detector,
        split: str,
        folder: Path,
        langs: list[str] | None = None,
        sources: tuple[str, ...] | list[str] = DEFAULT_SOURCES,
        baseline_dir: Path | None = None,
        data: dict[str, list[Item]] | None = None,
        limit: int | None = None,
        context_files: list[Path] | None = None,
    ) -> SplitOutput:
        """Runs a detector over a split, item by item into the ledger, then writes the files.

        Args:
            detector: a built detector.
            split: "val", "test" or "train".
            folder: the split's folder in the run (prediction files, items/, raw/, stats.json).
            langs: languages to run (default: all languages of the split).
            sources: context sources, in order.
            baseline_dir: when given, the mark-all baseline is written there too.
            data: the items per language, when the caller has them already.
            limit: only the first N items of each language (a quick look at a model or prompt).
            context_files: JSONL files of `{"id", "context"}` to use instead of named sources.
        """
        data = data if data is not None else load_split(split, langs)
        if limit is not None:
            data = {lang: items[:limit] for lang, items in data.items()}
        out = SplitOutput(split=split, items=data)
        detector.workdir = folder / "raw"
        detector.workdir.mkdir(parents=True, exist_ok=True)
        ledgers = {lang: Ledger(folder / "items" / f"{lang}.jsonl") for lang in data}
        total = sum(len(v) for v in data.values())
        # One stage per detector and folder: variants (or members) running the same detector on
        # the same split keep their own times.
        rel = folder.relative_to(self.out).as_posix() if folder.is_relative_to(self.out) else str(folder)
        stage = f"{detector.name}:{split}" if rel in (".", split, "predictions") else f"{detector.name}:{rel}"
        t0 = time.perf_counter()
        with self.reporter.progress(self.quiet) as bar, warnings_to(self.warn):
            task = bar.add_task(f"{detector.name} on {split}", total=total)
            for lang, items in data.items():
                ledger = ledgers[lang]
                todo = [it for it in items if not ledger.ok(it.id)]
                bar.advance(task, len(items) - len(todo))
                out.reused += len(items) - len(todo)
                if baseline_dir is not None:
                    write_predictions(baseline_dir / submission_name(lang, split), mark_all(items), items)
                if todo:
                    ids = [i.id for i in items]
                    if context_files is not None:
                        ctx = load_context_files(context_files, ids)
                    else:
                        ctx = load_contexts(split, lang, sources, item_ids=ids)
                    out.contexts_missing[lang] = ctx.missing
                    bare = [i for i in ids if not support_contexts(ctx.by_id.get(i, []))]
                    if bare:
                        checks_only = sum(1 for i in bare if ctx.by_id.get(i))
                        self.warn(
                            f"{split}/{lang}: no context for {len(bare)} of {plural(len(ids), 'item')} from "
                            f"{', '.join(map(str, ctx.files or sources)) or 'any source'} (e.g. {bare[0]}); "
                            "context-based detectors flag nothing in them"
                            + (
                                f" ({checks_only} of them have only fact-check contexts, qa_*, which "
                                "support nothing)"
                                if checks_only
                                else ""
                            )
                        )
                    self._run_items(detector, lang, todo, ctx.by_id, ledger, bar, task, folder)
                    out.done_now += len(todo)
                self._write_language(detector, split, lang, items, ledger, folder, out)
        self._write_stats(folder, ledgers, out, stage)
        # A stage resumed after a kill was computed over several runs: the ledger's per-item
        # times add up all of it, where this run's wall time covers only the last part.
        item_seconds = round(sum(r.seconds or 0.0 for ld in ledgers.values() for r in ld.results.values()), 2)
        self.record_stage(
            stage, time.perf_counter() - t0, reused=out.done_now == 0, items=total, item_seconds=item_seconds
        )
        for warning in getattr(detector, "warnings", []):
            self.warn(warning)
        return out

    def warn(self, warning: str) -> None:
        if warning not in self.warnings:
            self.warnings.append(warning)
            self.reporter.warning(warning)

    def _run_items(self, detector, lang, todo, contexts, ledger, bar, task, folder) -> None:
        from mushroom.backends.rawlog import RawLog, raw_file

        detector.raw_log = RawLog(raw_file(folder / "raw", lang))
        size = detector.batch_items or len(todo)
        expected = {it.id for it in todo}
        emitted: set[str] = set()
        last = [time.perf_counter()]
        work: dict[str, Any] = {}  # rows under the stage's bar for work between items

        def end_work() -> None:
            for row in work.values():
                bar.remove_task(row)
            work.clear()

        def on_work(what: str, done: int, total: int) -> None:
            if what not in work:
                work[what] = bar.add_task(f"  {what}", total=total)
            bar.update(work[what], completed=done, total=total)
            if done >= total:
                bar.remove_task(work.pop(what))

        def emit(result: ItemResult) -> None:
            if result.id not in expected:
                raise MushroomError(f"detector {detector.name} emitted an unknown item {result.id!r}")
            # An item is finished, so the work before it is over, even one that stopped short
            # (a failed chunk encoding whose items are then encoded one by one).
            end_work()
            now = time.perf_counter()
            result.seconds = round(now - last[0], 4)
            last[0] = now
            ledger.add(result)
            emitted.add(result.id)
            bar.advance(task, 1)

        detector.on_work = on_work
        try:
            for k in range(0, len(todo), size):
                batch = todo[k : k + size]
                reason = f"detector {detector.name} emitted no result"
                try:
                    detector.run(batch, contexts, emit)
                except MushroomError:
                    raise
                except Exception as exc:  # the batch's unfinished items fail with this error
                    reason = error_text(exc)
                for it in batch:
                    if it.id not in emitted:
                        emit(ItemResult.failed(it.id, reason))
        except KeyboardInterrupt:
            done = sum(len(Ledger(p).results) for p in self.out.glob("**/items/*.jsonl"))
            raise Interrupted(
                f"interrupted during {detector.name}, language {lang!r}: {plural(done, 'finished item')} "
                f"(over all of the run's splits and members) saved in {self.out}; run the same command "
                "again to resume where it stopped"
            ) from None
        finally:
            detector.raw_log = None
            detector.on_work = None
            end_work()

    def _write_language(self, detector, split, lang, items, ledger, folder, out: SplitOutput) -> None:
        path = folder / submission_name(lang, split)
        failed = [
            Failure(
                split,
                lang,
                it.id,
                getattr(ledger.results.get(it.id), "error", None) or "no result",
                detector.name,
            )
            for it in items
            if not ledger.ok(it.id)
        ]
        out.failures.extend(failed)
        self.failures.extend(failed)
        if failed and not self.allow_failures:
            path.unlink(missing_ok=True)  # never leave a complete-looking file from an older pass
            return
        preds = [
            ledger.results[it.id].prediction if ledger.ok(it.id) else Prediction(id=it.id) for it in items
        ]
        write_predictions(path, preds, items)
        out.files[lang] = path
        out.predictions[lang] = preds
        channels = [
            ChannelRecord(id=it.id, channels=ledger.results[it.id].channels)
            for it in items
            if ledger.ok(it.id) and ledger.results[it.id].channels
        ]
        if channels:
            from mushroom.data.channels import channel_file

            write_jsonl(channel_file(folder / "raw", lang), channels)

    def _write_stats(self, folder: Path, ledgers: dict[str, Ledger], out: SplitOutput, stage: str) -> None:
        per_lang = {lang: _sum_stats(list(ld.results.values())) for lang, ld in ledgers.items()}
        out.stats = {
            **per_lang,
            "all": _sum_stats([r for ld in ledgers.values() for r in ld.results.values()]),
        }
        write_json(folder / "stats.json", out.stats)
        for lang, stats in per_lang.items():
            for warning in unusable_warnings(f"{stage} {lang}", stats):
                self.warn(warning)

    # -- results ----------------------------------------------------------------------------

    def score(
        self,
        split: str,
        files: dict[str, Path],
        folder: Path,
        title: str,
        baseline_files: dict[str, Path] | None = None,
        items: dict[str, list[Item]] | None = None,
    ) -> list[dict]:
        """Scores written prediction files against the split's gold (the official path).

        Writes scores.json (per item) and scores.md into `folder` and reports the table. With
        `items` (a `limit`ed run), each file is scored against those items' gold labels only.

        Returns:
            The table rows (per language, with CIs, baselines and the leaderboard #1).
        """
        from mushroom.evaluation.leaderboard import load_leaderboard
        from mushroom.evaluation.tables import markdown_table, score_rows

        if not files:
            self.reporter.message("no complete language", lead=f"nothing to score on {split}:")
            for name in ("scores.json", "scores.md"):  # an earlier pass's scores no longer hold
                (folder / name).unlink(missing_ok=True)
            return []

        def one(lang: str, path: Path):
            return score_file(split, lang, path, items[lang] if items is not None else None)

        results = {lang: one(lang, path) for lang, path in files.items()}
        baselines = None
        if baseline_files is not None:
            baselines = {lang: one(lang, path) for lang, path in baseline_files.items()}
        rows = score_rows(results, baselines, load_leaderboard())
        per_lang = {lang: r.to_dict(with_items=True) for lang, r in results.items()}
        payload: dict = per_lang
        if baselines is not None:
            payload = {"per_lang": per_lang, "mark_all": {lang: r.to_dict() for lang, r in baselines.items()}}
        write_json(folder / "scores.json", payload)
        (folder / "scores.md").write_text(markdown_table(rows), encoding="utf-8")
        self.reporter.table(Table(title, kind="scores", rows=rows))
        return rows

    def submit(self, files: list[Path], zip_path: Path) -> Path | None:
        """Zips submission files, unless items failed and failures are not allowed."""
        if self.failures and not self.allow_failures:
            zip_path.unlink(missing_ok=True)
            return None
        if files and all("-tst" in f.name for f in files):
            from mushroom.data.splits import split_files

            every = split_files("test")
            if len(files) < len(every):
                self.warn(
                    f"{zip_path.name} holds {len(files)} of the {len(every)} test languages; a "
                    "leaderboard submission usually has one file per language (a run over every "
                    "language writes them all)"
                )
        return write_zip(zip_path, files)

    def report_stats(self, title: str, stats: dict[str, int]) -> None:
        """The per-stage counters of a split (model-backed detectors have them): a row a counter."""
        stages: dict[str, dict[str, int]] = {}
        for key, value in stats.items():
            stage, _, counter = key.rpartition(".")
            if stage and stage != "items":
                stages.setdefault(stage, {})[counter] = value
        if not stages:
            return
        counters = list(dict.fromkeys(c for named in stages.values() for c in named))
        rows = [[counter, *(stages[st].get(counter, "") for st in stages)] for counter in counters]
        self.reporter.table(Table(title, columns=["counter", *stages], rows=rows))

    def finish(self, summary: dict[str, Any]) -> dict[str, Any]:
        """Writes summary.json and failures.jsonl, reports the failures; RunFailed if any."""
        # An error that names its item ("no recorded response for 'val-en-1'") would make a
        # group of one per item; the item's id is left out of the grouping key.
        keyed = [(f.error.replace(repr(f.id), "'<id>'"), f) for f in self.failures]
        groups = Counter(key for key, _ in keyed)
        summary = {
            **summary,
            "items_failed": len(self.failures),
            "failures_by_error": dict(groups.most_common()),
            "allow_failures": self.allow_failures,
            "warnings": self.warnings,
            "stages": self.stages,
            "seconds": round(time.perf_counter() - self.started, 2),
        }
        write_jsonl(self.out / "failures.jsonl", [f.row() for f in self.failures])
        write_json(self.out / "summary.json", summary)
        self.release()
        if self.failures:
            title = f"{plural(len(self.failures), 'failed item')}, by error"
            rows = []
            for error, n in groups.most_common(10):
                example = next(f for key, f in keyed if key == error)
                rows.append([n, error[:200], f"{example.split}/{example.lang}/{example.id}"])
            self.reporter.table(Table(title, columns=["items", "error", "for example"], rows=rows))
            where = self.out / "failures.jsonl"
            if not self.allow_failures:
                raise RunFailed(
                    f"{plural(len(self.failures), 'item')} failed (listed in {where}); "
                    f"no submission was written. {retry_advice([f.error for f in self.failures])}, "
                    "or add --allow-failures to write files with those items left empty"
                )
            self.reporter.message(
                f"{plural(len(self.failures), 'item')} left as empty predictions in the files "
                f"(listed in {where})",
                lead="--allow-failures:",
            )
        self.reporter.message(f"run folder: {self.out}  ({summary['seconds']} s)")
        return summary
