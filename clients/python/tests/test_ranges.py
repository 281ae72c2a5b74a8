"""clients/SPEC.md, "Ranges in segment mode" and "Range refills are sized and timed so
that no caller waits": segment refills are ranges from /range, a sidecar without /range
(0.1.0, a 404) is asked /ids for the client's life, and the refill's size and low-water
mark follow the measured rate."""

from __future__ import annotations

import asyncio
import http.server
import json
import re
import sys
import threading
import urllib.request
from urllib.parse import parse_qs, urlsplit

import pytest

import kubeflake
from kubeflake import _policy
from kubeflake._policy import Settings
from kubeflake._pace import Pace
from kubeflake._sizer import Sizer
from kubeflake.aio import AsyncClient
from kubeflake.errors import ProtocolError


def answered(url: str, route: str) -> int:
    """The sidecar's count of 200 answers to `route` (its /metrics)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=5) as r:
        text = r.read().decode()
    m = re.search(r'kubeflake_http_requests_total\{code="200",route="' + route + r'"\} (\d+)', text)
    return int(m.group(1)) if m else 0


def test_segment_refills_are_ranges_and_every_value_comes_once_in_order(segment_sidecar):
    ids_before = answered(segment_sidecar.url, "ids")
    ranges_before = answered(segment_sidecar.url, "range")
    with kubeflake.Client(socket=segment_sidecar.socket) as ids:
        values = [ids.next() for _ in range(20_000)]
        assert ids.stats().ids == 20_000

    async def main():
        async with AsyncClient(socket=segment_sidecar.socket) as ids:
            return [await ids.next() for _ in range(20_000)]

    later = asyncio.run(main())
    assert values == sorted(set(values)) and later == sorted(set(later))
    assert later[0] > values[-1], "the second client's values come after the first's"
    assert answered(segment_sidecar.url, "range") > ranges_before, "the refills asked /range"
    assert answered(segment_sidecar.url, "ids") == ids_before, "and never /ids"


class _FakeSidecar(http.server.BaseHTTPRequestHandler):
    """A segment sidecar in one process: `server.ranges` False is a 0.1.0 sidecar (404 to
    /range; /ids values with a gap after every multiple of 7), else /range answers
    min(count, server.cap) values and 400 above server.max."""

    protocol_version = "HTTP/1.1"

    def do_GET(self):
        s = self.server
        parts = urlsplit(self.path)
        count = int(parse_qs(parts.query).get("count", ["0"])[0])
        with s.lock:
            if parts.path == "/readyz":
                self._reply(200, b'{"status":"ready","mode":"Segment","strict":false,"phase":"segment"}')
            elif parts.path == "/range" and s.ranges:
                s.asked.append(count)
                if count > s.max:
                    self._reply(400, json.dumps({"error": f"count must be a whole number from 1 to {s.max}"}).encode())
                    return
                n = min(count, s.cap)
                self._reply(200, json.dumps({"first": str(s.next), "count": n}).encode())
                s.next += n
            elif parts.path == "/ids" and not s.ranges:
                out = []
                for _ in range(count):
                    out.append(s.next)
                    s.next += 3 if s.next % 7 == 0 else 1
                self._reply(200, "".join(f"{v}\n" for v in out).encode())
            else:
                if parts.path == "/range":
                    s.range_404s += 1
                self._reply(404, json.dumps({"error": f"no route {parts.path}"}).encode())

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class _Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        """A client closing its kept connection when done is not an error of the test."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@pytest.fixture
def fake():
    def start(ranges: bool, cap: int = 1 << 40, max: int = 1 << 40, first: int = 1000):
        server = _Server(("127.0.0.1", 0), _FakeSidecar)
        server.lock = threading.Lock()
        server.ranges, server.cap, server.max, server.next = ranges, cap, max, first
        server.asked, server.range_404s = [], 0
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}"

    servers = []
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _expected_old_values(n: int) -> list[int]:
    out, v = [], 1000
    for _ in range(n):
        out.append(v)
        v += 3 if v % 7 == 0 else 1
    return out


