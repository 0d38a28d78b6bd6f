"""Servers whose circuit breaker tripped earlier in this command.

Kept so that the next backend to the same server does not pay the whole trip again.

A variants config, or a main job with several model-backed members, builds one backend per
variant or member. Against a server that fails every request, each paid its own breaker:
about 20 s of retries apiece, 108 s for the four variants of `configs/variants.toml` on 20
items. A backend built for a server remembered here starts on probation instead: one
attempt per request, and two failed requests with none that worked trip it. A server that
has come back answers that attempt, and the memory of it is dropped.

The memory lasts one CLI command (`remembering_trips`, entered by the CLI's error boundary);
outside one, nothing is remembered and every backend starts afresh, as a Python caller's
retry after restarting a server expects.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_trips: dict[tuple[str, str], str] | None = None


@contextmanager
def remembering_trips() -> Iterator[None]:
    """Remembers tripped servers until the block ends (one command)."""
    global _trips
    with _lock:
        outer, _trips = _trips, {}
    try:
        yield
    finally:
        with _lock:
            _trips = outer


def tripped_before(url: str, model: str) -> str | None:
    """Why the breaker of an earlier backend to this server and model tripped, or None."""
    with _lock:
        return None if _trips is None else _trips.get((url, model))


def remember_trip(url: str, model: str, reason: str) -> None:
    """A backend's breaker tripped: later backends to this server and model start on probation."""
    with _lock:
        if _trips is not None:
            _trips[(url, model)] = reason


def forget_trip(url: str, model: str) -> None:
    """The server answered: later backends start afresh."""
    with _lock:
        if _trips is not None:
            _trips.pop((url, model), None)
