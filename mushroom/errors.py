"""Errors that point at the exact place in the user's input that is wrong."""

from __future__ import annotations

import re
from collections.abc import Container, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mushroom.util.words import close_match, plural

# The CLI's exit codes (docs/reference/exit-codes.md); each error class below carries its own.
EXIT_OK = 0
EXIT_INVALID_INPUT = 1  # DataError: a file the command read is not valid
EXIT_USAGE = 2  # MushroomError: the command, an option or a config is wrong
EXIT_RUN_FAILED = 3  # RunFailed: items failed; nothing submitted
EXIT_MISSING_EXTRA = 4  # MissingExtra: the install lacks an optional package
EXIT_BUG = 70  # EX_SOFTWARE: an unexpected exception, i.e. a bug in mushroom
EXIT_INTERRUPTED = 130  # Interrupted: Ctrl-C


class MushroomError(Exception):
    """Base class: the CLI prints these without a traceback.

    `exit_code` is what the CLI exits with (docs/reference/exit-codes.md): 2 is a usage or config
    error, the default for anything the user can fix by changing the command.
    """

    exit_code: int = EXIT_USAGE


class RunFailed(MushroomError):
    """Items of a run failed (model calls, detector errors): exit 3, nothing submitted.

    Raised after everything that could be done was done and written, so a re-run of the same
    command redoes only the failed items. From Python (`Detector.detect`, `mushroom.detect_batch`)
    it carries what did not fail: `predictions` (id -> prediction of each item that worked) and
    `errors` (id -> error of each that failed), so one failed call does not lose a whole batch.
    """

    exit_code = EXIT_RUN_FAILED

    def __init__(self, message: str, predictions: dict | None = None, errors: dict[str, str] | None = None):
        super().__init__(message)
        self.predictions: dict = dict(predictions or {})
        self.errors: dict[str, str] = dict(errors or {})


def install_hint(extra: str) -> str:
    """The `pip install` of an extra's packages, as this install declares them.

    Not `pip install 'mushroom[EXTRA]'`: "mushroom" on PyPI is another project (a 2018 web
    messaging library), which pip fetches wherever this one is not installed. The packages
    are read from the installed metadata; from a checkout run without installing, the
    editable install of the extra is named.
    """
    from importlib import metadata

    try:
        declared = metadata.requires("mushroom") or []
    except metadata.PackageNotFoundError:
        declared = []
    marker = re.compile(rf"""^(.*?)\s*;\s*extra\s*==\s*["']{re.escape(extra)}["']\s*$""")
    wanted = [m.group(1).strip() for r in declared if (m := marker.match(r))]
    if not wanted:
        return f"pip install -e '.[{extra}]' in mushroom's checkout"
    return "pip install " + " ".join(f"'{r}'" for r in wanted) + f" (mushroom's {extra!r} extra)"


