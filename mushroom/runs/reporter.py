"""How a run tells a person what happens: a small protocol, rendered by whoever calls the run.

The run service, the main job and run configs say what they did (a line, a warning, a table
of values, progress) through a `Reporter` and never draw anything themselves, so the layers
below the command line need no terminal library. The command line's reporter
(`mushroom.cli.tables.RichReporter`) draws the tables and bars with rich; `PlainReporter`, the
default for callers that give none (scripts, benchmarks), writes plain lines.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO


class ProgressBar(Protocol):
    """The few calls a run makes on a progress display (rich's `Progress` has them)."""

    def add_task(self, description: str, total: float | None = ...) -> Any: ...
    def advance(self, task_id: Any, advance: float = ...) -> None: ...
    def update(self, task_id: Any, *, completed: float | None = ..., total: float | None = ...) -> None: ...
    def remove_task(self, task_id: Any) -> None: ...


@dataclass
class Table:
    """A table of values, with no styling: a kind says how the renderer should draw it.

    `kind` is "plain" (cells as given; a column of numbers is right-aligned), "scores" (rows
    of `evaluation.tables.score_rows`), "systems" (`columns` unused, `data` is a stack's
    `system -> lang -> metric` comparison) or "paired" (rows of `evaluation.compare.comparison_rows`).
    """

    title: str
    kind: str = "plain"
    columns: list[str] = field(default_factory=list)
    rows: list[list[Any]] | list[dict] = field(default_factory=list)
    data: Any = None


class Reporter(Protocol):
    """Where a run's messages, warnings, tables and progress go."""

    def message(self, text: str, lead: str = "") -> None:
        """A line of plain text; `lead`, when given, is a highlighted word or two before it."""

    def warning(self, text: str) -> None:
        """A warning (printed once by the caller, which keeps the run's list)."""

    def table(self, table: Table) -> None:
        """A table of values."""

    def progress(self, disable: bool = False) -> AbstractContextManager[ProgressBar]:
        """A progress display for the duration of a stage."""


class _NoBar:
    def add_task(self, description: str, total: float | None = None) -> int:
        return 0

    def advance(self, task_id: Any, advance: float = 1) -> None:
        pass

    def update(self, task_id: Any, *, completed: float | None = None, total: float | None = None) -> None:
        pass

    def remove_task(self, task_id: Any) -> None:
        pass


class PlainReporter:
    """Plain lines on a stream (stdout by default), tables as tab-separated rows, no progress bar.

    Warnings go to `err_stream`: by default stderr, as the command line prints them, or
    `stream` when one is given (a script's log keeps its warnings).
    """

    def __init__(self, stream: TextIO | None = None, err_stream: TextIO | None = None):
        self.stream = stream
        self.err_stream = err_stream if err_stream is not None else stream

    def _print(self, text: str) -> None:
        print(text, file=self.stream or sys.stdout)

    def message(self, text: str, lead: str = "") -> None:
        self._print(f"{lead} {text}" if lead else text)

    def warning(self, text: str) -> None:
        print(f"warning: {text}", file=self.err_stream or sys.stderr)

    def table(self, table: Table) -> None:
        self._print(table.title)
        if table.columns:
            self._print("\t".join(table.columns))
        for row in table.rows:
            self._print("\t".join(map(str, row.values() if isinstance(row, dict) else row)))

    @contextmanager
    def progress(self, disable: bool = False) -> Iterator[ProgressBar]:
        yield _NoBar()
