#!/usr/bin/env python3
"""Soak: mixed API load on `local` for a long while, its memory and
connections sampled as it goes.

Starts `local --development` on a fresh database with jobs through RabbitMQ
(every job handler runs inside it, on its simulated host), then runs CLIENTS
threads for SOAK_SECONDS, each looping over: list clusters, create one, read
it, list its operations, delete the one it created two rounds before. Every
10 s it samples the resident memory (VmRSS) and the open sockets of `local`;
every minute it writes one JSON line with the
minute's request count, errors, p50/p99 latency and the latest samples.

Usage: tests/bench/soak.py [seconds] (default 1800); needs the workspace
binaries built (`cargo build --workspace --bins`), PostgreSQL at
DATABASE_SERVER_URL (default postgres://postgres@127.0.0.1:5432) and
RabbitMQ at AMQP_URL.
"""

import json
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, "target", "debug")
SERVER = os.environ.get("DATABASE_SERVER_URL", "postgres://postgres@127.0.0.1:5432")
AMQP = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
CLIENTS = int(os.environ.get("CLIENTS", "4"))
PORT = int(os.environ.get("PORT", "18181"))
BASE = f"http://127.0.0.1:{PORT}"


def call(method, path, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(BASE + path, data=data, method=method)
    if data is not None:
        request.add_header("content-type", "application/json")
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, payload = response.status, response.read()
    except urllib.error.HTTPError as err:
        status, payload = err.code, err.read()
    except OSError:
        status, payload = 0, b""
    return status, payload, time.perf_counter() - start


def sample(pid):
    rss_kib = 0
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss_kib = int(line.split()[1])
    sockets = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass
    return {"rss_mib": round(rss_kib / 1024, 1), "sockets": sockets}


class Minute:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.errors = 0

    def add(self, status, seconds):
        with self.lock:
            self.latencies.append(seconds)
            if status == 0 or status >= 500:
                self.errors += 1

    def take(self):
        with self.lock:
            latencies, errors = sorted(self.latencies), self.errors
            self.latencies, self.errors = [], 0
        if not latencies:
            return {"requests": 0, "errors": errors}
        pick = lambda q: round(latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000, 2)
        return {"requests": len(latencies), "errors": errors, "p50_ms": pick(0.5), "p99_ms": pick(0.99)}


def client(minute, stop):
    mine = []
    while not stop.is_set():
        status, _, took = call("GET", "/api/console/clusters?limit=50")
        minute.add(status, took)
        name = "soak-" + uuid.uuid4().hex[:12]
        status, payload, took = call("POST", "/api/console/clusters", {
            "name": name, "workload_cpu_limit_milli_cores": 1000,
            "workload_memory_limit_mib": 1024, "public_access_mode": "nodeport"})
        minute.add(status, took)
        if status == 202:
            cluster = json.loads(payload)["cluster"]["id"]
            mine.append(cluster)
            for path in (f"/api/console/clusters/{cluster}", f"/api/console/clusters/{cluster}/operations"):
                status, _, took = call("GET", path)
                minute.add(status, took)
        if len(mine) > 2:
            status, _, took = call("DELETE", f"/api/console/clusters/{mine[0]}")
            minute.add(status, took)
            if status in (202, 404):
                mine.pop(0)
        time.sleep(0.05)


def main():
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 1800
    database = "kbsoak_" + uuid.uuid4().hex[:8]
    subprocess.run(["psql", f"{SERVER}/postgres", "-qc", f"CREATE DATABASE {database}"], check=True)
    env = dict(os.environ, DATABASE_URL=f"{SERVER}/{database}", AMQP_URL=AMQP,
               AMQP_EXCHANGE=f"kbsoak.{database}", RUST_LOG="warn", PORT=str(PORT))
    local = subprocess.Popen([os.path.join(BIN, "local"), "--development"], env=env)
    try:
        for _ in range(300):
            if call("GET", "/healthz")[0] == 200:
                break
            time.sleep(0.1)
        minute, stop = Minute(), threading.Event()
        threads = [threading.Thread(target=client, args=(minute, stop)) for _ in range(CLIENTS)]
        for thread in threads:
            thread.start()
        start = time.monotonic()
        samples = []
        while time.monotonic() - start < seconds:
            time.sleep(10)
            samples.append(sample(local.pid))
            if len(samples) % 6 == 0:
                line = {"minute": len(samples) // 6, **minute.take(), **samples[-1]}
                print(json.dumps(line), flush=True)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        local.terminate()
        local.wait(timeout=30)
        subprocess.run(["psql", f"{SERVER}/postgres", "-qc",
                        f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"], check=False)


if __name__ == "__main__":
    main()
