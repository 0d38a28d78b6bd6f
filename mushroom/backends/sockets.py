"""HTTP requests in flight that can be cut short from another thread.

A blocking read on a socket is not woken when another thread closes the client (httpx's
`Client.close()` returns at once while the read waits out its 600 s timeout). So a Ctrl-C,
or a circuit breaker that found the server hung, waited for every request in flight: the
process could not exit before they ended (a thread pool's workers are joined at exit).
Here every connection's socket is kept (weakly) and `abort()` shuts them down, which wakes
the reads with a closed connection.

httpx takes no network backend, so the one of its connection pool is wrapped; where an
httpx release moves that attribute, `install` returns None and requests are waited for,
as before, instead of failing.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import weakref
from typing import Any

import httpcore


class _Stream(httpcore.NetworkStream):
    """A network stream whose socket (its TLS socket after `start_tls`) is kept for `abort`."""

    def __init__(self, inner: httpcore.NetworkStream, kept: OpenSockets):
        self._inner = inner
        self._kept = kept
        kept.add(inner.get_extra_info("socket"))

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout), self._kept)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class OpenSockets(httpcore.NetworkBackend):
    """A network backend that remembers the sockets it opened, to shut them down at once."""

    def __init__(self, inner: httpcore.NetworkBackend):
        self._inner = inner
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()

    def add(self, sock: Any) -> None:
        if isinstance(sock, socket.socket):
            with self._lock:
                self._sockets.add(sock)

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(*args, **kwargs), self)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(*args, **kwargs), self)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)

    def abort(self) -> int:
        """Shuts down every open socket; the reads waiting on them end. Returns how many."""
        with self._lock:
            open_now = list(self._sockets)
        cut = 0
        for sock in open_now:
            with contextlib.suppress(OSError, ValueError):  # closed meanwhile
                sock.shutdown(socket.SHUT_RDWR)
                cut += 1
        return cut


def install(transport: Any) -> OpenSockets | None:
    """Wraps the network backend of an `httpx.HTTPTransport`'s pool; None where it has none."""
    pool = getattr(transport, "_pool", None)
    inner = getattr(pool, "_network_backend", None)
    if not isinstance(inner, httpcore.NetworkBackend):
        return None
    kept = OpenSockets(inner)
    pool._network_backend = kept  # type: ignore[union-attr]
    return kept
