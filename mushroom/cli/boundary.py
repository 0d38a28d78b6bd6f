"""The command line's error boundary and the small helpers every command shares.

Every expected failure reaches the user as a few lines naming the file, option or value and
what to do, with an exit code a script can branch on (README, "Exit codes"): 0 ok, 1 an input
file found invalid, 2 a usage or config error, 3 a run with failed items, 4 an optional package
not installed (the message names the `pip install` that brings it), 70 a bug
in mushroom, 130 interrupted. Tracebacks are for bugs, and only with `--debug`.

Output that contains user text (file names, ids, model output, option values) goes through
`esc` before rich renders it: rich reads `[...]` as markup and would eat the `vllm` extra or a
file named `run[bold].jsonl`.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape

from mushroom.errors import (
    EXIT_BUG,
    EXIT_INTERRUPTED,
    EXIT_INVALID_INPUT,
    EXIT_OK,
    EXIT_USAGE,
    MushroomError,
    cut_by_ctrl_c,
)
from mushroom.util.files import LINK_LOOP
from mushroom.util.folderlock import command_scope
from mushroom.util.interrupts import clear_fallback_hints, current_hint, hint_text, interrupt_message
from mushroom.util.options import validation_message

if TYPE_CHECKING:
    import typer

_closed: list[str] = []  # the streams whose reader went away, in the order it happened


def _drop_output(stream: Any, name: str) -> None:
    """Sends the rest of a stream's output nowhere, and notes that its reader went away."""
    if name not in _closed:
        _closed.append(name)
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())  # Python's flush at exit finds an open file, not a dead pipe
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a stream with no file (captured in tests)
        pass


class PipeConsole(Console):
    """A console whose reader may stop reading (`mushroom main-job | head`).

    rich's answer to a closed pipe is SystemExit(1): a main job piped into `head` stopped at
    its next line of output, mid-run, its summary unwritten, with not a word. Here the rest
    of the output goes nowhere and the command runs to its end; `run_cli` then says so.
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        _drop_output(self.file, "stderr" if self.stderr else "stdout")


def echo(text: str) -> None:
    """`print` for exact output (JSON, a path): a reader that stopped reading ends no command."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        out_console.on_broken_pipe()  # the same stdout, so the same end of its output


# Messages are never broken into lines (tables still fit), and `:name:` is no emoji code: a
# run labelled "0:a:" was printed as "0🅰".
out_console = PipeConsole(soft_wrap=True, emoji=False)
err_console = PipeConsole(stderr=True, soft_wrap=True, emoji=False)


_debug: ContextVar[bool] = ContextVar("mushroom_debug", default=False)


# ---- output ------------------------------------------------------------------------------


def esc(value: object) -> str:
    """User text made safe for rich markup (brackets shown as typed)."""
    return escape(str(value))


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


# ---- paths -------------------------------------------------------------------------------


def input_file(path: Path, option: str) -> Path:
    """An existing readable file given as `option`; a folder or a missing path is a usage error."""
    if not path.exists():
        raise MushroomError(f"{option} {path}: no such file")
    if path.is_dir():
        raise MushroomError(f"{option} {path}: is a folder; give a file")
    from mushroom.data.jsonl import refuse_irregular

    refuse_irregular(path)  # `compare --items /dev/zero` was taken as no --items at all
    return path


def file_to_write(value: str) -> Path:
    """Typer's parser for an option naming a file to write: `--out dir/` names a folder.

    A `Path` drops the trailing slash, so `stack --out fits/` wrote a file named `fits` and
    exited 0; the slash is only seen here, before the conversion.
    """
    import typer

    if value.endswith(("/", os.sep)):
        raise typer.BadParameter(
            f"{value} ends in '/', so it names a folder; give the file's name too ({value}NAME)"
        )
    if value in (".", "..") or value.endswith(("/.", "/..")):  # `--out z/.` wrote a file named z
        raise typer.BadParameter(f"{value} names a folder; give the name of a file in it")
    return Path(value)


def json_to_write(value: str) -> str:
    """`file_to_write` for `score --json`, kept as text: `-` is stdout, `./-` a file of that name."""
    file_to_write(value)
    return value


