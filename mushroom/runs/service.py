"""The run service: the one place that opens run folders, runs detectors and writes results.

Every entry point (the main job, `detect`, `run CONFIG`, `stack apply`) goes through it, so
they all resume, account and fail the same way:

- **Per-item ledger.** Each split folder has `items/<lang>.jsonl`, one `ItemResult` line per
  finished item (ok with its prediction, or failed with its error), appended and flushed as
  the detector emits it. A re-run of the same command on the same folder sends only the
  items that are missing or failed; a kill -9 loses at most the items in flight.
- **Flat memory.** Items are read, run and recorded a chunk at a time (`CHUNK_ITEMS`); the
  run keeps per item its id and where its ledger line is, and writes prediction files,
  stats and the mark-all baseline from the ledger as streams. Evidence channels are stored
  once, in `raw/channels.<lang>.jsonl.gz` (see `mushroom.data.channels`).
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

import itertools
import json
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Set, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mushroom.backends.base import retry_note
from mushroom.data.contexts import (
    DEFAULT_SOURCES,
    ContextSet,
    fact_checks,
    graded_unusable,
    grades_file,
    load_contexts,
    support_contexts,
)
from mushroom.data.itemstream import ContextFiles
from mushroom.data.jsonl import JsonlWriter, read_utf8, write_jsonl
from mushroom.data.label_files import EMPTY_ANSWER
from mushroom.data.predictions import mark_all, prediction_file_lang, submission_name
from mushroom.data.records import Item, Prediction
from mushroom.data.runfolder import (
    RUN_MARKS,
    answer_digest,
    changed_versions,
    run_config_file,
    timestamp,
    versions,
    write_json,
)
from mushroom.data.splits import load_split
from mushroom.detectors.base import Detector, ItemResult
from mushroom.errors import (
    SERVER_CONTEXT_FLAGS,
    DataError,
    Interrupted,
    MushroomError,
    RunFailed,
    error_text,
    retry_advice,
)
from mushroom.evaluation.submission import write_zip
from mushroom.runs import CHUNK_ITEMS
from mushroom.runs.confighash import (
    FILE_DIGESTS,
    HASH_SCHEME,
    config_changes,
    config_hash,
    fingerprint,
    listed_changes,
    only_limit_grows,
    unrecorded_files,
)
from mushroom.runs.folders import RUN_FILES, TOP_FILES, enclosing_run, held_runs, protected_folder
from mushroom.runs.ledger import Ledger, item_digest
from mushroom.runs.reporter import PlainReporter, Reporter, Table
from mushroom.util import folderlock
from mushroom.util.files import missing_reason
from mushroom.util.interrupts import fallback_hint
from mushroom.util.names import safe_name
from mushroom.util.registry import stop_for_import
from mushroom.util.warn import warnings_to
from mushroom.util.words import clipped, listed, one_line, plural


def score_file(
    split: str, lang: str, path: Path, items: Iterable[Item] | None = None, leave_out: Set[str] = frozenset()
):
    """One prediction file's ScoreResult, by the official path unless `items` are given.

    A run on part of a language (`limit`) is scored against those items' own labels, since
    the split's gold file has items the run never predicted. Both are read as streams: a run
    over an items file of a million answers scores them without holding them. Predictions of
    ids in `leave_out` are not read (items that failed, which `items` leaves out too).
    """
    from mushroom.evaluation.score import score_files, score_predictions

    if items is None:
        from mushroom.data.splits import split_files

        return score_files(split_files(split)[lang], path)
    return score_predictions(items, (p for p in _written_predictions(path) if p.id not in leave_out), path)


def _written_predictions(path: Path) -> Iterator[Prediction]:
    """The predictions of a file this run wrote (and checked), a line at a time."""
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield Prediction.model_validate(json.loads(line))


@dataclass
class Failure:
    """One failed item of a run."""

    split: str
    lang: str
    id: str
    error: str
    detector: str
    folder: str = ""  # where its files are in the run: a variant's or member's failures apart

    def row(self) -> dict[str, str]:
        return {
            "split": self.split,
            "lang": self.lang,
            "id": self.id,
            "detector": self.detector,
            **({"folder": self.folder} if self.folder not in ("", ".") else {}),
            "error": self.error,
        }


@dataclass
class SplitOutput:
    """What one detector left for one split: prediction files, items, outcomes and counts."""

    split: str
    files: dict[str, Path] = field(default_factory=dict)
    # the items per language as given (lists, or an items file's languages read again on demand)
    items: Mapping[str, Iterable[Item]] = field(default_factory=dict)
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
# pyes takes no --backend: its models list replays (a `kind = "replay"` entry per model)
_PYES_RAW_HINT = ' (raw/ has every response; a models entry of kind "replay" re-reads them)'
# (unusable counter, out of counter, what they count): a model that answers every request
# with text the parser cannot read leaves every prediction empty, which scores like a quiet
# "nothing hallucinated" unless someone says so. A failed request is not among them: it
# fails its item, which the run reports as failed (a warning that its prediction "is empty
# or falls back" said the opposite). What each means is _FALL_BACK, or _MEANING's line:
_UNUSABLE = (
    ("llm.unparseable", "llm.replies", "LLM responses were unparseable"),
    ("chain.decomposition_failures", "chain.items", "answers could not be decomposed into claims"),
    ("chain.verify_failures", "chain.items", "answers' claims could not be verified"),
    # checked nothing, so left "could not check" (unverifiable), which is no finding either
    ("chain.no_claims", "chain.items", "answers were decomposed into no claims"),
    (
        "chain.no_claims_in_answer",
        "chain.items",
        "answers were decomposed into claims none of which is in them",
    ),
    ("chain.claims_unjudged", "chain.claims", "claims got no readable verdict"),
    ("pyes.unusable", "pyes.answers", "P(Yes) answers gave no usable score"),
    # parsed, but what the model named is not in the answer (an echoed template, a paraphrase)
    ("llm.lost", "llm.claims", "claimed spans were not found in the answer"),
    ("chain.claims_not_in_answer", "chain.claims", "decomposed claims were not found in the answer"),
    ("chain.spans_not_located", "chain.spans", "wrong spans were not found in the answer"),
    ("llm.truncated", "llm.replies", "LLM responses used their whole max_tokens budget and were cut off"),
    (
        "llm.stopped_by_server",
        "llm.replies",
        "LLM responses were stopped for length by the server under half their max_tokens",
    ),
    (
        "chain.truncated",
        "chain.replies",
        "chain responses used their whole max_tokens budget and were cut off",
    ),
    ("llm.content_filtered", "llm.replies", "LLM responses were stopped by the server's content filter"),
)
_CUT = " (the repair parser closed what it could): raise max_tokens, or the model is repeating itself"
_UNCHECKED = ": nothing checked them, so they are left unverifiable (the chain's unverifiable_probability)"
_MEANING = {
    "llm.truncated": _CUT,
    "llm.stopped_by_server": (
        ": the prompt nearly fills the server's context, or the server caps replies; raise its context "
        f"length ({SERVER_CONTEXT_FLAGS}), not max_tokens"
    ),
    "chain.truncated": _CUT,
    "llm.content_filtered": (
        ": the filter stops the same request again, so max_tokens does not help; try another model, or "
        "the server without its filter"
    ),
    "chain.no_claims": _UNCHECKED,
    "chain.no_claims_in_answer": _UNCHECKED,
    "chain.claims_unjudged": _UNCHECKED,
}
# replies no reading could use: no vote for "nothing wrong", so an item with nothing else failed
_UNREAD = (
    '; such a reply is no vote for "nothing wrong": an item with no other reply failed. Check the '
    "model, prompt and server"
)
_NOT_READ = {
    "llm.unparseable": _UNREAD,
    # a reply naming only text not in the answer votes for nothing (an item with no other failed)
    "llm.lost": _UNREAD.replace("such a reply", "a reply that named nothing in the answer"),
    "chain.decomposition_failures": _UNREAD,
    "chain.verify_failures": _UNREAD,
}
UNUSABLE_SHARE = 0.5


def unusable_warnings(where: str, stats: dict[str, int], in_run: bool = True) -> list[str]:
    """Warnings for counters saying that most model output of a language was unusable, or some cut off.

    Outside a run (`in_run` False: the Python API) the advice names no run folder.
    """
    out = []
    said = _unusable_keys(stats)
    for bad, total, what in _UNUSABLE:
        if bad in said:
            n, of = stats[bad], stats[total]
            hint = (_PYES_RAW_HINT if bad.startswith("pyes.") else _RAW_HINT) if in_run else ""
            meaning = _MEANING.get(bad) or _NOT_READ.get(bad, _FALL_BACK) + hint
            out.append(f"{where}: {n} of {of} {what}{meaning}")
    return out


def _unusable_keys(stats: dict[str, int]) -> set[str]:
    """The counters of `_UNUSABLE` that `unusable_warnings` speaks of."""
    out = set()
    for bad, total, _ in _UNUSABLE:
        n, of = stats.get(bad, 0), stats.get(total, 0)
        # a cut-off reply is said however few: each lost what the model had left to say
        if of and n and (n / of >= UNUSABLE_SHARE or bad in _MEANING):
            out.add(bad)
    return out


# Counters of model output read only in part: a run's counts table shows them; the Python API,
# which has none, said nothing of them (an entry dropped read as a model that found less).
PARTLY_READ = (
    "llm.unparseable",
    "llm.empty_replies",
    "llm.cut_before_any_span",
    "llm.lost_replies",
    "llm.invalid_entries",
    "llm.bad_probabilities",
    "llm.lost",
    "chain.unreadable_claims",
    "chain.claims_not_in_answer",
    "chain.unreadable_verdicts",
    "chain.unknown_claim_verdicts",
    "chain.claims_unjudged",
    "chain.invalid_entries",
    "chain.bad_probabilities",
    "chain.spans_not_located",
    "pyes.unusable",
)


def partly_read_warning(where: str, stats: dict[str, int]) -> str | None:
    """One line naming the model output read only in part, below `unusable_warnings`' share.

    For the Python API: a run's counts table lists these counters. What `unusable_warnings`
    already said is not said again.
    """
    said = _unusable_keys(stats)
    found = [f"{key} {stats[key]}" for key in PARTLY_READ if stats.get(key) and key not in said]
    if not found:
        return None
    return (
        f"{where}: part of the model's output could not be used as written ({', '.join(found)}; "
        "their meaning: docs/reference/run-folders.md, stats.json): the spans returned leave it "
        "out, or take a default in its place"
    )


_PAST_END = (
    "its result in {path} has a span past the end of the answer (a line edited by hand, or of "
    "another answer): a re-run of the folder computes it again"
)


def _reaches_past(prediction: Prediction, length: int) -> bool:
    """Whether a ledger prediction has a span past its answer's end.

    The item's inputs are checked by digest; its prediction was not: such a span went into
    the submission, which then failed its own check on every re-run, naming the file the
    run had just written.
    """
    return any(s.end > length for s in prediction.soft_labels) or any(
        h[1] > length for h in prediction.hard_labels
    )


def _sum_stats(results: Iterable[ItemResult]) -> dict[str, int]:
    """Summed counters of results, read once."""
    total: Counter[str] = Counter()
    for r in results:
        total.update(r.stats)
        total["items.ok" if r.status == "ok" else "items.failed"] += 1
    return dict(sorted(total.items()))


def _chunk_size(detector: Detector) -> int:
    """CHUNK_ITEMS, rounded up to whole `batch_items` batches so chunking never splits one."""
    size = detector.batch_items
    return -(-CHUNK_ITEMS // size) * size if size else CHUNK_ITEMS


class _First:
    """The first `limit` items of a re-readable collection (an items file's language), re-readable."""

    def __init__(self, items: Iterable[Item], limit: int):
        self.items, self.limit = items, limit

    def __len__(self) -> int:
        return min(len(self.items), self.limit)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Item]:
        return itertools.islice(self.items, self.limit)


