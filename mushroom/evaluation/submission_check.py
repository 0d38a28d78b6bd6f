"""A whole submission checked as a leaderboard reads it: a zip or a folder of per-language files.

`check FILE` answers "is this file right for these items"; a participant about to upload
asks "will this zip be taken": one file per language, each named for its language, each
right for that language's items, and which languages are missing. The zip is read as it
is, entries in sub-folders included, so what is checked is what would be uploaded. Entry
names are data: an entry is unpacked under a name of our own (`0.jsonl`, `1.jsonl`, ...) in
a temporary folder, never a path the archive chose.
"""

from __future__ import annotations

import re
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from mushroom.data.predictions import prediction_file_lang, submission_name
from mushroom.data.records import Item
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.evaluation.check import CheckReport, check_file

# a zip whose files would unpack to more than this is refused before anything is written: the
# whole test split's submission is 1.7 MB, and a zip bomb of 1 GiB took 2 GB of memory
MAX_UNPACKED_BYTES = 256 * 2**20


def _name_end(split: str) -> str:
    """What a file name of `split` ends with after its language: "-tst.v1.jsonl" for test."""
    return submission_name("xx", split).removeprefix("mushroom.xx")


_SPLIT_OF_NAME = {_name_end(split): split for split in ("test", "val")}


@dataclass
class SubmissionReport:
    """Each language's file report, and what is wrong with the set of files."""

    files: dict[str, tuple[str, CheckReport]] = field(default_factory=dict)  # lang -> (name, report)
    errors: list[Problem] = field(default_factory=list)
    warnings: list[Problem] = field(default_factory=list)
    # a file's name -> its entry in a sub-folder of the zip: refused, though its lines are fine
    in_sub_folder: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors and all(report.ok for _, report in self.files.values())


def is_submission(path: Path) -> bool:
    """Whether `path` is a zip or a folder: a whole submission rather than one file."""
    # by its name too: a truncated or empty .zip is no zip to zipfile, and no JSONL file either
    return path.is_dir() or (path.is_file() and (path.suffix.lower() == ".zip" or zipfile.is_zipfile(path)))


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
        MushroomError: a folder holds no .jsonl file.
        DataError: the archive cannot be read, holds no .jsonl file, or would unpack too large.
    """
    report = SubmissionReport()
    where = str(path)
    with _files(path, report) as found:
        if not found:  # every entry unreadable: each is said already
            return report
        by_lang: dict[str, list[str]] = {}
        for name in found:
            lang = prediction_file_lang(name)
            if lang is None:
                report.errors.append(
                    Problem(
                        where,
                        None,
                        None,
                        f"{_shown(name)}: {_name_advice(name)}",
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
        if items is None and len(splits) != 1:  # said with what else is wrong, not instead of it
            if len(splits) == 0:
                report.errors.append(
                    Problem(where, None, None, "no file name says a split (-tst.v1 or -val.v2): give --items")
                )
            return report
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
            from mushroom.data.splits import item_files

            every_lang = item_files(splits[0])[1]
            missing = sorted(set(every_lang) - set(by_lang))
            if missing:
                every = len(every_lang)
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
    from mushroom.data.splits import item_files, load_split

    split, files = item_files(splits[0])
    return load_split(split, [lang for lang in langs if lang in files])


def _name_advice(name: str) -> str:
    """Why a file's name is not one the leaderboard reads, with the name it wants where it can tell.

    `en.jsonl` or `mushroom.en-tst.v2.jsonl` were said to name no language, though each does.
    """
    from mushroom.data.languages import TEST_LANGUAGES

    parts = [p.lower() for p in re.split(r"[._/-]", PurePosixPath(name).name)]
    lang = next((p for p in parts if p in TEST_LANGUAGES), None)
    if lang is None:
        return "its name names no language (as mushroom.en-tst.v1.jsonl)"
    split = "val" if "val" in parts else "test"
    return f"the leaderboard reads the {lang!r} file only by the name {submission_name(lang, split)}"


def _shown(name: str) -> str:
    """An entry's name as data: control characters (a terminal escape) written as escapes."""
    return name if name.isprintable() else ascii(name)[1:-1]


