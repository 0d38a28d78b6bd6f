"""The command line's error boundary and the small helpers every command shares.

Every expected failure reaches the user as a few lines naming the file, option or value and
what to do, with an exit code a script can branch on (README, "Exit codes"): 0 ok, 1 an input
file found invalid, 2 a usage or config error, 3 a run with failed items, 130 interrupted.
Tracebacks are for bugs, and only with `--debug`.

Output that contains user text (file names, ids, model output, option values) goes through
`esc` before rich renders it: rich reads `[...]` as markup and would eat `mushroom[vllm]` or a
file named `run[bold].jsonl`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape

from mushroom.errors import Interrupted, MushroomError, close_match
from mushroom.jsonl import error_message

if TYPE_CHECKING:
    import typer

out_console = Console(soft_wrap=True)  # messages are never broken into lines; tables still fit
err_console = Console(stderr=True, soft_wrap=True)

EXIT_OK = 0
EXIT_INVALID_INPUT = 1
EXIT_USAGE = 2
EXIT_RUN_FAILED = 3
EXIT_INTERRUPTED = 130
EXIT_BUG = 70  # EX_SOFTWARE: an unexpected exception, i.e. a bug in mushroom

_debug: ContextVar[bool] = ContextVar("mushroom_debug", default=False)
_interrupt_hint: ContextVar[str | Callable[[], str] | None] = ContextVar(
    "mushroom_interrupt_hint", default=None
)


# ---- output ------------------------------------------------------------------------------


def esc(value: object) -> str:
    """User text made safe for rich markup (brackets shown as typed)."""
    return escape(str(value))


def plural(n: int, word: str, many: str | None = None) -> str:
    """A count with its noun in agreement: `1 item`, `2 items`, `0 items`.

    Every message that counts something goes through here, so "1 items" or "error(s)" never
    reach a user. The plural is `word + "s"` unless `many` is given ("entries"); for a noun
    phrase the last word takes the "s" ("prediction file" -> "prediction files").
    """
    return f"{n} {word if n == 1 else many or word + 's'}"


SHOWN_IDS = 5  # ids a message lists before "... (first 5 shown)"


def listed(ids: list[str], shown: int = SHOWN_IDS) -> str:
    """The first few ids, quoted, and how many were left out: `'a', 'b', ... (first 5 shown)`."""
    head = ", ".join(repr(i) for i in ids[:shown])
    return head + (f", ... (first {shown} shown)" if len(ids) > shown else "")


def no_prediction(ids: list[str], noun: str = "item", total: int | None = None) -> str:
    """One line for every id without a prediction: a count (of `total`) and the first few ids.

    One line, not one per item: a file that lost half of 1,000 items would otherwise bury
    every other problem under 500 lines with no line number to go to. The checker, the
    scorer, `compare` and the stack's member loading all say it this way.
    """
    count = plural(len(ids), noun) if total is None else f"{len(ids)} of {plural(total, noun)}"
    return f"no prediction for {count}: {listed(ids)}"


def print_error(message: str) -> None:
    """`error: MESSAGE` on stderr; the message is plain text, never markup."""
    err_console.print(f"[red]error:[/red] {esc(message)}", highlight=False, soft_wrap=True)


def print_warning(message: str) -> None:
    """`warning: MESSAGE` on stderr; the message is plain text, never markup."""
    err_console.print(f"[yellow]warning:[/yellow] {esc(message)}", highlight=False, soft_wrap=True)


def set_debug(on: bool) -> None:
    """Set by the global `--debug` flag: expected errors then show their traceback too."""
    _debug.set(on)


def debug_enabled() -> bool:
    """`--debug` was given, or MUSHROOM_DEBUG is set (errors before option parsing too)."""
    return _debug.get() or os.environ.get("MUSHROOM_DEBUG", "") not in ("", "0")


# ---- names and options -------------------------------------------------------------------


def suggest(name: str, choices: list[str] | tuple[str, ...] | Mapping[str, Any], label: str = "valid") -> str:
    """The tail of an "unknown name" message: a close match if any, then every valid name.

    `f"unknown detector {name!r}{suggest(name, available())}"` reads
    "unknown detector 'lexcal'; did you mean 'lexical'? valid: chain, lexical, llm"; `label`
    names the list where "valid" would not read well ("available", "its settings are").
    """
    names = sorted(choices)
    close = close_match(name, names)
    hint = f"; did you mean {close!r}?" if close else ";"
    return f"{hint} {label}: {', '.join(names) if names else '(none)'}"


def check_name(name: str, choices: list[str] | tuple[str, ...] | Mapping[str, Any], what: str) -> str:
    """Returns `name` if it is one of `choices`; else a usage error with a suggestion."""
    if name not in choices:
        raise MushroomError(f"unknown {what} {name!r}{suggest(name, choices)}")
    return name


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
    for err in exc.errors():
        loc = ".".join(str(part) for part in err["loc"]) or "(value)"
        given = "" if err.get("type") == "missing" else f" (got {_short(err.get('input'))})"
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
    if err.get("type") != "list_type" or not isinstance(value, str):
        return ""
    text = value.strip()
    if not text.startswith("[") and not text.endswith("]") and "," not in text:
        return ""
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


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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
    """A comma-separated list of names; with `choices`, each must be one (with a suggestion)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
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


# ---- paths -------------------------------------------------------------------------------