class MissingExtra(MushroomError):
    """An optional package is not installed: exit 4, with the `pip install` that brings it.

    Not a bug (exit 70) and not a mistaken command (exit 2): the command is right and the
    install is short of a package, which only the user can add. Mostly raised before a run
    folder is made (a part's readiness check); a package an engine imports only when it loads
    or at its first request stops the run there, before any item is marked failed.
    """

    exit_code = EXIT_MISSING_EXTRA

    def __init__(
        self, what: str, package: str, extra: str = "", hint: str | None = None, message: str | None = None
    ):
        """Names who needs the package and how to install it.

        Args:
            what: who needs it ("detector 'semantic'", "backend 'vllm'").
            package: the import name that is missing ("torch").
            extra: the mushroom extra that installs it ("semantic").
            hint: what to do instead of the `pip install` of the extra's packages.
            message: the whole message, where a part says it its own way.
        """
        self.what, self.package, self.extra = what, package, extra
        self.hint = hint or (install_hint(extra) if extra else f"pip install {package}")
        super().__init__(message or f"{what} needs {package!r}, which is not installed: {self.hint}")


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input file, located by line and field.

    A list of these is what the checker prints; the loaders raise the same list at once so
    that a user fixes a file in one round instead of one error per run.
    """

    path: str
    line: int | None
    field: str | None
    message: str
    item_id: str | None = None

    def __str__(self) -> str:
        where = self.path
        if self.line is not None:
            where += f":{self.line}"
        if self.item_id is not None:
            where += f": id {self.item_id!r}"
        if self.field:
            where += f": field '{self.field}'"
        return f"{where}: {self.message}"


def duplicate_id(path: str | Path, line: int, item_id: str, first: int) -> Problem:
    """A line whose id an earlier line of the same file has: every reader refuses it alike."""
    return Problem(str(path), line, "id", f"duplicate id {item_id!r} (first on line {first})")


UNKNOWN_ID = "is not among the items"
"""How the error of a prediction line whose id no item has reads (`check` counts them apart)."""


def unknown_id(path: str | Path, line: int | None, item_id: str, known: Container[str]) -> Problem:
    """A line whose id no item has, with the item's id when only its writing differs."""
    return Problem(str(path), line, "id", f"id {item_id!r} {UNKNOWN_ID}{near_id(item_id, known)}")


def near_id(item_id: str, known: Container[str]) -> str:
    """Says which item an unknown id is written differently for, or "".

    Ids are compared as written, as the official scorer compares them; an id that an editor
    or a tool re-encoded (NFC/NFD) or padded with spaces looks equal on screen and is still
    "not among the items", with nothing to see. Only the id's own forms are looked up, so a
    file whose every id is unknown costs no more than one whose ids are all known.
    """
    import unicodedata

    forms = [(item_id.strip(), "without the spaces around it")]
    forms += [
        (unicodedata.normalize(f, item_id), f"the same letters in Unicode form {f}") for f in ("NFC", "NFD")
    ]
    for form, why in forms:
        if form != item_id and form in known:
            return f": an item has {form!r} ({why}; ids are compared as written)"
    return ""


class Interrupted(MushroomError):
    """Ctrl-C: exit 130 with one line saying what was kept and how to go on.

    The run commands raise it (through `mushroom.cli.boundary.interrupt_hint`) with their own
    message; a bare KeyboardInterrupt elsewhere gets a generic one at the CLI boundary.
    """

    exit_code = EXIT_INTERRUPTED


class DataError(MushroomError):
    """Bad input: carries every problem found, each naming file, line and field.

    Exit 1 ("input found invalid") by default: the command was right, a file it read is not.
    A file that cannot be found or opened is a usage error (exit 2), as is a config file the
    user wrote by hand; those pass `exit_code=2`.
    """

    exit_code = EXIT_INVALID_INPUT

    def __init__(
        self,
        problems: list[Problem],
        max_shown: int = 20,
        exit_code: int | None = None,
        source: str = "input",
    ):
        """Keeps every problem; the message spells out the first `max_shown`.

        Args:
            problems: every problem found, in file order.
            max_shown: how many are spelled out before "... and N more".
            exit_code: 2 for a usage error (a missing file, a mistaken option) instead of 1.
            source: what held the problems, for the heading: "input", or "options" when they
                came from the command line, where "in input" sends a user looking for a bad file.
        """
        self.problems = problems
        self.source = source
        if exit_code is not None:
            self.exit_code = exit_code
        shown = "\n".join(f"  {p}" for p in problems[:max_shown])
        more = len(problems) - max_shown
        tail = f"\n  ... and {more} more" if more > 0 else ""

        super().__init__(f"{plural(len(problems), 'problem')} in {source}:\n{shown}{tail}")

    @classmethod
    def single(
        cls, path: str | Path, line: int | None, field: str | None, message: str, exit_code: int | None = None
    ) -> DataError:
        return cls([Problem(str(path), line, field, message)], exit_code=exit_code)


