"""JSONL reading and writing with errors that name file, line and field.

Every loader reads the whole file and reports all problems at once; every writer writes to a
temporary file and renames it, so a crash never leaves half a file that looks complete.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from mushroom.errors import DataError, Problem

M = TypeVar("M", bound=BaseModel)


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def iter_json_lines(
    path: Path, problems: list[Problem], parse_float: Callable[[str], Any] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields (line number, object) for each non-blank line; bad lines become problems."""
    try:
        handle = path.open(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DataError.single(path, None, None, "file not found") from exc
    with handle:
        try:
            for lineno, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line, parse_float=parse_float)
                except json.JSONDecodeError as exc:
                    problems.append(
                        Problem(str(path), lineno, None, f"invalid JSON: {exc.msg} at column {exc.colno}")
                    )
                    continue
                if not isinstance(obj, dict):
                    problems.append(
                        Problem(str(path), lineno, None, f"expected a JSON object, got {type(obj).__name__}")
                    )
                    continue
                yield lineno, obj
        except UnicodeDecodeError as exc:
            problems.append(Problem(str(path), None, None, f"not valid UTF-8: {exc.reason}"))


def validation_problems(path: Path, lineno: int, exc: ValidationError) -> list[Problem]:
    """Turns a pydantic error into one problem per failing field."""
    return [Problem(str(path), lineno, _field_path(err["loc"]) or None, err["msg"]) for err in exc.errors()]


def load_records(
    path: str | Path,
    model: type[M],
    *,
    unique_ids: bool = True,
    extra_check: Callable[[M], list[tuple[str, str]]] | None = None,
    prepare: Callable[[int, dict[str, Any]], dict[str, Any]] | None = None,
) -> list[M]:
    """Loads a JSONL file into validated records, or raises DataError listing every problem.

    Args:
        path: the JSONL file.
        model: the pydantic record type of each line.
        unique_ids: reject a file in which an `id` appears twice.
        extra_check: returns (field, message) pairs for checks that need the whole record,
            such as a span beyond the end of the answer text.
        prepare: rewrites each raw object (given its line number) before validation.
    """
    path = Path(path)
    problems: list[Problem] = []
    records: list[M] = []
    seen: dict[str, int] = {}
    for lineno, obj in iter_json_lines(path, problems):
        if prepare is not None:
            obj = prepare(lineno, obj)
        try:
            record = model.model_validate(obj)
        except ValidationError as exc:
            problems.extend(validation_problems(path, lineno, exc))
            continue
        if extra_check is not None:
            for field, message in extra_check(record):
                problems.append(Problem(str(path), lineno, field, message))
        rid = getattr(record, "id", None)
        if unique_ids and rid is not None:
            if rid in seen:
                problems.append(
                    Problem(str(path), lineno, "id", f"duplicate id {rid!r} (first on line {seen[rid]})")
                )
                continue
            seen[rid] = lineno
        records.append(record)
    if problems:
        raise DataError(problems)
    return records


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any] | BaseModel]) -> Path:
    """Writes rows atomically (temp file + rename), UTF-8, one compact JSON object a line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            for row in rows:
                data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
                out.write(json.dumps(data, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def append_jsonl(path: str | Path, row: dict[str, Any]) -> None:
    """Appends one row and flushes it to disk: used by stages that must resume after a kill."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()
        os.fsync(out.fileno())


def read_json_model(path: str | Path, model: type[M]) -> M:
    """One JSON document as a validated record; problems name the file and field."""
    path = Path(path)
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError([Problem(str(path), 0, "-", "file not found")]) from None
    except json.JSONDecodeError as exc:
        raise DataError([Problem(str(path), exc.lineno, "-", f"invalid JSON: {exc.msg}")]) from None
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise DataError(validation_problems(path, 0, exc)) from None
