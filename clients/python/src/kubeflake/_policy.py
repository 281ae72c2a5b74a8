"""What the sync and asyncio clients share: where the sidecar is, the settings, how a
batch size adapts and how long to wait before asking again (clients/SPEC.md)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

DEFAULT_URL = "http://127.0.0.1:7070"


@dataclass(frozen=True)
class Endpoint:
    """Where the sidecar answers: a Unix socket path, or a host and port."""

    socket: str | None = None
    host: str = "127.0.0.1"
    port: int = 7070

    @property
    def transport(self) -> str:
        return "unix" if self.socket else "tcp"

    def __str__(self) -> str:
        return f"unix:{self.socket}" if self.socket else f"http://{self.host}:{self.port}"

    @classmethod
    def resolve(cls, url: str | None = None, socket: str | None = None) -> "Endpoint":
        """The explicit arguments first, then KUBEFLAKE_SOCKET (when set and not empty),
        then KUBEFLAKE_URL, then the sidecar's default address. A socket, when chosen, is
        the only transport: there is no silent fallback to TCP."""
        if socket:
            return cls(socket=socket)
        if url is None:
            env_socket = os.environ.get("KUBEFLAKE_SOCKET")
            if env_socket:
                return cls(socket=env_socket)
            url = os.environ.get("KUBEFLAKE_URL") or DEFAULT_URL
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(
                f"KUBEFLAKE_URL must look like http://127.0.0.1:7070, not {url!r} "
                "(the sidecar speaks plain HTTP on loopback)")
        return cls(host=parts.hostname, port=parts.port or 80)


@dataclass(frozen=True)
class Settings:
    """Every knob, with the defaults of clients/SPEC.md."""

    prefetch: bool = True          # False: every next() is one request
    max_age: float | None = 1.0    # seconds a buffered Snowflake ID may wait; None: forever
    max_wait: float = 5.0          # the bound on one call, retries and waits included
    request_timeout: float = 2.0   # one HTTP exchange
    min_batch: int = 64
    max_batch: int = 10_000
    max_range: int = 1_000_000     # the largest segment refill from /range (the sidecar's --max-range)
    refill_period: float = 0.1     # the batch size aims at one refill per this many seconds

    def __post_init__(self) -> None:
        if not 1 <= self.min_batch <= self.max_batch:
            raise ValueError(f"need 1 <= min_batch <= max_batch, got {self.min_batch} and {self.max_batch}")
        if self.max_range < self.min_batch:
            raise ValueError(f"need min_batch <= max_range, got {self.min_batch} and {self.max_range}")
        if self.max_wait < 0 or self.request_timeout <= 0:
            raise ValueError("max_wait must be >= 0 and request_timeout > 0 (seconds)")
        if self.max_age is not None and self.max_age <= 0:
            raise ValueError("max_age must be > 0 seconds, or None for no limit")


def next_batch_size(current: int, lasted: float | None, settings: Settings, ceiling: int | None = None) -> int:
    """Leaf's rule: double the batch when the last one lasted under half the refill
    period, halve it when it lasted over four periods; within [min_batch, ceiling]
    (default max_batch)."""
    size = current
    if lasted is not None:
        if lasted < settings.refill_period / 2:
            size = current * 2
        elif lasted > settings.refill_period * 4:
            size = current // 2
    return max(settings.min_batch, min(settings.max_batch if ceiling is None else ceiling, size))


def low_water(batch: int) -> int:
    """Refill when the buffer holds this many IDs or fewer: half a batch, until refills are
    measured, and the floor of the safe distance's mark after (kubeflake._pace)."""
    return batch // 2


def backoff(previous: float) -> float:
    """The next wait after a failure that named no Retry-After: 50 ms doubling to 1 s."""
    return 0.05 if previous <= 0 else min(previous * 2, 1.0)


def parse_ids(body: bytes, what: str) -> list[int]:
    """The IDs of an /id or /ids answer, one decimal per line. A batch of 10,000 is parsed
    on the refill thread, which shares the GIL with the callers: the common form (digits
    and newlines only) goes through json's C parser, about a third cheaper than int() per
    line; anything else through int() per line, which says what is wrong."""
    import json

    from .errors import ProtocolError

    text = body.strip(b"\n")
    ids = None
    if text and not text.translate(None, b"0123456789\n"):
        try:
            ids = json.loads(b"[" + text.replace(b"\n", b",") + b"]")
        except ValueError:
            ids = None  # empty lines or leading zeros: the line by line parse below
    if ids is None:
        try:
            ids = [int(line) for line in body.split(b"\n") if line]
        except ValueError:
            raise ProtocolError(f"{what}: the answer is not decimal IDs, one per line") from None
        if any(v < 0 for v in ids):
            raise ProtocolError(f"{what}: the answer holds no ID or one outside 0..2^63-1")
    if not ids or max(ids) >= 2**63:
        raise ProtocolError(f"{what}: the answer holds no ID or one outside 0..2^63-1")
    return ids


def parse_range(body: bytes, asked: int, what: str) -> range:
    """The values of a /range answer, `{"first":"F","count":n}`: F to F+n-1, with
    1 <= n <= asked and every value below 2^63. Anything else is a ProtocolError."""
    import json

    from .errors import ProtocolError

    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    first = doc.get("first") if isinstance(doc, dict) else None
    count = doc.get("count") if isinstance(doc, dict) else None
    if (not isinstance(first, str) or not first.isascii() or not first.isdigit()
            or type(count) is not int or not 1 <= count <= asked):
        raise ProtocolError(f"{what}: the answer is not {{\"first\":\"F\",\"count\":n}} with 1 <= n <= {asked}")
    start = int(first)
    if start + count > 2**63:
        raise ProtocolError(f"{what}: the range from {start} of {count} values passes 2^63-1")
    return range(start, start + count)


def mode_from_readyz(doc: dict) -> str | None:
    """'snowflake', 'segment' or 'strict' from a /readyz body; None while the sidecar
    cannot tell yet (it waits for a slot, or a segment sidecar is not ready)."""
    phase = doc.get("phase")
    if phase == "snowflake":
        return "snowflake"
    if phase == "segment" and "strict" in doc:
        return "strict" if doc["strict"] else "segment"
    return None
