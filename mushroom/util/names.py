"""File names built from values mushroom read: a language code, a source or model name.

Shared-task data and datasets come from other people, so a value read from a file must never
pick where mushroom writes: an items file whose `lang` was `../../../../tmp/x` made
`detect --items` write `/tmp/x.jsonl`. Every writer builds such a name through `safe_name`,
and the item reader refuses the value first, naming its file, line and field.
"""

from __future__ import annotations

import re

from mushroom.errors import MushroomError
from mushroom.util.words import clipped

MAX_NAME = 64
_NAME = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_.-]{{0,{MAX_NAME - 1}}}")
# Windows opens a device, not a file, for these names (with any extension), in any folder
_DEVICE = re.compile(r"(CON|PRN|AUX|NUL|COM[0-9]|LPT[0-9])(\..*)?", re.IGNORECASE)


class UnsafeName(MushroomError):
    """A value that would leave its folder, or make no file name, as part of a path: bad input."""

    exit_code = 1


def name_problem(value: object) -> str | None:
    """Why `value` cannot be part of a file name, or None when it can.

    A name is 1 to 64 letters, digits, `-`, `_` or `.`, starting with a letter or digit, with
    no `..`: no separator, no absolute path, no NUL, nothing a file system reads as a folder.
    """
    if not isinstance(value, str):
        return f"must be text, not {type(value).__name__}"
    if not _NAME.fullmatch(value) or ".." in value:
        return (
            f"{clipped(value, 40)!r} cannot name a file: use 1 to {MAX_NAME} letters, digits, '-', '_' "
            "or '.' (no path separators, no '..')"
        )
    if _DEVICE.fullmatch(value):
        return f"{value!r} cannot name a file: Windows reads it as a device; choose another name"
    return None


def valid_name(value: str, what: str) -> str:
    """`value` when it can be part of a file name; else ValueError, as a pydantic validator raises.

    For fields of records read from files (an item's language, a run config's variant):
    pydantic names the field and the line.
    """
    problem = name_problem(value)
    if problem is not None:
        raise ValueError(f"{what} {problem}")
    return value


def safe_name(value: object, what: str) -> str:
    """`value` when it can be part of a file name; else UnsafeName saying what it was."""
    problem = name_problem(value)
    if problem is not None:
        raise UnsafeName(f"{what} {problem}")
    return value  # type: ignore[return-value]
