"""A dataset saved from `predictions_to_dataset`, read by `score` and `check` as prediction files.

Its rows are written to temporary JSONL files (one per language of a gold folder), so the
scorer and checker read them as they read a file; what they say of those files is said of
the dataset's folder and row.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from mushroom.data.hf import load_saved, write_rows
from mushroom.data.label_files import LABEL_KEYS
from mushroom.errors import DataError, MushroomError, Problem
from mushroom.util.tempdirs import process_temp_dir


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
        message = self.text(problem.message, about=problem.path)
        return Problem(str(self.source), line, problem.field, message, problem.item_id)

    def said(self, exc: MushroomError) -> MushroomError:
        """`exc` with the files' names replaced by the dataset's folder."""
        if isinstance(exc, DataError):
            return DataError([self.problem(p) for p in exc.problems], exit_code=exc.exit_code)
        out = MushroomError(self.text(str(exc)))
        out.exit_code = exc.exit_code
        return out

    def text(self, line: str, about: str | None = None) -> str:
        """A message (an error, a warning) said of the dataset's folder and rows, not the files'.

        A file's line is its row's number: a language's file holds only some of the rows.
        """
        source = str(self.source)
        names = {str(f): (source, rows) for f, rows in self.rows.items()}
        names.setdefault(str(self.path), (source, []))  # the folder of per-language files, last
        return in_callers_words(line, names, "{name}:{record}", "row {record}", about)


def in_callers_words(
    text: str, names: dict[str, tuple[str, list[int]]], cite: str, cite_line: str, about: str | None = None
) -> str:
    """A message about temporary files said of what the caller gave: records, not lines.

    `mushroom.score` writes records in memory, and `score` a saved dataset's rows, to
    temporary JSON-lines files; a message naming those files and their lines meant nothing.

    Args:
        text: the message.
        names: each temporary path (a file before the folder holding it), with the name to
            say instead and the record of each of its lines (line 1 first).
        cite: what `path:N` becomes, a format of `name` and `record`.
        cite_line: what "line N" becomes in a message naming the file (or `about` it).
        about: the file a problem is of, whose lines its message names without its path.
    """
    for path, (name, index) in names.items():
        if path not in text and path != about:
            continue

        def record(m: re.Match, form: str, name: str = name, index: list[int] = index) -> str:
            n = int(m.group(1))
            return form.format(name=name, record=index[n - 1]) if 0 < n <= len(index) else m.group(0)

        text = re.sub(re.escape(path) + r":(\d+)", lambda m: record(m, cite), text)
        text = re.sub(r"\bline (\d+)", lambda m: record(m, cite_line), text)  # "(first on line 4)"
        text = text.replace(path, name)
    return text


def saved_predictions(path: Path, gold: Path | None = None) -> SavedPredictions:
    """A dataset saved from `predictions_to_dataset` (or any with id and labels) as prediction files.

    Every row is checked as a prediction file's line is, and named by row. With a gold folder
    of per-language files, the rows are split by the language of the gold item of their id,
    so that `score` pairs them as it pairs the official files; a row whose id no gold file has
    is refused by row.
    """
    from mushroom.data.predictions import load_predictions
    from mushroom.evaluation.score import by_gold_file

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
    folder = process_temp_dir("mushroom-hf-")
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
    with whole.open(encoding="utf-8") as handle:  # not splitlines: an answer may hold U+2028
        lines = handle.readlines()
    ids = [str(json.loads(line)["id"]) for line in lines]
    by_file = by_gold_file(ids, gold, lambda k: (str(path), k + 1))
    split_folder = folder / "by-language"
    split_folder.mkdir()
    saved = SavedPredictions(path, split_folder)
    for gold_file, index in by_file.items():  # named as the gold's files, as score pairs them
        out = split_folder / gold_file.name
        out.write_text("".join(lines[k] for k in index), encoding="utf-8")
        saved.rows[out] = [k + 1 for k in index]
    return saved
