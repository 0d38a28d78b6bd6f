"""The circuit breaker: a run stops sending to a server that fails every request.

Apart from the client (`openai_compat`) because it is its own state machine with its own
tests: when to trip (cold, warm, on probation, on timeouts) and what the run then says.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from mushroom.backends.trips import forget_trip, remember_trip, tripped_before
from mushroom.errors import NOT_SENT, SLOWER, refused_by_server
from mushroom.util.words import one_line, plural

# The circuit breaker: failed requests after which the rest of the run is not sent. Each
# request has spent its own retries first, so 3 failures are ~18 attempts over ~20 s: a
# server failing all of them is broken, not busy (one that fails half its attempts fails a
# request 1 time in 64). After requests have worked, 10 in a row: a server that died mid-run.
BREAKER_COLD = 3
BREAKER_WARM = 10
# On probation (the server failed earlier in the command; see mushroom.backends.trips): two
# failed requests of one attempt each, not one, so that one request's own fault (a content
# filter's 400) does not stop a backend to a server that has come back.
BREAKER_PROBATION = 2
# Read timeouts trip it sooner: each costs `timeout_s` (600 s), so three of them on a one-slot
# server that hangs were half an hour before the run stopped. One when none has worked (a
# model that slow would take timeout_s an item), two in a row after some have. A connection
# closed after LONG_SILENCE_S with no answer (a proxy's timeout) counts as one.
TIMEOUTS_COLD = 1
TIMEOUTS_WARM = 2
TIMED_OUT = "timeout after"  # how a read timeout's message starts (after "gave up after ...: ")
SILENT_CLOSE = "the connection was closed after"  # how a long-silence close's message starts


class CircuitBreaker:
    """Stops a run's requests to a server that fails every one of them.

    A vLLM out of memory or a proxy with a dead upstream answers HTTP 500 to everything:
    retried per request, item after item, such a run took hours to end in "every item
    failed". Counted here are requests that ended in a server error (after their retries):
    5xx, a 4xx other than 408 and 429, a 429 that says the account is out of quota, a body
    that is not a completion, a timeout or a connection closed after a long silence (which
    trip it sooner, see TIMEOUTS_COLD). A busy
    server (408, 429) is not broken and never trips it. Once tripped, it stays so for the
    backend's life: the rest of the run fails unsent with one reason, and the same command
    run again (a new backend) sends them all. `on_open` is called once it trips, to cut the
    requests still waiting on the server.
    """

    def __init__(
        self,
        url: str,
        enabled: bool = True,
        on_open: Callable[[], object] | None = None,
        timeout_s: float | None = None,
        model: str = "",
    ):
        self.url = url
        self.model = model
        self.timeout_s = timeout_s
        self.enabled = enabled
        self.on_open = on_open
        self._lock = threading.Lock()
        self._worked = False
        self._in_row = 0
        self._timeouts_in_row = 0
        self._closes_in_row = 0  # of those timeouts, the connections closed after a long silence
        self._open: str | None = None
        # tripped for another backend earlier in this command (see mushroom.backends.trips):
        # BREAKER_PROBATION failures trip it, and `post` makes one attempt a request, until one works
        self.probation = tripped_before(url, model) is not None and enabled

    def on_probation(self) -> bool:
        """Whether this server failed earlier in the command and none of this backend's requests worked."""
        return self.probation and not self._worked

    def blocked(self) -> str | None:
        """The reason a request is not sent, or None."""
        return self._open

    def success(self) -> None:
        with self._lock:
            first = not self._worked
            self._worked, self._in_row, self._timeouts_in_row, self._closes_in_row = True, 0, 0, 0
        if first:
            forget_trip(self.url, self.model)

    def failure(self, message: str) -> None:
        """Counts a request that ended in a server error; trips after enough of them."""
        if not self.enabled or message.startswith(NOT_SENT):
            return
        # a connection closed after a long silence is a timeout on the way (a proxy's): three
        # of them on a one-slot server were three proxy timeouts before the run stopped
        closed = SILENT_CLOSE in message
        timed_out = TIMED_OUT in message or closed
        with self._lock:
            self._in_row += 1
            self._timeouts_in_row = self._timeouts_in_row + 1 if timed_out else 0
            self._closes_in_row = self._closes_in_row + 1 if closed else 0
            limit = BREAKER_WARM if self._worked else BREAKER_PROBATION if self.probation else BREAKER_COLD
            timeouts = TIMEOUTS_WARM if self._worked else TIMEOUTS_COLD
            if self._open is not None or (self._in_row < limit and self._timeouts_in_row < timeouts):
                return
            first = "" if self._worked else " (none worked)"
            if self._timeouts_in_row >= timeouts:
                n = self._timeouts_in_row
                if self._closes_in_row < n:  # a read timeout among them: its advice, timeout_s
                    within = f" within {self.timeout_s} s" if self.timeout_s else ""
                    none = "no request" if n == 1 else f"none of the last {n} requests"
                    self._open = (
                        f"{NOT_SENT}: the server at {self.url} answered {none}{within}; "
                        f"a slower model needs a {SLOWER}; the same command retries it"
                    )
                else:
                    which = "a request" if n == 1 else f"the last {n} requests"
                    self._open = (
                        f"{NOT_SENT}: the connection to {self.url} closed {which} after a long wait "
                        "with no answer: a proxy's read timeout in front of the server (raise it), or "
                        "the server dropped them; the same command retries it"
                    )
            else:
                # "... (none worked); the last: gave up after 6 attempts: HTTP 500 ...": it said
                # "with gave up after", the request's outcome read as the server's answer
                failed = f"failed the last {plural(self._in_row, 'request')}{first}"
                if self.probation and not self._worked:
                    failed = (
                        f"failed {plural(self._in_row, 'request')} again, as it did earlier in this command"
                    )
                # a refusal (HTTP 4xx) comes again to the same request: "retries it" sent users round
                again = (
                    "mend what it says first: the same request is refused again"
                    if refused_by_server(message)
                    else "the same command retries it"
                )
                self._open = (
                    f"{NOT_SENT}: the server at {self.url} {failed}; the last: {one_line(message)}; {again}"
                )
        self._opened()

    def trip(self, reason: str) -> None:
        """Stops sending at once, for a reason found otherwise (a server that answers nothing)."""
        if not self.enabled:
            return
        with self._lock:
            if self._open is not None:
                return
            self._open = f"{NOT_SENT}: {reason}; the same command retries it"
        self._opened()

    def _opened(self) -> None:
        remember_trip(self.url, self.model, self._open or "")
        if self.on_open is not None:
            self.on_open()
