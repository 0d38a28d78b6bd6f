"""Official submission files: one checked JSONL per language, bundled in a zip."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from mushroom.check import check_rows
from mushroom.errors import DataError
from mushroom.jsonl import write_jsonl
from mushroom.records import Item, Prediction


def submission_name(lang: str, split: str = "test") -> str:
    """The official file name: mushroom.<lang>-tst.v1.jsonl (val: mushroom.<lang>-val.v2.jsonl).

    Items from a file of the user's (`detect --items`) go to mushroom.<lang>-items.jsonl.
    """
    if split == "items":
        return f"mushroom.{lang}-items.jsonl"
    return f"mushroom.{lang}-tst.v1.jsonl" if split == "test" else f"mushroom.{lang}-val.v2.jsonl"


_PREDICTION_FILE = re.compile(r"mushroom\.([a-z]{2,3})-(?:tst\.v1|val\.v2|items)\.jsonl")


def prediction_file_lang(name: str) -> str | None:
    """The language of a file name `submission_name` makes (items files too); None otherwise."""
    match = _PREDICTION_FILE.fullmatch(name)
    return match.group(1) if match else None


def write_predictions(path: Path, predictions: list[Prediction], items: list[Item]) -> Path:
    """Checks predictions against their items, then writes them; nothing is written if bad."""
    rows = [p.submission_dict() for p in predictions]
    report = check_rows(enumerate(rows, start=1), items, str(path))
    if not report.ok:
        raise DataError(report.errors)
    order = {item.id: k for k, item in enumerate(items)}
    rows.sort(key=lambda r: order[r["id"]])
    return write_jsonl(path, rows)


def write_zip(zip_path: Path, files: list[Path]) -> Path:
    """Bundles files at the root of a zip, the layout the task's upload page expects."""
    tmp = zip_path.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for file in sorted(files):
            bundle.write(file, arcname=file.name)
    tmp.replace(zip_path)
    return zip_path
