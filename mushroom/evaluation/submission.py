"""Official submission files: one checked JSONL per language, bundled in a zip."""

from __future__ import annotations

import zipfile
from pathlib import Path

from mushroom.data.jsonl import write_jsonl
from mushroom.data.records import Item, Prediction
from mushroom.errors import DataError
from mushroom.evaluation.check import check_rows


def write_predictions(path: Path, predictions: list[Prediction], items: list[Item]) -> Path:
    """Checks predictions against their items, then writes them; nothing is written if bad."""
    rows = [p.submission_dict() for p in predictions]
    report = check_rows(enumerate(rows, start=1), items, str(path))
    if not report.ok:
        raise DataError(report.errors)
    order = {item.id: k for k, item in enumerate(items)}
    rows.sort(key=lambda r: order[r["id"]])
    return write_jsonl(path, rows)


# Every entry carries this date and mode, not the file's: the same predictions make the same
# bytes, so a zip's checksum says whether two runs submitted the same thing.
_ENTRY_DATE = (1980, 1, 1, 0, 0, 0)
_ENTRY_MODE = 0o644 << 16


def write_zip(zip_path: Path, files: list[Path]) -> Path:
    """Bundles files at the root of a zip, the layout the task's upload page expects."""
    tmp = zip_path.with_suffix(".zip.tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for file in sorted(files, key=lambda f: f.name):
            entry = zipfile.ZipInfo(file.name, date_time=_ENTRY_DATE)
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = _ENTRY_MODE
            entry.create_system = 3  # Unix, on every OS: Windows writes 0 into the header
            bundle.writestr(entry, file.read_bytes())
    tmp.replace(zip_path)
    return zip_path
