"""A whole submission checked as a leaderboard reads it: a zip or a folder of per-language files.

`check FILE` answers "is this file right for these items"; a participant about to upload
asks "will this zip be taken": one file per language, each named for its language, each
right for that language's items, and which languages are missing. The zip is read as it
is, entries in sub-folders included, so what is checked is what would be uploaded. Entry
names are data: a file is written out only under a name of the official pattern, never a
path the archive chose.
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mushroom.data.predictions import prediction_file_lang
from mushroom.data.records import Item
from mushroom.errors import MushroomError, Problem
from mushroom.evaluation.check import CheckReport, check_file

# a zip whose files would unpack to more than this is refused before anything is written
MAX_UNPACKED_BYTES = 4 * 2**30

_SPLIT_OF_NAME = {"-tst.v1.jsonl": "test", "-val.v2.jsonl": "val"}


@dataclass
class SubmissionReport:
    """Each language's file report, and what is wrong with the set of files."""

    files: dict[str, tuple[str, CheckReport]] = field(default_factory=dict)  # lang -> (name, report)
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors and all(report.ok for _, report in self.files.values())


def is_submission(path: Path) -> bool:
    """Whether `path` is a zip or a folder: a whole submission rather than one file."""
    return path.is_dir() or (path.is_file() and zipfile.is_zipfile(path))


def check_submission(
    path: Path, items: list[Item] | None, strict: bool = False, partial: bool = False
) -> SubmissionReport:
    """Checks every per-language file of a zip or folder against its language's items.

    Args:
        path: a zip (as uploaded) or a folder of files named like `mushroom.en-tst.v1.jsonl`.
        items: the items the files are for (any languages); None reads them from the split
            the file names say (`-tst.v1`: test, `-val.v2`: val).
        strict: also report keys the official scorer ignores.
        partial: accept files that predict only some of their items (a --limit run); no upload.

    Raises:
        MushroomError: the archive cannot be read, holds no .jsonl file, or would unpack too large.
    """
    report = SubmissionReport()
    where = str(path)
    with _files(path, report) as found:
        by_lang: dict[str, list[str]] = {}
        for name in found:
            lang = prediction_file_lang(name)
            if lang is None:
                report.errors.append(
                    Problem(
                        where, None, None, f"{name}: its name names no language (as mushroom.en-tst.v1.jsonl)"
                    )
                )
                continue
            by_lang.setdefault(lang, []).append(name)
        for lang, names in sorted(by_lang.items()):
            if len(names) > 1:
                report.errors.append(
                    Problem(
                        where, None, None, f"{len(names)} files for language {lang!r}: {', '.join(names)}"
                    )
                )
        splits = sorted(
            {split for name in found for end, split in _SPLIT_OF_NAME.items() if name.endswith(end)}
        )
        if len(splits) > 1:
            report.errors.append(
                Problem(where, None, None, f"files of more than one split: {', '.join(splits)}")
            )
        items_by_lang = _items_by_lang(items, splits, sorted(by_lang))
        for lang, names in sorted(by_lang.items()):
            if lang not in items_by_lang:
                report.errors.append(
                    Problem(
                        where, None, None, f"{names[0]}: no items of language {lang!r} to check it against"
                    )
                )
                continue
            report.files[lang] = (names[0], check_file(found[names[0]], items_by_lang[lang], strict, partial))
        if items is None and len(splits) == 1:
            from mushroom.data.splits import split_files

            missing = sorted(set(split_files(splits[0])) - set(by_lang))
            if missing:
                every = len(split_files(splits[0]))
                report.warnings.append(
                    Problem(
                        where,
                        None,
                        None,
                        f"{len(by_lang)} of the {every} {splits[0]} languages; none for {', '.join(missing)}",
                    )
                )
    return report


def _items_by_lang(items: list[Item] | None, splits: list[str], langs: list[str]) -> dict[str, list[Item]]:
    if items is not None:
        out: dict[str, list[Item]] = {}
        for item in items:
            out.setdefault(item.lang, []).append(item)
        return out
    if len(splits) != 1:
        raise MushroomError(
            "the file names say no one split (-tst.v1 or -val.v2): give the items they are for with --items"
        )
    from mushroom.data.splits import load_split, split_files

    return load_split(splits[0], [lang for lang in langs if lang in split_files(splits[0])])


@contextmanager
def _files(path: Path, report: SubmissionReport) -> Iterator[dict[str, Path]]:
    """The submission's .jsonl files by name: a folder's own, or a zip's unpacked to a temporary folder."""
    if path.is_dir():
        found = {p.name: p for p in sorted(path.glob("*.jsonl"))}
        if not found:
            raise MushroomError(f"{path}: no .jsonl file in the folder")
        yield found
        return
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise MushroomError(f"{path}: cannot be read as a zip ({exc})") from None
    with archive, tempfile.TemporaryDirectory(prefix="mushroom-check-") as tmp:
        entries = [info for info in archive.infolist() if not info.is_dir()]
        jsonl = [info for info in entries if info.filename.lower().endswith(".jsonl")]
        if not jsonl:
            raise MushroomError(f"{path}: no .jsonl file in the zip (it holds {len(entries)} other entries)")
        if sum(info.file_size for info in jsonl) > MAX_UNPACKED_BYTES:
            raise MushroomError(f"{path}: its .jsonl files unpack to over {MAX_UNPACKED_BYTES // 2**30} GiB")
        others = [info.filename for info in entries if info not in jsonl]
        if others:
            report.warnings.append(
                Problem(
                    str(path),
                    None,
                    None,
                    f"entries that are no .jsonl file, not checked: {', '.join(others[:5])}",
                )
            )
        found: dict[str, Path] = {}
        for k, info in enumerate(jsonl):
            name = PurePosixPath(info.filename).name
            if info.filename != name:
                report.warnings.append(
                    Problem(
                        str(path),
                        None,
                        None,
                        f"{info.filename} is in a sub-folder of the zip; an upload reads its top level",
                    )
                )
            if name in found:
                report.errors.append(Problem(str(path), None, None, f"two entries are named {name}"))
                continue
            # written under a name of our own (the entry's name is the archive's, not a path to follow)
            target = Path(tmp) / f"{k}.jsonl"
            with archive.open(info) as source, target.open("wb") as sink:
                while chunk := source.read(1 << 20):
                    sink.write(chunk)
            found[name] = target
        yield found
