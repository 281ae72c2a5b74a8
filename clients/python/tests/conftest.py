"""A real standalone sidecar for the tests: KUBEFLAKE_SIDECAR_BIN names the binary
(clients/python/test.sh sets it)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RunningSidecar:
    def __init__(self, tmp: Path, *args: str):
        binary = os.environ.get("KUBEFLAKE_SIDECAR_BIN")
        if not binary or not os.access(binary, os.X_OK):
            pytest.fail("KUBEFLAKE_SIDECAR_BIN must name a built kubeflake-sidecar binary "
                        "(clients/python/test.sh finds or builds one)")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.socket = str(tmp / "api.sock")
        self.proc = subprocess.Popen(
            [binary, "standalone", "--listen", f"127.0.0.1:{self.port}", "--listen-unix", self.socket,
             "--state-dir", str(tmp / "state"), *args],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "sidecar.log", "w"))
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=1):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"the sidecar did not become ready: {(tmp / 'sidecar.log').read_text()[-2000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def sidecar(tmp_path_factory):
    s = RunningSidecar(tmp_path_factory.mktemp("snowflake"), "--worker-id", "7")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def segment_sidecar(tmp_path_factory):
    s = RunningSidecar(tmp_path_factory.mktemp("segment"), "--mode", "segment", "--block-size", "500")
    yield s
    s.stop()
