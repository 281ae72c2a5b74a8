"""The sync client's lock-free next() (kubeflake._fast): uniqueness across threads, the age
bound on an ID taken late, and the locked path where the GIL is off."""

import sys
import threading
import time

import kubeflake
from kubeflake import _fast


def _take_in_threads(ids: kubeflake.Client, threads: int, each: int) -> list[list[int]]:
    taken: list[list[int]] = [[] for _ in range(threads)]

    def work(n):
        append, take = taken[n].append, ids.next
        for _ in range(each):
            append(take())

    workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return taken


def test_sixteen_threads_through_the_fast_path_never_share_an_id(sidecar, segment_sidecar):
    """Small batches, so that the threads cross from one batch's iterator to the next, and
    into the locked path, thousands of times; a short switch interval, so that they are
    interrupted between the fast path's steps as often as the interpreter allows."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for where in (sidecar, segment_sidecar):
            with kubeflake.Client(socket=where.socket, min_batch=16, max_batch=256, max_range=256) as ids:
                taken = _take_in_threads(ids, 16, 10_000)
                everything = [v for part in taken for v in part]
                assert len(set(everything)) == len(everything) == 160_000
                assert all(part == sorted(part) for part in taken)
                assert ids.stats().ids == 160_000
    finally:
        sys.setswitchinterval(interval)


def test_an_id_the_fast_path_takes_after_its_batch_expired_is_dropped_not_served(sidecar):
    """clients/SPEC.md, "Maximum age": the fast path reads the clock after taking an ID;
    an ID of a batch past its age then is dropped (counted as expired)."""
    with kubeflake.Client(socket=sidecar.socket) as ids:
        fresh = ids.next()
        stale = fresh - 1  # any value: it stands for an ID of a batch fetched long ago
        ids._fast = (time.monotonic() - 0.001, iter([stale]).__next__)
        expired = ids.stats().expired
        value = ids.next()
        assert value != stale and value > fresh
        assert ids.stats().expired == expired + 1


def test_without_the_gil_every_call_takes_the_locked_path(sidecar, monkeypatch):
    """Free-threaded CPython runs C calls in parallel: the fast path's argument is void
    there, so the client never installs it."""
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert not _fast.lock_free()
    with kubeflake.Client(socket=sidecar.socket, min_batch=16, max_batch=256) as ids:
        taken = _take_in_threads(ids, 4, 5_000)
        assert ids._fast is _fast.SLOW
        everything = [v for part in taken for v in part]
        assert len(set(everything)) == len(everything) == 20_000
