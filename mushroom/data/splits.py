"""Finding and loading Mu-SHROOM split files shipped in data/.

The official file names differ per split (`-val.v2.extra`, `-tst.v1`, `-train_nolabel.v1`),
so callers name a split and a language and this module finds the file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from mushroom.data.jsonl import load_records
from mushroom.data.records import Item
from mushroom.data.spans import span_problems
from mushroom.errors import MushroomError
from mushroom.util.words import suggest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# From a checkout, the repository's data/ is the default; an installed package has none, so
# MUSHROOM_DATA_DIR (or a data/mushroom folder where mushroom is run) names it.
IN_CHECKOUT = (PROJECT_ROOT / "pyproject.toml").is_file() and (PROJECT_ROOT / "data" / "mushroom").is_dir()


def workspace() -> Path:
    """Where runs/, submissions/ and eval/ go by default: the checkout, else the current folder."""
    return PROJECT_ROOT if IN_CHECKOUT else Path.cwd()


def _data_dir() -> Path:
    env = os.environ.get("MUSHROOM_DATA_DIR")
    if env:
        return Path(env)
    return PROJECT_ROOT / "data" / "mushroom" if IN_CHECKOUT else Path.cwd() / "data" / "mushroom"


DEFAULT_DATA_DIR = _data_dir()

SPLIT_DIRS = {
    "val": "val",
    "test": "test-unlabeled",
    "test-labeled": "test-labeled",
    "train": "train-unlabeled",
}
SPLIT_TAGS = {"val": "val", "test": "tst", "test-labeled": "tst", "train": "train"}
# The splits whose items carry gold labels: a run of one is scored.
LABELLED_SPLITS = ("val", "test-labeled")


def split_hint(split: str, flag: str = "--split") -> str:
    """The tail of an "unknown split" message: the split a data folder's name is of, else a close one.

    `--split test-unlabeled` (the folder's name) was told "did you mean 'test-labeled'?", the
    held-out split that is not shipped.
    """
    folders = {folder: name for name, folder in SPLIT_DIRS.items() if folder != name}
    if split in folders:
        name = folders[split]
        return f": {split}/ is the folder of the {name!r} split; give " + (
            f"{flag} {name}" if flag else repr(name)
        )
    if "," in split:
        return f": one split at a time; choose one of: {', '.join(sorted(SPLIT_DIRS))}"
    return suggest(split, list(SPLIT_DIRS), "choose one of")


def in_data_dir(path: Path) -> bool:
    """Whether a path lies in the folder of the official data files, where nothing is written."""
    return Path(path).resolve().is_relative_to(DEFAULT_DATA_DIR.resolve())


def same_items(split: str, other: str) -> bool:
    """Whether two split names hold the same items: `test-labeled` is `test` with its labels."""
    return SPLIT_TAGS.get(split, split) == SPLIT_TAGS.get(other, other)


_FILE_RE = re.compile(r"^mushroom\.([a-z]{2})-(val|tst|train)[^/]*\.jsonl$")


OR_ITEMS = ", or pass --items FILE"
"""Ends the advice of a missing split folder; a command without --items (`run`) leaves it out."""


def split_files(split: str, data_dir: Path | None = None) -> dict[str, Path]:
    """Language code -> file for a split, found by the official naming pattern."""
    if split not in SPLIT_DIRS:
        raise MushroomError(f"unknown split {split!r}{split_hint(split)}")
    folder = (data_dir or DEFAULT_DATA_DIR) / SPLIT_DIRS[split]
    if not folder.is_dir():
        if split == "test-labeled":  # a known split that is not shipped: say so
            raise MushroomError(
                f"split folder not found: {folder}; the labelled test split is not shipped with mushroom "
                "(its labels are held out): put its files there, or set MUSHROOM_DATA_DIR to the folder "
                "holding test-labeled/"
            )
        raise MushroomError(
            f"split folder not found: {folder} (set MUSHROOM_DATA_DIR to the folder holding val/ and "
            f"test-unlabeled/{OR_ITEMS})"
        )
    found: dict[str, Path] = {}
    for path in sorted(folder.glob("*.jsonl")):
        match = _FILE_RE.match(path.name)
        if match and match.group(2) == SPLIT_TAGS[split]:
            found[match.group(1)] = path
    if not found:
        raise MushroomError(f"no mushroom.<lang>-{SPLIT_TAGS[split]}*.jsonl files in {folder}")
    return found


def item_files(split: str, data_dir: Path | None = None) -> tuple[str, dict[str, Path]]:
    """The split whose files hold `split`'s items, and its files: test's may be test-labeled's.

    A folder holding the labelled test split but not the unlabelled one (a scorer's copy) still
    serves whatever asks for the test items alone (their lengths, a submission to check).
    """
    try:
        return split, split_files(split, data_dir)
    except MushroomError as exc:
        if split != "test":
            raise
        try:
            return "test-labeled", split_files("test-labeled", data_dir)
        except MushroomError:
            raise exc from None


_OFFICIAL_NAME = re.compile(r"(?:^|[._/-])([a-z]{2})-(val|tst|train)")


def lang_from_filename(path: Path) -> str | None:
    """The language code in an official-style file name, if there is one."""
    match = _OFFICIAL_NAME.search(path.name)
    return match.group(1) if match else None


def split_tag(path: Path) -> str | None:
    """The split an official-style file name says: val, tst or train (None: it says none)."""
    match = _OFFICIAL_NAME.search(path.name)
    return match.group(2) if match else None


def _item_checks(item: Item) -> list[tuple[str, str]]:
    return span_problems(len(item.model_output_text), item.soft_labels, item.hard_labels)


ANSWER_EVIDENCE = ("model_output_tokens", "model_output_logits")
"""The answering model's tokens and logits: most of a val item's size, read by few detectors."""


def load_items(path: str | Path, id_prefix: str | None = None, answer_evidence: bool = True) -> list[Item]:
    """Loads one split file; every problem (bad JSON, missing field, bad span) is reported.

    Args:
        path: the JSONL file.
        id_prefix: lines without an `id` get `<id_prefix><line number>`; the official
            unlabelled train files have no ids, and runs need stable ones to resume.
        answer_evidence: keep each item's `ANSWER_EVIDENCE`; a command that only compares
            spans with answers (`check`) drops them as each line is read, and holds a corpus
            in about a third of the memory.
    """

    def prepare(lineno: int, obj: dict) -> dict:
        if id_prefix is not None and "id" not in obj:
            obj = {**obj, "id": f"{id_prefix}{lineno}"}
        if not answer_evidence:
            obj = {k: v for k, v in obj.items() if k not in ANSWER_EVIDENCE}
        return obj

    return load_records(path, Item, extra_check=_item_checks, prepare=prepare)


def load_split(
    split: str, langs: list[str] | None = None, data_dir: Path | None = None
) -> dict[str, list[Item]]:
    """Items of a split per language, for the requested languages (all when None)."""
    files = split_files(split, data_dir)
    wanted = langs or sorted(files)
    missing = [lang for lang in wanted if lang not in files]
    if missing:
        from mushroom.util.words import suggest

        raise MushroomError(
            f"split {split!r} has no file for {', '.join(missing)}"
            + suggest(missing[0], sorted(files), "it has")
        )
    prefix = (lambda lang: f"train-{lang}-") if split == "train" else (lambda lang: None)
    return {lang: load_items(files[lang], prefix(lang)) for lang in wanted}


def require_some_labels(split: str, langs: list[str] | None, what: str) -> None:
    """Raises for an unknown split, or one with no gold labels at all (the shipped test split).

    Checked before a command reads its runs: compare blamed the shipped test file, exit 1 as
    if it were broken, and a split name like 'tst' was read as a run's lack of files. A split
    labelled in some languages only is left to `require_labelled` on the languages scored.
    """
    data = load_split(split, langs)
    if not any(item.is_labelled for items in data.values() for item in items):
        require_labelled(data, split, what)


def require_labelled(data: dict[str, list[Item]], split: str, what: str) -> None:
    """Raises unless every item carries gold labels.

    Scoring an unlabelled item treats its gold as "nothing hallucinated", so a threshold
    sweep or a stack fitted on test would report IoU 1.0 for marking nothing, with exit 0.
    """
    bare = {lang: sum(not it.is_labelled for it in items) for lang, items in data.items()}
    bare = {lang: n for lang, n in bare.items() if n}
    if not bare:
        return
    advice = "use a labelled split (--split val)"
    if split == "test":
        advice += ", or test-labeled with the test split's labels in its folder"
    total = sum(len(items) for items in data.values())
    if sum(bare.values()) == total:  # fourteen languages' "(150 of 150)" said less than this
        raise MushroomError(
            f"{what} needs gold labels, and split {split!r} has none ({total} items); {advice}"
        )
    counts = ", ".join(f"{lang} ({n} of {len(data[lang])})" for lang, n in sorted(bare.items()))
    raise MushroomError(
        f"{what} needs gold labels, and split {split!r} has items without them: {counts}; {advice}"
    )
