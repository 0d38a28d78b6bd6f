"""Loading prediction files as records, with the official rules for missing labels."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from enum import StrEnum
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from mushroom.data.jsonl import iter_json_lines, open_binary, validation_problems
from mushroom.data.records import Item, Prediction, hard_from_soft, soft_from_hard
from mushroom.data.spans import (
    check_finite,
    hard_to_mask,
    mask_to_hard,
    soft_to_vector,
    span_problems,
    vector_to_soft,
)
from mushroom.errors import DataError, Problem, duplicate_id, unknown_id
from mushroom.util.names import safe_name


def prediction_span_problems(
    pred: Prediction, length: int | None, where: tuple[str, int | None], field_prefix: str = ""
) -> list[Problem]:
    """`spans.span_problems` of a prediction, as Problems naming its file, line and id."""
    path, line = where
    return [
        Problem(path, line, f"{field_prefix}{name}", message, item_id=pred.id)
        for name, message in span_problems(length, *pred.given_labels())
    ]


def load_predictions(
    path: str | Path, lengths: Mapping[str, int] | None = None, other_ids: bool = False
) -> dict[str, Prediction]:
    """Id -> prediction; a file without hard (soft) labels gets them derived as officially.

    Unknown keys (in records and in spans) are ignored, as the official scorer ignores them.
    Every span is checked: reversed, empty or negative spans are errors, and so are spans past
    the end of the answer when `lengths` (item id -> text length) is given; so are ids that
    are not among those items, unless `other_ids` (a stack applied to some of a file's
    items). Nothing is clipped or dropped.
    """
    path = Path(path)
    problems: list[Problem] = []
    out: dict[str, Prediction] = {}
    first_line: dict[str, int] = {}
    for line, row in iter_json_lines(path, problems):
        pred = _row_prediction(row, path, line, lengths, problems, other_ids)
        if pred is None:
            continue
        if pred.id in out:
            problems.append(duplicate_id(path, line, pred.id, first_line[pred.id]))
            continue
        first_line[pred.id] = line
        out[pred.id] = pred
    if problems:
        raise DataError(problems)
    return out


def iter_predictions(path: str | Path) -> Iterator[tuple[int, Prediction]]:
    """(line, prediction) of a file in file order, a line at a time, with `load_predictions`' rules.

    For files too large to hold (a stack applied to a corpus): the first bad line raises
    DataError, where `load_predictions` lists every one; a repeated id is the caller's to
    catch, since catching it here would keep every id.
    """
    path = Path(path)
    with open_binary(path) as handle:
        for line, raw in enumerate(handle, start=1):
            if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            if not raw.strip():
                continue
            problems: list[Problem] = []
            try:
                row = json.loads(raw.decode("utf-8"))
            except ValueError as exc:  # bad UTF-8 or JSON
                raise DataError([Problem(str(path), line, None, f"invalid JSON: {exc}")]) from None
            if not isinstance(row, dict):
                raise DataError([Problem(str(path), line, None, "not a JSON object")])
            pred = _row_prediction(row, path, line, None, problems)
            if pred is None:
                raise DataError(problems)
            yield line, pred


def _row_prediction(
    row: dict,
    path: Path,
    line: int,
    lengths: Mapping[str, int] | None,
    problems: list[Problem],
    other_ids: bool = False,
) -> Prediction | None:
    """One line's prediction, its missing labels derived as officially; None (and problems) if bad.

    A line without hard labels gets them from its soft labels, and one without soft labels
    gets soft ones from its hard labels: a per-line rule, so a file read as a stream gives
    what a file read whole gives.
    """
    if "hard_labels" not in row and "soft_labels" not in row:
        # An empty prediction must say so (`"hard_labels": []`); a line without either
        # key is a truncated or foreign record, and the official scorer fails on it.
        problems.append(Problem(str(path), line, "hard_labels", "neither hard_labels nor soft_labels given"))
        return None
    try:
        pred = Prediction.model_validate(row)
    except ValidationError as exc:
        problems.extend(validation_problems(path, line, exc, row))
        return None
    length = None
    if lengths is not None:
        length = lengths.get(pred.id)
        if length is None and not other_ids:
            problems.append(unknown_id(path, line, pred.id, lengths))
            return None
    span_errors = prediction_span_problems(pred, length, (str(path), line))
    if span_errors:
        problems.extend(span_errors)
        return None
    if "hard_labels" not in row:
        pred.hard_labels = hard_from_soft(pred.soft_labels)
    if "soft_labels" not in row:
        pred.soft_labels = soft_from_hard(pred.hard_labels)
    return pred


def prediction_from_vectors(
    item_id: str, soft: np.ndarray, hard_mask: np.ndarray, decimals: int = 6
) -> Prediction:
    """Builds a consistent prediction: every hard character keeps a positive probability.

    Raises:
        ValueError: `soft` holds NaN or infinity (`check_finite`).
    """
    soft = soft.astype(float)
    check_finite(soft)
    soft = np.clip(soft, 0.0, 1.0)
    floor = 10.0**-decimals
    soft = np.where(hard_mask & (np.round(soft, decimals) <= 0), floor, soft)
    return Prediction(
        id=item_id, soft_labels=vector_to_soft(soft, decimals), hard_labels=mask_to_hard(hard_mask)
    )


def prediction_vectors(pred: Prediction, length: int) -> tuple[np.ndarray, np.ndarray]:
    """(soft vector, hard mask) of a prediction over a text of `length` characters."""
    return soft_to_vector(pred.soft_labels, length), hard_to_mask(pred.hard_labels, length)


def mark_all(items: list[Item]) -> list[Prediction]:
    """The mark-all baseline: every character hallucinated with probability 1."""
    out = []
    for item in items:
        n = len(item.model_output_text)
        out.append(prediction_from_vectors(item.id, np.ones(n), np.ones(n, dtype=bool)))
    return out


class SoftMode(StrEnum):
    """How the ensemble's soft label is computed."""

    vote = "vote"
    mean = "mean"


