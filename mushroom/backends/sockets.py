"""HTTP requests in flight that can be cut short from another thread.

A blocking read on a socket is not woken when another thread closes the client (httpx's
`Client.close()` returns at once while the read waits out its 600 s timeout). So a Ctrl-C,
or a circuit breaker that found the server hung, waited for every request in flight: the
process could not exit before they ended (a thread pool's workers are joined at exit).
Here every connection's socket is kept (weakly) and `abort()` shuts them down, which wakes
the reads with a closed connection.

httpx takes no network backend, so the one of each connection pool of a client (its own,
and those of the proxies it mounts from the environment) is wrapped; where an httpx release
moves those attributes, `install` returns None and requests are waited for, as before,
instead of failing.
"""

from __future__ import annotations

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


class _Backend(httpcore.NetworkBackend):
    """One pool's network backend, its sockets kept in the client's `OpenSockets`."""

    def __init__(self, inner: httpcore.NetworkBackend, kept: OpenSockets):
        self._inner = inner
        self._kept = kept

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_tcp(*args, **kwargs), self._kept)

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
        return _Stream(self._inner.connect_unix_socket(*args, **kwargs), self._kept)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class OpenSockets:
    """The sockets a client opened, to shut them down at once.

    After `abort()`, a socket opened by a request that was still connecting is shut down as
    soon as it is added (it would otherwise wait out its read timeout), until `resume()`.
    """

    def __init__(self) -> None:
        self._sockets: weakref.WeakSet[socket.socket] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._cutting = False

    def add(self, sock: Any) -> None:
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            self._sockets.add(sock)
            cutting = self._cutting
        if cutting:
            _shut(sock)

    def abort(self) -> int:
        """Shuts down every open socket, and those opened from now until `resume`. Returns how many."""
        with self._lock:
            self._cutting = True
            open_now = list(self._sockets)
        return sum(_shut(sock) for sock in open_now)

    def resume(self) -> None:
        """Sockets opened from now on are left open."""
        with self._lock:
            self._cutting = False


def _shut(sock: socket.socket) -> bool:
    """Shuts a socket down for reading and writing; False when it was closed already.

    `socket.socket.shutdown` itself: a TLS socket's own method drops its SSL object, and a
    worker reading it then gets a ValueError that httpx does not wrap.
    """
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except (OSError, ValueError):
        return False
    return True


def install(client: Any) -> OpenSockets | None:
    """Keeps the sockets of every connection pool of an `httpx.Client`; None where it has none."""
    transports = [getattr(client, "_transport", None), *getattr(client, "_mounts", {}).values()]
    pools = [getattr(t, "_pool", None) for t in transports if t is not None]
    backends = [getattr(p, "_network_backend", None) for p in pools]
    if not pools or not all(isinstance(b, httpcore.NetworkBackend) for b in backends):
        return None
    kept = OpenSockets()
    for pool, backend in zip(pools, backends):
        pool._network_backend = _Backend(backend, kept)  # type: ignore[union-attr]
    return kept
