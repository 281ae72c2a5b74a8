"""The sync client: a prefetch buffer refilled by a background thread (clients/SPEC.md)."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field, replace

from . import _buffer, _fast, _policy, _runs
from ._sizer import Sizer
from ._http import TRANSPORT_ERRORS, Transport
from ._policy import Endpoint, Settings
from .errors import BadRequest, KubeflakeError, NoSidecar, ProtocolError, from_response, not_ready_yet
from .layout import Decoded, Layout, _decoded, _read_layout

_monotonic = time.monotonic
YIELD_EVERY = 64  # fast-path calls between two GIL releases while a refill is out


@dataclass
class Stats:
    """Counters of one client; names as in clients/SPEC.md, "Observability"."""

    ids: int = 0                 # IDs handed out by next()
    buffer_depth: int = 0        # IDs in the buffer now
    batch_size: int = 0          # the next refill's size
    refills: int = 0             # successful /ids requests of the buffer
    refill_seconds: float = 0.0  # their total duration
    refill_errors: int = 0
    waits: int = 0               # next() calls that found the buffer empty and waited
    wait_seconds: float = 0.0
    expired: int = 0             # buffered IDs dropped for being older than max_age
    direct: int = 0              # requests that bypass the buffer (after=, strict, no prefetch)
    errors: dict[str, int] = field(default_factory=dict)  # raised errors by kind


class _Requester:
    """The retry loop every request goes through: bounded by a deadline, honouring
    Retry-After, turning failures into typed errors."""

    def __init__(self, transport: Transport, settings: Settings):
        self.transport = transport
        self.settings = settings

    def raw(self, path: str, timeout: float):
        """One exchange, whatever its status; NoSidecar if none."""
        try:
            return self.transport.get(path, timeout)
        except TRANSPORT_ERRORS as e:
            raise NoSidecar(
                f"no kubeflake sidecar answered at {self.transport.endpoint} ({e.__class__.__name__}: {e}); "
                "check KUBEFLAKE_SOCKET / KUBEFLAKE_URL and that the sidecar runs") from e

    def once(self, path: str, timeout: float) -> bytes:
        """One attempt; raises the typed error of a failure."""
        response = self.raw(path, timeout)
        if response.status == 200:
            return response.body
        raise from_response(response.status, response.body, response.retry_after, path)

    def get(self, path: str, deadline: float) -> bytes:
        delay = 0.0
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self.once(path, max(0.001, min(self.settings.request_timeout, remaining)))
            except KubeflakeError as e:
                if not e.retryable:
                    raise
                wait = getattr(e, "retry_after", None)
                if wait is None:
                    delay = _policy.backoff(delay)
                    wait = delay
                remaining = deadline - time.monotonic()
                if wait > remaining:
                    raise  # waiting as asked would pass the bound: say so now
                time.sleep(wait)


class Client:
    """IDs from the kubeflake sidecar.

    `next()` serves from a buffer that a background thread refills from `/ids?count=N`;
    `next_after()` and every call on a strict sequence go to the sidecar directly. Safe to
    share between threads. Use as a context manager or call `close()`.
    """

    def __init__(self, url: str | None = None, socket: str | None = None, **settings):
        self.endpoint = Endpoint.resolve(url, socket)
        self.settings = Settings(**settings)
        self._transport = Transport(self.endpoint)
        self._req = _Requester(self._transport, self.settings)
        self._cond = threading.Condition(threading.Lock())
        self._sizer = Sizer(self.settings)
        self._no_ranges = False  # the sidecar answered 404 to /range (0.1.0): refills ask /ids
        self._want = False
        self._empty_since: float | None = None  # a caller found the buffer empty since the last refill
        self._refill_error: KubeflakeError | None = None
        self._retry_at = 0.0
        self._mode: str | None = None
        self._layout: Layout | None | bool = False  # False: not read yet
        self._thread: threading.Thread | None = None
        self._closed = False
        self._stats = Stats(batch_size=self._sizer.batch)
        self._buffer = _fast.FastBuffer()
        self._lock_free = _fast.lock_free()
        self._fast = _fast.SLOW  # (until, take) of next()'s lock-free path; see kubeflake._fast

    # -- the buffer --------------------------------------------------------------------

    def next(self) -> int:
        """The next ID. Raises a KubeflakeError subclass when none can be had within
        `max_wait` seconds."""
        # The steady state takes no lock (kubeflake._fast says why that is safe): one C
        # call takes an ID, and the clock, read after it, proves its batch still fresh.
        until, take = self._fast
        value = take()
        if value is not None and _monotonic() < until:
            return value
        return self._next_slow(value)

    def _next_slow(self, taken: int | None) -> int:
        """next() under the lock: the first call, the next batch, the mark, waits."""
        if self._mode is None and self.settings.prefetch:
            try:
                self.mode()
            except KubeflakeError as e:
                with self._cond:
                    self._count(e)
                raise
        if not self.settings.prefetch or self._mode == "strict":
            return self._direct("/id")
        cond = self._cond
        max_age = self.settings.max_age if self._mode == "snowflake" else None
        with cond:
            if taken is not None:
                self._buffer.expired += 1  # taken by the fast path after its batch expired
            started = None
            while True:
                value = self._buffer.take(time.monotonic(), max_age)
                if value is not None:
                    depth = self._buffer.depth()
                    if not self._want and depth <= self._sizer.low:
                        self._ask_refill()
                    if started is not None:
                        self._stats.wait_seconds += time.monotonic() - started
                    # While a refill is out, the fast path comes back here every
                    # YIELD_EVERY calls, to let the refill thread run (below).
                    refilling = self._want
                    budget = YIELD_EVERY if refilling else depth - self._sizer.low
                    if self._lock_free:
                        self._fast = self._buffer.fast(budget, max_age)
                    break
                if self._closed:
                    raise KubeflakeError("the client is closed")
                now = time.monotonic()
                if started is None:
                    started = now
                    self._stats.waits += 1
                    # The mark was too low for the refills' spread: a safe distance further ahead.
                    self._sizer.waited()
                    if self._empty_since is None:
                        self._empty_since = now
                self._ask_refill()
                error = self._refill_error
                if error is not None and not error.retryable:
                    self._count(error)
                    raise error
                try:
                    remaining = _buffer.wait_left(started, now, self.settings.max_wait, error,
                                                  self._retry_at, self.endpoint)
                except KubeflakeError as out_of_time:
                    self._stats.wait_seconds += now - started
                    self._count(out_of_time)
                    raise
                cond.wait(remaining)
        if refilling:
            # A caller taking IDs in a tight loop holds the GIL between the interpreter's
            # switches (5 ms), longer than a refill: the refill thread, ready with its
            # answer, would wait that long, and the buffer run dry. Releasing the GIL here
            # lets it run (the Node client yields the same way). Not os.sched_yield(): it
            # returns before the refill thread wakes, the caller takes the GIL back, and
            # segment refills then starve (measured: 143,000 IDs/s instead of 2 million).
            time.sleep(0)
        return value

    def _ask_refill(self) -> None:
        self._want = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._refill_loop, name="kubeflake-refill", daemon=True)
            self._thread.start()
        self._cond.notify_all()

    def _refill_loop(self) -> None:
        delay = 0.0
        cond = self._cond
        while True:
            with cond:
                while not self._want and not self._closed:
                    cond.wait()
                if self._closed:
                    return
                ranges = self._mode == "segment" and not self._no_ranges
                size = self._sizer.request(ranges)
            started = time.monotonic()
            try:
                if self.mode() != "segment":
                    ranges = False
                if ranges:
                    got = self._range(size)
                    if got is None:
                        with cond:
                            self._no_ranges = True  # a 0.1.0 sidecar: /ids from now on
                        continue
                    parts = [got]
                else:
                    # Runs of consecutive IDs (ranges), cheaper to parse and to hold.
                    parts = _runs.parse_runs(
                        self._req.once(f"/ids?count={size}", self.settings.request_timeout), "/ids")
            except BadRequest as e:
                with cond:
                    # A sidecar with a smaller --max-batch (--max-range): ask for fewer.
                    if not self._sizer.too_large(size, ranges):
                        self._refill_error = e
                        cond.notify_all()
                continue
            except KubeflakeError as e:
                with cond:
                    self._refill_error = e
                    self._stats.refill_errors += 1
                    cond.notify_all()
                    wait = getattr(e, "retry_after", None)
                    if wait is None:
                        delay = _policy.backoff(delay)
                        wait = delay
                    self._retry_at = time.monotonic() + wait
                    if not e.retryable:
                        self._want = False
                        continue
                    # Wait as asked; next() calls' notifications do not cut it short.
                    while not self._closed and (left := self._retry_at - time.monotonic()) > 0:
                        cond.wait(left)
                continue
            done = time.monotonic()
            delay = 0.0
            with cond:
                # One refill at a time, appended in the order fetched: segment values
                # leave the buffer in the order the sidecar issued them.
                for part in parts:
                    self._buffer.add(started, part)
                self._stats.refills += 1
                self._stats.refill_seconds += done - started
                segment = self._mode == "segment"
                empty = 0.0 if self._empty_since is None else max(0.0, done - self._empty_since)
                self._empty_since = None
                self._sizer.refilled(done, done - started, self._buffer.handed_out(), segment,
                                     segment and not self._no_ranges, empty)
                self._stats.batch_size = self._sizer.batch
                self._refill_error = None
                self._want = self._buffer.depth() <= self._sizer.low
                cond.notify_all()

    def _range(self, size: int) -> range | None:
        """One /range refill of at most `size` values; None when the sidecar has no
        /range (a 404: a 0.1.0 sidecar)."""
        path = f"/range?count={size}"
        response = self._req.raw(path, self.settings.request_timeout)
        if response.status == 404:
            return None
        if response.status != 200:
            raise from_response(response.status, response.body, response.retry_after, path)
        return _policy.parse_range(response.body, size, path)

    # -- requests that bypass the buffer ----------------------------------------------

    def _deadline(self) -> float:
        return time.monotonic() + self.settings.max_wait

    def _direct(self, path: str) -> int:
        with self._cond:
            self._stats.direct += 1
        try:
            ids = _policy.parse_ids(self._req.get(path, self._deadline()), path)
        except KubeflakeError as e:
            with self._cond:
                self._count(e)
            raise
        return ids[0]

    def next_after(self, after: int) -> int:
        """An ID greater than `after`, whichever pod issued it (docs/api.md, `after`).
        Never from the buffer: a buffered ID may be below `after`."""
        if not 0 <= after < 2**63:
            raise ValueError(f"after must be an ID (0 <= after < 2^63), got {after}")
        return self._direct(f"/id?after={after}")

    def next_batch(self, count: int) -> list[int]:
        """`count` IDs in increasing order in one request, not from the buffer."""
        return _policy.parse_ids(self._req.get(f"/ids?count={count}", self._deadline()), "/ids")

    def mode(self) -> str:
        """'snowflake', 'segment' or 'strict', read once from the sidecar's /readyz (its
        `phase`, and `strict` once a segment sidecar is ready)."""
        if self._mode is None:
            deadline = self._deadline()
            delay = 0.0
            while True:
                try:
                    response = self._req.raw("/readyz", self.settings.request_timeout)
                    if response.status not in (200, 503):
                        raise from_response(response.status, response.body, response.retry_after, "/readyz")
                    doc = _json(response.body, "/readyz")
                    mode = _policy.mode_from_readyz(doc)
                    if mode is not None:
                        self._mode = mode
                        break
                    error: KubeflakeError = not_ready_yet(str(self.endpoint), response.status, doc,
                                                          response.retry_after)
                except NoSidecar as e:
                    error = e
                delay = _policy.backoff(delay)
                wait = getattr(error, "retry_after", None) or delay
                if time.monotonic() + wait > deadline:
                    raise error
                time.sleep(wait)
        return self._mode

    # -- decode ------------------------------------------------------------------------

    def layout(self) -> Layout | None:
        """The sequence's layout, read once from the sidecar; None for segment mode and
        for layouts with a key form (then `decode` asks the sidecar)."""
        if self._layout is False:
            self._layout = _read_layout(lambda path: _json(self._req.get(path, self._deadline()), path))
        return self._layout

    def decode(self, value: int) -> Decoded:
        """An ID's fields, computed locally from the layout (agrees with /decode)."""
        layout = self.layout()
        if layout is None:
            return _decoded(self.decode_remote(value))
        return layout.decode(value)

    def decode_remote(self, value: int) -> dict:
        """The sidecar's own /decode answer."""
        return _json(self._req.get(f"/decode/{value}", self._deadline()), "/decode")

    # -- the rest ----------------------------------------------------------------------

    def stats(self) -> Stats:
        with self._cond:
            buffer = self._buffer
            return replace(self._stats, ids=buffer.handed_out(), buffer_depth=buffer.depth(), expired=buffer.expired,
                           errors=dict(self._stats.errors))

    def _count(self, error: KubeflakeError) -> None:
        self._stats.errors[error.kind] = self._stats.errors.get(error.kind, 0) + 1

    def close(self) -> None:
        """Stops the refill thread; buffered IDs are dropped (gaps, never reused)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.request_timeout + 1)
        self._transport.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _json(body: bytes, what: str) -> dict:
    try:
        doc = json.loads(body)
    except ValueError:
        raise ProtocolError(f"{what}: the answer is not JSON") from None
    if not isinstance(doc, dict):
        raise ProtocolError(f"{what}: the answer is not a JSON object")
    return doc
