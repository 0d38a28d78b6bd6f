"""Ctrl-C as a message that says what was saved and how to go on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from mushroom.errors import Interrupted

_interrupt_hint: ContextVar[str | Callable[[], str] | None] = ContextVar(
    "mushroom_interrupt_hint", default=None
)


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
        raise Interrupted(interrupt_message(hint)) from None
    finally:
        _interrupt_hint.reset(token)


def hint_text(hint: str | Callable[[], str] | None) -> str:
    """What was saved, calling a callable hint now; "" for none. A failing hint says so.

    Said after a stop (a Ctrl-C, a full disk), which a failing hint must never hide.
    """
    if callable(hint):
        try:
            hint = hint()
        except Exception as exc:  # the hint must never hide why the command stopped
            hint = f"(could not tell what was saved: {exc})"
    return hint or ""


def interrupt_message(hint: str | Callable[[], str] | None) -> str:
    """`interrupted; HINT`, calling a callable hint now (`hint_text`)."""
    said = hint_text(hint)
    return f"interrupted; {said}" if said else "interrupted"


_fallback: list[str | Callable[[], str]] = []  # hints of what is open (a run's folder), newest last


def fallback_hint(hint: str | Callable[[], str]) -> Callable[[], None]:
    """A hint for a Ctrl-C outside every `interrupt_hint` block while something is open.

    A run's folder is open from its start to its end, and a Ctrl-C between its stages (reading
    the items, the final scoring, a comparison of variants) said only "interrupted". Returns
    the call that withdraws it (a second call does nothing).
    """
    _fallback.append(hint)

    def withdraw() -> None:
        if hint in _fallback:
            _fallback.remove(hint)

    return withdraw


def clear_fallback_hints() -> None:
    """Withdraws every fallback hint: a command's end (a run that stopped on an error keeps one)."""
    _fallback.clear()


def current_hint() -> str | Callable[[], str] | None:
    """The hint of the innermost `interrupt_hint` block, else of what is open (for a bare Ctrl-C)."""
    return _interrupt_hint.get() or (_fallback[-1] if _fallback else None)
