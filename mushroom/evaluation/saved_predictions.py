"""A dataset saved from `predictions_to_dataset`, read by `score` and `check` as prediction files.

Its rows are written to temporary JSONL files (one per language of a gold folder), so the
scorer and checker read them as they read a file; what they say of those files is said of
the dataset's folder and row.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mushroom.data.hf import load_saved, write_rows
from mushroom.data.label_files import LABEL_KEYS
from mushroom.errors import DataError, MushroomError, Problem


@dataclass
class SavedPredictions:
    """A saved dataset of predictions written as prediction files the scorer and checker read.

    Those files are temporary, so what they are blamed for is said of the dataset's folder and
    row (`said`): "tmp/mushroom.en-val.v2.jsonl:3" meant nothing to the user.
    """

    source: Path
    path: Path  # the one file, or a folder of one file per language of the gold
    rows: dict[Path, list[int]] = field(default_factory=dict)  # each file's lines: their dataset rows

    def problem(self, problem: Problem) -> Problem:
        """The problem said of the dataset's folder and row, when it names one of the files."""
        written = self.rows.get(Path(problem.path))
        if written is None:
            return problem
        known = problem.line is not None and 0 < problem.line <= len(written)
        line = written[problem.line - 1] if known else None
        return Problem(str(self.source), line, problem.field, problem.message, problem.item_id)

    def said(self, exc: MushroomError) -> MushroomError:
        """`exc` with the files' names replaced by the dataset's folder."""
        if isinstance(exc, DataError):
            return DataError([self.problem(p) for p in exc.problems], exit_code=exc.exit_code)
        out = MushroomError(self.text(str(exc)))
        out.exit_code = exc.exit_code
        return out

    def text(self, line: str) -> str:
        """A message (an error, a warning) with the files' names replaced by the dataset's folder."""
        for written in sorted(self.rows, key=lambda f: -len(str(f))):
            line = line.replace(str(written), str(self.source))
        return line.replace(str(self.path), str(self.source))  # the folder of per-language files


def saved_predictions(path: Path, gold: Path | None = None) -> SavedPredictions:
    """A dataset saved from `predictions_to_dataset` (or any with id and labels) as prediction files.

    Every row is checked as a prediction file's line is, and named by row. With a gold folder
    of per-language files, the rows are split by the language of the gold item of their id,
    so that `score` pairs them as it pairs the official files; a row whose id no gold file has
    is refused by row.
    """
    from mushroom.data.predictions import load_predictions
    from mushroom.evaluation.score import files_by_lang, gold_file_of_ids

    dataset = load_saved(path)
    columns = set(dataset.column_names)
    if "id" not in columns or not columns & set(LABEL_KEYS):
        raise DataError(
            [
                Problem(
                    str(path),
                    None,
                    None,
                    f"columns {', '.join(sorted(columns)) or 'none'}: a dataset of predictions has "
                    "id and soft_labels or hard_labels (as predictions_to_dataset writes)",
                )
            ]
        )
    folder = Path(tempfile.mkdtemp(prefix="mushroom-hf-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    # a label kind the dataset lacks is None in every row: absent, so the other kind stands for it
    rows = ({k: v for k, v in row.items() if not (k in LABEL_KEYS and v is None)} for row in dataset)
    whole = write_rows(rows, folder / "predictions.jsonl", str(path))
    saved = SavedPredictions(path, whole, {whole: list(range(1, dataset.num_rows + 1))})
    try:
        load_predictions(whole)
    except DataError as exc:
        raise saved.said(exc) from None
    if gold is None or not gold.is_dir():
        return saved
    file_of = gold_file_of_ids(files_by_lang(gold)[0].values())
    by_file: dict[Path, list[tuple[int, str]]] = {}
    strangers: list[Problem] = []
    with whole.open(encoding="utf-8") as handle:
        for row, line in enumerate(handle, 1):
            item_id = str(json.loads(line)["id"])
            if item_id not in file_of:
                strangers.append(Problem(str(path), row, "id", f"{item_id!r} is in no gold file of {gold}"))
            else:
                by_file.setdefault(file_of[item_id], []).append((row, line))
    if strangers:
        raise DataError(strangers)
    split_folder = folder / "by-language"
    split_folder.mkdir()
    saved = SavedPredictions(path, split_folder)
    for gold_file, lines in by_file.items():  # named as the gold's files, as score pairs them
        out = split_folder / gold_file.name
        out.write_text("".join(line for _, line in lines), encoding="utf-8")
        saved.rows[out] = [row for row, _ in lines]
    return saved
