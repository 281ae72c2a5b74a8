#!/usr/bin/env python3
"""The client conformance suite: clients/conformance/cases.json against real sidecars.

    clients/conformance/run.py --sidecar BINARY --client NAME -- DRIVER_COMMAND...
    KUBEFLAKE_CONFORMANCE=full ...      the full mode (1,000,000 IDs in the uniqueness case)
    --only CASE[,CASE]                  some cases only

Starts standalone sidecars built from the tree on loopback and on Unix sockets (one with a
non-default layout, a segment one, a strict one, one whose epoch lies a few seconds ahead so
it refuses with Retry-After), then runs each case of cases.json with a fresh driver process
(the protocol: clients/conformance/README.md). Prints one line a case and, last,
"N passed, N failed"; exits 1 if any failed. Python 3.10+ standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVER_ANSWER_SECONDS = 60  # a driver silent this long on one command has hung: a failure
READY_SECONDS = 20


class CaseFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CaseFailed(message)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Sidecar:
    """A standalone sidecar on a loopback port and a Unix socket, restartable in place."""

    def __init__(self, binary: str, work: Path, name: str, args: list[str], sequence: str | None = None):
        self.binary, self.name, self.args = binary, name, args
        self.dir = work / name
        n = 1
        while self.dir.exists():  # a fresh sidecar of the same name: a directory of its own
            n += 1
            self.dir = work / f"{name}.{n}"
        self.dir.mkdir()
        self.port = free_port()
        self.socket = str(self.dir / "api.sock")
        if sequence is not None:
            (self.dir / "sequence.yaml").write_text(sequence)
            self.args = args + ["--sequence-file", str(self.dir / "sequence.yaml")]
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, wait_ready: bool = True) -> None:
        self.starts += 1
        log = open(self.dir / f"log.{self.starts}", "w")
        self.proc = subprocess.Popen(
            [self.binary, "standalone", "--listen", f"127.0.0.1:{self.port}", "--listen-unix", self.socket,
             "--state-dir", str(self.dir / "state"), *self.args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=1):
                    pass
                if not wait_ready or self.ready():
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the {self.name} sidecar did not start; its log:\n{self.log()}")

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=1) as r:
                return r.status == 200
        except OSError:
            return False

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def log(self) -> str:
        path = self.dir / f"log.{self.starts}"
        return path.read_text()[-3000:] if path.exists() else ""

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=5) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """The value of one series of /metrics (0 when absent)."""
        _, body = self.get("/metrics")
        for line in body.decode().splitlines():
            m = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.e+]+)$", line)
            if not m or m.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            if labels is None or all(found.get(k) == v for k, v in labels.items()):
                return float(m.group(3))
        return 0.0

    def decode(self, value: int) -> dict:
        status, body = self.get(f"/decode/{value}")
        if status != 200:
            raise CaseFailed(f"/decode/{value} answered {status}: {body[:200]!r}")
        return json.loads(body)


class Driver:
    """One driver process: a JSON command a line in, a JSON answer a line out."""

    def __init__(self, command: list[str], env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self.proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=open(log_path, "w"), env=env, text=True, bufsize=1)
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def call(self, op: str, seconds: float = DRIVER_ANSWER_SECONDS, **args) -> dict:
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            raise CaseFailed(f"the driver did not answer {op!r} within {seconds} s (hung?)") from None
        if line is None:
            raise CaseFailed(f"the driver exited during {op!r}; its stderr:\n{self.stderr()}")
        return json.loads(line)

    def ok(self, op: str, **args) -> dict:
        answer = self.call(op, **args)
        check(answer.get("ok") is True, f"{op} failed: {answer.get('error')}")
        return answer

    def error(self, op: str, **args) -> dict:
        answer = self.call(op, **args)
        check(answer.get("ok") is False, f"{op} succeeded ({answer}) where an error was expected")
        return answer["error"]

    def stderr(self) -> str:
        return self.log_path.read_text()[-3000:]

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self.call("close", seconds=10)
        except (CaseFailed, BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def read_run(path: str) -> list[list[int]]:
    per_worker: dict[int, list[int]] = {}
    with open(path) as f:
        for line in f:
            worker, value = line.split()
            per_worker.setdefault(int(worker), []).append(int(value))
    return list(per_worker.values())


def check_unique_and_ordered(per_worker: list[list[int]], expected: int) -> None:
    total = sum(map(len, per_worker))
    check(total == expected, f"the workers took {total} IDs, not {expected}")
    seen: set[int] = set()
    for ids in per_worker:
        seen.update(ids)
    check(len(seen) == total, f"{total - len(seen)} duplicate IDs among {total}")
    for n, ids in enumerate(per_worker):
        for a, b in zip(ids, ids[1:]):
            check(a < b, f"worker {n} got {b} after {a}: the buffer handed IDs out of order")


def time_ms(rfc3339: str) -> int:
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)


class Suite:
    def __init__(self, args, cases: dict):
        self.args = args
        self.cases = cases
        self.work = Path(tempfile.mkdtemp(prefix="kubeflake-conformance-"))
        self.sidecars: dict[str, Sidecar] = {}
        self.drivers: list[Driver] = []
        self.mode = os.environ.get("KUBEFLAKE_CONFORMANCE", "default")
        if self.mode not in cases["modes"]:
            raise SystemExit(f"KUBEFLAKE_CONFORMANCE must be one of {sorted(cases['modes'])}, not {self.mode!r}")

    # -- sidecars and drivers ----------------------------------------------------------

    def sidecar(self, name: str, fresh: bool = False) -> Sidecar:
        """The sidecar `name` of cases.json, started on first use; `fresh`: a new one (for
        a sidecar whose epoch lies ahead, so that its refusals last the case's whole margin)."""
        if fresh and name in self.sidecars:
            self.sidecars.pop(name).stop()
        if name not in self.sidecars:
            spec = self.cases["sidecars"][name]
            sequence = spec.get("sequence")
            if sequence is not None and "{epoch_in_seconds}" in sequence:
                ahead = int(spec["epoch_ahead_seconds"])
                epoch = (datetime.now(timezone.utc) + timedelta(seconds=ahead)).strftime("%Y-%m-%dT%H:%M:%SZ")
                sequence = sequence.replace("{epoch_in_seconds}", epoch)
            s = Sidecar(self.args.sidecar, self.work, name, spec.get("args", []), sequence)
            s.start(wait_ready=spec.get("ready", True))
            self.sidecars[name] = s
        return self.sidecars[name]

    def driver(self, case: str, env: dict[str, str]) -> Driver:
        full = {k: v for k, v in os.environ.items() if not k.startswith("KUBEFLAKE_")}
        full.update(env)
        d = Driver(self.args.command, full, self.work / f"driver-{case}.log")
        self.drivers.append(d)
        return d

    def open(self, case: str, env: dict[str, str], settings: dict | None = None) -> tuple[Driver, dict]:
        d = self.driver(case, env)
        return d, d.ok("open", settings=settings or {})

    # -- the cases ---------------------------------------------------------------------

    def case_transport_socket_first(self, c):
        a = self.sidecar("snowflake")
        d, opened = self.open(c["name"], {"KUBEFLAKE_SOCKET": a.socket, "KUBEFLAKE_URL": f"http://127.0.0.1:{free_port()}"})
        check(opened["transport"] == "unix", f"transport {opened['transport']!r}, expected unix")
        d.ok("next")

    def case_transport_url_without_socket(self, c):
        a = self.sidecar("snowflake")
        d, opened = self.open(c["name"], {"KUBEFLAKE_URL": a.url})
        check(opened["transport"] == "tcp", f"transport {opened['transport']!r}, expected tcp")
        d.ok("next")

    def case_socket_set_never_falls_back(self, c):
        a = self.sidecar("snowflake")
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": str(self.work / "nothing-here.sock"), "KUBEFLAKE_URL": a.url},
                         c["settings"])
        error = d.error("next")
        check(error["kind"] == "no_sidecar", f"error kind {error['kind']!r}, expected no_sidecar")

    def case_no_sidecar_refused(self, c):
        d, _ = self.open(c["name"], {"KUBEFLAKE_URL": f"http://127.0.0.1:{free_port()}"}, c["settings"])
        error = d.error("next")
        check(error["kind"] == "no_sidecar", f"error kind {error['kind']!r}, expected no_sidecar")

    def case_no_sidecar_silent(self, c):
        # A listener that accepts connections (the kernel's backlog) and never answers.
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(64)
            d, _ = self.open(c["name"], {"KUBEFLAKE_URL": f"http://127.0.0.1:{silent.getsockname()[1]}"}, c["settings"])
            error = d.error("next", seconds=c["hang_seconds"])
        check(error["kind"] == "no_sidecar", f"error kind {error['kind']!r}, expected no_sidecar")

    def case_bad_request(self, c):
        a = self.sidecar("snowflake")
        d, _ = self.open(c["name"], {"KUBEFLAKE_URL": a.url})
        error = d.error("next_after", after=c["after"])
        check(error["kind"] == "bad_request", f"error kind {error['kind']!r}, expected bad_request")

    def case_after_bypasses_buffer(self, c):
        a = self.sidecar("snowflake")
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": a.socket}, c["settings"])
        first = int(d.ok("next")["id"])  # the buffer now holds IDs just above `first`
        fields = a.decode(first)
        layout = self.cases["sidecars"]["snowflake"]["layout"]
        ticks_ahead = c["after_ms_ahead"] // layout["tick_ms"]
        after = int(d.ok("compose", tick=fields["tick"] + ticks_ahead, datacenter=fields["datacenter"],
                         worker=fields["worker"], sequence=0)["id"])
        got = int(d.ok("next_after", after=str(after))["id"])
        check(got > after, f"next_after({after}) gave {got}, not greater")
        stats = d.ok("stats")["stats"]
        check(stats["direct"] >= 1, f"next_after was not a direct request: stats {stats}")

    def case_after_conflict_typed(self, c):
        a = self.sidecar("snowflake")
        d, _ = self.open(c["name"], {"KUBEFLAKE_URL": a.url}, c["settings"])
        first = int(d.ok("next")["id"])
        fields = a.decode(first)
        ticks = c["after_seconds_ahead"] * 1000 // self.cases["sidecars"]["snowflake"]["layout"]["tick_ms"]
        after = d.ok("compose", tick=fields["tick"] + ticks, datacenter=fields["datacenter"],
                     worker=fields["worker"], sequence=0)["id"]
        error = d.error("next_after", after=after)
        check(error["kind"] == "clock_behind", f"error kind {error['kind']!r}, expected clock_behind")
        check(error.get("status") == 409 and error.get("reason") == "after_ahead_of_clock",
              f"expected status 409 reason after_ahead_of_clock, got {error}")
        check((error.get("retry_after_ms") or 0) >= 1000 * (c["after_seconds_ahead"] - 5),
              f"retry_after_ms {error.get('retry_after_ms')} does not carry the sidecar's Retry-After")

    def case_retry_after_bound(self, c):
        e = self.sidecar("future_epoch", fresh=True)
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": e.socket}, c["settings"])
        error = d.error("next")
        check(error["kind"] == "clock_behind" and error.get("reason") == "clock_before_epoch",
              f"expected clock_behind with reason clock_before_epoch, got {error}")
        check(error.get("retry_after_ms") == 1000, f"expected retry_after_ms 1000 (Retry-After: 1), got {error}")

    def case_retry_after_honoured(self, c):
        e = self.sidecar("future_epoch", fresh=True)
        refused_before = sum(e.metric("kubeflake_http_requests_total", {"code": "503", "route": r}) for r in ("id", "ids"))
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": e.socket}, c["settings"])
        d.ok("next")
        refused = sum(e.metric("kubeflake_http_requests_total", {"code": "503", "route": r}) for r in ("id", "ids"))
        refused -= refused_before
        check(refused >= 1, "the sidecar no longer refused when the case began (its epoch had passed): "
              "raise epoch_ahead_seconds in cases.json for this machine")
        check(refused <= c["max_refused_requests"],
              f"{refused} requests were refused while the sidecar asked for 1 s between tries: "
              "Retry-After was not honoured")

    def case_uniqueness_across_restart(self, c):
        a = self.sidecar("snowflake")
        count = self.cases["modes"][self.mode]["ids"]
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": a.socket}, c["settings"])
        out = str(self.work / f"{c['name']}.ids")
        issued_before = a.metric("kubeflake_ids_issued_total")
        restarted = threading.Event()
        failure: list[str] = []

        def restart_midway() -> None:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if a.metric("kubeflake_ids_issued_total") - issued_before >= count * c["restart_at_fraction"]:
                    a.kill()
                    try:
                        a.start(wait_ready=False)
                    except RuntimeError as e:
                        failure.append(str(e))
                    restarted.set()
                    return
                time.sleep(0.01)
            failure.append("the sidecar never issued enough IDs to be restarted midway")

        killer = threading.Thread(target=restart_midway, daemon=True)
        killer.start()
        result = d.ok("run", workers=c["workers"], count=count, out=out, seconds=600)
        killer.join(timeout=130)
        check(not failure, "; ".join(failure))
        check(restarted.is_set(), "the sidecar was not restarted")
        # The restarted process counts from 0 and only this driver asks it: what it issued
        # went to the run, so the run went on across the restart.
        after_restart = a.metric("kubeflake_ids_issued_total")
        check(after_restart > 0, "the run ended before the sidecar was restarted: nothing came from the new process")
        check(not result["errors"], f"next() raised during the run: {result['errors']}")
        check_unique_and_ordered(read_run(out), count)
        print(f"    {count} IDs, {c['workers']} workers, sidecar killed (SIGKILL) and restarted midway "
              f"({after_restart:.0f} IDs from the new process): 0 duplicates ({result['seconds']:.2f} s in the driver)")

    def case_segment_order(self, c):
        b = self.sidecar("segment")
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": b.socket}, c["settings"])
        out = str(self.work / f"{c['name']}.ids")
        result = d.ok("run", workers=c["workers"], count=c["count"], out=out)
        check(not result["errors"], f"next() raised: {result['errors']}")
        check_unique_and_ordered(read_run(out), c["count"])

    def case_strict_bypasses_buffer(self, c):
        s = self.sidecar("strict")
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": s.socket})
        values = [int(d.ok("next")["id"]) for _ in range(c["calls"])]
        check(values == sorted(set(values)), f"strict values not increasing: {values}")
        stats = d.ok("stats")["stats"]
        check(stats["direct"] == c["calls"] and stats["refills"] == 0,
              f"a strict sequence's next() must not use the buffer: stats {stats}")

    def case_exhausted_is_final(self, c):
        e = self.sidecar("segment_near_end")
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": e.socket}, c["settings"])
        values, error = [], None
        for _ in range(c["max_calls"]):
            # The bound is far below max_wait: a client that waits out a final refusal hangs here.
            answer = d.call("next", seconds=c["hang_seconds"])
            if not answer["ok"]:
                error = answer["error"]
                break
            values.append(int(answer["id"]))
        check(error is not None, f"{c['max_calls']} values from a counter that had fewer: {values}")
        check(error["kind"] == "exhausted" and error.get("reason") == "exhausted" and error.get("status") == 503,
              f"expected exhausted, 503, reason exhausted; got {error}")
        check(values == sorted(set(values)) and all(v >= 9223372036854775800 for v in values),
              f"values before the end not in order or not from the counter: {values}")

    def case_max_age(self, c):
        a = self.sidecar("snowflake")
        d, _ = self.open(c["name"], {"KUBEFLAKE_SOCKET": a.socket}, c["settings"])
        first = int(d.ok("next")["id"])
        time.sleep(c["sleep_ms"] / 1000)
        second = int(d.ok("next")["id"])
        gap = time_ms(a.decode(second)["time"]) - time_ms(a.decode(first)["time"])
        check(gap >= c["sleep_ms"] - c["settings"]["max_age_ms"],
              f"after {c['sleep_ms']} ms idle the next ID is only {gap} ms younger: a stale buffered ID was served")
        stats = d.ok("stats")["stats"]
        check(stats["expired"] > 0, f"no buffered ID was dropped for its age: stats {stats}")

    def case_decode_agrees(self, c):
        a = self.sidecar("snowflake")
        d, _ = self.open(c["name"], {"KUBEFLAKE_URL": a.url})
        samples = [int(d.ok("next")["id"]) for _ in range(c["ids_from_next"])] + [int(v) for v in c["fixed_ids"]]
        for value in samples:
            want = a.decode(value)
            got = d.ok("decode", id=str(value))["fields"]
            for key in ("tick", "datacenter", "worker", "sequence"):
                check(got[key] == want[key], f"decode({value}).{key} = {got[key]}, /decode says {want[key]}")
            check(got["time_ms"] == time_ms(want["time"]),
                  f"decode({value}) time {got['time_ms']} ms, /decode says {want['time']}")
            back = d.ok("compose", tick=want["tick"], datacenter=want["datacenter"], worker=want["worker"],
                        sequence=want["sequence"])["id"]
            check(int(back) == value, f"compose(decode({value})) = {back}")

    # -- running -----------------------------------------------------------------------

    def run(self) -> int:
        only = set(self.args.only.split(",")) if self.args.only else None
        passed = failed = 0
        print(f"conformance: client {self.args.client}, mode {self.mode}, sidecar {self.args.sidecar}")
        try:
            for c in self.cases["cases"]:
                if only and c["name"] not in only:
                    continue
                started = time.monotonic()
                try:
                    getattr(self, f"case_{c['name']}")(c)
                except (CaseFailed, RuntimeError) as e:
                    failed += 1
                    print(f"FAIL {self.args.client}: {c['name']}: {e}")
                    for d in self.drivers:
                        if d.stderr().strip():
                            print(f"    driver stderr: {d.stderr()[-1500:]}")
                else:
                    passed += 1
                    print(f"ok   {self.args.client}: {c['name']} ({time.monotonic() - started:.1f} s)")
                finally:
                    for d in self.drivers:
                        d.close()
                    self.drivers.clear()
        finally:
            for s in self.sidecars.values():
                s.stop()
        print(f"conformance {self.args.client}: {passed} passed, {failed} failed")
        if failed:
            print(f"conformance {self.args.client}: the sidecars' logs and the IDs are kept in {self.work}")
            return 1
        # A passing run keeps nothing: its IDs files are about 20 MB per client in full mode.
        shutil.rmtree(self.work, ignore_errors=True)
        return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sidecar", required=True, help="the kubeflake-sidecar binary")
    parser.add_argument("--client", required=True, help="a name for the output")
    parser.add_argument("--only", help="comma-separated case names")
    parser.add_argument("command", nargs="+", help="the driver command (after --)")
    args = parser.parse_args()
    cases = json.loads((HERE / "cases.json").read_text())
    return Suite(args, cases).run()


if __name__ == "__main__":
    sys.exit(main())