def error_text(exc: BaseException) -> str:
    """One line naming the exception type, for grouping failures by cause."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:500]


# What the hub client's errors say when a name is no local folder and the hub could not give it
_HUB_LOOKUP = re.compile(
    r"huggingface\.co|not a local folder|valid model identifier|offline mode|repository not found"
    r"|couldn't connect|name or service not known",
    re.IGNORECASE,
)
# what safetensors, torch and the GGUF reader say of a file cut short or damaged
# (not "invalid header value" or "unexpected EOF": an HTTP header, an SSL stream, worth a retry)
_DAMAGED = re.compile(
    r"SafetensorError|incomplete metadata|invalid header length|deserializing header|header too large"
    r"|cannot reshape array|unexpected end of file|PytorchStreamReader failed",
    re.IGNORECASE,
)


def looks_damaged(exc: BaseException) -> bool:
    """Whether a model load failed on a file cut short or damaged (running again reads the same bytes)."""
    return bool(_DAMAGED.search(f"{type(exc).__name__}: {error_text(exc)}"))


def load_failure(what: str, name: str, exc: BaseException) -> str:
    """The message of a model that could not be loaded: it stops the run, which can be resumed.

    A mistyped name that is no local folder is looked up on the hub: after about a minute of
    the hub client's retries, "run the same command again" alone sent the user round again.
    """
    said = error_text(exc)
    if _HUB_LOOKUP.search(said) and not Path(name).expanduser().exists():
        return (
            f"{what} {name!r} could not be loaded ({said}): no folder of that name is here, so it was "
            "looked up on the Hugging Face hub; check the name (a local model is given by its "
            "folder's path, e.g. ./models/x). Where there is no network, HF_HUB_OFFLINE=1 makes a "
            "wrong name fail at once. The run stops here: the same command retries it"
        )
    if looks_damaged(exc):
        return (
            f"{what} {name!r} could not be loaded ({said}): its files look damaged or cut short (a "
            "download or copy that did not finish?); fetch or copy them again (a registry name: "
            "`mushroom models pull --force NAME`). The run stops here"
        )
    return (
        f"{what} {name!r} could not be loaded ({said}); the run stops here: "
        "run the same command again to retry"
    )


def did_you_mean(name: str, names: Iterable[str]) -> str:
    """' (did you mean 'x'?)' for an unknown name with a close match, else ''."""
    match = close_match(name, names, prefix=True)
    return f" (did you mean {match!r}?)" if match else ""


REPLAY_MISS = "no recorded response"
"""How a replay backend's error for a request its file has no answer to begins."""
CUT_OFF = "the reply was cut off at max_tokens"
"""In the error of an item whose every reply stopped at its budget before it named a span."""
SERVER_CONTEXT_FLAGS = "llama-server -c, llama_cpp.server --n_ctx, vLLM --max-model-len"
"""The servers' settings of their context length, named where a prompt did not fit in it."""
CONTEXT_FULL = "the reply was stopped for length by the server, not at max_tokens"
"""In the error of an item whose replies stopped for length far below max_tokens: the prompt
filled the server's context, or the server caps replies (llama.cpp says "length" for both)."""
MODEL_FLAG = "--model NAME"
"""How a backend's advice names the model setting; each command writes it in its own form
(`model_advice`): main-job takes `-o backend.model=NAME`, pyes a `model` in its `models` list."""
SLOWER = "higher -o backend.timeout_s"
"""In the error of a request the server did not answer in time; `retry_advice` reads it."""
NOT_SENT = "not sent"
"""How the error of a request never sent begins (a tripped circuit breaker, a dead URL, a Ctrl-C).

Such a request cost nothing: it is no model call in a cascade's spend, and no item "sent"."""
RECORDED_CUT = "record it again with a live backend and a larger max_tokens"
"""Ends the cut-off error of a replayed item: a replay reads the recorded reply whatever max_tokens is."""
UNREADABLE = "the model's reply could not be read"
"""In the error of an item whose every reply was prose where the prompt asks for spans."""
NAMED_ELSEWHERE = "the reply named only text that is not in the answer"
"""In the error of an item whose every reply named spans the answer does not hold."""
FILTERED = "the server's content filter stopped the reply"
"""In the error of an item whose reply a content filter cut: the same request is cut again."""
NO_P_YES = "gave no usable P(yes)"
"""In the error of a pyes item whose model answered without a yes/no probability to read."""
TOO_LONG = "longer than the server's context"
"""In the error of a request the server refused for its length: the same request fails again."""