THRESHOLD_1 = "threshold 1 marks nothing (a hard label needs a value above it); give e.g. 0.99"
"""Why a hard-label threshold of 1 is refused: characters are marked where a value exceeds it."""


def vote(
    item_id: str,
    softs: list[np.ndarray],
    masks: list[np.ndarray],
    threshold: float = 0.5,
    soft_mode: SoftMode = SoftMode.vote,
) -> Prediction:
    """The per-character vote over runs' soft vectors and hard masks of one item."""
    share = np.mean(np.stack(masks).astype(float), axis=0)
    soft = share if soft_mode == SoftMode.vote else np.mean(np.stack(softs), axis=0)
    return prediction_from_vectors(item_id, soft, share > threshold)


def submission_name(lang: str, split: str = "test") -> str:
    """The official file name: mushroom.<lang>-tst.v1.jsonl (val: mushroom.<lang>-val.v2.jsonl).

    test-labeled's files are test's; train's are mushroom.<lang>-train.jsonl.

    Items from a file of the user's (`detect --items`) go to mushroom.<lang>-items.jsonl.
    """
    return _file_name(safe_name(lang, "language code"), split)


def submission_glob(split: str = "test") -> str:
    """The glob pattern of every language's file of `split` (the names `submission_name` makes)."""
    return _file_name("*", split)


# The file name's end per split. `test-labeled` holds the test items with their labels: its files
# are test files (they were named as val's, so `score` against the test gold found none). `train`
# has a name of its own (its files were named as val's too).
_NAME_ENDS = {"test": "tst.v1", "test-labeled": "tst.v1", "train": "train", "items": "items"}


def _file_name(lang: str, split: str) -> str:
    return f"mushroom.{lang}-{_NAME_ENDS.get(split, 'val.v2')}.jsonl"


def split_of_file_name(name: str) -> str | None:
    """The split a prediction file's name is of: val, test (test-labeled's too), train or items."""
    for split in ("val", "test", "train", "items"):
        if name.endswith(_file_name("", split).removeprefix("mushroom.")):
            return split
    return None


# Any code an item may have (`safe_name`, lower case: "en-us" too), not only the official two
# letters: the files of an items file in such a language were not found by `ensemble` or the
# failure checks.
_PREDICTION_FILE = re.compile(r"mushroom\.([a-z0-9][a-z0-9._-]*?)-(?:tst\.v1|val\.v2|train|items)\.jsonl")


def prediction_langs(folder: Path, split: str) -> list[str]:
    """The language codes of a folder's prediction files of a split."""
    return sorted(filter(None, (prediction_file_lang(p.name) for p in folder.glob(submission_glob(split)))))


def prediction_file_lang(name: str) -> str | None:
    """The language of a file name `submission_name` makes (items files too); None otherwise."""
    match = _PREDICTION_FILE.fullmatch(name)
    return match.group(1) if match else None


def items_of_file(items: list[Item], path: Path) -> tuple[list[Item], str | None]:
    """The items a prediction file is for, and the language they were cut to (None if not cut).

    `detect --items` writes a file per language of a mixed items file: each is for its own
    language's items, or every other language's items read as "not predicted".
    """
    lang, langs = prediction_file_lang(path.name), {it.lang for it in items}
    if len(langs) > 1 and lang in langs:
        return [it for it in items if it.lang == lang], lang
    return items, None
