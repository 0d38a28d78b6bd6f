"""`mushroom.score`: the official metrics from Python, on files or on records in memory.

A researcher tuning in a notebook had `mushroom score` on the command line and, in Python,
only functions of private-looking modules, one of which took the gold items as records
and failed on the official rows as dicts (`'dict' object has no attribute 'id'`).

Records in memory are written to temporary JSON-lines files and scored by the same reader
as a file: numbers parsed as the official scorer parses them, hard labels derived from soft
ones where a record has none, the same warnings. So `score(rows, preds)` equals `mushroom
score` on the files those rows would make, to the last digit. Messages name the records
as `gold[3]` or `predictions[0]`, not the temporary files, and the keywords as Python
writes them (`langs=`, `partial=True`), not the command's flags.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mushroom.errors import DataError, MushroomError, Problem

if TYPE_CHECKING:
    from mushroom.evaluation.score import ScoreResult

PathLike = str | os.PathLike
# where each temporary file came from: its name in messages, and the record index of each line
Names = dict[str, tuple[str, list[int]]]


def score(
    gold: PathLike | Iterable[Any],
    predictions: PathLike | Iterable[Any],
    *,
    langs: str | list[str] | None = None,
    partial: bool = False,
) -> ScoreResult:
    """Scores predictions against gold spans exactly as the official scorer (and `mushroom score`).

    Args:
        gold: labelled items: a file or a folder of official JSON-lines files, or the rows
            themselves (dicts as the official files hold them, with `id`,
            `model_output_text`, `soft_labels` and `hard_labels`; or `Item` records).
        predictions: a prediction file, a folder of per-language files, a run folder; or
            the predictions themselves (`mushroom.Prediction`s, or dicts with `id`,
            `soft_labels`, `hard_labels` as a submission line has them). Records given
            with a gold folder are matched to its files by id.
        langs: with a gold folder, the languages to score ("en,de" or a list; all the
            gold's by default).
        partial: score only the gold items that have a prediction; otherwise a gold item
            without one is an error, as the official scorer requires. A run folder made
            with `--limit` is scored on its items either way (and warned of).

    Returns:
        The per-item scores in the official order: `mean_iou` and `mean_cor` average the
        items (pooled, as the official scorer does on one file), `by_lang()` splits them,
        `ci()` gives bootstrap intervals, `to_dict()` a summary. What `mushroom score`
        would warn of is in `warnings`, and warned of as a `RuntimeWarning`.

    Raises:
        MushroomError: a file or record that cannot be scored: a span past its answer, an id
            twice, an id not in the gold, a gold item with no prediction (without
            `partial`), a NaN probability, a path that is not there. A `DataError` lists
            every problem found.
        TypeError: an argument of the wrong kind: neither a path nor an iterable of records
            (a DataFrame itself: give `df.to_dict("records")`), a record that is no dict,
            a value that is no JSON, records against a prediction folder, or a `partial`
            that is no bool.
    """
    import numpy as np

    if not isinstance(partial, bool | np.bool_):  # "no" is truthy: it scored a subset, unsaid
        raise TypeError(f"partial is True or False, not {partial!r}")
    try:
        return _score(gold, predictions, _langs(langs), bool(partial))
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


def _langs(langs: Any) -> list[str] | None:
    """`langs` as a list: "en" was read as the languages "e" and "n"."""
    if langs is None:
        return None
    if isinstance(langs, str):
        return [x.strip() for x in langs.split(",") if x.strip()]
    if isinstance(langs, Iterable) and all(isinstance(x, str) for x in langs):
        return list(langs)
    raise TypeError(f"langs is a language code, codes joined by commas, or a list of them, not {langs!r}")


def _score(gold: Any, predictions: Any, langs: list[str] | None, partial: bool) -> ScoreResult:
    from mushroom.evaluation.runfiles import score_run_files
    from mushroom.evaluation.score import require_path

    gold_path, pred_path = _as_path(gold, "gold"), _as_path(predictions, "predictions")
    for name, path in (("gold", gold_path), ("predictions", pred_path)):
        if path is not None:  # said here, in the keyword's name, not the command's GOLD
            require_path(name, path)
    if gold_path is not None and pred_path is None:
        from mushroom.data.hf import is_saved_dataset, saved_gold

        if is_saved_dataset(gold_path):  # records are paired with its rows as with official files
            gold_path = saved_gold(gold_path)
    notes: list[str] = []
    names: Names = {}
    texts: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="mushroom-score-") as tmp:
        if gold_path is None:
            gold_path = _written(Path(tmp) / "gold.jsonl", _rows(gold, "gold"), "gold", names)
        if pred_path is None:
            rows = _rows(predictions, "predictions", texts)
            if gold_path.is_dir():
                pred_path, covered = _split_by_language(rows, gold_path, Path(tmp) / "predictions", names)
                if partial and langs is None:  # the languages predicted, as their items are
                    langs = covered
            else:
                pred_path = _written(Path(tmp) / "predictions.jsonl", rows, "predictions", names)
        elif pred_path.is_dir() and names:
            raise TypeError(
                "predictions is a folder and gold records in memory: give gold as the file or "
                "folder of its language(s)"
            )
        if langs is not None and not gold_path.is_dir():
            raise TypeError("langs picks the files of a gold folder; gold is one file (every item is scored)")
        try:
            result = score_run_files(gold_path, pred_path, langs, partial=partial, note=notes.append)
        except DataError as exc:
            raise DataError([_renamed_problem(p, names) for p in exc.problems]) from None
        except MushroomError as exc:
            raise type(exc)(_renamed(str(exc), names)) from None
        said = [n.removeprefix("warning: ") for n in notes if not (partial and "(--partial)" in n)]
        result.warnings = [_renamed(w, names) for w in said + result.warnings]
        if texts:
            result.warnings += _text_warning(texts, gold_path, langs)
    return _warned(result)


def _carried_text(rec: Any) -> tuple[str, str] | None:
    """(id, answer text) a prediction record carries, if it carries one."""
    if isinstance(rec, dict):
        rid, text = rec.get("id"), rec.get("text", rec.get("model_output_text"))
    else:
        rid = getattr(rec, "id", None)
        text = rec.text if "text" in getattr(rec, "model_fields_set", ()) else None
    return (rid, text) if isinstance(rid, str) and isinstance(text, str) else None


def _text_warning(texts: dict[str, str], gold: Path, langs: list[str] | None) -> list[str]:
    """A warning for predictions whose own text is not their gold answer: offsets into another text.

    `detect` on an answer normalised differently (NFC, stripped) gave offsets one off from
    the gold's, and were scored IoU 0.75 without a word.
    """
    from mushroom.data.jsonl import iter_json_lines
    from mushroom.evaluation.score import files_by_lang

    by_lang = {} if gold.is_file() else files_by_lang(gold)[0]
    files = [gold] if gold.is_file() else [f for lang, f in by_lang.items() if langs is None or lang in langs]
    differ = []
    for path in files:
        for _, row in iter_json_lines(path, []):
            said = texts.get(row["id"]) if isinstance(row.get("id"), str) else None
            if said is not None and said != row.get("model_output_text"):
                differ.append(row["id"])
    if not differ:
        return []
    return [
        f"{len(differ)} of the predictions carry a text that is not their gold answer (first: id "
        f"{differ[0]!r}): their offsets index another text, and are scored as they are"
    ]


def _as_path(value: Any, what: str) -> Path | None:
    """The path given, or None for records; what is neither is refused."""
    if isinstance(value, os.PathLike):
        return Path(value)
    if isinstance(value, str):
        if not value.strip():
            raise MushroomError(f"{what}: an empty path")
        return Path(value)
    if hasattr(value, "columns"):  # iterated, a DataFrame gives its column names
        raise TypeError(f"{what} is a DataFrame: give its rows, {what}_df.to_dict('records')")
    if isinstance(value, bytes | dict) or not isinstance(value, Iterable):
        raise TypeError(
            f"{what} is a path, or an iterable of records (dicts or mushroom records), "
            f"not {type(value).__name__}"
        )
    return None


def _rows(records: Iterable[Any], what: str, texts: dict[str, str] | None = None) -> list[dict]:
    """Each record as the line a file would hold; a record of another kind is a TypeError.

    `texts` gets the answer text a prediction carries (`mushroom.Prediction.text`, or a
    row's `text` or `model_output_text`), by id, for `_text_warning`.
    """
    from mushroom.data.records import Item, Prediction, hard_from_soft, left_out, soft_from_hard

    rows = []
    for k, rec in enumerate(records):
        carried = _carried_text(rec) if texts is not None else None
        if carried is not None:
            texts[carried[0]] = carried[1]
        if isinstance(rec, Prediction) and what == "predictions":
            row = rec.submission_dict()
            # a label left out is derived from the other, as in a file (submission_dict's [] for
            # it scored a soft-only record IoU 0.04, not 0.38). Derived here from the given
            # kind's values now, so both are written: written as given, a mix of soft-only and
            # hard-only records was warned of as a file the official scorer fails on; and a
            # record's derived field is not trusted (an edited list left it stale).
            given = rec.model_fields_set
            row = {key: v for key, v in row.items() if key == "id" or key in given}
            if "soft_labels" in given and "hard_labels" not in given:
                row["hard_labels"] = [list(h) for h in hard_from_soft(rec.soft_labels)]
            elif "hard_labels" in given and "soft_labels" not in given:
                row["soft_labels"] = [s.model_dump() for s in soft_from_hard(rec.hard_labels)]
        elif isinstance(rec, Item) and what == "gold":
            row = rec.model_dump(mode="json", exclude_none=True)
        elif isinstance(rec, dict):
            row = {key: v for key, v in rec.items() if not left_out(v)}
        else:
            kinds = "a dict or a mushroom.Prediction" if what == "predictions" else "a dict or an Item"
            raise TypeError(f"{what}[{k}] is a {type(rec).__name__}; a record here is {kinds}")
        item_id = row.get("id")
        if isinstance(item_id, numbers.Integral) and not isinstance(item_id, bool):
            row["id"] = str(int(item_id))  # as detect_batch takes them (numpy's too): strings
        rows.append(row)
    if not rows:
        raise MushroomError(f"{what}: no records")
    return rows


def _plain(value: Any) -> Any:
    """A numpy number or array as Python's, for json.dumps (a notebook's offsets often are)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"a value of type {type(value).__name__} is not JSON")


