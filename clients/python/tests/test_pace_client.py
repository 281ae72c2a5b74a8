"""clients/SPEC.md, "a safe distance", wired into both clients (the Go client's
TestASnowflakeCallerFindingTheBufferEmptyDoublesTheSafeDistance): every refill is measured,
the time the buffer was empty left out, and a caller that finds the buffer empty, once the
rate is measured, doubles the distance and moves the mark by the Snowflake rule, max_age
included. No timing: a fake Snowflake sidecar answers two refills at once and holds the
third until released. Then "Maximum age" against a real sidecar, however far ahead the
mark keeps the buffer (the Go client's TestSnowflakeIDsAreNeverHandedOutOlderThanMaxAge)."""

from __future__ import annotations

import asyncio
import http.server
import threading
import time
from urllib.parse import parse_qs, urlsplit

import pytest

import kubeflake
from kubeflake import _pace
from kubeflake._pace import MIN_DISTANCE
from kubeflake.aio import AsyncClient


class _Gated(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        s = self.server
        parts = urlsplit(self.path)
        if parts.path == "/readyz":
            return self._reply(b'{"status":"ready","mode":"Snowflake","strict":false,"phase":"snowflake"}')
        if parts.path != "/ids":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        with s.lock:
            s.answered += 1
            held = s.answered > s.open
        if held:
            s.gate.wait(30)
        count = int(parse_qs(parts.query)["count"][0])
        with s.lock:
            ids = range(s.next, s.next + count)
            s.next += count
        return self._reply("".join(f"{v}\n" for v in ids).encode())

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client closing its kept connection when done


@pytest.fixture
def gated():
    server = _Server(("127.0.0.1", 0), _Gated)
    server.lock, server.gate = threading.Lock(), threading.Event()
    server.open, server.answered, server.next = 2, 0, 1
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, f"http://127.0.0.1:{server.server_address[1]}"
    server.gate.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def arrivals(monkeypatch):
    """Every refill arrival's `empty` argument, in order."""
    seen: list[float] = []
    arrived = _pace.Pace.arrived

    def watched(self, now, took, handed_out, empty=0.0):
        seen.append(empty)
        return arrived(self, now, took, handed_out, empty)

    monkeypatch.setattr(_pace.Pace, "arrived", watched)
    return seen


SETTINGS = dict(min_batch=100, max_batch=100, max_age=1.0, max_wait=10.0)


def _set_measures(sizer) -> None:
    """1,000 IDs/s and a slowest refill of 150 ms: the mark at distance 2 is 300, at 4 600,
    and within half of max_age (1 s) at the rate, less a batch: 400."""
    assert sizer.pace._arrivals == 2 and sizer.pace.distance == MIN_DISTANCE, "two refills measured"
    sizer.pace.rate, sizer.pace.slow, sizer.low = 1000.0, 0.150, 300


def _check_after_wait(sizer) -> None:
    assert sizer.pace.distance == 2 * MIN_DISTANCE, "a caller found the buffer empty: the distance doubles"
    assert sizer.low == 400, "4 x 150 ms x 1,000/s = 600, within half of max_age at the rate less a batch"


def _check_empty_left_out(arrivals: list[float]) -> None:
    """The third refill arrived after the buffer was empty for at least the 20 ms the test
    held it after the wait: the rate leaves that time out."""
    assert len(arrivals) >= 3 and arrivals[2] >= 0.02, f"the arrivals' empty times: {arrivals}"


def test_a_caller_finding_the_buffer_empty_doubles_the_safe_distance(gated, arrivals):
    server, url = gated
    with kubeflake.Client(url=url, **SETTINGS) as ids:
        for _ in range(200):  # the two answered batches
            ids.next()
        with ids._cond:
            _set_measures(ids._sizer)
            waits = ids._stats.waits
        got: list[int] = []
        caller = threading.Thread(target=lambda: got.append(ids.next()))
        caller.start()  # finds the buffer empty: the third refill is held
        deadline = time.monotonic() + 10
        while ids.stats().waits == waits:
            assert time.monotonic() < deadline and not got, "the caller did not wait on the held refill"
            time.sleep(0.001)
        with ids._cond:
            _check_after_wait(ids._sizer)
        time.sleep(0.02)
        server.gate.set()
        caller.join(10)
        assert got == [201]
    _check_empty_left_out(arrivals)


def test_an_async_caller_finding_the_buffer_empty_doubles_the_safe_distance(gated, arrivals):
    server, url = gated

    async def main():
        async with AsyncClient(url=url, **SETTINGS) as ids:
            for _ in range(200):
                await ids.next()
            _set_measures(ids._sizer)
            waits = ids._stats.waits
            caller = asyncio.get_running_loop().create_task(ids.next())
            deadline = time.monotonic() + 10
            while ids._stats.waits == waits:
                assert time.monotonic() < deadline and not caller.done(), "the caller did not wait"
                await asyncio.sleep(0.001)
            _check_after_wait(ids._sizer)
            await asyncio.sleep(0.02)
            server.gate.set()
            return await caller

    assert asyncio.run(main()) == 201
    _check_empty_left_out(arrivals)


MAX_AGE = 0.020


def _check_age(layout, began: float, value: int, burst: int) -> None:
    """The age is taken when the call began: the buffer checks a batch's age (from when its
    request was sent, before any of its IDs' times) after that moment, so the bound holds
    however long the caller is descheduled; the slack is the ID's time unit and the clocks'
    spread, not the machine's load (the Go client's test of the same bound)."""
    age = began - layout.decode(value).time.timestamp()
    slack = layout.time_unit.total_seconds() + 0.005
    assert age <= MAX_AGE + slack, f"burst {burst}: ID {value} was {age * 1000:.1f} ms old when its call began"


def test_snowflake_ids_are_never_handed_out_older_than_max_age_however_far_ahead_the_mark(sidecar):
    """clients/SPEC.md, "Maximum age", with the safe distance's larger buffer: bursts of
    calls with pauses longer than max_age between them, every ID younger than max_age when
    its call began."""
    with kubeflake.Client(socket=sidecar.socket, max_age=MAX_AGE) as ids:
        layout = ids.layout()
        for burst in range(4):
            for _ in range(20_000):
                began = time.time()
                _check_age(layout, began, ids.next(), burst)
            time.sleep(0.3)
        assert ids.stats().expired > 0, "no buffered ID expired across pauses: the test did not test the bound"


def test_async_snowflake_ids_are_never_handed_out_older_than_max_age(sidecar):
    async def main():
        async with AsyncClient(socket=sidecar.socket, max_age=MAX_AGE) as ids:
            layout = await ids.layout()
            for burst in range(4):
                for _ in range(20_000):
                    began = time.time()
                    _check_age(layout, began, await ids.next(), burst)
                await asyncio.sleep(0.3)
            return ids.stats().expired

    assert asyncio.run(main()) > 0, "no buffered ID expired across pauses: the test did not test the bound"
