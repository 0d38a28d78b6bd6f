"""Hugging Face `datasets` in and out: the ecosystem's format for shared-task data.

In: a `datasets.Dataset` with the official columns (`id`, `lang`, `model_input`,
`model_output_text`, and the labels where there are some), or a folder written by
`Dataset.save_to_disk`, is read through the same validation as a JSONL file, so a bad column
gets the same `FILE:ROW: field 'NAME'` error (the folder is the file, the row its line).
Out: predictions become a `Dataset` with the submission columns (`id`, `soft_labels`,
`hard_labels`), ready for `save_to_disk` or `push_to_hub`.

`datasets` is an optional extra (`pip install -e '.[datasets]'`), imported only here.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mushroom.data.label_files import LABEL_KEYS
from mushroom.data.predictions import submission_name
from mushroom.data.records import Item, Prediction
from mushroom.errors import DataError, MissingExtra, MushroomError, Problem
from mushroom.util.names import safe_name
from mushroom.util.tempdirs import process_temp_dir

SAVED_MARKERS = ("dataset_info.json", "state.json")


def datasets_module() -> Any:
    """The `datasets` package, or MissingExtra naming the extra that installs it."""
    try:
        import datasets
    except ImportError:
        raise MissingExtra("reading or writing a Hugging Face dataset", "datasets", "datasets") from None
    return datasets


def is_saved_dataset(path: Path) -> bool:
    """Whether `path` is a folder written by `save_to_disk` (not a folder of JSONL files).

    A `DatasetDict`'s folder counts too, so that `load_saved` names its splits: it was taken
    for a plain folder ("is a folder; give a file", "GOLD is a folder, PRED a file").
    """
    if path.is_dir() and (path / "dataset_dict.json").is_file():
        return True
    return path.is_dir() and all((path / name).is_file() for name in SAVED_MARKERS)


def refuse_part_of_dataset(path: Path, option: str) -> None:
    """A file inside a saved dataset's folder is refused, naming the folder to give instead.

    `--items ds/state.json` was read as JSON Lines ("one JSON document spread over several
    lines"), and `ds/data-00000-of-00001.arrow` as lines of invalid UTF-8.
    """
    if path.is_file() and is_saved_dataset(path.parent):
        raise MushroomError(
            f"{option} {path}: a file inside the saved dataset {path.parent}; "
            f"give the folder: {option} {path.parent}"
        )


def load_saved(path: Path) -> Any:
    """The Dataset saved in `path`; a DatasetDict (several splits) names its splits to choose from."""
    datasets = datasets_module()
    if _saved_no_rows(path):  # datasets 5.2's load_from_disk fails on it with an IndexError
        raise DataError([Problem(str(path), None, None, "the saved dataset holds no rows")])
    splits = sorted(path.iterdir()) if (path / "dataset_dict.json").is_file() else []
    empty = [split.name for split in splits if split.is_dir() and _saved_no_rows(split)]
    if empty:
        said = f"a DatasetDict whose split(s) {', '.join(empty)} hold no rows"
        raise DataError([Problem(str(path), None, None, said)])
    try:
        loaded = datasets.load_from_disk(str(path))
    except Exception as exc:  # a cut-off or hand-edited folder: datasets' own error, said as such
        from mushroom.errors import error_text

        raise MushroomError(f"{path}: could not be read as a saved dataset: {error_text(exc)}") from exc
    if isinstance(loaded, datasets.DatasetDict):
        raise MushroomError(
            f"{path} is a DatasetDict (splits: {', '.join(loaded)}); give one split's folder, "
            f"e.g. {path / next(iter(loaded))}"
        )
    return loaded


def _saved_no_rows(path: Path) -> bool:
    """Whether a `save_to_disk` folder of one Dataset lists no data file (0 rows were saved)."""
    try:
        state = json.loads((path / "state.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # a DatasetDict's folder, or an unreadable state: load_from_disk says
    return isinstance(state, dict) and state.get("_data_files") == []


def write_rows(rows: Iterable[dict[str, Any]], path: Path, source: str | None = None) -> Path:
    """Rows as JSON Lines, one a line, as the official files are.

    A value JSON cannot hold (bytes, a date) in a column mushroom reads is refused by row and
    column, naming `source`: it was written as its str(), so a bytes answer became the text
    "b'...'" and was scored. In a column it does not read (a timestamp, an image) it is left out.
    """
    read = set(Item.model_fields) | set(LABEL_KEYS)
    problems: list[Problem] = []
    with path.open("w", encoding="utf-8") as handle:
        for line, row in enumerate(rows, 1):
            try:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                continue
            except (TypeError, ValueError):  # said by column below
                bad = [key for key, value in row.items() if not _json_ok(key, value)]
            for key in bad:
                if key in read:
                    kind = type(row[key]).__name__
                    problems.append(
                        Problem(
                            source or str(path), line, key, f"a {kind} value: give text, numbers or lists"
                        )
                    )
            kept = {key: value for key, value in row.items() if key not in bad}
            handle.write(json.dumps(kept, ensure_ascii=False) + "\n")
    if problems:
        raise DataError(problems)
    return path


def _json_ok(key: Any, value: Any) -> bool:
    try:
        json.dumps({key: value})
    except (TypeError, ValueError):
        return False
    return True


def _as_jsonl(dataset: Any, source: str, folder: Path) -> Path:
    """The dataset's rows in a JSONL file of `folder`, checked as an items file would be.

    Problems name `source` and the row (1-based), not the temporary file.
    """
    from mushroom.data.splits import load_items

    _refuse_missing_columns(dataset, source)
    path = write_rows(iter(dataset), folder / "items.jsonl", source)
    try:
        load_items(path)
    except DataError as exc:
        raise DataError(
            [Problem(source, p.line, p.field, p.message, p.item_id) for p in exc.problems],
            exit_code=exc.exit_code,
        ) from None
    return path


def _refuse_missing_columns(dataset: Any, source: str) -> None:
    """One problem for a column every row lacks, not one per row (an audit counted 24).

    Named with the dataset's close column, and the API's name for it (`answer`, `question`).
    """
    from mushroom.util.words import close_match

    columns = list(getattr(dataset, "column_names", None) or [])
    if not columns or not len(dataset):
        return
    other_names = {"model_output_text": "answer", "model_input": "question", "lang": "language", "id": "qid"}
    problems = []
    for need in ("id", "lang", "model_input", "model_output_text"):
        if need in columns:
            continue
        close = close_match(need, columns) or (other_names[need] if other_names[need] in columns else None)
        hint = f" (rename {close!r} to it: dataset.rename_column({close!r}, {need!r}))" if close else ""
        problems.append(Problem(source, None, need, f"no column {need!r} among {', '.join(columns)}{hint}"))
    if problems:
        raise DataError(problems)


def items_from_dataset(dataset: Any, source: str = "dataset") -> list[Item]:
    """The dataset's rows as checked items (every problem named by row and field)."""
    from mushroom.data.splits import load_items

    with tempfile.TemporaryDirectory(prefix="mushroom-hf-") as tmp:
        return load_items(_as_jsonl(dataset, source, Path(tmp)))


def saved_items_file(path: Path, rows_of: dict[Path, list[int]] | None = None) -> Path:
    """A saved dataset's items as a checked JSONL file in a new temporary folder (read lazily by runs).

    `rows_of` gets the file's rows (line k is row k), for messages to name rows, not lines.
    """
    folder = process_temp_dir("mushroom-hf-")
    # removed when the process ends (or by the next one, if killed): the run reads it until then
    dataset = load_saved(path)
    out = _as_jsonl(dataset, str(path), folder)
    if rows_of is not None:
        rows_of[out] = list(range(1, len(dataset) + 1))
    return out


def saved_gold(path: Path, split: str = "val", rows_of: dict[Path, list[int]] | None = None) -> Path:
    """A saved dataset of gold items as official per-language files, for the scorer.

    One language gives one file (`mushroom.<lang>-val.v2.jsonl`), several a folder of them, so
    `score` pairs them with prediction files or a run folder as it pairs the official files.
    `rows_of` gets each file's rows, in the order of its lines.
    """
    items_path = saved_items_file(path)
    by_lang: dict[str, list[dict[str, Any]]] = {}
    row_numbers: dict[str, list[int]] = {}
    with items_path.open(encoding="utf-8") as handle:
        for row_number, line in enumerate(handle, 1):
            # a dataset has every column, None where a record lacked it: a label kind it lacks
            # is absent to the scorer (which reads the other kind for it), not "must be a list"
            row = {k: v for k, v in json.loads(line).items() if not (k in LABEL_KEYS and v is None)}
            # the code as items read it ("EN" in official val files is "en"): the scorer names
            # a gold file's language from its file name, in lower case
            code = safe_name(Item.model_validate(row).lang, "language code")
            by_lang.setdefault(code, []).append(row)
            row_numbers.setdefault(code, []).append(row_number)
    if not any(row.get(key) is not None for rows in by_lang.values() for row in rows for key in LABEL_KEYS):
        raise DataError(
            [Problem(str(path), None, None, "no row has hard_labels or soft_labels: gold must be labelled")]
        )
    folder = items_path.parent / "gold"
    folder.mkdir()
    files = [write_rows(rows, folder / submission_name(lang, split)) for lang, rows in by_lang.items()]
    if rows_of is not None:
        rows_of.update(zip(files, row_numbers.values()))
    return files[0] if len(files) == 1 else folder


def predictions_to_dataset(predictions: Iterable[Prediction]) -> Any:
    """Predictions as a Dataset with the submission columns: id, soft_labels, hard_labels."""
    datasets = datasets_module()
    rows = [p.submission_dict() for p in predictions]
    for row in rows:
        row["hard_labels"] = [list(span) for span in row["hard_labels"]]
    return datasets.Dataset.from_list(rows)