def test_a_sidecar_without_range_answering_404_is_asked_for_ids_and_its_values_served_in_order(fake):
    server, url = fake(ranges=False)
    with kubeflake.Client(url=url) as ids:
        values = [ids.next() for _ in range(3000)]
    assert values == _expected_old_values(3000), "the values of /ids, in their order, none skipped"
    assert server.range_404s == 1, "/range was asked once, then never again"


def test_the_async_client_falls_back_to_ids_on_a_404_too(fake):
    server, url = fake(ranges=False)

    async def main():
        async with AsyncClient(url=url) as ids:
            return [await ids.next() for _ in range(3000)]

    assert asyncio.run(main()) == _expected_old_values(3000)
    assert server.range_404s == 1


@pytest.mark.parametrize("use_async", [False, True])
def test_range_refills_grow_past_max_batch_and_a_400_halves_max_range(fake, use_async):
    server, url = fake(ranges=True, max=1000, first=1)
    settings = dict(url=url, max_batch=100, max_range=4096)
    if use_async:
        async def main():
            async with AsyncClient(**settings) as ids:
                return [await ids.next() for _ in range(20_000)]
        values = asyncio.run(main())
    else:
        with kubeflake.Client(**settings) as ids:
            values = [ids.next() for _ in range(20_000)]
    assert values == list(range(1, 20_001))
    taken = [n for n in server.asked if n <= 1000]
    refused = [n for n in server.asked if n > 1000]
    assert max(taken) > 100, f"ranges above max_batch were asked: {server.asked}"
    assert 1 <= len(refused) <= 3, f"a 400 halved max_range until the sidecar took it: {server.asked}"


def test_a_range_answer_of_another_shape_is_a_protocol_error():
    for bad in [b'{"first":5,"count":3}', b'{"first":"5","count":0}', b'{"first":"5","count":11}',
                b'{"first":"-5","count":3}', b'{"first":"5"}', b'{"first":"9223372036854775807","count":2}',
                b'{"first":"9223372036854775806","count":3}', b"<html>", b'{"first":"+5","count":3}',
                b'{"first":"5","count":true}', b'[1,2]']:
        with pytest.raises(ProtocolError):
            _policy.parse_range(bad, 10, "/range?count=10")
    last = _policy.parse_range(b'{"first":"9223372036854775798","count":10}', 10, "/range")
    assert last == range(9223372036854775798, 2**63), "the last range of the sequence ends at 2^63-1"


def test_the_low_water_mark_is_half_a_batch_until_refills_are_measured():
    assert Pace().low_water(1000, 1_000_000) == 500


def test_the_low_water_mark_covers_two_slowest_recent_refills_at_the_measured_rate():
    p = Pace()
    p.arrived(1000.0, 0.0008, 0)
    p.arrived(1001.0, 0.0008, 10_000_000)  # 10M values/s; refills take 0.8 ms
    assert p.low_water(10_000, 1_000_000) == 16_000
    assert p.low_water(100_000, 1_000_000) == 50_000, "never below half the batch"
    assert p.low_water(10_000, 12_000) == 12_000, "never above the ceiling"


def test_the_refill_time_is_an_exponential_mean_giving_the_newest_a_quarter():
    p = Pace()
    p.arrived(1000.0, 0.004, 0)
    p.arrived(1001.0, 0.0, 1000)
    assert p.refill_seconds == pytest.approx(0.003)
    p.arrived(1003.0, 0.0, 5000)
    assert p.rate == 2000


def test_the_sizer_bounds_range_refills_by_max_range_and_ids_refills_by_max_batch():
    s = Sizer(Settings(max_batch=100, max_range=6400))
    now = 0.0
    for _ in range(20):
        now += 0.001  # each batch lasted 1 ms: double
        s.refilled(now, 0.00001, 0, segment=True, ranges=True)
    assert s.request(True) == 6400 and s.request(False) == 100
    assert s.too_large(6400, True)
    assert s.request(True) == 3200 and s.request(False) == 100
