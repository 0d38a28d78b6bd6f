"""JSONL reading and writing with errors that name file, line and field.

Every loader reads every line and reports all problems at once; every writer writes to a
temporary file and renames it, so a crash never leaves half a file that looks complete.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TextIO, TypeVar

from pydantic import BaseModel, ValidationError

from mushroom.errors import DataError, MushroomError, Problem, duplicate_id
from mushroom.util.options import error_message
from mushroom.util.words import close_match

M = TypeVar("M", bound=BaseModel)


def _field_path(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def _reject_constant(name: str) -> Any:
    # Python's json reads NaN and Infinity; JSON has no such numbers and the official tools
    # (pandas' ujson) do not read them either.
    raise ValueError(f"{name} is not a JSON number")


_KEY_BEFORE = re.compile(r'"((?:[^"\\]|\\.)*)"\s*:[^:"]*$')
_CONSTANT = re.compile(r"(?<![\w\"])(-?Infinity|NaN)(?![\w\"])")


def _field_at(line: str, pos: int) -> str:
    """` in field 'NAME'`: the key whose value holds `pos`, when a plain scan finds one."""
    found = _KEY_BEFORE.search(line, 0, pos)
    return f" in field {found.group(1)!r}" if found else ""


def _json_problem(line: str, exc: json.JSONDecodeError) -> str:
    """What is wrong with a line json could not decode, said of the number when it is one.

    `"prob": 5.` (or `00.5`, `0.5e`) was "Expecting ',' delimiter": json stops after the part
    it could read, and blames the next character (a numeric-input audit).
    """
    text = f"invalid JSON: {exc.msg.removesuffix(' at')} at column {exc.colno}"
    nxt = line[exc.pos : exc.pos + 1]  # "" at the line's end (a line cut after a digit)
    if (
        exc.msg.startswith("Expecting ',' delimiter")
        and 0 < exc.pos <= len(line)
        and line[exc.pos - 1].isdigit()
    ):
        if nxt in (".", "e", "E") or nxt.isdigit():
            start = exc.pos - 1
            while start > 0 and line[start - 1] in "0123456789.-+eE":
                start -= 1
            end = exc.pos
            while end < len(line) and line[end] in "0123456789.-+eE":
                end += 1
            return (
                f"invalid JSON: {line[start:end]!r} at column {start + 1}{_field_at(line, start)} is no JSON "
                "number (write it in full, as 5.0 or 0.5)"
            )
    return text


def _constant_problem(line: str, exc: ValueError) -> str:
    """NaN or Infinity refused, with the field that holds it."""
    found = _CONSTANT.search(line)
    where = f" (column {found.start() + 1}{_field_at(line, found.start())})" if found else ""
    return f"invalid JSON: {exc}{where}"


def refuse_irregular(path: Path) -> None:
    """Raises for an existing path that is a device or a pipe, before it is opened.

    `check /dev/zero` read zeros until memory ran out. A pipe (`<(jq ...)`, `/dev/stdin`, a
    named pipe) is refused too: files are read more than once (a head for what kind of file it
    is, offsets to come back to), and a pipe's second read found half its lines gone. Opening
    a named pipe with no writer waits for one forever, so this is asked first. A path that
    does not exist is the opener's to say.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        why = "is a pipe, not a file: it is read more than once; save it to a file first"
    else:
        why = "is a device, not a file"
    raise DataError.single(path, None, None, why, exit_code=2)


def open_text(path: Path) -> TextIO:
    """Opens a user's text file for reading; a UTF-8 BOM is skipped, CRLF read as LF.

    A path that is missing, a folder or unreadable is a usage error (exit 2) naming it.
    """
    try:
        refuse_irregular(path)
        return path.open(encoding="utf-8-sig")
    except FileNotFoundError as exc:
        raise DataError.single(path, None, None, "file not found", exit_code=2) from exc
    except IsADirectoryError as exc:
        raise DataError.single(path, None, None, "is a folder, expected a file", exit_code=2) from exc
    except OSError as exc:
        raise DataError.single(path, None, None, f"cannot read: {exc.strerror}", exit_code=2) from exc


