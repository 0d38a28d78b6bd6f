"""Reading KEY=VALUE options and explaining pydantic errors field by field.

Shared by the command line, the API and run configs: detectors and backends validate their
options here, so a misspelt name gets the same suggestion wherever it was given.
"""

from __future__ import annotations

import json
import re
import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from mushroom.errors import MushroomError
from mushroom.util.words import clipped, suggest


def error_message(err: Any) -> str:
    """A pydantic error's message without the "Value error, " pydantic puts before our own."""
    return str(err["msg"]).removeprefix("Value error, ")


# the tag pydantic puts last in an error's place for one branch of a union ("int",
# "literal['auto']", "constrained-int", "function-after[...]"): the user wrote no such key
_BRANCH = re.compile(
    r"^(int|float|str|bool|none|bytes|constrained-\w+|(literal|list|dict|tuple|set|function-\w+|"
    r"is-instance|lax-or-strict|json-or-python|tagged-union|union)\[.*\])$"
)


def field_errors(errors: list[Any]) -> list[dict[str, Any]]:
    """Pydantic's errors with those of one union's branches merged into one per field.

    `-o backend.concurrency=abc` gave two problems named `backend.concurrency.int` and
    `backend.concurrency.literal['auto']`: places the user cannot write. They become one,
    at `backend.concurrency`, saying what each branch wanted.
    """

    def branch_of(err: Any) -> tuple | None:
        loc = tuple(err.get("loc", ()))
        tagged = len(loc) >= 2 and isinstance(loc[-1], str) and _BRANCH.match(loc[-1])
        return loc[:-1] if tagged else None

    # only two or more under one field are a union's branches: one alone may be a key the
    # user wrote (a dict key "int")
    per_field = Counter(key for err in errors if (key := branch_of(err)) is not None)
    out: list[dict[str, Any]] = []
    merged: dict[tuple, dict[str, Any]] = {}
    for err in errors:
        key = branch_of(err)
        if key is None or per_field[key] < 2:
            out.append(dict(err))
        elif key in merged:
            text = error_message(err)
            merged[key]["msg"] += f", or {text[:1].lower()}{text[1:]}"
        else:
            merged[key] = {**err, "loc": key, "msg": error_message(err)}
            out.append(merged[key])
    return out


def check_name(name: str, choices: list[str] | tuple[str, ...] | Mapping[str, Any], what: str) -> str:
    """Returns `name` if it is one of `choices`; else a usage error with a suggestion."""
    if name not in choices:
        raise MushroomError(f"unknown {what} {name!r}{suggest(name, choices)}")
    return name


def member_flags(text: str, member: str) -> str:
    """Advice's `-o KEY=VALUE` written as a main job takes it of a member: `-o MEMBER.KEY=VALUE`.

    A detector's own advice (`raise max_tokens (-o max_tokens=N)`) was refused by the main
    job, which takes a member's options with its name before them.
    """
    return re.sub(r"(?<![\w.])-o (?=[a-z_]+[=.])", f"-o {member}.", text)


def config_form(text: str) -> str:
    """Advice's `-o KEY=VALUE` written as a run config takes it: a key under [detector.options].

    `mushroom run` takes no -o: its advice "raise max_tokens (-o max_tokens=N)" was refused
    as an unknown option.
    """

    def keyed(match: re.Match) -> str:
        *groups, leaf = match.group(1).split(".")
        value = match.group(2)
        # a word is a TOML string: `structured_output = json_object` is a line tomllib refuses;
        # numbers, true/false, lists and placeholders (N, NAME) stay as written
        if re.fullmatch(r"[a-z][a-z0-9_-]*", value) and value not in ("true", "false"):
            value = f'"{value}"'
        return f"{leaf} = {value} under [{'.'.join(['detector.options', *groups])}] in the config"

    return re.sub(r"(?<![\w.])-o ([a-z_]+(?:\.[a-z_]+)*)=([^\s),;]+)", keyed, text)


def in_run_form(advice: str, config: Mapping[str, Any], members: Sequence[str]) -> str:
    """Advice's `-o` flags as the run they are for takes them (`member_flags`, `config_form`).

    Args:
        advice: the advice, its flags as `detect` takes them.
        config: the run's config (config.json's "config").
        members: in a main job, the members the advice is for.
    """
    if config.get("job") == "main":
        advice = member_flags(advice, members[0] if len(members) == 1 else "MEMBER")
        if len(members) > 1:
            advice += f" (MEMBER: {', '.join(members)})"
    return config_form(advice) if "run_config" in config else advice


