"""Items and context files read as streams: an index of where each line is, not the lines.

A run over a file of a million answers cannot hold them: an official item with its tokens
and logits takes about 20 KB in memory. `ItemsFile` reads the file once to check every line
(the same errors as `load_items`, before a run folder exists) and keeps per language only the
byte offsets of its lines; `ContextFiles` keeps where each id's context is in each file.
A run then reads a chunk of items and their contexts at a time.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterable, Iterator
from pathlib import Path

from pydantic import ValidationError

from mushroom.data.contexts import ContextSet
from mushroom.data.jsonl import open_binary
from mushroom.data.records import Context, ContextRecord, Item
from mushroom.errors import DataError, Problem

_BOM = b"\xef\xbb\xbf"


def _reject(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _lines(path: Path) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, line) of each non-blank line; a BOM at the start is skipped."""
    with open_binary(path) as handle:
        offset = 0
        for lineno, raw in enumerate(handle, start=1):
            start = offset
            offset += len(raw)
            if lineno == 1 and raw.startswith(_BOM):
                raw, start = raw[len(_BOM) :], start + len(_BOM)
            if raw.strip():
                yield lineno, start, raw


def _parse(raw: bytes) -> dict:
    obj = json.loads(raw.decode("utf-8"), parse_constant=_reject)
    if not isinstance(obj, dict):
        raise ValueError("not a JSON object")
    return obj


def _read_at(handle, offset: int) -> dict:
    handle.seek(offset)
    return _parse(handle.readline())


class LangItems:
    """One language's items of an `ItemsFile`, read from disk each time they are iterated."""

    def __init__(self, path: Path, offsets: array, labelled: bool = False, n_labelled: int = 0):
        self.path = path
        self.offsets = offsets
        self.labelled = labelled  # every item has gold labels (then the run scores them)
        self.n_labelled = n_labelled  # how many have: some and not all is said, not scored

    def __len__(self) -> int:
        return len(self.offsets)

    def __iter__(self) -> Iterator[Item]:
        with self.path.open("rb") as handle:
            for offset in self.offsets:
                yield Item.model_validate(_read_at(handle, offset))


class ItemsFile:
    """An items JSONL file, checked line by line, with the offsets of each language's items."""

    def __init__(self, path: Path):
        from mushroom.data.splits import _item_checks, load_items

        self.path = Path(path)
        self.offsets: dict[str, array] = {}
        self.labelled: dict[str, bool] = {}  # language -> every item has gold labels (then it is scored)
        self.n_labelled: dict[str, int] = {}
        seen: set[str] = set()
        bad = False
        with open_binary(self.path) as head:
            # zip, gzip, UTF-16: load_items names what the file is instead
            bad = head.read(4).startswith((b"PK\x03\x04", b"\x1f\x8b", b"\xff\xfe", b"\xfe\xff"))
        for _, offset, raw in [] if bad else _lines(self.path):
            try:
                item = Item.model_validate(_parse(raw))
            except (ValueError, ValidationError, RecursionError):
                bad = True
                break
            if item.id in seen or _item_checks(item):
                bad = True
                break
            seen.add(item.id)
            self.offsets.setdefault(item.lang, array("q")).append(offset)
            self.labelled[item.lang] = self.labelled.get(item.lang, True) and item.is_labelled
            self.n_labelled[item.lang] = self.n_labelled.get(item.lang, 0) + item.is_labelled
        if bad:  # one reader decides what is wrong, and says all of it
            load_items(self.path)
            raise DataError([Problem(str(self.path), None, None, "not a JSON Lines file of items")])

    def by_lang(self, langs: Iterable[str] | None = None) -> dict[str, LangItems]:
        """Each language's items (the given ones, in file order of their first item), read lazily."""
        wanted = set(langs) if langs is not None else None
        return {
            lang: LangItems(self.path, offs, self.labelled[lang], self.n_labelled[lang])
            for lang, offs in self.offsets.items()
            if wanted is None or lang in wanted
        }

    def __len__(self) -> int:
        return sum(len(v) for v in self.offsets.values())


class ContextFiles:
    """Context files (`{"id", "context"}` a line, each file one source) indexed by id.

    Reads as `load_context_files` does, a chunk's ids at a time: contexts keep the order of
    the files, and `missing` counts the given ids a file lacks.
    """

    def __init__(self, paths: list[Path]):
        from mushroom.data.jsonl import load_records

        self.paths = [Path(p) for p in paths]
        self.index: list[dict[str, int]] = []
        self.blank: list[set[str]] = []  # per file, the ids whose context is blank (read as none)
        for path in self.paths:
            where: dict[str, int] = {}
            blank: set[str] = set()
            try:
                for _, offset, raw in _lines(path):
                    rec = ContextRecord.model_validate(_parse(raw))
                    if rec.id in where:
                        raise ValueError("duplicate id")
                    where[rec.id] = offset
                    if not rec.context.strip():
                        blank.add(rec.id)
            except (ValueError, ValidationError, RecursionError):
                load_records(path, ContextRecord)  # raises, naming every problem
                raise DataError(
                    [Problem(str(path), None, None, "not a JSON Lines file of contexts")]
                ) from None
            self.index.append(where)
            self.blank.append(blank)

    def load(self, item_ids: list[str]) -> ContextSet:
        """The contexts of these items, and per file how many of them it lacks."""
        result = ContextSet()
        for path, where in zip(self.paths, self.index):
            result.files[path.stem] = str(path)
            with path.open("rb") as handle:
                for item_id in item_ids:
                    offset = where.get(item_id)
                    if offset is not None:
                        text = ContextRecord.model_validate(_read_at(handle, offset)).context
                        result.by_id.setdefault(item_id, []).append(Context(source=path.stem, text=text))
            result.missing[path.stem] = sum(1 for i in item_ids if i not in where)
        return result


def read_items_file(items_file: Path) -> dict[str, LangItems]:
    """An items file (or a `save_to_disk` folder) by language, checked whole, read later a chunk at a time.

    A file with no items is an error: a run over nothing would "succeed" and write nothing.
    """
    from mushroom.data.hf import is_saved_dataset, saved_items_file

    # a folder of `Dataset.save_to_disk`: its rows, checked, as a JSONL file the run reads
    read_from = saved_items_file(items_file) if is_saved_dataset(items_file) else items_file
    data = dict(ItemsFile(read_from).by_lang())
    if not data:
        raise DataError.single(items_file, None, None, "no items")
    return data


def keep_langs(data: dict[str, LangItems], langs: list[str] | None, items_file: Path) -> dict[str, LangItems]:
    """The languages asked for with --lang; none of them in the file is an error naming those it has."""
    from mushroom.errors import MushroomError

    if not langs:
        return data
    kept = {code: its for code, its in data.items() if code in langs}
    if not kept:
        raise MushroomError(
            f"--lang {','.join(langs)}: {items_file} has no items in that language; "
            f"it has {', '.join(sorted(data))}"
        )
    return kept
