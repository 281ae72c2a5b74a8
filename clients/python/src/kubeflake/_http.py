"""Kept-alive HTTP/1.1 to the sidecar over TCP or a Unix socket (standard library only)."""

from __future__ import annotations

import http.client
import socket
import threading
from dataclasses import dataclass

from ._policy import Endpoint

# What a failed exchange raises, whatever the transport: the caller turns it into NoSidecar.
TRANSPORT_ERRORS = (OSError, http.client.HTTPException)


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    retry_after: str | None


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float):
        super().__init__("kubeflake", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Transport:
    """A small pool of kept-alive connections, safe to share between threads."""

    def __init__(self, endpoint: Endpoint, pool_size: int = 8):
        self.endpoint = endpoint
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._pool_size = pool_size

    def _new(self, timeout: float) -> http.client.HTTPConnection:
        if self.endpoint.socket:
            return _UnixConnection(self.endpoint.socket, timeout)
        return http.client.HTTPConnection(self.endpoint.host, self.endpoint.port, timeout=timeout)

    def get(self, path: str, timeout: float) -> Response:
        """One GET. A kept-alive connection the sidecar closed meanwhile is retried once on
        a new one at once; any other failure raises one of TRANSPORT_ERRORS."""
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        if conn is None:
            conn = self._new(timeout)
        while True:
            try:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request("GET", path, headers={"Accept": "text/plain"})
                raw = conn.getresponse()
                body = raw.read()
                response = Response(raw.status, body, raw.getheader("Retry-After"))
            except TRANSPORT_ERRORS:
                conn.close()
                if reused:
                    reused = False
                    conn = self._new(timeout)
                    continue
                raise
            if raw.will_close:
                conn.close()
            else:
                with self._lock:
                    if len(self._idle) < self._pool_size:
                        self._idle.append(conn)
                        conn = None
                if conn is not None:
                    conn.close()
            return response

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()