def model_advice(message: str, form: str) -> str:
    """A backend's message with its `--model NAME` advice in the form the command takes."""
    return message.replace(MODEL_FLAG, form)


@contextmanager
def model_flag_as(form: str) -> Iterator[None]:
    """Within: a backend's `--model NAME` advice is raised as `form`, for a command without --model."""
    try:
        yield
    except MushroomError as exc:
        if type(exc) is not MushroomError or MODEL_FLAG not in str(exc):
            raise
        raise MushroomError(model_advice(str(exc), form)) from None


# A client error: the same request is refused again. 408, 409, 425 and 429 are the server's
# "not now", which the backend retries too (`openai_compat.RETRY_STATUS`).
_REFUSED = re.compile(r"\bHTTP 4(?!08|09|25|29)\d\d\b")


def refused_by_server(error: str) -> bool:
    """Whether `error` holds a client error (HTTP 4xx but "not now"): a re-run as it is gets it again."""
    return bool(_REFUSED.search(error))


def retry_advice(errors: list[str], folder: str = "") -> str:
    """What to do about failed items: a re-run retries them, except where it cannot help.

    A replay answers from its file, so running the same command again fails the same items
    the same way; those need recorded answers or a run limited to the items recorded. A
    reply cut off at max_tokens comes back from the response cache as it was, and a prompt
    too long for the server is refused again: both need a setting changed first.
    `folder` ("--out DIR") is named in the advice: a command given no folder makes a new one
    each time, and would start over instead of retrying.
    """
    if errors and all(REPLAY_MISS in e for e in errors):
        return (
            "The replay file has no answer for them, so a re-run would fail them again: record their "
            "answers with a live backend, or run only the items it recorded"
        )
    cut = sum(CUT_OFF in e for e in errors)
    if errors and all(RECORDED_CUT in e for e in errors):
        return (
            "Each recorded reply was cut off at max_tokens before it named a span, and a replay reads "
            "them as they were: record them again with a live backend and a larger max_tokens "
            "(-o max_tokens=N), in a new folder"
        )
    if errors and cut == len(errors):
        return (
            "Each reply was cut off at max_tokens before it named a span, and a re-run reads the same "
            "replies from the cache: raise max_tokens (-o max_tokens=N) and run in a new folder"
        )
    unread = sum(UNREADABLE in e for e in errors)
    no_score = sum(NO_P_YES in e for e in errors)
    filtered = sum(FILTERED in e for e in errors)
    if errors and filtered == len(errors):
        return (
            "The server's content filter stopped each reply, and stops the same requests again: try "
            "another model, or the server without its filter, in a new folder"
        )
    if errors and no_score == len(errors):
        return (
            "The model answered them without a P(yes) to read, and a re-run gets the same replies (the "
            "cache keeps them; temperature 0 repeats them): mend what the error says, in a new folder"
        )
    if errors and unread == len(errors):
        return (
            "The model answered them in no form the parser reads, and a re-run reads the same replies "
            "from the cache: try another prompt or model, in a new folder"
        )
    elsewhere = sum(NAMED_ELSEWHERE in e for e in errors)
    recorded = sum(RECORDED_CUT in e for e in errors)
    full = sum(CONTEXT_FULL in e for e in errors)
    if errors and (cut - recorded) + full + unread + elsewhere + no_score + filtered == len(errors):
        # every reply came and is cached: "run the same command again" read them again, and
        # raising max_tokens in the same folder is refused as another config
        fixes = []
        if cut:
            fixes.append(f"raise max_tokens (-o max_tokens=N) for the {cut} cut off at it")
        if full:
            fixes.append(
                f"raise the server's context length ({SERVER_CONTEXT_FLAGS}) or its reply limit for the "
                f"{full} it stopped"
            )
        if filtered:
            fixes.append(
                f"try another model, or the server without its filter, for the {filtered} it stopped"
            )
        if no_score:
            fixes.append(f"mend what the error says for the {no_score} without a P(yes) to read")
        if unread + elsewhere:
            fixes.append(
                f"try another prompt or model for the {unread + elsewhere} whose replies name no span "
                "of the answer"
            )
        return (
            "The model answered each of them, and a re-run reads the same replies from the cache: "
            + "; ".join(fixes)
            + ", in a new folder"
        )
    long = sum(TOO_LONG in e for e in errors)
    slow = sum(SLOWER in e for e in errors)
    context = (
        f"raise the server's context length ({SERVER_CONTEXT_FLAGS}), then run the same command again"
        + (f" with {folder}" if folder else "")
        + "; or lower max_tokens, in a new folder"
    )
    if errors and long == len(errors):
        return f"The server refused them as {TOO_LONG}, so a re-run as it is fails them again: {context}"
    if errors and all("ConnectError" in e or "Connection refused" in e for e in errors):
        return (
            "Nothing answered at the server's URL (the connection was refused): start the server (one "
            "that was running may have crashed: see its log), or give its URL, then run the same "
            f"command again{f' with {folder}' if folder else ''}"
        )
    refused = sum(refused_by_server(e) and TOO_LONG not in e for e in errors)
    if errors and refused == len(errors):
        return (
            "The server refused the requests (an HTTP 4xx: the request, the model's name or the key "
            "was wrong), so a re-run as it is fails them again: mend what the errors above say; a "
            "setting that changes answers (the model, structured_output) needs a new --out folder"
        )
    again = f"Run the same command again{f' with {folder}' if folder else ''} to retry only them"
    if refused:
        again += (
            f"; {refused} of them {'was' if refused == 1 else 'were'} refused by the server (an HTTP 4xx), "
            "which a re-run gets again"
        )
    if long:
        again += f"; {long} of them were {TOO_LONG}, which a re-run fails again unless you {context}"
    if filtered:
        again += f"; for {filtered} of them {FILTERED}, which a re-run gets again (try another model)"
    if cut - recorded:
        again += (
            f"; for {cut - recorded} of them {CUT_OFF}, which a re-run reads from the cache again (raise "
            "it, in a new folder)"
        )
    if recorded:
        again += f"; for {recorded} of them the recorded reply was cut off at max_tokens: {RECORDED_CUT}"
    if unread:
        again += f"; for {unread} of them {UNREADABLE}, which a re-run reads from the cache again"
    if elsewhere:
        again += f"; for {elsewhere} of them {NAMED_ELSEWHERE}, which a re-run reads from the cache again"
    if full:
        again += (
            f"; for {full} of them {CONTEXT_FULL}, which a re-run reads from the cache again (raise its "
            f"context length: {SERVER_CONTEXT_FLAGS}, in a new folder)"
        )
    if slow:
        again += (
            f"; for {slow} of them the server answered too slowly or not at all: raise -o backend.timeout_s "
            "first if the model is that slow"
        )
    return again


def cut_by_ctrl_c(exc: BaseException) -> bool:
    """Whether `exc` is a Ctrl-C, or an import one cut (a KeyboardInterrupt among its causes).

    pybind11's compiled modules (scipy's) raise "ImportError: initialization failed" from the
    KeyboardInterrupt: it was said as a bug, with a traceback and exit 1.
    """
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, KeyboardInterrupt):
            return True
        if not isinstance(link, ImportError):
            return False
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False