def refuse_foreign(path: Path, option: str, what: str, ours: Callable[[Path], bool]) -> None:
    """Refuses to write over a file that is not one this command writes (`ours` says which are).

    `stack fit --out` replaced a prediction file with a stack, and `ensemble --out` a file of
    the user's, each exiting 0; a re-run writing over its own earlier output goes on, and so
    does an empty file (a `mktemp`).
    """
    if not path.is_file():
        return
    try:
        with path.open("rb") as handle:
            empty = not handle.read(1 << 16).strip() and not handle.read(1)
    except OSError:
        empty = False
    if not empty and not ours(path):
        raise MushroomError(
            f"{option} {path} exists and is not a {what}; give another name, or delete it first"
        )


def output_file(path: Path, option: str, inputs: Iterable[Path | None] = ()) -> Path:
    """A path to write as `option`: not a folder, its folder creatable, and none of the command's data.

    `score --output GOLD` replaced the gold file with two lines of scores, and `ensemble --out`
    could write over its --items file or an official val file, each exiting 0. So the path may
    not be one of `inputs`, nor be named as the per-language files an input folder is read
    for (`mushroom.en-val.v2.jsonl`) anywhere inside it (a run is read through its
    `predictions/` or `val/`) or beside an input file (a later command would read it as one of
    that folder's runs), nor replace a file the run of an input keeps (its config, ledgers,
    scores), nor lie in the data folder of the official files. Other names there are fine
    (`score RUN --json RUN/scores-mine.json`), every time. Commands that write nothing into
    an input's run folder say so with `refuse_out_in_runs` as well.
    """
    from mushroom.data.predictions import prediction_file_lang
    from mushroom.data.runfolder import made_from_files, run_scope
    from mushroom.data.splits import DEFAULT_DATA_DIR, in_data_dir
    from mushroom.runs.folders import RUN_FILES, parent_run

    if str(path) == "-" or path.parts[:1] == ("-",):  # a file, or a folder, named "-" was made
        raise MushroomError(
            f"{option} -: this writes files, not to stdout (what it prints is on stdout already); "
            "give a file or folder name"
        )
    if path.is_dir():
        raise MushroomError(f"{option} {path}: is a folder; give a file name to write")
    target = path.resolve()
    for given in inputs:
        if given is None:
            continue
        source = given.resolve()
        if target == source:
            raise MushroomError(f"{option} {path} is an input of this command ({given}); write it elsewhere")
        named = prediction_file_lang(target.name) is not None
        if named and (target.is_relative_to(source) if source.is_dir() else target.parent == source.parent):
            where = (
                f"the prediction files read from the input folder {given}"
                if source.is_dir()
                else f"a prediction file, beside the input {given}"
            )
            raise MushroomError(
                f"{option} {path} is named as {where}: it would be read as one of that folder's runs; "
                "give it another name or folder"
            )
    # the items and context files an input run was made from (`detect --items`): an ensemble
    # written over its contexts file replaced what the run's numbers rest on
    for given in inputs:
        scope = run_scope(given) if given is not None and given.exists() else None
        for name in made_from_files(scope.config) if scope is not None else []:
            if name.is_file() and name.resolve() == target:
                raise MushroomError(
                    f"{option} {path} is a file the run {scope.folder} was made from (its items or "
                    "contexts); write it elsewhere"
                )
    # Any run's files, an input's or not, at any depth (a variant run keeps its ledgers and
    # scores in <run>/<variant>/val/): `ensemble --out OTHER_RUN/predictions/mushroom.en-val.v2.jsonl`
    # replaced a file whose run then scored another number, and `score --json RUN/config.json`
    # left that run unresumable.
    near = parent_run(target.parent)
    if near is not None:
        rel = target.relative_to(near)
        if RUN_FILES & set(rel.parts) or prediction_file_lang(target.name) is not None:
            # a new file among the run's kept ones is read as the run's (a prediction, a score)
            does = "would replace a file" if target.exists() else "would be written among the files"
            raise MushroomError(
                f"{option} {path} {does} the run {near} keeps (its config, ledgers, scores or "
                "predictions); write it elsewhere"
            )
    if in_data_dir(target):
        raise MushroomError(
            f"{option} {path} is inside {DEFAULT_DATA_DIR}, the folder of the official data files; "
            "write it elsewhere"
        )
    if _holds_items(target):
        # a copy of the data outside the configured folder: `ensemble --out` replaced its gold
        raise MushroomError(
            f"{option} {path} holds items (answers with model_output_text), not predictions: "
            "writing would replace them; write it elsewhere"
        )
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise MushroomError(f"{option} {path}: {parent} is a file, not a folder")
    return path


