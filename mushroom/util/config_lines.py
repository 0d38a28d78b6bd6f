"""Where in a config file a key is written, so that a wrong value is named by its line.

A run config's errors named the key (`field 'detector.options.threshold'`) but no line, while
a data file's name both; in a long config with variants a user searched for the third
`[[variants]]` table by hand. tomllib keeps no positions, so TOML is read here line by line
for its table headers and keys (arrays of tables counted, as the validator's `variants.2`
counts them, and named by their `name`, as a run config's problems name a variant);
YAML's own parser gives each key's mark. JSON configs stay without lines.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from mushroom.errors import DataError

_BARE = r"[A-Za-z0-9_-]+"
_QUOTED = r"\"(?:[^\"\\]|\\.)*\"|'[^']*'"
_PART = rf"(?:{_BARE}|{_QUOTED})"
_DOTTED = rf"{_PART}(?:\s*\.\s*{_PART})*"
_HEADER = re.compile(rf"^\s*(\[\[?)\s*({_DOTTED})\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(rf"^\s*({_DOTTED})\s*=\s*(\"[^\"\\\\]*\"|'[^']*')?")
_ONE_PART = re.compile(_PART)


def _parts(dotted: str) -> list[str]:
    return [p[1:-1] if p[:1] in "\"'" else p for p in _ONE_PART.findall(dotted)]


def toml_key_lines(text: str) -> dict[str, int]:
    """Each table's and key's dotted path (`variants.1.options.prompt`) -> its first line (1-based).

    A table of an array with `name = "b"` is found as `variants.b` too.
    """
    lines: dict[str, int] = {}
    names: dict[str, str] = {}  # "variants.1" -> "variants.b"
    # an array of tables' path, with its parents' indexes (`variants.1.options.models`) -> its
    # last index: each variant's models count from 0
    arrays: dict[str, int] = {}
    table: list[str] = []
    quote = None  # the delimiter of a multi-line string the line is in: its text is no key
    # "\n" alone ends a TOML line: splitlines also broke at U+2028 or U+0085 inside a string
    for number, line in enumerate((part.removesuffix("\r") for part in text.split("\n")), start=1):
        if quote is not None:
            if quote in line:
                quote = None
            continue
        header = _HEADER.match(line)
        if header:
            path: list[str] = []
            parts = _parts(header.group(2))
            for k, part in enumerate(parts):
                path.append(part)
                key = ".".join(path)
                if k == len(parts) - 1 and header.group(1) == "[[":
                    arrays[key] = arrays.get(key, -1) + 1
                if key in arrays:
                    path.append(str(arrays[key]))
            table = path
            lines.setdefault(".".join(table), number)
            continue
        key = _KEY.match(line)
        if key:
            parts = _parts(key.group(1))
            lines.setdefault(".".join([*table, *parts]), number)
            if parts == ["name"] and key.group(2) and table and table[-1].isdigit():
                names[".".join(table)] = ".".join([*table[:-1], key.group(2)[1:-1]])
            rest = line[line.index("=", key.end(1)) + 1 :]  # the value, from its first character
            for delimiter in ('"""', "'''"):
                if rest.lstrip().startswith(delimiter) and rest.count(delimiter) == 1:
                    quote = delimiter  # opened here, closed on a later line
    return _aliased(lines, names)


def _aliased(lines: dict[str, int], names: dict[str, str]) -> dict[str, int]:
    """`lines` with each path under a named array item found by the name as well."""
    out = dict(lines)
    for path, number in lines.items():
        for indexed, named in names.items():
            if path == indexed or path.startswith(indexed + "."):
                out.setdefault(named + path[len(indexed) :], number)
    return out


def yaml_key_lines(text: str) -> dict[str, int]:
    """As `toml_key_lines`, from YAML's own marks (empty where the text does not compose)."""
    try:
        import yaml

        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except Exception:  # noqa: BLE001 - no lines is the fallback; the loader says what is wrong
        return {}
    lines: dict[str, int] = {}
    names: dict[str, str] = {}
    seen: set[int] = set()  # an anchor's node is walked once: `&l [en, *l]` holds itself

    def walk(node: Any, path: list[str]) -> None:
        if id(node) in seen:
            return
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            for key_node, value in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    here = [*path, str(key_node.value)]
                    named = key_node.value == "name" and isinstance(value, yaml.ScalarNode)
                    if named and path and path[-1].isdigit():  # an item of a list, by its name
                        names[".".join(path)] = ".".join([*path[:-1], str(value.value)])
                    lines.setdefault(".".join(here), key_node.start_mark.line + 1)
                    walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for k, value in enumerate(node.value):
                here = [*path, str(k)]
                lines.setdefault(".".join(here), value.start_mark.line + 1)
                walk(value, here)

    walk(root, [])
    return _aliased(lines, names)


def key_lines(path: Path) -> dict[str, int]:
    """The key lines of a TOML or YAML config file; empty for JSON or a file that cannot be read."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return {}
    if path.suffix in (".yaml", ".yml"):
        return yaml_key_lines(text)
    if path.suffix == ".json":
        return {}
    return toml_key_lines(text)


def line_of(field: str, lines: dict[str, int]) -> int | None:
    """The line of `field`, or of the nearest key above it (a list's, for `langs.3`)."""
    parts = field.split(".")
    while parts:
        found = lines.get(".".join(parts))
        if found is not None:
            return found
        parts.pop()
    return None


def with_lines(path: Path, error: DataError) -> DataError:
    """`error` with each problem of `path` that names a key but no line given that key's line."""
    if not any(p.line is None and p.field and p.path == str(path) for p in error.problems):
        return error
    lines = key_lines(path)
    if not lines:
        return error
    problems = [
        dataclasses.replace(p, line=line_of(p.field, lines))
        if p.line is None and p.field and p.path == str(path)
        else p
        for p in error.problems
    ]
    return DataError(problems, exit_code=error.exit_code, source=error.source)