def nest_options(options: dict[str, Any]) -> dict[str, Any]:
    """`backend.max_retries=0` -> {"backend": {"max_retries": 0}}: options of nested settings."""
    out: dict[str, Any] = {}

    def clash(group: str, value: Any) -> MushroomError:
        return MushroomError(
            f"option {group!r} is given both as a value (-o {group}={value}) and as a group "
            f"(-o {group}.KEY=…): give it one way, e.g. -o {group}.kind={value} for a backend's kind"
        )

    for key, value in options.items():
        *parents, leaf = key.split(".")
        node = out
        for depth, part in enumerate(parents):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise clash(".".join(parents[: depth + 1]), child)
            node = child
        if isinstance(node.get(leaf), dict):  # the group came first: the value would replace it
            raise clash(key, value)
        node[leaf] = value
    return out


def merge_options(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `over` laid on it, nested groups merged key by key rather than replaced.

    So `-o llm.backend.base_url=URL` on top of a config file's `[options.llm.backend]`
    changes the URL and keeps the kind and model, as a variant's options do a detector's.
    """
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        merged = isinstance(value, dict) and isinstance(old, dict)
        # a group naming another `kind` replaces the old: a backend of another kind shares none
        # of its settings (a variant's openai backend was refused the base's `device`)
        if merged and "kind" in value and old.get("kind", value["kind"]) != value["kind"]:
            merged = False
        out[key] = merge_options(old, value) if merged else value
    return out


def parse_options(pairs: list[str], option: str = "-o") -> dict[str, Any]:
    """KEY=VALUE pairs; VALUE is read as JSON when it parses (numbers, booleans, objects).

    A key given twice is an error rather than a silent "last one wins".
    """
    import json

    options: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise MushroomError(f"{option} expects KEY=VALUE, got {pair!r}")
        if key in options:
            raise MushroomError(f"{option} {key} is given twice")
        try:
            options[key] = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            options[key] = value
    return options


def option_names(model_class: type[BaseModel]) -> list[str]:
    """The names (and aliases) a pydantic options model accepts."""
    names = []
    for name, info in model_class.model_fields.items():
        names.append(name)
        if isinstance(info.alias, str) and info.alias != name:
            names.append(info.alias)
    return sorted(names)


def check_option_names(
    options: Mapping[str, Any], model_class: type[BaseModel], what: str = "option", prefix: str = ""
) -> None:
    """Unknown option names are usage errors listing the valid names and a close match.

    Args:
        options: the parsed options.
        model_class: the pydantic model they are for (a detector's `Options`).
        what: how to call them in the message ("lexical option").
        prefix: shown before each name (`lexical.` for main-job's DETECTOR.KEY options).
    """
    valid = option_names(model_class)
    for key in options:
        if key not in valid:
            raise MushroomError(f"unknown {what} {prefix}{key!r}{suggest(key, valid)}")


def validation_message(exc: ValidationError, source: str = "") -> str:
    """A pydantic error as lines naming each field, the problem and the value given."""
    lines = []
    for err in field_errors(exc.errors()):
        if not err["loc"]:  # a check of the whole record: its input is every setting, not one value
            lines.append(f"{source}{error_message(err)}")
            continue
        loc = ".".join(str(part) for part in err["loc"])
        given = "" if err.get("type") == "missing" else f" (got {_short(err.get('input'))})"  # even a dict
        if err.get("type") == "extra_forbidden":
            lines.append(f"{source}{loc}: unknown name{given}")
        else:
            lines.append(f"{source}{loc}: {error_message(err)}{given}{value_hint(err)}")
    return "\n".join(lines)


def value_hint(err: Mapping[str, Any]) -> str:
    """How to write a value given in a form the option reader cannot take.

    `-o yes_words=yes,oui` or `[yes,oui]` (a string where a list is due) needs a JSON
    list, and `-o seed=none` a JSON `null`: values are read as JSON. (`temperatures` takes
    the bare comma form itself, as `--temperatures` does.)
    """
    value = err.get("input")
    loc = ".".join(str(part) for part in err.get("loc", ()))
    if isinstance(value, str) and value.lower() in ("none", "null") and value != "null":
        return f"; for no value write -o {loc}=null"
    if err.get("type") == "bool_type" and isinstance(value, str) and value.lower() in ("true", "false"):
        return f"; write -o {loc}={value.lower()}"  # values are read as JSON: False is a word there
    if err.get("type") != "list_type" or not isinstance(value, str):
        return ""
    text = value.strip()
    if not text.startswith("[") and not text.endswith("]") and "," not in text:
        return ""
    if "{" in text or "=" in text:  # TOML's inline tables (`[{kind="x"}]`): split on commas, they broke
        import tomllib

        try:
            value = tomllib.loads(f"v = {text}")["v"]
        except tomllib.TOMLDecodeError:
            return '; values are read as JSON: objects as {"key": "value", ...}'
        return f"; write it in JSON: -o {shlex.quote(f'{loc}={json.dumps(value, ensure_ascii=False)}')}"
    inner = text.removeprefix("[").removesuffix("]")  # `[0.1,0.2` lost its bracket, not its list
    parts = [p.strip() for p in inner.split(",") if p.strip()]
    # as JSON, so that words get their quotes: `[yes,oui]` is no list to the reader either
    listed = json.dumps([_json_or_text(p) for p in parts], ensure_ascii=False)
    return f"; write a list in JSON: -o {shlex.quote(f'{loc}={listed}')}"


def _json_or_text(part: str) -> Any:
    """A list element as the user meant it: a number stays one, anything else is text."""
    try:
        value = json.loads(part)
    except ValueError:
        return part.strip("'\"")
    return value if isinstance(value, int | float | str) else part


def given_value(err: Mapping[str, Any]) -> str:
    """` (got 'yes')`: the value a pydantic error is about, short; none for a missing key or a table.

    A config's `threshold: yes` said "Input should be a valid number" of nothing the user saw.
    Our own validators' messages (`value_error`) say what they need of the value themselves.
    """
    value = err.get("input")
    if err.get("type") in ("missing", "extra_forbidden", "value_error") or isinstance(value, (dict, list)):
        return ""
    return f" (got {_short(value)})"


def _short(value: Any) -> str:
    return clipped(repr(value), 60)


def validate_options(
    options: Mapping[str, Any], model_class: type[BaseModel], what: str = "option", prefix: str = ""
) -> BaseModel:
    """Checks names (with suggestions), then values; both kinds of mistake are usage errors."""
    check_option_names(options, model_class, what, prefix)
    try:
        return model_class.model_validate(dict(options))
    except ValidationError as exc:
        raise MushroomError(f"invalid {what}:\n" + validation_message(exc, f"  {prefix}")) from None


def parse_float_list(
    text: str, option: str, low: float | None = None, high: float | None = None
) -> list[float]:
    """`0.05,0.1,0.2` as floats; a bad or out-of-range element names the option and itself."""
    import math

    values = []
    parts = [p.strip() for p in text.split(",")]
    if "" in parts[:-1] or not any(parts):  # `0.1,,0.2`: a value was lost; a trailing comma is fine
        raise MushroomError(f"{option} {text!r}: an empty value in the list (expected e.g. 0.05,0.1,0.2)")
    for part in parts:
        if not part:
            continue
        try:
            value = float(part)
        except ValueError:
            raise MushroomError(f"{option}: {part!r} is not a number (expected e.g. 0.05,0.1,0.2)") from None
        if (
            not math.isfinite(value)
            or (low is not None and value < low)
            or (high is not None and value > high)
        ):
            if low is not None and high is not None:
                bounds = f" in [{low:g}, {high:g}]"
            elif low is not None:
                bounds = f" >= {low:g}"
            elif high is not None:
                bounds = f" <= {high:g}"
            else:
                bounds = ""
            raise MushroomError(f"{option}: {part!r} must be a finite number{bounds}")
        values.append(value)
    if not values:
        raise MushroomError(f"{option}: no values given")
    return values


def split_names(
    text: str, choices: list[str] | tuple[str, ...] | None = None, what: str = "name"
) -> list[str]:
    """A comma-separated list of names; with `choices`, each must be one (with a suggestion).

    An empty entry ("lexical,,llm") is refused rather than dropped: it is most often a name
    left out by mistake, and the run would go on without it.
    """
    if not text.strip():
        return []
    names = [n.strip() for n in text.split(",")]
    if not all(names):
        raise MushroomError(f"{text!r} has an empty {what}: separate {what}s by single commas")
    if choices is not None:
        for name in names:
            check_name(name, choices, what)
    return names


def field_default(info: Any) -> str:
    """A field's default as `mushroom detectors` shows it: required, a factory's value, or the value."""
    from pydantic_core import PydanticUndefined

    if info.is_required():
        return "(required)"
    if info.default_factory is not None:
        try:
            value = info.default_factory()
        except TypeError:  # factories that take the validated data
            return "(computed)"
    elif info.default is PydanticUndefined:
        return "(required)"
    else:
        value = info.default
    if isinstance(value, BaseModel):  # nested options: only what differs from their defaults
        fields = ", ".join(f"{k}={v!r}" for k, v in value.model_dump(exclude_defaults=True).items())
        return f"{type(value).__name__}({fields})"
    return repr(value)
