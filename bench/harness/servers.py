"""The servers bench/run measures, on 127.0.0.1 (kubeflake, the bare hyper ceiling,
redis-server, a private PostgreSQL cluster), each in its own session; every one it started
is killed at exit (`cleanup`)."""

import os
import pwd
import signal
import socket
import subprocess
import sys
import time
import urllib.request

from .common import RELEASE, fail, sh
from .prepare import pg_bin


CHILDREN = []


def cleanup(*_):
    for proc in CHILDREN:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    CHILDREN.clear()


def on_signal(signum, _frame):
    cleanup()
    sys.exit(128 + signum)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(args, log_path, **kw):
    out = open(log_path, "ab")
    proc = subprocess.Popen([str(a) for a in args], stdout=out, stderr=out,
                            start_new_session=True, **kw)
    CHILDREN.append(proc)
    return proc


def stop(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc in CHILDREN:
        CHILDREN.remove(proc)


def http_status(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def unix_http_status(path, route):
    """The status of `GET route` over the Unix socket at `path` (None if nobody answers)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(str(path))
            s.sendall(f"GET {route} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n".encode())
            head = s.recv(64).split(b" ", 2)
            return int(head[1]) if len(head) > 1 and head[0].startswith(b"HTTP/1.") else None
    except (OSError, ValueError):
        return None


def wait_until(what, check, limit=30.0, step=0.002):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(step)
    fail(f"{what} not ready after {limit} s")


def redis_ping(port, unix=None):
    """Whether redis-server answers PING on the TCP port (or the Unix socket `unix`)."""
    try:
        if unix:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(1)
            s.connect(str(unix))
        else:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
        with s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class Servers:
    """Everything the run measures, on loopback; killed at exit."""

    def __init__(self, tmp):
        self.tmp = tmp

    def socket_path(self, name):
        return self.tmp / f"{name}.sock"

    def start_sidecar(self, name="sidecar", extra=(), unix=False):
        """With `unix`, it serves the same routes on the socket self.socket_path(name) too."""
        port = free_port()
        state = self.tmp / f"state-{name}-{port}"
        state.mkdir()
        sock = ["--listen-unix", self.socket_path(name)] if unix else []
        proc = spawn([RELEASE / "kubeflake-sidecar", "standalone", "--listen", f"127.0.0.1:{port}",
                      *sock, "--state-dir", state, *extra], self.tmp / f"{name}.log")
        wait_until(name, lambda: http_status(port, "/readyz") == 200)
        if unix:
            wait_until(f"{name} socket",
                       lambda: unix_http_status(self.socket_path(name), "/readyz") == 200)
        return proc, port

    def start_ceiling(self, unix=False):
        port = free_port()
        sock = ["--listen-unix", self.socket_path("ceiling")] if unix else []
        proc = spawn([RELEASE / "kubeflake-ceiling", "--listen", f"127.0.0.1:{port}", *sock],
                     self.tmp / "ceiling.log")
        wait_until("ceiling", lambda: http_status(port, "/") == 200)
        if unix:
            wait_until("ceiling socket",
                       lambda: unix_http_status(self.socket_path("ceiling"), "/") == 200)
        return proc, port

    def start_redis(self, unix=False):
        """With `unix`, it also listens on self.socket_path("redis") (mode 700: this user)."""
        port = free_port()
        sock = (["--unixsocket", self.socket_path("redis"), "--unixsocketperm", "700"]
                if unix else [])
        proc = spawn(["redis-server", "--bind", "127.0.0.1", "--port", port, *sock, "--save", "",
                      "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
                      "--dir", self.tmp], self.tmp / "redis.log")
        wait_until("redis-server", lambda: redis_ping(port))
        if unix:
            wait_until("redis-server socket", lambda: redis_ping(port, self.socket_path("redis")))
        return proc, port

    def start_postgres(self):
        """A private cluster in the temp dir, reachable over its unix socket and on
        127.0.0.1 (same port)."""
        pgdir = self.tmp / "pg"
        pgdir.mkdir()
        kw = {}
        if os.geteuid() == 0:  # postgres refuses to run as root
            user = pwd.getpwnam("postgres")
            os.chown(pgdir, user.pw_uid, user.pw_gid)
            kw = {"user": user.pw_uid, "group": user.pw_gid}
        bin_dir = pg_bin()
        sh([bin_dir / "initdb", "-D", pgdir / "data", "-U", "bench", "--auth=trust",
            "--no-sync", "-E", "UTF8"], timeout=300, **kw)
        port = free_port()
        proc = spawn([bin_dir / "postgres", "-D", pgdir / "data", "-k", pgdir, "-p", port,
                      "-c", "listen_addresses=127.0.0.1", "-c", "max_connections=200"],
                     self.tmp / "postgres.log", **kw)
        wait_until("postgres", lambda: subprocess.run(
            [bin_dir / "pg_isready", "-q", "-h", pgdir, "-p", str(port)]).returncode == 0,
            limit=60, step=0.1)
        return proc, pgdir, port
