"""Where warnings go: the run's or the CLI's `warning:` line, or Python's `warnings` module.

A backend, an encoder's disk cache or any other low layer warns through `say`; the layer that
shows things to the user (a run, the CLI) sets the sink with `warnings_to`. Through
`warnings.warn` alone the CLI printed a warning twice: Python's line with its source file and
code, then the run's own `warning:` line.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager

_warning_sink: Callable[[str], None] | None = None


@contextmanager
def warnings_to(sink: Callable[[str], None]) -> Iterator[None]:
    """Warnings go to `sink` while inside (a module global: backends warn from threads).

    One sink at a time: runs in parallel threads of one process would share the innermost one.
    """
    global _warning_sink
    before, _warning_sink = _warning_sink, sink
    try:
        yield
    finally:
        _warning_sink = before


def say(message: str, stacklevel: int = 2) -> None:
    """Shows `message` through the sink, or else as a RuntimeWarning (a caller from Python)."""
    sink = _warning_sink
    if sink is not None:
        sink(message)
    else:
        warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
