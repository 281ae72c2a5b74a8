#!/usr/bin/env python3
"""How a standalone sidecar answers a caller that asks for more than the layout's ceiling.

    kubeflake-sidecar standalone --listen-unix /tmp/p/api.sock --state-dir /tmp/p/state &
    clients/java/kubeflake-bench/refusal_probe.py /tmp/p/api.sock [SECONDS]

Asks GET /ids?count=10000 back to back on one kept-alive connection for SECONDS (default
12), ignoring Retry-After, and prints the answers by status and refusal reason, the IDs per
second it got, and when the first refusal came. A measurement aid for clients/java/README.md,
"Speed", not a test.
"""
import collections
import socket
import sys
import time


def main():
    path = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 12.0
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile("rb")
    codes = collections.Counter()
    reasons = collections.Counter()
    ids = 0
    first = None
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        s.sendall(b"GET /ids?count=10000 HTTP/1.1\r\nHost: kubeflake\r\nAccept: text/plain\r\n\r\n")
        status = int(f.readline().split()[1])
        headers = {}
        while True:
            line = f.readline()
            if line in (b"\r\n", b""):
                break
            name, value = line.decode().split(":", 1)
            headers[name.lower()] = value.strip()
        body = f.read(int(headers["content-length"]))
        codes[status] += 1
        if status == 200:
            ids += len(body.split())
            continue
        reason = body.split(b'"reason":"')[1].split(b'"')[0].decode() if b'"reason":"' in body else "?"
        reasons[(status, reason, headers.get("retry-after"))] += 1
        if first is None:
            first = (time.monotonic() - started, ids)
    took = time.monotonic() - started
    print(f"answers by status: {dict(codes)}")
    for (status, reason, retry_after), n in reasons.items():
        print(f"  {n} x {status} {reason}, Retry-After {retry_after}")
    print(f"{ids:,} IDs in {took:.1f} s: {ids / took:,.0f} IDs/s")
    if first:
        print(f"first refusal after {first[0]:.2f} s and {first[1]:,} IDs")


if __name__ == "__main__":
    main()
