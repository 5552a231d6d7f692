#!/usr/bin/env python3
"""How long `POST /api/auth/password-reset` takes for a real address and for
an unknown one, alternating, each request from an IPv6 /64 of its own (so no
limit is reached). The two must not be told apart by time.

Usage: start `local` in accounts mode behind one trusted proxy hop with a mail
server (KUBEBYON_TRUSTED_PROXY_HOPS=1 SMTP_URL=…), make a verified account
REAL, then: reset-timing.py BASE_URL REAL [ROUNDS]
"""
import json
import statistics
import sys
import time
import urllib.request


def ask(base, email, ip):
    request = urllib.request.Request(
        f"{base}/api/auth/password-reset",
        data=json.dumps({"email": email}).encode(),
        headers={"content-type": "application/json", "x-forwarded-for": ip},
        method="POST",
    )
    began = time.perf_counter()
    with urllib.request.urlopen(request) as response:
        response.read()
        assert response.status == 202, response.status
    return (time.perf_counter() - began) * 1000


def main():
    base, real = sys.argv[1], sys.argv[2]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 28
    times = {"real": [], "unknown": []}
    for i in range(rounds):
        # In turns, each after a pause: what one request leaves to do after
        # its answer (storing a code, the mail) must not slow the next one.
        first, second = ("real", "unknown") if i % 2 == 0 else ("unknown", "real")
        for name in (first, second):
            email = real if name == "real" else "nobody@example.com"
            net = 10 if name == "real" else 20
            times[name].append(ask(base, email, f"2001:db8:{net}:{i}::1"))
            time.sleep(0.05)
    for name, xs in times.items():
        xs = sorted(xs[3:])  # the first rounds warm the pool
        print(f"{name:8s} n={len(xs)} median={statistics.median(xs):.2f} ms "
              f"mean={statistics.mean(xs):.2f} ms p90={xs[int(len(xs) * 0.9)]:.2f} ms")


if __name__ == "__main__":
    main()
