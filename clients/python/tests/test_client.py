"""The sync and asyncio clients against a real standalone sidecar (and one fake sidecar,
named so, for the answer a standalone sidecar never gives)."""

import asyncio
import http.server
import threading

import pytest

import kubeflake
from kubeflake.aio import AsyncClient


def test_ids_from_the_buffer_are_unique_and_increase_across_threads(sidecar):
    with kubeflake.Client(socket=sidecar.socket) as ids:
        taken: list[list[int]] = [[] for _ in range(8)]

        def work(n):
            for _ in range(5000):
                taken[n].append(ids.next())

        threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        everything = [v for part in taken for v in part]
        assert len(set(everything)) == 40000
        assert all(part == sorted(part) for part in taken)
        stats = ids.stats()
        assert stats.ids == 40000 and stats.refills < 40000 / 64


def test_the_batch_grows_under_a_steady_demand(sidecar):
    with kubeflake.Client(url=sidecar.url) as ids:
        for _ in range(50000):
            ids.next()
        assert ids.stats().batch_size > 64


def test_without_prefetch_every_id_is_one_request(sidecar):
    with kubeflake.Client(url=sidecar.url, prefetch=False) as ids:
        a, b = ids.next(), ids.next()
        assert a < b and ids.stats().direct == 2 and ids.stats().refills == 0


def test_next_after_is_above_after_and_bypasses_the_buffer(sidecar):
    with kubeflake.Client(url=sidecar.url) as ids:
        first = ids.next()
        layout = ids.layout()
        after = layout.compose(tick=layout.decode(first).tick + 200, worker=1023, sequence=4095)
        assert ids.next_after(after) > after
        assert ids.stats().direct == 1


def test_decode_agrees_with_the_sidecar(sidecar):
    with kubeflake.Client(url=sidecar.url) as ids:
        value = ids.next()
        local, remote = ids.decode(value), ids.decode_remote(value)
        assert (local.tick, local.worker, local.sequence) == (remote["tick"], remote["worker"], remote["sequence"])
        assert local.worker == 7


def test_a_bad_after_is_a_bad_request(sidecar):
    with kubeflake.Client(url=sidecar.url) as ids:
        with pytest.raises(kubeflake.BadRequest, match="largest ID"):
            ids.next_after(2**63 - 1)


def test_no_sidecar_is_a_typed_error_within_the_bound(tmp_path):
    with kubeflake.Client(socket=str(tmp_path / "absent.sock"), max_wait=0.3) as ids:
        with pytest.raises(kubeflake.NoSidecar, match="absent.sock"):
            ids.next()
        assert ids.stats().errors == {"no_sidecar": 1}


def test_segment_values_come_out_in_order(segment_sidecar):
    with kubeflake.Client(socket=segment_sidecar.socket) as ids:
        values = [ids.next() for _ in range(3000)]
        assert ids.mode() == "segment"
        assert values == sorted(set(values))
        assert ids.layout() is None


def test_the_async_client_serves_tasks_from_one_buffer(sidecar):
    async def main():
        async with AsyncClient(socket=sidecar.socket) as ids:
            async def work():
                return [await ids.next() for _ in range(2000)]

            parts = await asyncio.gather(*(work() for _ in range(8)))
            after = await ids.next_after(max(max(p) for p in parts))
            decoded = await ids.decode(after)
            return parts, after, decoded, ids.stats()

    parts, after, decoded, stats = asyncio.run(main())
    everything = [v for p in parts for v in p]
    assert len(set(everything)) == 16000 and all(p == sorted(p) for p in parts)
    assert after > max(everything) and decoded.worker == 7
    assert stats.refills >= 1 and stats.direct == 1


def test_the_async_client_types_a_missing_sidecar(tmp_path):
    async def main():
        async with AsyncClient(socket=str(tmp_path / "absent.sock"), max_wait=0.3) as ids:
            await ids.next()

    with pytest.raises(kubeflake.NoSidecar):
        asyncio.run(main())


class _WaitingForSlot(http.server.BaseHTTPRequestHandler):
    """A fake sidecar, for the one answer a standalone sidecar never gives: a pod's sidecar
    that waits for the operator to give it a worker slot."""

    def do_GET(self):
        body = b'{"status":"not ready","phase":"waiting","reason":"no_slot","error":"no worker slot yet"}'
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def fake_sidecar_waiting_for_a_slot():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _WaitingForSlot)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_sidecar_waiting_for_a_slot_is_slot_lost_not_no_sidecar(fake_sidecar_waiting_for_a_slot):
    with kubeflake.Client(url=fake_sidecar_waiting_for_a_slot, max_wait=0.5) as ids:
        with pytest.raises(kubeflake.SlotLost, match="no worker slot yet") as raised:
            ids.next()
    assert raised.value.reason == "no_slot" and raised.value.retry_after == 1.0


def test_the_async_client_says_slot_lost_too(fake_sidecar_waiting_for_a_slot):
    async def main():
        async with AsyncClient(url=fake_sidecar_waiting_for_a_slot, max_wait=0.5) as ids:
            await ids.next()

    with pytest.raises(kubeflake.SlotLost, match="no worker slot yet"):
        asyncio.run(main())