def _where(value: Any, bad: Callable[[Any], bool], where: str = "") -> str | None:
    """Where in a record the first value `bad` holds is (`soft_labels.0.prob`), or None."""
    if bad(value):
        return where
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, dict):
        items = value.items()
        key_bad = next((key for key in value if bad(key)), None)  # a key is written too
        if key_bad is not None:
            return f"{where}.{key_bad!a}" if where else ascii(key_bad)
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, inner in items:
        found = _where(inner, bad, f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


def _not_finite(value: Any) -> bool:
    return isinstance(value, float) and not math.isfinite(value)


def _half_character(value: Any) -> bool:
    from mushroom.text.normalize import LONE_SURROGATE

    return isinstance(value, str) and LONE_SURROGATE.search(value) is not None


def _line(row: dict, what: str, k: int) -> str:
    half = _where(row, _half_character)
    if half is not None:  # UTF-8 cannot write it: a raw UnicodeEncodeError said no record
        raise DataError(
            [
                Problem(
                    f"{what}[{k}]",
                    None,
                    half,
                    "holds a lone surrogate (half a character), which no file can hold",
                )
            ]
        )
    try:
        return json.dumps(row, ensure_ascii=False, default=_plain, allow_nan=False)
    except ValueError:
        where = _where(row, _not_finite) or "?"
        # the file reader said "invalid JSON: NaN is not a JSON number" of JSON nobody wrote
        raise DataError(
            [Problem(f"{what}[{k}]", None, where, "NaN or infinite: the scorer reads only numbers")]
        ) from None
    except TypeError as exc:
        raise TypeError(f"{what}[{k}]: {exc}") from None


def _written(path: Path, rows: list[dict], what: str, names: Names, index: list[int] | None = None) -> Path:
    index = index if index is not None else list(range(len(rows)))
    lines = [_line(row, what, k) for row, k in zip(rows, index)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    names[str(path)] = (what, index)
    return path


def _split_by_language(rows: list[dict], gold: Path, folder: Path, names: Names) -> tuple[Path, list[str]]:
    """Prediction records as per-language files named as the gold folder's, matched by id.

    Returns the folder and the languages it has files for.

    `detect_batch` over a whole split, then `score(split_folder, preds)`: the records were
    refused, as a folder and records cannot be paired by file name.
    """
    from mushroom.evaluation.score import by_gold_file, files_by_lang

    files, _ = files_by_lang(gold)
    if not files:
        raise MushroomError(f"gold {gold}: no per-language files (such as mushroom.en-val.v2.jsonl)")
    lang_of = {path: lang for lang, path in files.items()}
    by_file = by_gold_file([row.get("id") for row in rows], gold, lambda k: (f"predictions[{k}]", None))
    for path, index in by_file.items():
        _written(folder / path.name, [rows[k] for k in index], "predictions", names, index)
    names[str(folder)] = ("predictions", [])  # after its files: a message may name the folder
    return folder, sorted(lang_of[path] for path in by_file)


# the command's words for what the keywords say here: only as its messages write them, never
# inside a path or an id of the user's ("/data/GOLD/x.jsonl", an id 'PRED')
_FLAGS = ((re.compile(r"--langs\b ?"), "langs="), (re.compile(r"--partial\b"), "partial=True"))
_FLAGS += (
    (re.compile(r"`mushroom score GOLD PRED`"), "`mushroom.score(gold, predictions)`"),
    (re.compile(r"(?<![\w/.'\"-])GOLD(?= |'s |,)"), "gold"),
    (re.compile(r"(?<![\w/.'\"-])PRED(?= |,)"), "predictions"),
)


def _renamed(text: str, names: Names, about: str | None = None) -> str:
    """A message about temporary files in the caller's words: `predictions[3]` for its line 4."""
    from mushroom.evaluation.saved_predictions import in_callers_words

    text = in_callers_words(text, names, "{name}[{record}]", "{name}[{record}]", about)
    text = re.sub(r"mushroom-score-\w+/", "", text)  # a file named after one ("gold.str-ids.jsonl")
    for flag, keyword in _FLAGS:
        text = flag.sub(keyword, text)
    return text


def _renamed_problem(problem: Problem, names: Names) -> Problem:
    message = _renamed(problem.message, names, about=problem.path)
    named = names.get(problem.path)
    if named is None:
        return Problem(_renamed(problem.path, names), problem.line, problem.field, message, problem.item_id)
    name, index = named
    where = name if problem.line is None else f"{name}[{index[problem.line - 1]}]"
    return Problem(where, None, problem.field, message, problem.item_id)


def _warned(result: ScoreResult) -> ScoreResult:
    for warning in result.warnings:
        warnings.warn(warning, RuntimeWarning, stacklevel=4)
    return result
