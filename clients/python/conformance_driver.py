#!/usr/bin/env python3
"""The Python client's conformance driver: the protocol of clients/conformance/README.md.

Reads one JSON command a line on stdin, writes one JSON answer a line on stdout.
`--async` drives kubeflake.aio.AsyncClient (tasks) instead of kubeflake.Client (threads).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import kubeflake  # noqa: E402
from kubeflake.aio import AsyncClient  # noqa: E402


def settings_from(doc: dict) -> dict:
    ms = lambda key: doc[key] / 1000 if key in doc else None  # noqa: E731
    out = {}
    for key, name in (("max_wait_ms", "max_wait"), ("request_timeout_ms", "request_timeout"),
                      ("max_age_ms", "max_age")):
        if key in doc:
            out[name] = ms(key)
    for key in ("min_batch", "max_batch", "prefetch"):
        if key in doc:
            out[key] = doc[key]
    return out


def error_doc(e: Exception) -> dict:
    if not isinstance(e, kubeflake.KubeflakeError):
        return {"kind": "internal", "message": f"{e.__class__.__name__}: {e}"}
    doc = {"kind": e.kind, "message": str(e)}
    if isinstance(e, kubeflake.Refused):
        doc.update(status=e.status, reason=e.reason,
                   retry_after_ms=None if e.retry_after is None else int(e.retry_after * 1000))
    return doc


def decoded_doc(d: kubeflake.Decoded) -> dict:
    return {"tick": d.tick, "datacenter": d.datacenter, "worker": d.worker, "sequence": d.sequence,
            "time_ms": int(d.time.timestamp() * 1000)}


def stats_doc(s: kubeflake.Stats) -> dict:
    return {"ids": s.ids, "buffer_depth": s.buffer_depth, "refills": s.refills, "waits": s.waits,
            "expired": s.expired, "direct": s.direct, "refill_errors": s.refill_errors,
            "batch_size": s.batch_size, "errors": s.errors}


def write_run(out: str, taken: list[list[int]]) -> None:
    with open(out, "w") as f:
        for worker, ids in enumerate(taken):
            f.write("".join(f"{worker} {v}\n" for v in ids))


class Sync:
    def __init__(self):
        self.client: kubeflake.Client | None = None

    def handle(self, cmd: dict) -> dict:
        op = cmd["op"]
        c = self.client
        if op == "open":
            self.client = kubeflake.Client(**settings_from(cmd.get("settings", {})))
            return {"transport": self.client.endpoint.transport}
        if op == "next":
            return {"id": str(c.next())}
        if op == "next_after":
            return {"id": str(c.next_after(int(cmd["after"])))}
        if op == "decode":
            return {"fields": decoded_doc(c.decode(int(cmd["id"])))}
        if op == "compose":
            return {"id": str(c.layout().compose(tick=cmd["tick"], datacenter=cmd["datacenter"],
                                                 worker=cmd["worker"], sequence=cmd["sequence"]))}
        if op == "stats":
            return {"stats": stats_doc(c.stats())}
        if op == "run":
            return self.run(cmd["workers"], cmd["count"], cmd["out"])
        if op == "close":
            if c is not None:
                c.close()
            return {}
        raise ValueError(f"unknown op {op!r}")

    def run(self, workers: int, count: int, out: str) -> dict:
        left = [count]
        lock = threading.Lock()
        taken: list[list[int]] = [[] for _ in range(workers)]
        errors: dict[str, int] = {}

        def work(n: int) -> None:
            mine = taken[n]
            nxt = self.client.next
            while True:
                with lock:
                    if left[0] <= 0:
                        return
                    left[0] -= 1
                try:
                    mine.append(nxt())
                except kubeflake.KubeflakeError as e:
                    with lock:
                        errors[e.kind] = errors.get(e.kind, 0) + 1
                    return

        started = time.monotonic()
        threads = [threading.Thread(target=work, args=(n,)) for n in range(workers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seconds = time.monotonic() - started
        write_run(out, taken)
        return {"count": sum(map(len, taken)), "errors": errors, "seconds": seconds}


class Async:
    def __init__(self):
        self.client: AsyncClient | None = None

    async def handle(self, cmd: dict) -> dict:
        op = cmd["op"]
        c = self.client
        if op == "open":
            self.client = AsyncClient(**settings_from(cmd.get("settings", {})))
            return {"transport": self.client.endpoint.transport}
        if op == "next":
            return {"id": str(await c.next())}
        if op == "next_after":
            return {"id": str(await c.next_after(int(cmd["after"])))}
        if op == "decode":
            return {"fields": decoded_doc(await c.decode(int(cmd["id"])))}
        if op == "compose":
            layout = await c.layout()
            return {"id": str(layout.compose(tick=cmd["tick"], datacenter=cmd["datacenter"],
                                             worker=cmd["worker"], sequence=cmd["sequence"]))}
        if op == "stats":
            return {"stats": stats_doc(c.stats())}
        if op == "run":
            return await self.run(cmd["workers"], cmd["count"], cmd["out"])
        if op == "close":
            if c is not None:
                await c.aclose()
            return {}
        raise ValueError(f"unknown op {op!r}")

    async def run(self, workers: int, count: int, out: str) -> dict:
        left = [count]
        taken: list[list[int]] = [[] for _ in range(workers)]
        errors: dict[str, int] = {}

        async def work(n: int) -> None:
            mine = taken[n]
            while left[0] > 0:
                left[0] -= 1
                try:
                    mine.append(await self.client.next())
                except kubeflake.KubeflakeError as e:
                    errors[e.kind] = errors.get(e.kind, 0) + 1
                    return
                if len(mine) % 256 == 0:
                    await asyncio.sleep(0)  # let the other tasks take turns, as an app's would

        started = time.monotonic()
        await asyncio.gather(*(work(n) for n in range(workers)))
        seconds = time.monotonic() - started
        write_run(out, taken)
        return {"count": sum(map(len, taken)), "errors": errors, "seconds": seconds}


def answer(result: dict | None, error: Exception | None) -> None:
    doc = {"ok": True, **result} if error is None else {"ok": False, "error": error_doc(error)}
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def main() -> None:
    use_async = "--async" in sys.argv[1:]
    loop = asyncio.new_event_loop() if use_async else None
    driver = Async() if use_async else Sync()
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            if use_async:
                result = loop.run_until_complete(driver.handle(cmd))
            else:
                result = driver.handle(cmd)
        except Exception as e:  # every failure is answered, typed or not
            answer(None, e)
        else:
            answer(result, None)
        if cmd["op"] == "close":
            break
    if loop is not None:
        loop.close()


if __name__ == "__main__":
    main()