def _holds_items(path: Path) -> bool:
    """Whether an existing file's first record is an item (a data or gold file), read from its head."""
    import json

    from mushroom.data.jsonl import first_line

    if not path.is_file():
        return False
    try:
        line = first_line(path)
        record = json.loads(line) if line is not None else None
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and "model_output_text" in record


# ---- interruption ------------------------------------------------------------------------


# ---- the boundary ------------------------------------------------------------------------


def _os_message(exc: OSError) -> str:
    name = exc.filename if exc.filename is not None else ""
    if exc.filename2 is not None and isinstance(exc, PermissionError):
        # a file written atomically fails at its replace: the file that refused is the target,
        # not the hidden `.NAME.part` the user never made
        name = exc.filename2
    what = {
        IsADirectoryError: "is a folder, expected a file",
        NotADirectoryError: "a part of this path is a file, not a folder",
        FileNotFoundError: "no such file or folder",
        PermissionError: "permission denied",
        FileExistsError: "already exists",
    }.get(type(exc), LINK_LOOP if exc.errno == errno.ELOOP else exc.strerror or str(exc))
    return f"{name}: {what}" if name else str(what)


_DISK_FULL = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}


def _disk_full_message(exc: OSError) -> str:
    """A full disk (or a file-size limit, a quota), with what was saved and how to go on.

    A write that fails for want of space names no file (Python's OSError has none then): the
    bare "error: No space left on device" said neither where nor that the work is kept (an
    audit). The run's own hint says both, as a Ctrl-C's does.
    """
    said = hint_text(current_hint())
    where = f"{exc.filename}: " if exc.filename is not None else ""
    then = f"free space; {said}" if said else "free space and run the same command again"
    return f"{where}{exc.strerror or exc} (a full disk, a quota or a file-size limit): {then}"


def exit_code_for(exc: BaseException) -> tuple[int, str | None]:
    """(exit code, message) for an exception reaching the boundary; message None: a bug."""
    import typer

    if isinstance(exc, MushroomError):
        return exc.exit_code, str(exc)
    if isinstance(exc, KeyboardInterrupt | typer.Abort) or cut_by_ctrl_c(exc):
        return EXIT_INTERRUPTED, interrupt_message(current_hint())
    if isinstance(exc, ValidationError):
        return EXIT_USAGE, "invalid value:\n" + validation_message(exc, "  ")
    if isinstance(exc, OSError) and exc.errno in _DISK_FULL:
        return EXIT_USAGE, _disk_full_message(exc)
    if isinstance(exc, OSError):
        return EXIT_USAGE, _os_message(exc)
    if isinstance(exc, RuntimeError) and str(exc).startswith("Symlink loop from "):
        # Path.resolve() on a loop of links (Python 3.11-3.12; from 3.13 a strict one raises
        # OSError ELOOP, named by _os_message, and a plain one returns the path)
        where = str(exc).removeprefix("Symlink loop from ").strip("'")
        return EXIT_USAGE, f"{where}: {LINK_LOOP}"
    if isinstance(exc, UnicodeDecodeError):
        return EXIT_INVALID_INPUT, f"a file is not valid UTF-8: {exc.reason}"
    if isinstance(exc, ImportError):  # an optional package imported where no check named it first
        from mushroom.util.registry import missing_extra

        missing = missing_extra(exc, "this command")
        if missing is not None:
            return missing.exit_code, str(missing)
    return EXIT_BUG, None


