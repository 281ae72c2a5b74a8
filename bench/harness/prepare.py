"""bench/run's set-up: the Debian packages and matplotlib a run needs, and its release build."""

import glob
import os
import shutil
import subprocess
import sys
from pathlib import Path

from .common import RELEASE, ROOT, VENV, fail, log, sh


def as_root(args):
    return args if os.geteuid() == 0 else ["sudo", "-n"] + args


def pg_bin():
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(d.split("/")[-2]))
    return Path(dirs[-1]) if dirs and Path(dirs[-1], "initdb").exists() else None


def install_packages(only=None):
    """The Debian packages the run needs (the socket section alone needs only Redis)."""
    wanted = [("redis-server", lambda: shutil.which("redis-server"))]
    if only is None:
        wanted += [("wrk", lambda: shutil.which("wrk")), ("postgresql", pg_bin)]
    if only == "strict":
        wanted = [("postgresql", pg_bin)]
    if only == "hotspot":  # a simulation: no servers
        wanted = []
    missing = [p for p, found in wanted if not found()]
    if missing:
        log(f"installing Debian packages: {' '.join(missing)}")
        sh(as_root(["apt-get", "update", "-qq"]), timeout=600)
        sh(as_root(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-qq",
                    *missing]), timeout=900)
    if only in (None, "strict") and not pg_bin():
        fail("no PostgreSQL server binaries under /usr/lib/postgresql/*/bin after install")
    py = VENV / "bin" / "python"
    if not py.exists():
        log(f"creating {VENV} for matplotlib")
        sh([sys.executable, "-m", "venv", str(VENV)], timeout=300)
    if subprocess.run([py, "-c", "import matplotlib"], capture_output=True).returncode != 0:
        log("installing matplotlib into the venv")
        sh([VENV / "bin" / "pip", "install", "-q", "matplotlib"], timeout=900)


def build(only=None):
    packages = ["kubeflake-sidecar", "kubeflake-bench"] + ([] if only else ["kubeflake-operator"])
    # strict: the e2e test builds its own sidecars; hotspot: only the simulation runs
    if only in ("strict", "hotspot"):
        packages = ["kubeflake-bench"]
    log(f"building release binaries ({', '.join(packages)}) into {RELEASE}")
    sh(["cargo", "build", "--release", "--locked", "-q",
        *[a for p in packages for a in ("-p", p)]], timeout=3600, cwd=ROOT)
