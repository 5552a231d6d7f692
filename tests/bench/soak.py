#!/usr/bin/env python3
"""Soak: mixed API load on `local` for a long while, its memory and
connections sampled as it goes.

Starts a simulated host cluster (`bench-host`), `local --development` on a
fresh database with jobs through RabbitMQ, and beside it the job functions
`job-cluster-create` and `job-cluster-delete` as processes of their own,
consuming the same queues as the copies inside `local` (competing consumers,
as a scaled-out deployment runs them). Then CLIENTS threads run for
SOAK_SECONDS, each a user keeping up to IN_FLIGHT clusters of their own
(see `client`). Every 10 s it
samples the resident memory (VmRSS) and the open sockets of `local` and of
`job-cluster-create`; every minute it writes one JSON line with the minute's
request count, errors, p50/p99 latency, the latest samples and the job
backlog (pending jobs, age of the oldest).

With SOAK_PG_LOG_MS set, PostgreSQL logs every statement on the soak's
database slower than that many milliseconds (to its server log).

Usage: tests/bench/soak.py [seconds] (default 1800); needs the workspace
binaries built (`cargo build --workspace --bins`), PostgreSQL at
DATABASE_SERVER_URL (default postgres://postgres@127.0.0.1:5432) and
RabbitMQ at AMQP_URL.
"""

import json
import os
import signal
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
IN_FLIGHT = int(os.environ.get("IN_FLIGHT", "8"))
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
    """One user: keeps up to IN_FLIGHT clusters of their own, creating one
    while below that, reading the newest and its operations, and deleting the
    oldest once it is ready. So the job backlog stays bounded (CLIENTS x
    IN_FLIGHT creates at most) and the soak measures a platform keeping up,
    not a queue growing without end."""
    mine = []
    while not stop.is_set():
        status, _, took = call("GET", "/api/console/clusters?limit=50")
        minute.add(status, took)
        if len(mine) < IN_FLIGHT:
            name = "soak-" + uuid.uuid4().hex[:12]
            status, payload, took = call("POST", "/api/console/clusters", {
                "name": name, "workload_cpu_limit_milli_cores": 1000,
                "workload_memory_limit_mib": 1024, "public_access_mode": "nodeport"})
            minute.add(status, took)
            if status == 202:
                mine.append(json.loads(payload)["cluster"]["id"])
        if mine:
            status, _, took = call("GET", f"/api/console/clusters/{mine[-1]}/operations")
            minute.add(status, took)
            status, payload, took = call("GET", f"/api/console/clusters/{mine[0]}")
            minute.add(status, took)
            if status == 200 and json.loads(payload)["status"] == "ready":
                status, _, took = call("DELETE", f"/api/console/clusters/{mine[0]}")
                minute.add(status, took)
                if status in (202, 404):
                    mine.pop(0)
        time.sleep(0.05)


def backlog(url):
    """Jobs waiting to start, and how long the oldest has waited (seconds)."""
    out = subprocess.run(
        ["psql", url, "-Atc",
         "SELECT count(*), COALESCE(extract(epoch FROM now() - min(created_at)), 0)::int "
         "FROM cluster_jobs WHERE status = 'pending'"],
        capture_output=True, text=True, check=False).stdout.strip()
    pending, oldest = (out.split("|") + ["0", "0"])[:2] if out else ("0", "0")
    return {"jobs_pending": int(pending), "oldest_pending_s": int(oldest)}


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else 1800
    database = "kbsoak_" + uuid.uuid4().hex[:8]
    subprocess.run(["psql", f"{SERVER}/postgres", "-qc", f"CREATE DATABASE {database}"], check=True)
    if os.environ.get("SOAK_PG_LOG_MS"):
        subprocess.run(["psql", f"{SERVER}/postgres", "-qc",
                        f"ALTER DATABASE {database} SET log_min_duration_statement = "
                        f"{int(os.environ['SOAK_PG_LOG_MS'])}"], check=True)
    kubeconfig = f"/tmp/{database}.kubeconfig"
    host = subprocess.Popen([os.path.join(BIN, "bench-host"), kubeconfig])
    for _ in range(300):
        if os.path.exists(kubeconfig):
            break
        time.sleep(0.1)
    env = dict(os.environ, DATABASE_URL=f"{SERVER}/{database}", AMQP_URL=AMQP,
               AMQP_EXCHANGE=f"kbsoak.{database}", RUST_LOG="warn", PORT=str(PORT),
               KUBEBYON_HOST_KUBECONFIG=kubeconfig)
    local = subprocess.Popen([os.path.join(BIN, "local"), "--development"], env=env)
    workers = [subprocess.Popen([os.path.join(BIN, name)], env=env)
               for name in ("job-cluster-create", "job-cluster-delete")]
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
            samples.append({"local": sample(local.pid), "job_cluster_create": sample(workers[0].pid)})
            if len(samples) % 6 == 0:
                line = {"minute": len(samples) // 6, **minute.take(), **samples[-1],
                        **backlog(f"{SERVER}/{database}")}
                print(json.dumps(line), flush=True)
        stop.set()
        for thread in threads:
            thread.join()
    finally:
        for process in [local, *workers, host]:
            process.terminate()
        for process in [local, *workers, host]:
            process.wait(timeout=30)
        if os.path.exists(kubeconfig):
            os.remove(kubeconfig)
        subprocess.run(["psql", f"{SERVER}/postgres", "-qc",
                        f"DROP DATABASE IF EXISTS {database} WITH (FORCE)"], check=False)


if __name__ == "__main__":
    main()