def _retry_tally(detector: Detector) -> Counter[str]:
    """The retries of the detector's backends so far (`Backend.retry_tally`), added up."""
    tally: Counter[str] = Counter()
    for backend in detector.built_backends():
        tally.update(backend.retry_tally())
    return tally


def _first(items: Iterable[Item], limit: int) -> Iterable[Item]:
    """The first `limit` items: a list's slice, a sized collection's view, a generator's first ones."""
    if isinstance(items, list):
        return items[:limit]
    if isinstance(items, Sized):
        return _First(items, limit)
    return itertools.islice(items, limit)


def _contexts_of(contexts: ContextSet, ids: list[str]) -> ContextSet:
    """A language's contexts cut to some of its items, with what each source lacks among them."""
    by_id = {i: contexts.by_id[i] for i in ids if i in contexts.by_id}
    missing = {
        source: sum(1 for i in ids if not any(c.source == source for c in by_id.get(i, [])))
        for source in contexts.files
    }
    return ContextSet(by_id=by_id, missing=missing, files=contexts.files)


@dataclass
class _ContextTally:
    """What a language's chunks lacked in contexts, summed for one warning at its end."""

    missing: dict[str, int] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    bare: int = 0  # items without a supporting context
    first_bare: str = ""
    checks_only: int = 0  # ... of which have fact-check contexts only
    graded_out: int = 0  # ... of which `mushroom contexts` graded every context irrelevant
    cut: int = 0  # items whose contexts a model-backed detector cuts to its max_context_chars
    _unusable: dict[str, set[str]] = field(default_factory=dict)  # source file -> graded-out ids

    def add(
        self, ctx: ContextSet, ids: list[str], limit: int | None = None, support_only: bool = False
    ) -> None:
        if limit is not None:  # what its prompt shows of them: a long one lost its tail, unsaid
            from mushroom.detectors.llm import context_text

            shown = support_contexts if support_only else list
            self.cut += sum(len(context_text(shown(ctx.by_id.get(i, [])), limit)) > limit for i in ids)
        self.files.update(ctx.files)
        for path in ctx.files.values():
            if path not in self._unusable:
                self._unusable[path] = graded_unusable(Path(path))
        for source, n in ctx.missing.items():
            self.missing[source] = self.missing.get(source, 0) + n
        for i in ids:
            if not support_contexts(ctx.by_id.get(i, [])):
                self.first_bare = self.first_bare or i
                self.bare += 1
                self.checks_only += bool(fact_checks(ctx.by_id.get(i, [])))  # not an empty text
                self.graded_out += any(i in out for out in self._unusable.values())

    def warning(self, split: str, lang: str, n_items: int, sources: Iterable[str], detector: Detector) -> str:
        grades = ", ".join(str(grades_file(Path(p))) for p, out in self._unusable.items() if out)
        # each detector's own word: "context-based detectors flag nothing" was said of llm,
        # which judged them all the same
        does = f"{detector.name} {detector.without_context}"
        return (
            f"{split}/{lang}: no context for {self.bare} of {plural(n_items, 'item')} from "
            f"{', '.join(map(str, self.files or sources)) or 'any source'} (e.g. {self.first_bare}); "
            + (f"{does} (counted as context.none)" if detector.needs_contexts else does)
            + (
                f" ({self.checks_only} of them have only fact-check contexts, qa_*, which support nothing)"
                if self.checks_only
                else ""
            )
            + (
                f"; {self.graded_out} of them had every context graded irrelevant by `mushroom "
                f"contexts` (see {grades})"
                if self.graded_out
                else ""
            )
        )


