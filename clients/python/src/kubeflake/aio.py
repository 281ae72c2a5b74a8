"""The asyncio client: the same behaviour as kubeflake.Client, refilled by a task.

    async with kubeflake.aio.AsyncClient() as ids:
        order_id = await ids.next()
"""

from __future__ import annotations

import asyncio
import time

from . import _buffer, _policy
from ._sizer import Sizer
from ._http import Response
from ._policy import Endpoint, Settings
from .client import Stats, _json
from .errors import BadRequest, KubeflakeError, NoSidecar, from_response, not_ready_yet
from .layout import Decoded, Layout, _decoded


class _Connection:
    """One kept-alive HTTP/1.1 connection on asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer

    async def get(self, path: str) -> tuple[Response, bool]:
        self.writer.write(f"GET {path} HTTP/1.1\r\nHost: kubeflake\r\nAccept: text/plain\r\n\r\n".encode())
        await self.writer.drain()
        status_line = await self.reader.readline()
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
            raise ConnectionError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if headers.get("transfer-encoding", "").lower() == "chunked":
            body = bytearray()
            while True:
                size = int((await self.reader.readline()).split(b";")[0], 16)
                if size == 0:
                    await self.reader.readline()
                    break
                body += await self.reader.readexactly(size)
                await self.reader.readexactly(2)
            body = bytes(body)
        else:
            body = await self.reader.readexactly(int(headers.get("content-length", "0")))
        keep = headers.get("connection", "").lower() != "close"
        return Response(status, body, headers.get("retry-after")), keep

    def close(self) -> None:
        self.writer.close()


class AsyncClient:
    """IDs from the kubeflake sidecar, for asyncio. `await next()` serves from a buffer a
    background task refills; `next_after()` and strict sequences go to the sidecar.
    Use within one event loop; `async with` or `await aclose()`."""

    def __init__(self, url: str | None = None, socket: str | None = None, **settings):
        self.endpoint = Endpoint.resolve(url, socket)
        self.settings = Settings(**settings)
        self._idle: list[_Connection] = []
        self._sizer = Sizer(self.settings)
        self._no_ranges = False  # the sidecar answered 404 to /range (0.1.0): refills ask /ids
        self._empty_since: float | None = None  # a caller found the buffer empty since the last refill
        self._refill_error: KubeflakeError | None = None
        self._retry_at = 0.0
        self._mode: str | None = None
        self._layout: Layout | None | bool = False
        self._task: asyncio.Task | None = None
        self._want: asyncio.Event | None = None
        self._filled: asyncio.Condition | None = None
        self._closed = False
        self._stats = Stats(batch_size=self._sizer.batch)
        self._buffer = _buffer.Buffer(self._stats)

    # -- transport ---------------------------------------------------------------------

    async def _raw(self, path: str, timeout: float) -> Response:
        conn = self._idle.pop() if self._idle else None
        reused = conn is not None
        while True:
            try:
                if conn is None:
                    if self.endpoint.socket:
                        opened = asyncio.open_unix_connection(self.endpoint.socket)
                    else:
                        opened = asyncio.open_connection(self.endpoint.host, self.endpoint.port)
                    conn = _Connection(*await asyncio.wait_for(opened, timeout))
                response, keep = await asyncio.wait_for(conn.get(path), timeout)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError) as e:
                if conn is not None:
                    conn.close()
                    conn = None
                if reused:
                    reused = False
                    continue
                raise NoSidecar(
                    f"no kubeflake sidecar answered at {self.endpoint} ({e.__class__.__name__}: {e}); "
                    "check KUBEFLAKE_SOCKET / KUBEFLAKE_URL and that the sidecar runs") from e
            if keep and len(self._idle) < 8:
                self._idle.append(conn)
            else:
                conn.close()
            return response

    async def _once(self, path: str, timeout: float) -> bytes:
        response = await self._raw(path, timeout)
        if response.status == 200:
            return response.body
        raise from_response(response.status, response.body, response.retry_after, path)

    async def _get(self, path: str, deadline: float) -> bytes:
        delay = 0.0
        while True:
            remaining = deadline - time.monotonic()
            try:
                return await self._once(path, max(0.001, min(self.settings.request_timeout, remaining)))
            except KubeflakeError as e:
                if not e.retryable:
                    raise
                wait = getattr(e, "retry_after", None)
                if wait is None:
                    delay = _policy.backoff(delay)
                    wait = delay
                if wait > deadline - time.monotonic():
                    raise
                await asyncio.sleep(wait)

    # -- the buffer --------------------------------------------------------------------

    async def next(self) -> int:
        """The next ID; a KubeflakeError subclass when none within `max_wait` seconds."""
        if self._mode is None and self.settings.prefetch:
            try:
                await self.mode()
            except KubeflakeError as e:
                self._count(e)
                raise
        if not self.settings.prefetch or self._mode == "strict":
            return await self._direct("/id")
        max_age = self.settings.max_age if self._mode == "snowflake" else None
        started = None
        while True:
            value = self._buffer.take(time.monotonic(), max_age)
            if value is not None:
                if self._stats.buffer_depth <= self._sizer.low:
                    self._ask_refill()
                if started is not None:
                    self._stats.wait_seconds += time.monotonic() - started
                return value
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
            async with self._filled:
                try:
                    await asyncio.wait_for(self._filled.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

    def _ask_refill(self) -> None:
        if self._task is None:
            self._want = asyncio.Event()
            self._filled = asyncio.Condition()
            self._task = asyncio.get_running_loop().create_task(self._refill_loop())
        self._want.set()

    async def _notify(self) -> None:
        async with self._filled:
            self._filled.notify_all()

    async def _refill_loop(self) -> None:
        delay = 0.0
        while not self._closed:
            await self._want.wait()
            if self._closed:
                return
            ranges = self._mode == "segment" and not self._no_ranges
            size = self._sizer.request(ranges)
            started = time.monotonic()
            try:
                if await self.mode() != "segment":
                    ranges = False
                if ranges:
                    ids = await self._range(size)
                    if ids is None:
                        self._no_ranges = True  # a 0.1.0 sidecar: /ids from now on
                        continue
                else:
                    ids = _policy.parse_ids(await self._once(f"/ids?count={size}", self.settings.request_timeout), "/ids")
            except BadRequest as e:
                # A sidecar with a smaller --max-batch (--max-range): ask for fewer.
                if not self._sizer.too_large(size, ranges):
                    self._refill_error = e
                    await self._notify()
                continue
            except KubeflakeError as e:
                self._refill_error = e
                self._stats.refill_errors += 1
                if not e.retryable:
                    await self._notify()
                    self._want.clear()
                    continue
                wait = getattr(e, "retry_after", None)
                if wait is None:
                    delay = _policy.backoff(delay)
                    wait = delay
                self._retry_at = time.monotonic() + wait
                await self._notify()
                await asyncio.sleep(wait)
                continue
            done = time.monotonic()
            delay = 0.0
            self._buffer.add(started, ids)  # in the order fetched (segment order)
            self._stats.refills += 1
            self._stats.refill_seconds += done - started
            segment = self._mode == "segment"
            empty = 0.0 if self._empty_since is None else max(0.0, done - self._empty_since)
            self._empty_since = None
            self._sizer.refilled(done, done - started, self._stats.ids, segment, segment and not self._no_ranges, empty)
            self._stats.batch_size = self._sizer.batch
            self._refill_error = None
            if self._stats.buffer_depth > self._sizer.low:
                self._want.clear()
            await self._notify()

    async def _range(self, size: int) -> range | None:
        """One /range refill of at most `size` values; None when the sidecar has no
        /range (a 404: a 0.1.0 sidecar)."""
        path = f"/range?count={size}"
        response = await self._raw(path, self.settings.request_timeout)
        if response.status == 404:
            return None
        if response.status != 200:
            raise from_response(response.status, response.body, response.retry_after, path)
        return _policy.parse_range(response.body, size, path)

    # -- the rest, as in kubeflake.Client ----------------------------------------------

    def _deadline(self) -> float:
        return time.monotonic() + self.settings.max_wait

    async def _direct(self, path: str) -> int:
        self._stats.direct += 1
        try:
            return _policy.parse_ids(await self._get(path, self._deadline()), path)[0]
        except KubeflakeError as e:
            self._count(e)
            raise

    async def next_after(self, after: int) -> int:
        if not 0 <= after < 2**63:
            raise ValueError(f"after must be an ID (0 <= after < 2^63), got {after}")
        return await self._direct(f"/id?after={after}")

    async def next_batch(self, count: int) -> list[int]:
        return _policy.parse_ids(await self._get(f"/ids?count={count}", self._deadline()), "/ids")

    async def mode(self) -> str:
        if self._mode is None:
            deadline = self._deadline()
            delay = 0.0
            while True:
                try:
                    response = await self._raw("/readyz", self.settings.request_timeout)
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
                await asyncio.sleep(wait)
        return self._mode

    async def layout(self) -> Layout | None:
        """As kubeflake.Client.layout: three /decode answers, read once."""
        if self._layout is False:
            async def decode(path: str) -> dict:
                return _json(await self._get(path, self._deadline()), path)

            zero = await decode("/decode/0")
            largest, total = None, 0
            if zero.get("mode") != "Segment":
                for total_bits in (63, 53):
                    try:
                        largest, total = await decode(f"/decode/{2**total_bits - 1}"), total_bits
                        break
                    except BadRequest:
                        continue
            if largest is None or "tick" not in largest:
                self._layout = None
            else:
                one_tick = await decode(f"/decode/{1 << (total - int(largest['tick']).bit_length())}")
                self._layout = Layout.from_decodes(zero, largest, total, one_tick)
        return self._layout

    async def decode(self, value: int) -> Decoded:
        layout = await self.layout()
        if layout is None:
            return _decoded(await self.decode_remote(value))
        return layout.decode(value)

    async def decode_remote(self, value: int) -> dict:
        return _json(await self._get(f"/decode/{value}", self._deadline()), "/decode")

    def stats(self) -> Stats:
        from dataclasses import replace

        return replace(self._stats, errors=dict(self._stats.errors))

    def _count(self, error: KubeflakeError) -> None:
        self._stats.errors[error.kind] = self._stats.errors.get(error.kind, 0) + 1

    async def aclose(self) -> None:
        self._closed = True
        if self._task is not None:
            self._want.set()
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        for conn in self._idle:
            conn.close()
        self._idle.clear()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