def _is_mac_fork(name: str) -> bool:
    """Whether an entry is one of the extras macOS Finder adds (`__MACOSX/`, `._NAME`)."""
    return name.startswith("__MACOSX/") or PurePosixPath(name).name.startswith("._")


@contextmanager
def _files(path: Path, report: SubmissionReport) -> Iterator[dict[str, Path]]:
    """The submission's .jsonl files by name: a folder's own, or a zip's unpacked to a temporary folder."""
    where = str(path)
    if path.is_dir():
        from mushroom.evaluation.score import RUN_LISTS  # a run folder's failures.jsonl is no prediction file

        found = {
            p.name: p
            for p in sorted(path.iterdir())
            if p.is_file() and p.suffix.lower() == ".jsonl" and p.name not in RUN_LISTS
        }
        if not found:
            # a folder of something else: a slip of the path (exit 2), not a bad file
            held = path / "predictions"
            if held.is_dir() and any(held.glob("*.jsonl")):  # a `detect` run's folder: score takes it
                raise MushroomError(
                    f"{path}: a run folder; its prediction files are in {held}: check one with "
                    f"`mushroom check {held / 'FILE.jsonl'} --items ITEMS`, or the folder itself: "
                    f"`mushroom check {held}`"
                )
            raise MushroomError(f"{path}: no .jsonl file in the folder")
        yield found
        return
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise DataError.single(path, None, None, f"cannot be read as a zip ({exc})") from None
    with archive, tempfile.TemporaryDirectory(prefix="mushroom-check-") as tmp:
        entries = [info for info in archive.infolist() if not info.is_dir()]
        forks = [info for info in entries if _is_mac_fork(info.filename)]
        if forks:
            report.warnings.append(
                Problem(where, None, None, f"{len(forks)} macOS Finder entries (__MACOSX/, ._*) not checked")
            )
        entries = [info for info in entries if info not in forks]
        jsonl = [info for info in entries if info.filename.lower().endswith(".jsonl")]
        others = [_shown(info.filename) for info in entries if info not in jsonl]
        listed = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
        if not jsonl:
            held = f": it holds {listed}" if others else ": it is empty"
            raise DataError.single(path, None, None, f"no .jsonl file in the zip{held}")
        if sum(info.file_size for info in jsonl) > MAX_UNPACKED_BYTES:
            limit = MAX_UNPACKED_BYTES // 2**20
            raise DataError.single(
                path, None, None, f"its .jsonl files unpack to over {limit} MiB; no submission is"
            )
        if others:
            said = f"entries that are no .jsonl file, not checked: {listed}"
            report.warnings.append(Problem(where, None, None, said))
        found: dict[str, Path] = {}
        for k, info in enumerate(jsonl):
            name = _shown(PurePosixPath(info.filename.replace("\\", "/")).name)
            if info.filename != name:  # checked all the same: the fix is to zip it at the top
                report.errors.append(
                    Problem(
                        where,
                        None,
                        None,
                        f"{_shown(info.filename)} is in a sub-folder of the zip; the upload reads the files "
                        "at its top level (zip the files themselves, not their folder)",
                    )
                )
            if name in found:
                report.errors.append(Problem(where, None, None, f"two entries are named {_shown(name)}"))
                continue
            if info.filename != name:
                report.in_sub_folder[name] = _shown(info.filename)
            # written under a name of our own (the entry's name is the archive's, not a path to follow)
            target = Path(tmp) / f"{k}.jsonl"
            try:
                with archive.open(info) as source, target.open("wb") as sink:
                    while chunk := source.read(1 << 20):
                        sink.write(chunk)
            except (
                zipfile.BadZipFile,
                RuntimeError,
                NotImplementedError,
                EOFError,
                zlib.error,
                OSError,
            ) as exc:
                # a damaged, encrypted or oddly compressed entry ended as "internal error"
                report.errors.append(
                    Problem(where, None, None, f"{_shown(info.filename)} cannot be read ({exc})")
                )
                continue
            found[name] = target
        yield found
