"""bench/run's parts, a module each; bench/run itself is the command line (its options, the
list of benchmarks from bench/benchmarks.toml, running them by name) and the full
side-by-side run, in that order, from these:

    common.py     where things are (ROOT, the release binaries, the venv), log, fail, sh
    prepare.py    set-up: the Debian packages and matplotlib, the release build
    servers.py    the servers measured, on loopback (kubeflake, the bare hyper ceiling,
                  Redis, PostgreSQL), killed at exit
    measuring.py  the load generator and wrk, and the side-by-side measurements (single IDs,
                  batches, the in-process generators, footprint, the cluster figures)
    sections.py   the sections that also run alone (--only): socket, strict, hotspot
    results.py    the machine, and a run's raw results handed to bench/report.py

Python 3.11 standard library only (matplotlib is used through bench/report.py --chart).
"""