def input_file(path: Path, option: str) -> Path:
    """An existing readable file given as `option`; a folder or a missing path is a usage error."""
    if not path.exists():
        raise MushroomError(f"{option} {path}: no such file")
    if path.is_dir():
        raise MushroomError(f"{option} {path}: is a folder; give a file")
    return path


def output_file(path: Path, option: str) -> Path:
    """A path to write as `option`: not a folder, and its folder creatable."""
    if path.is_dir():
        raise MushroomError(f"{option} {path}: is a folder; give a file name to write")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise MushroomError(f"{option} {path}: {parent} is a file, not a folder")
    return path


# ---- interruption ------------------------------------------------------------------------


@contextlib.contextmanager
def interrupt_hint(hint: str | Callable[[], str]) -> Iterator[None]:
    """Ctrl-C inside the block exits 130 with `interrupted: HINT`.

    `hint` says what was saved and how to go on ("12 of 50 items saved in runs/x; run the
    same command to resume"); a callable is called at the moment of the interrupt, so it can
    count what was written by then.
    """
    token = _interrupt_hint.set(hint)
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(_interrupt_message(hint)) from None
    finally:
        _interrupt_hint.reset(token)


def _interrupt_message(hint: str | Callable[[], str] | None) -> str:
    if callable(hint):
        try:
            hint = hint()
        except Exception as exc:  # the hint must never hide the interrupt
            hint = f"(could not tell what was saved: {exc})"
    return f"interrupted; {hint}" if hint else "interrupted"


# ---- the boundary ------------------------------------------------------------------------


def _os_message(exc: OSError) -> str:
    name = exc.filename if exc.filename is not None else ""
    what = {
        IsADirectoryError: "is a folder, expected a file",
        NotADirectoryError: "a part of this path is a file, not a folder",
        FileNotFoundError: "no such file or folder",
        PermissionError: "permission denied",
        FileExistsError: "already exists",
    }.get(type(exc), exc.strerror or str(exc))
    return f"{name}: {what}" if name else str(what)


def exit_code_for(exc: BaseException) -> tuple[int, str | None]:
    """(exit code, message) for an exception reaching the boundary; message None: a bug."""
    import typer

    if isinstance(exc, MushroomError):
        return exc.exit_code, str(exc)
    if isinstance(exc, KeyboardInterrupt | typer.Abort):
        return EXIT_INTERRUPTED, _interrupt_message(_interrupt_hint.get())
    if isinstance(exc, ValidationError):
        return EXIT_USAGE, "invalid value:\n" + validation_message(exc, "  ")
    if isinstance(exc, OSError):
        return EXIT_USAGE, _os_message(exc)
    if isinstance(exc, UnicodeDecodeError):
        return EXIT_INVALID_INPUT, f"a file is not valid UTF-8: {exc.reason}"
    return EXIT_BUG, None


def run_cli(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Runs the typer app; every expected failure becomes a message and an exit code."""
    import typer

    args = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in args[: next((i for i, a in enumerate(args) if not a.startswith("-")), len(args))]:
        set_debug(True)
    from mushroom.backends.base import warnings_to

    try:
        command = typer.main.get_command(app)
        _flag_help(command)
        with warnings_to(print_warning):
            result = command(args=args, standalone_mode=False, prog_name="mushroom")
        if result == EXIT_INTERRUPTED:  # typer turns a bare Ctrl-C into a silent 130
            err_console.print(f"[yellow]{esc(_interrupt_message(None))}[/yellow]", highlight=False)
        return result if isinstance(result, int) else EXIT_OK
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # typer's click: bad option, missing argument, bad value
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print_error(str(exc))
        return int(getattr(exc, "exit_code", EXIT_USAGE) or EXIT_USAGE)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 - this is the boundary
        code, message = exit_code_for(exc)
        if message is None:
            if debug_enabled():
                traceback.print_exc()
            print_error(
                f"internal error: {type(exc).__name__}: {exc}\n"
                "this is a bug in mushroom; run again with --debug (mushroom --debug COMMAND ...) "
                "for the traceback and report it"
            )
            return code
        if debug_enabled():
            traceback.print_exc()
        if code == EXIT_INTERRUPTED:
            err_console.print(f"[yellow]{esc(message)}[/yellow]", highlight=False)
        else:
            print_error(message)
        return code


FLAG = ""
"""The metavar of a bool option: Typer shows `<bool>` after a flag, which reads as if it took
a value (`--allow-failures true` is then refused as an extra argument)."""


def _flag_help(command: Any) -> None:
    """Gives `--help` of a command and its subcommands the FLAG metavar our flags have."""
    original = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = original(ctx)
        if option is not None:
            option.metavar = FLAG
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        _flag_help(sub)


def reflow_help(app: Any) -> None:
    """Gives each command the help of its docstring with every paragraph on one line.

    Typer prints a docstring's later paragraphs with their source line breaks, so a sentence
    wrapped at 110 columns in the code broke in the middle on an 80-column terminal. Lines
    that start a list item or are indented keep their break.
    """
    import inspect

    for command in app.registered_commands:
        if command.help is None and command.callback is not None:
            command.help = _reflowed(inspect.getdoc(command.callback) or "")
    for group in app.registered_groups:
        reflow_help(group.typer_instance)


def _reflowed(doc: str) -> str:
    paragraphs = []
    for block in doc.split("\n\n"):
        lines: list[str] = []
        for line in block.splitlines():
            if lines and not line.startswith(("- ", "* ", " ")):
                lines[-1] += " " + line.strip()
            else:
                lines.append(line)
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)