class RunService:
    """Opens (or resumes) one run folder and does every run's bookkeeping there."""

    def __init__(
        self,
        out: Path,
        config: dict[str, Any],
        reporter: Reporter | None = None,
        quiet: bool = False,
        allow_failures: bool = False,
        folder_flag: str = "--out",
        side_pass: bool = False,
    ):
        # `side_pass`: a pass that ends before the run's end (main-job --plan-only) leaves the
        # record of a finished run as it was: its summary.json, and its config.json unless the
        # folder is new. A plan at another budget made the finished run read as stopped, its
        # config naming the plan's budget beside another's submission.
        self.out = Path(out)
        self.side_pass = side_pass
        # the option that named the folder, for messages that advise another (a script's --work)
        self.folder_flag = folder_flag
        self.config = config
        self.reporter: Reporter = reporter or PlainReporter()
        self.quiet = quiet
        self.allow_failures = allow_failures
        self.failures: list[Failure] = []
        # what --allow-failures did with the failed items, when not "left empty" (the cascade)
        self.failed_items_note: str | None = None
        # the detectors the note is of (a cascade's model-backed members); None: every one
        self.failed_items_note_of: frozenset[str] | None = None
        self.warnings: list[str] = []
        self.started = time.perf_counter()
        self._lock_key: Path | None = None
        self._withdraw_hint: Callable[[], None] = lambda: None  # set once the folder is open
        if self.out.exists() and not self.out.is_dir():
            raise MushroomError(f"{self.folder_flag} {self.out} is a file; give a folder for the run")
        if self.out.is_symlink() and not self.out.exists():  # a loop, or a link to nothing
            raise MushroomError(f"{self.folder_flag} {self.out}: {missing_reason(self.out)}")
        if self.out.name == "-":
            raise MushroomError(
                f"{self.folder_flag} -: a run writes a folder, not to stdout (what it prints is on stdout "
                "already); give a folder name"
            )
        outer = enclosing_run(self.out)
        if outer is not None:
            raise MushroomError(
                f"{self.folder_flag} {self.out} is inside the run folder {outer}; its files would be "
                "mixed with that run's (read as its predictions, zipped with its submission). "
                f"Choose a folder outside it. If {outer} was made a run folder by a slip, its run's "
                f"config.json is what makes it one: move that away (with the run's other files)"
            )
        protected = protected_folder(self.out)
        if protected is not None:
            from mushroom.data.splits import workspace

            raise MushroomError(
                f"{self.folder_flag} {self.out} is {protected}: as a run folder, every later run inside "
                "it would be refused; give the run a folder of its own, such as "
                f"{workspace() / 'runs' / 'NAME'}"
            )
        from mushroom.data.splits import DEFAULT_DATA_DIR, in_data_dir

        if in_data_dir(self.out):
            # a run written over test-unlabeled/ replaced the official items with predictions
            raise MushroomError(
                f"{self.folder_flag} {self.out} is inside {DEFAULT_DATA_DIR}, the folder of the official "
                "data files; choose a folder outside it"
            )
        held = held_runs(self.out)
        if held:
            raise MushroomError(
                f"{self.folder_flag} {self.out} holds the run{'s' if len(held) > 1 else ''} "
                f"{listed(held, 3)}: this run's files would be mixed "
                f"with them (read as one more run of that folder). Give a folder of its own, such as "
                f"{self.out / 'new-run'}"
            )
        self.stages = self._read_stages(self.out / "stages.json")
        try:
            self.resumed = self._open()
        except BaseException:  # a refused folder is not kept locked by this process
            self.release()
            raise
        # the summary of an earlier pass is not this one's: a run stopped before its end has
        # none, which compare, sweep and report read as "not finished"
        if not side_pass:
            (self.out / "summary.json").unlink(missing_ok=True)
        if self.resumed:
            self.reporter.message(f"the run in {self.out}", lead="resuming")
            if not side_pass:
                self._record_versions()
        self._withdraw_hint = fallback_hint(
            lambda: (
                f"what finished is kept in {self.out}; run the same command again with "
                f"{self.same_folder} to go on (finished work is not done again)"
            )
        )

    def _record_versions(self) -> None:
        """Adds this pass's versions to versions.json where they differ from the folder's.

        Only the first pass's were written: a folder resumed after an upgrade held items of two
        versions, and its record named one (an audit). A change of what computes the numbers
        is warned of; a change of the checkout's commit alone is recorded.
        """
        path = self.out / "versions.json"
        before, now = self.read_json(path), versions()
        if not isinstance(before, dict):  # lost or damaged: this pass's stand for it
            write_json(path, now)
            return
        changed = changed_versions(before, now)
        if not changed:
            return
        resumed = before.get("resumed") if isinstance(before.get("resumed"), list) else []
        write_json(path, {**before, "resumed": [*resumed, {"at": timestamp(), "changed": changed}]})
        computing = {k: v for k, v in changed.items() if k not in ("git_commit", "platform")}
        if computing:
            shown = ", ".join(f"{k.removeprefix('packages.')} {a} -> {b}" for k, (a, b) in computing.items())
            self.warn(
                f"{self.out} was made with other versions ({clipped(shown, 200)}): the items computed now "
                "may differ from its others (each pass's versions are in versions.json)"
            )

    # -- the folder -------------------------------------------------------------------------

    @property
    def _top_predictions(self) -> bool:
        """Whether this run writes prediction files at its top.

        The main job and `stack apply` do; `detect` writes into predictions/, and a run
        config into val/ and test/.
        """
        return self.config.get("job") in ("main", "stack-apply")

    def where(self, folder: Path) -> str:
        """A folder of the run as a path inside it ("vote3/val"), or whole when it is outside."""
        return folder.relative_to(self.out).as_posix() if folder.is_relative_to(self.out) else str(folder)

    def read_json(self, path: Path) -> Any:
        """A JSON file of the folder; None if it is missing, an error naming it if unreadable."""
        try:
            return json.loads(read_utf8(path))
        except FileNotFoundError:
            return None
        except json.JSONDecodeError as exc:
            raise MushroomError(
                f"{path}: unreadable ({exc.msg}); delete it or choose another {self.folder_flag}"
            ) from exc

    def _read_stages(self, path: Path) -> dict[str, dict[str, Any]]:
        """The folder's stage records, or an error naming the file when it holds something else.

        A hand-edited `{"lexical:items": 1}` failed the run as an internal TypeError (an audit).
        """
        stages = self.read_json(path)
        if stages is None:
            return {}
        if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
            raise MushroomError(
                f"{path}: not a record of stages (an object of one object per stage); delete it "
                f"(the next run records the stages again) or choose another {self.folder_flag}"
            )
        return stages

    def has_results(self) -> bool:
        """Whether any item has finished in this folder, or a run finished there (then its config is locked).

        A `stack apply` writes its files with no item ledger: its finished folder (its
        summary.json) was taken for one that stopped before its first item, and a run of
        another config overwrote its submission.
        """
        if (self.out / "summary.json").is_file():
            return True
        return any(p.stat().st_size > 0 for p in self.out.glob("**/items/*.jsonl"))

    def _lock(self) -> None:
        """Holds the folder's lock for this process, or says which process holds it.

        Two runs on one folder would each call the model for every item, append to the same
        ledgers and overwrite each other's config (`mushroom.util.folderlock`).
        """
        self._lock_key = folderlock.hold(self.out, self.folder_flag, self.warn)

    def release(self) -> None:
        """Frees this service's hold on the folder's lock (the end of a process frees it too)."""
        self._withdraw_hint()
        key, self._lock_key = self._lock_key, None
        folderlock.release(key)

    def _open(self) -> bool:
        cfg_path = self.out / "config.json"
        if self.out.is_dir() and not cfg_path.exists():
            # A folder of the user's own files silently became a run folder. Said, not refused:
            # a shell's `> OUT/log.txt` or a stack.json beside `stack apply`'s --out is there first.
            # (Unless the run would replace one of them, below.)
            names = sorted(p.name for p in self.out.iterdir())
            # A run's folder that lost its config.json keeps its marks (versions.json): the run
            # starts again there. A folder without them holds the user's own files, and the files
            # this run writes at its top (a main job's submission) would replace theirs: refused,
            # not noted. Folders and a stack.json beside `stack apply`'s --out are left alone.
            if not any(mark in names for mark in RUN_MARKS):
                clash = [
                    n for n in names if n in TOP_FILES or (self._top_predictions and prediction_file_lang(n))
                ]
                if clash:
                    raise MushroomError(
                        f"{self.folder_flag} {self.out} holds files and no run, and this run would replace "
                        f"{listed(clash, 3)}; choose an empty or new folder, or move them first"
                    )
            others = [n for n in names if not n.startswith((".", "mushroom.")) and n not in RUN_FILES]
            if others:
                self.reporter.message(
                    f"{self.out} holds files and no run "
                    f"({listed(others, 3)}): "
                    "the run is written beside them",
                    lead="note:",
                )
        self.out.mkdir(parents=True, exist_ok=True)
        self._lock()
        wanted = {"config": self.config, "config_hash": config_hash(self.config), "hash_scheme": HASH_SCHEME}
        existing = self.read_json(cfg_path)
        if existing is not None and run_config_file(cfg_path) is None:
            # a project's own config.json was replaced by the run's (or compared with it as a
            # run's, every setting "(not set) -> ..."); a run's own that lost its shape is damaged
            damaged = any((self.out / mark).is_file() for mark in RUN_MARKS)
            raise MushroomError(
                f"{cfg_path} is no run's config (a `config` table and its `config_hash`): "
                + (
                    "this run folder's config was damaged; restore it, or choose another "
                    if damaged
                    else "the folder holds a config of something else, which the run would replace; "
                    "choose another "
                )
                + f"{self.folder_flag} folder"
            )
        if existing is not None:
            # a folder hashed with a key since left out of the hash (`description`) has no
            # setting that differs: it is this run's
            same = existing.get("config_hash") == wanted["config_hash"] or (
                isinstance(existing.get("config"), dict)
                and not config_changes(existing["config"], self.config)
            )
            if (
                not same
                and only_limit_grows(existing.get("config"), self.config)
                # not a folder whose settings were edited by hand: refused below, as they are
                and existing.get("config_hash") == config_hash(existing["config"])
            ):
                # the first N items are the first M's start: the finished ones are kept, and
                # only the new ones run (a new folder sent every finished item to the model again)
                self.reporter.message(
                    f"{self.out}: --limit {existing['config']['limit']} -> "
                    f"{self.config.get('limit') or 'every item'}; its finished items are kept",
                    lead="note:",
                )
                write_json(cfg_path, wanted)
                return True
            if same:
                stored = existing.get("config")
                if (
                    existing.get("config_hash") != wanted["config_hash"]
                    and isinstance(stored, dict)
                    and existing.get("config_hash") != config_hash(stored)
                    and self.has_results()
                ):
                    # its settings no longer give its own hash: the answers were made with the
                    # settings hashed. Taken, the folder was rewritten to claim the edited ones.
                    edited = (
                        f"{cfg_path}: its settings were edited by hand (they no longer give its "
                        "config_hash), so its answers were made with other settings"
                    )
                    if existing.get("hash_scheme") == HASH_SCHEME:
                        raise MushroomError(
                            f"{edited}; restore the file, or run into another {self.folder_flag} folder"
                        )
                    # an older mushroom hashed keys since left out: the folder may be right
                    self.warn(
                        f"{cfg_path}: its settings no longer give its config_hash: it was written by an "
                        "older mushroom, which hashed other keys, or edited by hand. Taken as this run's; if "
                        "it was edited, its answers were made with other settings: use another "
                        f"{self.folder_flag}"
                    )
                if unrecorded_files(existing.get("config"), self.config) and self.has_results():
                    self.reporter.message(
                        f"{cfg_path}: the files its options name were not recorded by content when it "
                        "ran; taken as they are now, and recorded from this run on",
                        lead="note:",
                    )
                if existing != wanted and not self.side_pass:  # transport settings, or an older hash
                    write_json(cfg_path, wanted)
                return True
            if self.has_results():
                # never empty: a folder whose settings are all this run's is taken above
                changes = config_changes(existing["config"], self.config)
                differs = listed_changes(changes, "\n  ")
                if any(c.startswith(FILE_DIGESTS) or f".{FILE_DIGESTS}" in c for c in changes):
                    # two hashes alone did not say what differs
                    differs += f"\n  ({FILE_DIGESTS}: the content of the files options name, by sha256)"
                raise MushroomError(
                    f"{self.out} holds a run with another config; choose another {self.folder_flag} "
                    f"folder, or run again with its settings. What differs (folder -> this command):{differs}"
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

    def forget_stage(self, name: str) -> None:
        """Drops a stage's record, so that the next run computes it again.

        For a stage whose outputs another path of the job has overwritten: the cascade writes
        its own stack.json, which a later run without it must not take for its fit.
        """
        if self.stages.pop(name, None) is not None:
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
        data: Mapping[str, Iterable[Item]] | None = None,
        limit: int | None = None,
        context_files: list[Path] | ContextFiles | None = None,
    ) -> SplitOutput:
        """Runs a detector over a split, chunk by chunk into the ledger, then writes the files.

        Items are read a chunk at a time (`CHUNK_ITEMS`) from each language's iterable, run,
        recorded, and dropped: a generator is read once and never ahead of its chunk, and the
        run keeps per item only its id and where its outcome is in the ledger.

        Args:
            detector: a built detector.
            split: "val", "test" or "train".
            folder: the split's folder in the run (prediction files, items/, raw/, stats.json).
            langs: languages to run (default: all languages of the split).
            sources: context sources, in order.
            baseline_dir: when given, the mark-all baseline is written there too.
            data: the items per language, when the caller has them already (lists, or any
                iterables; the progress bar knows the total when each has a length).
            limit: only the first N items of each language (a quick look at a model or prompt).
            context_files: JSONL files of `{"id", "context"}` to use instead of named sources
                (or those files already indexed).
        """
        from mushroom.data.channels import channel_file

        data = data if data is not None else load_split(split, langs)
        if limit is not None:
            data = {lang: _first(items, limit) for lang, items in data.items()}
        out = SplitOutput(split=split, items=data)
        detector.workdir = folder / "raw"
        detector.workdir.mkdir(parents=True, exist_ok=True)
        if context_files is not None and not isinstance(context_files, ContextFiles):
            context_files = ContextFiles(context_files)
        sized = all(isinstance(v, Sized) for v in data.values())
        total = sum(len(v) for v in data.values()) if sized else None  # type: ignore[arg-type]
        ledgers: dict[str, Ledger] = {}
        run_ids: dict[str, list[str]] = {}
        n_items = 0
        chunk = _chunk_size(detector)
        # One stage per detector and folder: variants (or members) running the same detector on
        # the same split keep their own times.
        rel = self.where(folder)
        plain = rel in (".", split, "predictions")
        stage = f"{detector.name}:{split}" if plain else f"{detector.name}:{rel}"
        t0 = time.perf_counter()
        retried_before = _retry_tally(detector)
        # A backend's warning names the variant or member: the same words said of two variants
        # were shown once, before the one the warning was not about (an audit). Not its split:
        # a backend's warnings last across its splits, and a val item's was said again of test.
        owner = rel.removesuffix(f"/{split}")
        sink = self.warn if plain else (lambda warning: self.warn(f"{owner}: {warning}"))
        for option, template in detector.prompt_templates().items():
            if template.stands_in:
                sink(
                    f"{option} {template.name!r} is your file {template.source}, not the shipped prompt "
                    "of that name (a prompts/NAME.md where mushroom runs comes first)"
                )
        with self.reporter.progress(self.quiet) as bar, warnings_to(sink):
            task = bar.add_task(f"{detector.name} on {split}", total=total)
            for lang, items in data.items():
                ledger = Ledger(
                    folder / "items" / f"{safe_name(lang, 'language code')}.jsonl",
                    channel_file(folder / "raw", lang),
                )
                ledgers[lang] = ledger
                if ledger.lost_channels:  # done again: said, not silent
                    self.warn(
                        f"{split}/{lang}: the channel store {ledger.channel_path} lacks the evidence of "
                        f"{plural(ledger.lost_channels, 'item')} its ledger calls done (the file was cut, "
                        "damaged or deleted): they are computed again"
                    )
                if ledger.cut_line:
                    self.warn(
                        f"{split}/{lang}: the last line of the item ledger {ledger.path} was cut (the run "
                        "was killed while writing it): it was dropped, and its item is computed again"
                    )
                if ledger.unreadable:  # its items are done again: said, not silent
                    self.warn(
                        f"{split}/{lang}: {plural(ledger.unreadable, 'line')} of the item ledger "
                        f"{ledger.path} could not be read (damaged, or written by another version of "
                        "mushroom): an item with no other readable line there is computed again"
                    )
                ids: list[str] = []  # what the end of the run needs of each item: its id
                lengths = array("q")  # and its answer's length (8 bytes an item, not the item)
                changed = 0  # items done by an earlier run whose inputs have changed since
                seen = _ContextTally()
                # what its prompts show of an item's contexts, and whether fact-checks are left out
                shown_limit = getattr(detector.options, "max_context_chars", None)
                lang_contexts = None  # a split's contexts of this language, read once
                baseline = (
                    JsonlWriter(baseline_dir / submission_name(lang, split))
                    if baseline_dir is not None
                    else None
                )
                try:
                    iterator = iter(items)
                    while batch := list(itertools.islice(iterator, chunk)):
                        ids.extend(it.id for it in batch)
                        lengths.extend(len(it.model_output_text) for it in batch)
                        batch_ids = [it.id for it in batch]
                        if context_files is not None:
                            ctx = context_files.load(batch_ids)
                        else:
                            if lang_contexts is None:
                                lang_contexts = load_contexts(split, lang, sources)
                            ctx = _contexts_of(lang_contexts, batch_ids)
                        digests = {it.id: item_digest(it, ctx.by_id.get(it.id, [])) for it in batch}
                        edited = ledger.changed(digests)
                        changed += len(edited)
                        todo = [it for it in batch if not ledger.ok(it.id) or it.id in edited]
                        if total is not None and len(todo) < len(batch):
                            # items finished by an earlier run leave the bar's count rather than
                            # fill it: its rate and time left are of the items this run computes
                            total -= len(batch) - len(todo)
                            bar.update(task, total=total)
                        out.reused += len(batch) - len(todo)
                        if baseline is not None:
                            baseline.write(p.submission_dict() for p in mark_all(batch))
                        seen.add(ctx, batch_ids, shown_limit, detector.prompts_support_only)
                        if todo:
                            self._run_items(
                                detector, lang, todo, ctx.by_id, ledger, bar, task, folder, split, digests
                            )
                            out.done_now += len(todo)
                        del batch, todo, ctx, digests
                    if baseline is not None:
                        baseline.commit()
                finally:
                    if baseline is not None:
                        baseline.discard()
                    ledger.close()
                if changed:
                    self.warn(
                        f"{split}/{lang}: {plural(changed, 'item')} had changed since this folder's earlier "
                        f"run (answer, question, tokens, logits or context): computed again"
                    )
                # said again by a resumed run: it describes the files, and summary.json keeps
                # only this run's warnings
                out.contexts_missing[lang] = seen.missing
                if seen.bare:
                    self.warn(seen.warning(split, lang, len(ids), sources, detector))
                if seen.cut:
                    self.warn(
                        f"{split}/{lang}: the contexts of {seen.cut} of {plural(len(ids), 'item')} are "
                        f"longer than {detector.name}'s max_context_chars ({shown_limit}): its prompts "
                        f"show their first {shown_limit} characters (-o max_context_chars=N shows more)"
                    )
                self._write_language(detector, split, lang, ids, lengths, ledger, folder, out)
                run_ids[lang] = ids
                n_items += len(ids)
        item_seconds = self._write_stats(folder, ledgers, run_ids, out, stage)
        retried = _retry_tally(detector) - retried_before  # this stage's: a backend serves several
        # A stage resumed after a kill was computed over several runs: the ledger's per-item
        # times add up all of it, where this run's wall time covers only the last part.
        self.record_stage(
            stage,
            time.perf_counter() - t0,
            reused=out.done_now == 0,
            items=n_items,
            item_seconds=round(item_seconds, 2),
            **({"retries": dict(sorted(retried.items()))} if retried else {}),
        )
        note = retry_note(retried)
        if note is not None:
            self.warn(f"{stage}: {note}")
        for warning in getattr(detector, "warnings", []):  # each said once, as the sink said it
            sink(warning)
        return out

    @property
    def same_folder(self) -> str:
        """`--out DIR` for advice to run again: without it a command makes a new folder, and starts over."""
        return f"{self.folder_flag} {self.out}"

    def warn(self, warning: str) -> None:
        warning = self._own_form(warning)
        if warning not in self.warnings:
            self.warnings.append(warning)
            self.reporter.warning(warning)

    def failed_count(self, word: str = "item") -> str:
        """The failures counted: an item failed in two variants (or members) is two, and said so.

        "22 items failed" of a 20-item run with two variants read as more items than it has.
        """
        n, distinct = len(self.failures), len({(f.split, f.id) for f in self.failures})
        if n == distinct:
            return plural(n, word)
        stages = len({(f.split, f.folder) for f in self.failures})
        return f"{plural(n, word)} ({distinct} distinct, in {stages} variants, members or splits)"

    def _failed_items_note(self) -> str | None:
        """What --allow-failures gives the failed items, where the job has its own word for it."""
        of = self.failed_items_note_of
        if of is not None and any(f.detector not in of for f in self.failures):
            return None  # a CPU member failed too: its items are empty evidence, not kept
        return self.failed_items_note

    def _retry_advice(self) -> str:
        """`retry_advice` for the failures, its options as this job takes them (`in_run_form`)."""
        from mushroom.util.options import in_run_form

        advice = retry_advice([f.error for f in self.failures], self.same_folder)
        return in_run_form(advice, self.config, sorted({f.detector for f in self.failures}))

    def _own_form(self, text: str) -> str:
        """Advice in the form this job takes options: a run config has no -o, only its keys."""
        from mushroom.util.options import config_form

        return config_form(text) if "run_config" in self.config else text

    def _run_items(
        self, detector, lang, todo, contexts, ledger, bar, task, folder, split="", digests=None
    ) -> None:
        from mushroom.backends.rawlog import RawLog, raw_file
        from mushroom.evaluation.check import check_row

        detector.raw_log = RawLog(raw_file(folder / "raw", lang))
        size = detector.batch_items or len(todo)
        expected = {it.id: it for it in todo}
        emitted: set[str] = set()
        path = str(folder / submission_name(lang, split))
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
            if result.status == "ok" and result.prediction is not None:
                # A detector's bad span would make a file the checker refuses: said before the
                # item is recorded as done, so a re-run does not resume past it into the file.
                line = len(emitted) + 1
                problems = check_row(result.prediction.submission_dict(), expected[result.id], path, line)
                if problems:
                    raise DataError(problems)
            now = time.perf_counter()
            if result.seconds is None:  # one a detector timed itself (`sharing_time`) keeps its own
                result.seconds = round(now - last[0], 4)
            result.input_digest = (digests or {}).get(result.id)
            result.answer_digest = answer_digest(expected[result.id].model_output_text)
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
                except ImportError as exc:  # an install short of a package: no item can run
                    stop_for_import(exc, f"detector {detector.name!r}")
                except Exception as exc:  # the batch's unfinished items fail with this error
                    reason = error_text(exc)
                for it in batch:
                    if it.id not in emitted:
                        emit(ItemResult.failed(it.id, reason))
        except KeyboardInterrupt:
            ledger.close()
            ledgers = [Ledger(p) for p in self.out.glob("**/items/*.jsonl")]
            failed = sum(len(ld.failed) for ld in ledgers)
            done = sum(len(ld) for ld in ledgers) - failed  # a failed item is not finished (an audit)
            # a reply that came and failed (cut off, unreadable) is cached: resumed, it fails again
            also = (
                f" and {plural(failed, 'failed item')}, which the next run retries (a reply kept in "
                "the response cache is read again as it was),"
                if failed
                else ""
            )
            raise Interrupted(
                f"interrupted during {detector.name}, language {lang!r}: {plural(done, 'finished item')}"
                f"{also} (over all of the run's splits and members) saved in {self.out}; run the same "
                f"command again with {self.same_folder} to resume where it stopped"
            ) from None
        finally:
            detector.raw_log = None
            detector.on_work = None
            end_work()

    def _write_language(
        self, detector, split, lang, ids: list[str], lengths: array, ledger: Ledger, folder, out: SplitOutput
    ) -> None:
        from mushroom.data.channels import channel_file, legacy_channel_file

        path = folder / submission_name(lang, split)
        where = self.where(folder)
        failed = [
            Failure(split, lang, item_id, ledger.error(item_id) or "no result", detector.name, where)
            for item_id in ids
            if not ledger.ok(item_id)
        ]
        out.failures.extend(failed)
        self.failures.extend(failed)
        if failed and not self.allow_failures:
            # never leave a complete-looking file from an older pass; a plan (a side pass) stops
            # here and leaves the finished run's file, an input of its stack, as it was
            if not self.side_pass:
                path.unlink(missing_ok=True)
            return
        # Written from the ledger as a stream, in the items' order; failed items (allowed) empty.
        past_end: list[str] = []

        def rows() -> Iterator[dict]:
            for i, n, res in zip(ids, lengths, ledger.read(ids)):
                pred = res.prediction if res is not None and res.status == "ok" else None
                if pred is not None and _reaches_past(pred, n):
                    past_end.append(i)
                    pred = None
                yield (pred or Prediction(id=i)).submission_dict()

        writer = JsonlWriter(path)
        try:
            writer.write(rows())
            if past_end:
                # not this item's result (a line edited by hand, or another answer's): failed,
                # so that it is named now and the next run of the folder computes it again
                error = _PAST_END.format(path=ledger.path)
                for item_id in past_end:
                    ledger.add(ItemResult.failed(item_id, error))
                ledger.close()
                bad = [Failure(split, lang, i, error, detector.name, where) for i in past_end]
                out.failures.extend(bad)
                self.failures.extend(bad)
                if not self.allow_failures:
                    if not self.side_pass:
                        path.unlink(missing_ok=True)
                    return
            writer.commit()
        finally:
            writer.discard()
        out.files[lang] = path
        if channel_file(folder / "raw", lang).exists():  # the store holds them all: the old form goes
            legacy_channel_file(folder / "raw", lang).unlink(missing_ok=True)

    def _write_stats(
        self,
        folder: Path,
        ledgers: dict[str, Ledger],
        run_ids: dict[str, list[str]],
        out: SplitOutput,
        stage: str,
    ) -> float:
        """Writes stats.json from the ledgers, read once; returns the items' summed seconds.

        Only this run's items count: a ledger also holds items an earlier run of the folder
        computed (a larger --llm-budget or --limit), which this run's predictions leave out,
        and their cut-off or unusable replies would be warned of as this run's.
        """
        per_lang: dict[str, dict[str, int]] = {}
        everything: Counter[str] = Counter()
        seconds = 0.0
        for lang, ld in ledgers.items():
            results = (r for r in ld.read(run_ids[lang]) if r is not None)
            per_lang[lang] = _sum_stats(results)
            everything.update(per_lang[lang])
            seconds += sum(ld.spent.get(i, 0.0) for i in run_ids[lang])
        out.stats = {**per_lang, "all": dict(sorted(everything.items()))}
        write_json(folder / "stats.json", out.stats)
        for lang, stats in per_lang.items():
            for warning in unusable_warnings(f"{stage} {lang}", stats):
                self.warn(warning)
        return seconds

    # -- results ----------------------------------------------------------------------------

    def score(
        self,
        split: str,
        files: dict[str, Path],
        folder: Path,
        title: str,
        baseline_files: dict[str, Path] | None = None,
        items: dict[str, list[Item]] | None = None,
        members: dict[str, Path] | None = None,
    ) -> list[dict]:
        """Scores written prediction files against the split's gold (the official path).

        Writes scores.json (per item) and scores.md into `folder` and reports the table. With
        `items` (a `limit`ed run), each file is scored against those items' gold labels only.
        `members` (name -> folder of this split's files) are the runs a combination was built
        from: scores.md counts their failed items too, which the combination read as empty.

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
        for result in results.values():  # an empty answer's Cor is NaN: the table showed it unsaid
            for warning in result.warnings:
                if EMPTY_ANSWER in warning:
                    self.warn(warning)
        baselines = None
        if baseline_files is not None:
            baselines = {lang: one(lang, path) for lang, path in baseline_files.items()}
        rows = score_rows(results, baselines, load_leaderboard())
        per_lang = {lang: r.to_dict(with_items=True) for lang, r in results.items()}
        payload: dict = per_lang
        if baselines is not None:
            payload = {"per_lang": per_lang, "mark_all": {lang: r.to_dict() for lang, r in baselines.items()}}
        write_json(folder / "scores.json", payload)
        (folder / "scores.md").write_text(
            markdown_table(rows)
            + self._failed_note(split, files)
            + self._member_failed_note(split, members or {}),
            encoding="utf-8",
        )
        self.reporter.table(Table(title, kind="scores", rows=rows))
        return rows

    def _failed_note(self, split: str, files: dict[str, Path]) -> str:
        """The line scores.md ends with when scored items failed (an --allow-failures run).

        Their predictions are empty, so the table is not the model's score; the file is read
        and shared without the terminal's warning, which said so alone.
        """
        # the failures of the files scored: one service runs every variant (and a main job's
        # members), whose failures said another variant's scores held empty items (a review)
        where = {lang: self.where(path.parent) for lang, path in files.items()}
        failed = self._failed_by(split, lambda folder, lang: "" if where.get(lang) == folder else None).get(
            ""
        )
        if not failed:
            return ""
        langs = ", ".join(f"{lang} {n}" for lang, n in sorted(failed.items()))
        return (
            f"\n{plural(sum(failed.values()), 'item')} failed and scored as empty predictions ({langs}; "
            "listed in the run's failures.jsonl): these scores are not the detector's alone.\n"
        )

    def _member_failed_note(self, split: str, members: dict[str, Path]) -> str:
        """The line a combination's scores.md ends with when its members' items failed.

        A stack or vote built under --allow-failures read those items as flagging nothing; its
        own files hold no failed item, so `_failed_note` said nothing of them.
        """
        folders = {self.where(folder): name for name, folder in members.items()}
        failed = self._failed_by(split, lambda folder, lang: folders.get(folder))
        if not failed:
            return ""
        n = sum(sum(c.values()) for c in failed.values())
        where = "; ".join(
            f"{name}: " + ", ".join(f"{lang} {k}" for lang, k in sorted(c.items()))
            for name, c in sorted(failed.items())
        )
        return (
            f"\n{plural(n, 'item')} failed in a member ({where}; listed in the run's failures.jsonl) and "
            "were read as flagging nothing: these scores are not the stack's alone.\n"
        )

    def _failed_by(self, split: str, label: Callable[[str, str], str | None]) -> dict[str, Counter[str]]:
        """This run's failed items of `split`, each once, counted by `label(folder, lang)` and language.

        A failure whose label is None is not counted.
        """
        out: dict[str, Counter[str]] = {}
        for folder, lang, _ in {(f.folder, f.lang, f.id) for f in self.failures if f.split == split}:
            name = label(folder, lang)
            if name is not None:
                out.setdefault(name, Counter())[lang] += 1
        return out

    def submit(self, files: list[Path], zip_path: Path) -> Path | None:
        """Zips submission files, unless items failed and failures are not allowed."""
        if self.failures and not self.allow_failures:
            zip_path.unlink(missing_ok=True)
            return None
        if files and all("-tst" in f.name for f in files):
            from mushroom.data.splits import item_files

            try:
                every = item_files("test")[1]
            except MushroomError:  # no test folder at all: nothing to count
                every = {}
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
        main = self.config.get("job") == "main"
        # (group key, the error with '<id>' for each item's own, failure); a main job's row names
        # its member's options, so one member a row
        keyed = []
        for f in self.failures:
            generic = f.error.replace(repr(f.id), "'<id>'")
            keyed.append((f"{f.detector}: {generic}" if main else generic, generic, f))
        groups = Counter(key for key, _, _ in keyed)
        summary = {
            **summary,
            "items_failed": len(self.failures),
            "failures_by_error": dict(groups.most_common()),
            "allow_failures": self.allow_failures,
            "warnings": self.warnings,
            "stages": self.stages,
            "seconds": round(time.perf_counter() - self.started, 2),
        }
        if not self.side_pass:  # a plan's failures are reported; the finished run's record stays
            write_jsonl(self.out / "failures.jsonl", [f.row() for f in self.failures])
            write_json(self.out / "summary.json", summary)
        self.release()
        if self.failures:
            title = f"{self.failed_count('failed item')}, by error"
            rows = []
            where = self.out / "failures.jsonl"
            shown_groups = groups.most_common(10)
            for error, n in shown_groups:
                generic, example = next((g, f) for key, g, f in keyed if key == error)
                shown = example.error if n == 1 else generic  # '<id>' stands for each item's own
                if main:  # "-o backend.timeout_s", which it refuses for a member
                    from mushroom.util.options import member_flags

                    shown = f"{example.detector}: {member_flags(shown, example.detector)}"
                shown = self._own_form(shown)
                rows.append([n, one_line(shown, 240), f"{example.split}/{example.lang}/{example.id}"])
            rest = len(self.failures) - sum(n for _, n in shown_groups)
            if rest:  # errors quoting each reply are a group each: the rest were cut unsaid
                more = len(groups) - len(shown_groups)
                listed = (
                    "not listed: a plan writes no failures.jsonl" if self.side_pass else f"each in {where}"
                )
                rows.append([rest, f"... {plural(more, 'other error')}, {listed}", ""])
            self.reporter.table(Table(title, columns=["items", "error", "for example"], rows=rows))
            if not self.allow_failures and self.side_pass:
                advice = self._retry_advice()
                raise RunFailed(
                    f"{self.failed_count()} failed (above); no plan was made, and the "
                    f"folder's predictions and summary are as they were. {advice}, or add "
                    "--allow-failures to plan with those items read as empty"
                )
            if not self.allow_failures:
                advice = self._retry_advice()
                # a cascade keeps the CPU stack's prediction where a member failed: "left empty" was wrong
                gives = self._failed_items_note() or "those items are left empty"
                raise RunFailed(
                    f"{self.failed_count()} failed (listed in {where}); the files that "
                    f"would hold them (and any submission) were not written. {advice}, or add "
                    f"--allow-failures to write them anyway ({gives})"
                )
            done = self._failed_items_note() or "they are left as empty predictions in the files"
            self.reporter.message(
                f"{self.failed_count()} failed; {done} (listed in {where})",
                lead="--allow-failures:",
            )
        self.reporter.message(f"run folder: {self.out}  ({summary['seconds']} s)")
        return summary
