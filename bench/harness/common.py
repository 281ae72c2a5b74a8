"""Where bench/run finds things (the repository, its release binaries, its venv), and how it
logs, fails and runs a command."""

import os
import subprocess
import sys
import time
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent.parent  # bench/harness/common.py
# Where cargo puts what it builds: CARGO_TARGET_DIR (relative to ROOT, where cargo runs) or
# ROOT/target.
TARGET = ROOT / os.environ.get("CARGO_TARGET_DIR", "target")
RELEASE = TARGET / "release"
VENV = Path.home() / ".cache" / "kubeflake" / "bench-venv"
LAYOUT_CEILING = 4096 * 1000  # 2^sequenceBits IDs per 1 ms tick per worker, defaults
STARTED = time.monotonic()


def log(msg):
    print(f"[bench {time.monotonic() - STARTED:6.0f}s] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    log(f"error: {msg}")
    sys.exit(1)


def sh(args, timeout=600, **kw):
    """Runs a command to completion (bounded); returns its stdout."""
    args = [str(a) for a in args]
    try:
        return subprocess.run(args, check=True, text=True, capture_output=True,
                              timeout=timeout, **kw).stdout
    except subprocess.CalledProcessError as e:
        fail(f"{' '.join(map(str, args))} exited {e.returncode}:\n{e.stderr[-3000:]}")
    except subprocess.TimeoutExpired:
        fail(f"{' '.join(map(str, args))} took longer than {timeout} s")
