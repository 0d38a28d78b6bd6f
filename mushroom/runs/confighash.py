"""What a run folder's config is locked to: its hash, and the settings two configs differ in.

A folder holds one config. The hash leaves out the settings that do not change answers
(a server's URL, the cascade's budget), so changing them resumes the folder; a refused
folder names each setting that differs instead of leaving a user to diff two JSON files.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from pathlib import Path
from typing import Any

from mushroom.backends.config import TRANSPORT_KEYS
from mushroom.util.files import FILE_DIGESTS, file_blocks
from mushroom.util.words import clipped

# Backend settings that change how answers are fetched (TRANSPORT_KEYS) may change between
# runs of one folder. So may the settings that choose which items a model answers, not what it
# answers: the cascade's budget (`mushroom.runs.cascade`). A re-run with a larger one resumes
# the folder and sends only the items it adds.
# A config's `description` is words for people: editing it refused the folder as another run.
# Where a prompt was read from (`prompt_files`) is for a reader; its text's sha256 is hashed.
UNHASHED_KEYS = TRANSPORT_KEYS | {"llm_budget", "description", "made_from", "prompt_files"}

# Options added after run folders existed, at the default that gives the answers those folders
# hold: left out of the hash at that value, so the folders still resume (every semantic and
# main-job folder was refused once `answer_pool` appeared in their configs).
LATER_DEFAULTS: dict[str, Any] = {"answer_pool": "whole"}


def _strip_transport(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip_transport(v)
            for k, v in value.items()
            if k not in UNHASHED_KEYS and not (k in LATER_DEFAULTS and v == LATER_DEFAULTS[k])
        }
    if isinstance(value, list):
        return [_strip_transport(v) for v in value]
    return value


# Which keys `config_hash` leaves out, as a number kept beside the hash: a folder of this
# scheme whose settings no longer give its hash was edited by hand; one of an older scheme
# (UNHASHED_KEYS and LATER_DEFAULTS have grown) may just have been hashed otherwise.
HASH_SCHEME = 2


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of what determines a run's answers."""
    blob = json.dumps(_strip_transport(config), sort_keys=True, ensure_ascii=False).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


ABSENT = object()
MAX_CHANGES_SHOWN = 10


def only_limit_grows(old: Any, new: dict[str, Any]) -> bool:
    """Whether a folder's config differs from this run's only by a larger --limit (or none)."""
    if not isinstance(old, dict) or not isinstance(old.get("limit"), int):
        return False
    grown = new.get("limit") is None or (isinstance(new.get("limit"), int) and new["limit"] > old["limit"])
    return grown and not config_changes({**old, "limit": None}, {**new, "limit": None})


def unrecorded_files(old: Any, new: Any) -> bool:
    """Whether `new` records files by content where `old`, a folder's config of before, did not.

    Such a folder resumes (its files cannot be checked, and refusing it said a file had
    changed when none had: a review); its config then records them, for the next run.
    """
    if isinstance(old, dict) and isinstance(new, dict):
        if FILE_DIGESTS in new and FILE_DIGESTS not in old:
            return True
        if isinstance(new.get(FILE_DIGESTS), dict) and isinstance(old.get(FILE_DIGESTS), dict):
            if set(new[FILE_DIGESTS]) - set(old[FILE_DIGESTS]):  # one recorded since (pyes's prompt)
                return True
        return any(unrecorded_files(old.get(k), v) for k, v in new.items())
    if isinstance(old, list) and isinstance(new, list):
        return any(unrecorded_files(a, b) for a, b in zip(old, new))
    return False


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
            if name not in old and (name == FILE_DIGESTS or key.rsplit(".", 1)[-1] == FILE_DIGESTS):
                # a folder of before files (or this file) were recorded by content: see
                # `unrecorded_files`; a file an option newly names differs in the options too
                continue
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


NOT_SET = "(not set)"


def listed_changes(changes: list[str], sep: str) -> str:
    """The first MAX_CHANGES_SHOWN of `config_changes`, each after `sep`, and how many more.

    A run config's option is kept twice, as written (`run_config.detector.options.threshold`)
    and as the detector took it (`variants[0].options.threshold`): the second is left out
    where it says what the first says.
    """
    written = {c.split(".options.", 1)[-1] for c in changes if c.startswith("run_config.detector.options.")}
    changes = [
        c
        for c in changes
        if not (re.match(r"variants\[\d+\]\.options\.", c) and c.split(".options.", 1)[-1] in written)
    ]
    hidden = len(changes) - MAX_CHANGES_SHOWN
    return "".join(f"{sep}{c}" for c in changes[:MAX_CHANGES_SHOWN]) + (
        f"{sep}... and {hidden} more" if hidden > 0 else ""
    )


def _shown(value: Any) -> str:
    if value is ABSENT:
        return NOT_SET
    return clipped(json.dumps(value, ensure_ascii=False, sort_keys=True), 80)


def fingerprint(inputs: list[Path], extra: dict[str, Any]) -> str:
    """Hash of files' contents and settings: a stage whose fingerprint is unchanged is reused."""
    digest = hashlib.sha256(json.dumps(extra, sort_keys=True, default=str).encode())
    for path in sorted(inputs):
        digest.update(str(path.name).encode())
        if not path.is_file():
            digest.update(b"<missing>")
            continue
        for block in file_blocks(path):
            digest.update(block)
    return digest.hexdigest()[:16]