def _debug_first(args: list[str]) -> list[str]:
    """`--debug` given after the command moved before it, where the app takes it.

    `mushroom score --debug ...` was "No such option: --debug", as the error it was added to
    show was being reported. Only a bare `--debug` before any `--` moves.
    """
    end = args.index("--") if "--" in args else len(args)
    if "--debug" not in args[:end]:
        return args
    return ["--debug", *(a for a in args[:end] if a != "--debug"), *args[end:]]


def run_cli(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Runs the typer app; every expected failure becomes a message and an exit code."""
    args = _debug_first(list(sys.argv[1:] if argv is None else argv))
    if args[:1] == ["--debug"]:  # _debug_first moved any there
        set_debug(True)
    clear_fallback_hints()  # a library call before this command may have left one
    try:
        with command_scope(), _one_interrupt():  # a command stopped leaves no folder locked
            return _run(app, args)
    finally:
        if "stdout" in _closed and "stderr" not in _closed:
            err_console.print(
                "note: the output's reader stopped reading (a `| head`?); the rest of the output was "
                "dropped, and the command went on to its end",
                highlight=False,
                markup=False,
            )
        _closed.clear()
        clear_fallback_hints()


REPEAT_INTERRUPT_S = 2.0  # a second SIGINT this soon after the first is the same Ctrl-C


class _FirstInterrupt:
    """SIGINT as Python's default (KeyboardInterrupt), but a repeat within REPEAT_INTERRUPT_S is dropped.

    `timeout -s INT` signals the command and its group, and the second signal
    landed while the first was being said ("... saved; run the same command again"),
    printing a traceback from inside rich. A later Ctrl-C stops the command as the first did.
    """

    def __init__(self, last: float | None = None) -> None:
        self.last = last

    def __call__(self, signum: int, frame: Any) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last < REPEAT_INTERRUPT_S:
            return
        self.last = now
        raise KeyboardInterrupt


@contextmanager
def _one_interrupt() -> Iterator[None]:
    """`_FirstInterrupt` for the command's life, in the main thread (a signal handler's only place).

    Only in place of Python's own handler: a command started with SIGINT ignored (`mushroom
    ... &` in a script) is not stopped by one, nor is a caller's own handler replaced.
    """
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return
    before = signal.signal(signal.SIGINT, _FirstInterrupt())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def after_command() -> None:
    """As the process ends: a Ctrl-C within REPEAT_INTERRUPT_S of the command's end is dropped.

    After a Ctrl-C, the second signal of `timeout -s INT` printed a traceback from the
    interpreter's shutdown; after a finished command, a Ctrl-C in those few tenths of a second
    made the finished run exit 130 with no word (an audit). A later Ctrl-C still stops a
    shutdown that hangs.
    """
    if threading.current_thread() is threading.main_thread():
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _FirstInterrupt(last=time.monotonic()))


def _run(app: typer.Typer, args: list[str]) -> int:
    import typer

    from mushroom.backends.trips import remembering_trips
    from mushroom.util.warn import warnings_to

    try:
        command = typer.main.get_command(app)
        _flag_help(command)
        _refuse_repeated_options(command, args)
        with warnings_to(print_warning), remembering_trips():
            result = command(args=args, standalone_mode=False, prog_name="mushroom")
        if result == EXIT_INTERRUPTED:  # typer turns a bare Ctrl-C into a silent 130
            err_console.print(f"[yellow]{esc(interrupt_message(current_hint()))}[/yellow]", highlight=False)
        return result if isinstance(result, int) else EXIT_OK
    except typer.Exit as exc:
        return exc.exit_code
    except typer.TyperException as exc:  # typer's click: bad option, missing argument, bad value
        _usage_hint(exc)
        _say_given_value(exc, command, args)
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            print_error(str(exc))
        return int(getattr(exc, "exit_code", EXIT_USAGE) or EXIT_USAGE)
    except SystemExit as exc:
        if exc.code == 1 and isinstance(exc.__context__, BrokenPipeError):
            # typer's own console (--help) ends a closed pipe with SystemExit(1), as rich does:
            # `mushroom --help | head -1` printed what head wanted, and exited 1. rich has sent
            # the rest to /dev/null already; help is all such a command does, so no note.
            return EXIT_OK
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


def _refuse_repeated_options(command: Any, args: list[str]) -> None:
    """A usage error for an option of one value given twice: click keeps the last, unsaid.

    `detect --split val --split test` ran test, and `score --json A --json B` wrote B alone,
    while `-o KEY=...` twice and `--contexts x,x` were refused. Options that take many values
    (`-o`, `--lang`) and flags are left alone.
    """
    for given in _single_values(command, args).values():
        if len(given) > 1:
            values = ", ".join(value for _, value in given)
            typed = list(dict.fromkeys(name for name, _ in given))  # as typed: `--output a --out b`
            if len(typed) > 1:
                raise MushroomError(f"{' and '.join(typed)} name one option, given {values}: give it once")
            times = "twice" if len(given) == 2 else f"{len(given)} times"
            raise MushroomError(f"{typed[0]} is given {times} ({values}): give it once")


def _single_values(command: Any, args: list[str]) -> dict[str, list[tuple[str, str]]]:
    """The options of one value on a command line: longest name -> [(name as typed, value)], in order.

    Read as click reads them, so a value that looks like an option (`--prompt --limit=5`) is
    the value of the option before it.
    """
    rest = list(args)
    while hasattr(command, "commands"):  # a group: its subcommand is its first plain word
        word = next((a for a in rest if not a.startswith("-")), None)
        if word is None or word not in command.commands:
            return {}  # click says what is wrong
        rest = rest[rest.index(word) + 1 :]
        command = command.commands[word]
    single = {
        name: param
        for param in getattr(command, "params", [])
        if getattr(param, "param_type_name", "") == "option"
        and not getattr(param, "multiple", False)
        and not getattr(param, "is_flag", False)
        and not getattr(param, "count", False)
        for name in param.opts
    }
    seen: dict[str, list[tuple[str, str]]] = {}
    k = 0
    while k < len(rest) and rest[k] != "--":
        name, _, value = rest[k].partition("=")
        param = single.get(name)
        if param is not None:
            if not value and k + 1 < len(rest):
                k += 1
                value = rest[k]
            seen.setdefault(max(param.opts, key=len), []).append((name, value))
        k += 1
    return seen


def _usage_hint(exc: Exception) -> None:
    """`mushroom detect semantic`: the detector given as a word, refused as an extra argument.

    Also `mushroom run --config X`, as main-job takes a config: run takes it as its argument.
    """
    ctx, message = getattr(exc, "ctx", None), getattr(exc, "message", None)
    command = getattr(getattr(ctx, "command", None), "name", None)
    if command == "run" and isinstance(message, str) and message.startswith("No such option: --config"):
        # main-job takes --config; run takes its config as its argument
        exc.message = (
            f"{message}; `mushroom run` takes the config file as its argument: mushroom run CONFIG.toml"  # type: ignore[attr-defined]
        )
        return
    if command != "detect" or not isinstance(message, str) or not message.startswith("Got unexpected extra"):
        return
    from mushroom.detectors import available

    given = message[message.rfind("(") + 1 : message.rfind(")")].split()  # click names them there
    words = [w for w in given if w in available()]
    if words:
        exc.message = f"{message}; the detector is an option: --detector {words[0]}"  # type: ignore[attr-defined]


def _say_given_value(exc: Exception, command: Any, args: list[str]) -> None:
    """A bad option value named in its message: `Invalid value for '--limit': '3x': Input should be ...`.

    Typer's converters say what a value should be, not what was given, so a wrong value among
    many flags in a script (an unset variable, a shifted argument) had to be found by eye.
    """
    # typer's own click (typer._click from 0.29), so its classes are known by what they hold
    param, message = getattr(exc, "param", None), getattr(exc, "message", None)
    if type(exc).__name__ != "BadParameter" or getattr(param, "param_type_name", None) != "option":
        return
    values = _single_values(command, args).get(max(param.opts, key=len))  # type: ignore[union-attr]
    if not values or not isinstance(message, str):
        return
    given = values[-1][1]  # the last one given is the one click read
    if given and given in message:
        return  # a message of our own names the value already
    exc.message = f"{given!r}: {message}"


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
