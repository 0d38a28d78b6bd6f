"""`mushroom.score`: the official metrics from Python, on files or on records in memory.

A researcher tuning in a notebook had `mushroom score` on the command line and, in Python,
only functions of private-looking modules, one of which took the gold items as records
and failed on the official rows as dicts (`'dict' object has no attribute 'id'`).

Records in memory are written to a temporary JSON-lines file and scored by the same reader
as a file: numbers parsed as the official scorer parses them, hard labels derived from soft
ones where a line has none, the same warnings. So `score(rows, preds)` equals `mushroom
score` on the files those rows would make, to the last digit. Messages name the records
as `gold[3]` or `predictions[0]`, not the temporary file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mushroom.errors import DataError, MushroomError, Problem

if TYPE_CHECKING:
    from mushroom.evaluation.score import ScoreResult

PathLike = str | os.PathLike


def score(
    gold: PathLike | Iterable[Any],
    predictions: PathLike | Iterable[Any],
    *,
    langs: list[str] | None = None,
    partial: bool = False,
) -> ScoreResult:
    """Scores predictions against gold spans exactly as the official scorer (and `mushroom score`).

    Args:
        gold: labelled items: a file or a folder of official JSON-lines files, or the rows
            themselves (dicts as the official files hold them, with `id`,
            `model_output_text`, `soft_labels` and `hard_labels`; or `Item` records).
        predictions: a prediction file, a folder of per-language files, a run folder; or
            the predictions themselves (`mushroom.Prediction`s, or dicts with `id`,
            `soft_labels`, `hard_labels` as a submission line has them).
        langs: with two folders, the languages to score (all the gold's by default).
        partial: score only the gold items that have a prediction; otherwise a gold item
            without one is an error, as the official scorer requires.

    Returns:
        The per-item scores in the official order: `mean_iou` and `mean_cor` are the two
        numbers the official scorer prints, `ci()` their bootstrap intervals, `by_lang()`
        the same per language, `to_dict()` a JSON-ready summary. What `mushroom score`
        would warn of is in `warnings`, and warned of as a `RuntimeWarning`.

    Raises:
        MushroomError: a file or record that cannot be scored: a span past its answer, an id
            twice, an id not in the gold, a gold item with no prediction (without
            `partial`), a path that is not there. A `DataError` lists every problem found.
        TypeError: an argument that is neither a path nor an iterable of records.
    """
    try:
        return _score(gold, predictions, langs, partial)
    except DataError as exc:
        if partial or not any(p.message.startswith("no prediction for") for p in exc.problems):
            raise
        hint = "; partial=True scores only the gold items that have one"
        raise DataError(
            [
                Problem(p.path, p.line, p.field, p.message + hint, p.item_id)
                if p.message.startswith("no prediction for")
                else p
                for p in exc.problems
            ]
        ) from None


def _score(gold: Any, predictions: Any, langs: list[str] | None, partial: bool) -> ScoreResult:
    from mushroom.evaluation.runfiles import score_run_files

    gold_path, pred_path = _as_path(gold, "gold"), _as_path(predictions, "predictions")
    if gold_path is not None and pred_path is not None:
        notes: list[str] = []
        result = score_run_files(gold_path, pred_path, langs, partial=partial, note=notes.append)
        result.warnings[:0] = [n.removeprefix("warning: ") for n in notes]
        return _warned(result)
    if langs is not None:
        raise TypeError(
            "langs picks files of two folders: give gold and predictions as paths, or leave it out"
        )
    with tempfile.TemporaryDirectory(prefix="mushroom-score-") as tmp:
        names: dict[str, str] = {}
        if gold_path is None:
            gold_path = _written(Path(tmp) / "gold.jsonl", _gold_rows(gold), "gold")
            names[str(gold_path)] = "gold"
        if pred_path is None:
            pred_path = _written(
                Path(tmp) / "predictions.jsonl", _prediction_rows(predictions), "predictions"
            )
            names[str(pred_path)] = "predictions"
        if gold_path.is_dir() or pred_path.is_dir():
            kept = "gold" if gold_path.is_dir() else "predictions"
            raise TypeError(
                f"{kept} is a folder, the other records in memory: give a file of the language "
                "the records are of, or both as folders"
            )
        try:
            result = score_run_files(gold_path, pred_path, None, partial=partial, note=lambda _: None)
        except DataError as exc:
            raise DataError([_renamed_problem(p, names) for p in exc.problems]) from None
        except MushroomError as exc:
            raise type(exc)(_renamed(str(exc), names)) from None
        result.warnings = [_renamed(w, names) for w in result.warnings]
    return _warned(result)


def _as_path(value: Any, what: str) -> Path | None:
    """The path given, or None for records; a lone string that names no file is refused."""
    if isinstance(value, os.PathLike):
        return Path(value)
    if isinstance(value, str):
        if not value.strip():
            raise MushroomError(f"{what}: an empty path")
        return Path(value)
    if isinstance(value, bytes | dict) or not isinstance(value, Iterable):
        raise TypeError(
            f"{what} is a path, or an iterable of records (dicts or mushroom records), "
            f"not {type(value).__name__}"
        )
    return None


def _gold_rows(records: Iterable[Any]) -> list[dict]:
    from mushroom.data.records import Item

    rows = []
    for k, rec in enumerate(records):
        if isinstance(rec, Item):
            rows.append(rec.model_dump(mode="json", exclude_none=True))
        elif isinstance(rec, dict):
            rows.append(rec)
        else:
            raise TypeError(f"gold[{k}] is a {type(rec).__name__}; a gold record is a dict or an Item")
    return rows


def _prediction_rows(records: Iterable[Any]) -> list[dict]:
    from mushroom.data.records import Prediction

    rows = []
    for k, rec in enumerate(records):
        if isinstance(rec, Prediction):
            rows.append(rec.submission_dict())
        elif isinstance(rec, dict):
            rows.append(rec)
        else:
            raise TypeError(
                f"predictions[{k}] is a {type(rec).__name__}; a prediction is a dict or a mushroom.Prediction"
            )
    return rows


def _plain(value: Any) -> Any:
    """A numpy number or array as Python's, for json.dumps (a notebook's offsets often are)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"a value of type {type(value).__name__} is not JSON")


def _written(path: Path, rows: list[dict], what: str) -> Path:
    if not rows:
        raise MushroomError(f"{what}: no records")
    lines = []
    for k, row in enumerate(rows):
        try:
            lines.append(json.dumps(row, ensure_ascii=False, default=_plain))
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{what}[{k}]: {exc}") from None
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _renamed(text: str, names: dict[str, str]) -> str:
    """A message about a temporary file, naming the records instead: `gold[3]` for line 4."""
    for path, name in names.items():
        text = re.sub(re.escape(path) + r":(\d+)", lambda m, n=name: f"{n}[{int(m.group(1)) - 1}]", text)
        text = text.replace(path, name)
    return text


def _renamed_problem(problem: Problem, names: dict[str, str]) -> Problem:
    name = names.get(problem.path)
    if name is None:
        return Problem(
            problem.path, problem.line, problem.field, _renamed(problem.message, names), problem.item_id
        )
    where = name if problem.line is None else f"{name}[{problem.line - 1}]"
    return Problem(where, None, problem.field, _renamed(problem.message, names), problem.item_id)


def _warned(result: ScoreResult) -> ScoreResult:
    for warning in result.warnings:
        warnings.warn(warning, RuntimeWarning, stacklevel=4)
    return result