def open_binary(path: Path) -> BinaryIO:
    """A user's file opened for reading bytes; missing, a folder or unreadable is a usage error (exit 2)."""
    try:
        refuse_irregular(path)
        return path.open("rb")
    except FileNotFoundError as exc:
        raise DataError.single(path, None, None, "file not found", exit_code=2) from exc
    except IsADirectoryError as exc:
        raise DataError.single(path, None, None, "is a folder, expected a file", exit_code=2) from exc
    except OSError as exc:
        raise DataError.single(path, None, None, f"cannot read: {exc.strerror}", exit_code=2) from exc


def iter_json_lines(
    path: Path,
    problems: list[Problem],
    parse_float: Callable[[str], Any] | None = None,
    parse_int: Callable[[str], Any] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yields (line number, object) for each non-blank line; bad lines become problems.

    Read as the official tools read (pandas' `read_json(lines=True)`): lines end at LF, a
    CRLF's CR is JSON whitespace. A UTF-8 BOM at the start is skipped, where pandas stops
    (`starts_with_bom` lets `check` and `score` say so). Each line is decoded on
    its own, so a bad byte is reported on its own line. The file is read a line at a time (a
    run's item ledger can hold a corpus), except one that starts like a single JSON document,
    which is read whole to say so.
    """
    path = Path(path)
    with open_binary(path) as handle:
        yield from _json_lines(path, handle, problems, parse_float, parse_int)


def _json_lines(
    path: Path,
    handle: BinaryIO,
    problems: list[Problem],
    parse_float: Callable[[str], Any] | None,
    parse_int: Callable[[str], Any] | None = None,
) -> Iterator[tuple[int, dict[str, Any]]]:
    head: list[bytes] = []  # the lines up to the first that is not blank
    for raw in handle:
        head.append(raw)
        if raw.strip():
            break
    if head and head[0].startswith(_BOM):
        head[0] = head[0][len(_BOM) :]
    start = b"".join(head)
    first_line = start.strip()
    lines: Iterable[bytes] = itertools.chain(head, handle)
    if first_line.startswith(b"[") or first_line == b"{":
        start += handle.read()
        lines = start.split(b"\n")
    kind = _not_jsonl(start)
    if kind:
        problems.append(Problem(str(path), None, None, kind))
        return
    for lineno, raw in enumerate(lines, start=1):
        try:
            line = raw.removesuffix(b"\n").decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(
                Problem(
                    str(path),
                    lineno,
                    None,
                    f"not valid UTF-8 (byte {exc.start + 1} of the line): {exc.reason}",
                )
            )
            continue
        if not line.strip():
            continue
        try:
            obj = json.loads(
                line,
                parse_float=parse_float,
                parse_int=parse_int,
                parse_constant=_reject_constant,
            )
        except json.JSONDecodeError as exc:
            # lines ended by a bare CR (old Mac files) are one line here: "Extra data" said nothing
            bare_cr = exc.msg.startswith("Extra data") and line[exc.pos - 1 : exc.pos] == "\r"
            problems.append(
                # json's "Unterminated string starting at" already ends with "at"
                Problem(
                    str(path),
                    lineno,
                    None,
                    _json_problem(line, exc)
                    + (": lines end in a bare CR (\\r); JSONL lines end in \\n" if bare_cr else ""),
                )
            )
            continue
        except (ValueError, RecursionError) as exc:
            # NaN/Infinity, integers too long to convert, absurd nesting
            said = (
                _constant_problem(line, exc) if "is not a JSON number" in str(exc) else f"invalid JSON: {exc}"
            )
            problems.append(Problem(str(path), lineno, None, said))
            continue
        except OverflowError:  # 1e400 read as the official scorer reads numbers
            problems.append(Problem(str(path), lineno, None, "invalid JSON: a number too large for a float"))
            continue
        if not isinstance(obj, dict):
            problems.append(Problem(str(path), lineno, None, f"expected a JSON object, got {json_kind(obj)}"))
            continue
        yield lineno, obj


def json_kind(value: Any) -> str:
    """What a JSON value is, in JSON's words: "got NoneType" meant nothing to a user who wrote null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


_BOM = b"\xef\xbb\xbf"

OFFICIAL_BOM = (
    "starts with a UTF-8 byte order mark (BOM), which the official scorer's reader "
    "(pandas.read_json) refuses; save it as UTF-8 without a BOM"
)


def first_line(path: Path, head: int = 1 << 20) -> bytes | None:
    """The first non-blank line in a file's first `head` bytes; None when there is none.

    What a file is, told from its first record without reading it all (an items file, a
    response cache). Raises OSError when it cannot be read.
    """
    with open(path, "rb") as handle:
        data = handle.read(head)
    return next((line for line in data.splitlines() if line.strip()), None)


def starts_with_bom(path: Path) -> bool:
    """Whether a file begins with a UTF-8 BOM: mushroom reads past it, the official scorer does not."""
    try:
        refuse_irregular(path)
        with open(path, "rb") as handle:
            return handle.read(3) == _BOM
    except OSError:
        return False


def binary_kind(path: Path) -> str | None:
    """What a file is by its first bytes when it is an archive or UTF-16, not text; else None.

    Said before asking for what else a command needs: `check sub.tar.gz` asked for --items,
    and only then said the file was gzip-compressed.
    """
    try:
        with open(path, "rb") as handle:
            start = handle.read(4)
    except OSError:
        return None
    return _binary(start)


# The first bytes of files often given for JSON Lines, and what to say of each
_BINARY_KINDS = (
    ((b"PK\x03\x04",), "is a zip archive; unzip it and give the .jsonl file (or, to score, the folder)"),
    ((b"\x1f\x8b",), "is gzip-compressed; decompress it first (gunzip)"),
    ((b"\xff\xfe", b"\xfe\xff"), "is UTF-16; save it as UTF-8"),
    (
        (b"PAR1",),
        "is a Parquet file; expected JSON Lines: convert it (pandas.read_parquet(f).to_json(out, "
        "orient='records', lines=True, force_ascii=False)), or pass its rows to the Python API "
        "(mushroom.detect_batch, mushroom.score)",
    ),
)
# a header line of a table: names (the official fields, or any) joined by commas, tabs or semicolons
_TABLE_HEADER = re.compile(rb"^[\"']?[A-Za-z_][\w ]*[\"']?(?:[,\t;][\"']?[A-Za-z_][\w ]*[\"']?)+$")


def _binary(data: bytes) -> str | None:
    """What `_BINARY_KINDS` says of bytes that begin so, else None."""
    return next((said for marks, said in _BINARY_KINDS if data.startswith(marks)), None)


def _not_jsonl(data: bytes) -> str | None:
    """What the file is instead of JSON Lines, for the usual mix-ups; None if it may be JSONL."""
    binary = _binary(data)
    if binary is not None:
        return binary
    first_line = data.lstrip().split(b"\n", 1)[0].strip()
    if first_line.startswith(b"[") or first_line == b"{":
        try:
            whole = json.loads(data)
        except (ValueError, RecursionError):
            return None  # not one JSON document either: report it line by line
        if isinstance(whole, list):
            return "is a JSON array; expected JSON Lines, one object per line (as the official files)"
        return "is one JSON document spread over several lines; expected JSON Lines, one object per line"
    if _TABLE_HEADER.match(first_line):  # every line was "invalid JSON: Expecting value at column 1"
        shown = first_line[:60].decode("utf-8", "replace")
        # read as it is separated: read_csv's comma made one column of a TSV's header (an audit);
        # ids as text, or "0001" became the number 1, which an items file refuses
        sep = next((f", sep={c!r}" for c in ("\t", ";") if c.encode() in first_line), "")
        return (
            f"looks like a CSV or TSV table (its first line: {shown!r}); expected JSON Lines, one object "
            f"per line: convert it (pandas.read_csv(f{sep}, dtype={{'id': str}}).to_json(out, "
            "orient='records', lines=True, force_ascii=False))"
        )
    return None


def validation_problems(
    path: Path, lineno: int | None, exc: ValidationError, row: Any = None
) -> list[Problem]:
    """Turns a pydantic error into one problem per failing field, with the value it got.

    With the line's `row`, a readable id is named too (`FILE:LINE: id 'ID': field ...`), as
    `check` names it: a line number alone is hard to find in a file of long answers.
    """
    rid = row.get("id") if isinstance(row, dict) else None
    rid = rid if isinstance(rid, str) and rid else None
    return [
        Problem(
            str(path),
            lineno,
            _field_path(err["loc"]) or None,
            _with_input(err),
            item_id=rid if err["loc"][:1] != ("id",) else None,
        )
        for err in exc.errors()
    ]


def _with_input(err: Any) -> str:
    value = err.get("input")
    if err.get("type") == "missing" and isinstance(value, dict) and err.get("loc"):
        # a misspelt key leaves its field missing: the line's key is named, not just the gap
        name = str(err["loc"][-1])
        keys = [k for k in value if isinstance(k, str) and k != name]
        near = close_match(name, keys, cutoff=0.85, prefix=True)
        if near is not None:
            return f"{error_message(err)}; the line has {near!r}: misspelt?"
    if err.get("type") == "missing" or isinstance(value, (dict, list)):
        return error_message(err)
    shown = repr(value)
    return f"{error_message(err)} (got {shown[:60]}{'...' if len(shown) > 60 else ''})"


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
            problems.extend(validation_problems(path, lineno, exc, obj))
            continue
        rid = getattr(record, "id", None)
        if extra_check is not None:
            for field, message in extra_check(record):
                problems.append(
                    Problem(str(path), lineno, field, message, item_id=rid if isinstance(rid, str) else None)
                )
        if unique_ids and rid is not None:
            if rid in seen:
                problems.append(duplicate_id(path, lineno, rid, seen[rid]))
                continue
            seen[rid] = lineno
        records.append(record)
    if problems:
        raise DataError(problems)
    return records


def _umask() -> int:
    # The only portable way to read the umask is to set it and put it back.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def written_path(path: str | Path) -> Path:
    """Where a write to `path` lands: a symbolic link's target (a rename replaced the link itself)."""
    path = Path(path)
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def is_special(path: Path) -> bool:
    """Whether `path` is a device or a pipe: renamed over as root, /dev/null became a plain file."""
    return path.exists() and not path.is_file() and not path.is_dir()


def atomic_write_text(path: str | Path, text: str) -> Path:
    """Writes text atomically (temp file + rename) with the mode a plain `open` would give.

    `tempfile.mkstemp` creates files with mode 0600; left alone, every output would be
    private to its writer, which surprises users who share run folders.
    """
    path = written_path(path)
    if path.is_dir():
        raise MushroomError(f"{path}: is a folder; give a file name to write")
    if is_special(path):  # /dev/null, a pipe: written to as `open` would, never replaced
        try:
            with path.open("w", encoding="utf-8") as out:
                out.write(text)
        except OSError as exc:  # /dev/full: "No space left on device", not a silent success
            raise MushroomError(f"{path}: cannot write ({exc.strerror})") from exc
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise MushroomError(f"{path}: cannot write ({exc.strerror})") from exc
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_jsonl(path: str | Path, rows: Iterable[dict[str, Any] | BaseModel]) -> Path:
    """Writes rows atomically (temp file + rename), UTF-8, one compact JSON object a line."""
    lines = []
    for row in rows:
        data = row.model_dump(mode="json") if isinstance(row, BaseModel) else row
        lines.append(json.dumps(data, ensure_ascii=False) + "\n")
    return atomic_write_text(path, "".join(lines))


class JsonlWriter:
    """A JSONL file written a chunk of rows at a time, renamed into place when complete.

    For outputs too large to hold: the rows go to a hidden `.NAME.part` beside the file, so
    a reader never sees half a file and a killed writer leaves the old file (or none).
    """

    def __init__(self, path: str | Path):
        self.path = path = written_path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # a device or a pipe is written to directly: there is nothing to rename over
        self.tmp = None if is_special(path) else path.with_name(f".{path.name}.part")
        self.handle: Any = (self.tmp or path).open("w", encoding="utf-8")

    def write(self, rows: Iterable[dict]) -> None:
        for row in rows:
            self.handle.write(json.dumps(row, ensure_ascii=False) + "\n")

    def commit(self) -> None:
        self.handle.close()
        if self.tmp is not None:
            os.replace(self.tmp, self.path)

    def discard(self) -> None:
        """Drops the temporary file of a write that did not end (a no-op after `commit`).

        Closing flushes what is buffered, which fails again on a full disk: the file is dropped
        all the same (it was left behind, a `.part` on the full disk: an audit).
        """
        try:
            self.handle.close()
        except OSError:
            pass
        finally:
            if self.tmp is not None:
                self.tmp.unlink(missing_ok=True)


def mend_cut_line(path: str | Path, drop: bool = False) -> bytes | None:
    """Ends a last line that a kill cut mid-write, so that lines appended later start afresh.

    With `drop`, the cut line is removed instead: for files that other commands read
    strictly (a generated context source), where a broken line would stop them. A last line
    that is a whole JSON object lacks only its newline (an editor that strips it, after a hand
    mend): it is kept and ended, not dropped. A kill's cut never parses: a prefix of an object
    is not one.

    Returns:
        The line dropped, for the caller to say (a hand edit that broke it is lost too).
    """
    path = Path(path)
    if not path.exists():
        return None
    with path.open("rb+") as raw:
        size = raw.seek(0, 2)
        if not size or (raw.seek(-1, 2), raw.read(1))[1] == b"\n":
            return None
        if not drop:
            raw.write(b"\n")
            return None
        # back to the last newline, a block at a time: the file can hold a corpus
        end = size
        while end > 0:
            start = max(0, end - 65536)
            raw.seek(start)
            cut = raw.read(end - start).rfind(b"\n")
            if cut >= 0:
                break
            end = start
        line_start = start + cut + 1 if end > 0 else 0
        raw.seek(line_start)
        last = raw.read()
        if _whole_object(last):
            raw.write(b"\n")  # at the end: the read left the handle there
            return None
        raw.truncate(line_start)
        return last


def _whole_object(line: bytes) -> bool:
    """Whether a line is one complete JSON object."""
    try:
        return isinstance(json.loads(line), dict)
    except (ValueError, RecursionError):  # a cut object, bytes cut inside a character
        return False


def append_jsonl(path: str | Path, row: dict[str, Any]) -> None:
    """Appends one row and flushes it to disk: used by stages that must resume after a kill."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(row, ensure_ascii=False) + "\n")
        out.flush()
        os.fsync(out.fileno())


def _decoded(path: str | Path, handle: TextIO) -> str:
    """A text handle's whole content; bytes that are not UTF-8 are an error naming the file."""
    try:
        return handle.read()
    except UnicodeDecodeError as exc:
        raise DataError.single(
            path, None, None, f"not valid UTF-8 (byte {exc.start + 1}): {exc.reason}"
        ) from None


def read_utf8(path: str | Path) -> str:
    """A whole text file; one that is not UTF-8 is an error naming it.

    The boundary's last resort said only "a file is not valid UTF-8", naming no file. A missing
    file stays FileNotFoundError, for the caller to take as "none".
    """
    with Path(path).open(encoding="utf-8") as handle:
        return _decoded(path, handle)


def read_json_model(path: str | Path, model: type[M]) -> M:
    """One JSON document as a validated record; problems name the file and field."""
    path = Path(path)
    with open_text(path) as handle:
        text = _decoded(path, handle)
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise DataError([Problem(str(path), exc.lineno, None, f"invalid JSON: {exc.msg}")]) from None
    except (ValueError, RecursionError) as exc:
        raise DataError([Problem(str(path), None, None, f"invalid JSON: {exc}")]) from None
    try:
        return model.model_validate(obj)
    except ValidationError as exc:
        raise DataError(validation_problems(path, None, exc)) from None
