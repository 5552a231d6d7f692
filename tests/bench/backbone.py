#!/usr/bin/env python3
"""The job backbone, HTTP and cold-start benchmark, beside graphile-worker and Celery.

Run through tests/bench/backbone.sh, which installs the tools and peers and
builds the binaries. Every system uses the same PostgreSQL (DATABASE_URL, a
server URL whose database is replaced per run) and RabbitMQ (AMQP_URL).

Prints one JSON line per system, variant and repetition (also appended to
target/bench-results/backbone-<time>.jsonl), then a summary of medians with
min–max per group. Every process it starts, it stops.

Sections (--only a,b,...): floors, burn, latency, crash, http, coldstart.
"""

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

import psycopg

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("BENCH_BIN", os.path.join(ROOT, "target", "perf"))
PEERS = os.path.join(ROOT, "target", "bench-peers")
HERE = os.path.join(ROOT, "tests", "bench")
SERVER_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
AMQP_URL = os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
EXCHANGE = "kubebyon-bench"
QUIET_LOAD = 2.0  # 1-minute load average (the core count) a run waits for, at most 45 s
BUSY_LOAD = 3.0  # still above this after the wait: the machine is busy, the run is repeated

RESULTS = []
CHILDREN = []


def log(message):
    print(f"==> {message}", file=sys.stderr, flush=True)


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def emit(record):
    print(json.dumps(record), flush=True)
    RESULTS.append(record)
    with open(RESULTS_PATH, "a") as f:
        f.write(json.dumps(record) + "\n")


def db_url(name):
    parts = urllib.parse.urlsplit(SERVER_URL)
    return urllib.parse.urlunsplit(parts._replace(path="/" + name))


def psql(url, sql):
    out = subprocess.run(
        ["psql", url, "-XAtqc", sql], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


class Poller:
    """One kept connection for the completion checks (a psql per check would load the machine)."""

    def __init__(self):
        self.url = None
        self.conn = None

    def scalar(self, url, sql):
        if self.url != url:
            self.close()
            self.conn = psycopg.connect(url, autocommit=True)
            self.url = url
        return self.conn.execute(sql).fetchone()[0]

    def close(self):
        if self.conn is not None:
            self.conn.close()
        self.conn = self.url = None


POLL = Poller()


def fresh_db(name):
    psql(SERVER_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    psql(SERVER_URL, f"CREATE DATABASE {name}")
    return db_url(name)


def drop_db(name):
    POLL.close()
    psql(SERVER_URL, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def spawn(args, env=None, **kwargs):
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.Popen(
        args,
        env=full_env,
        start_new_session=True,
        stdout=kwargs.pop("stdout", subprocess.DEVNULL),
        stderr=kwargs.pop("stderr", subprocess.DEVNULL),
        **kwargs,
    )
    CHILDREN.append(proc)
    return proc


def stop(proc, sig=signal.SIGTERM, timeout=15):
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def stop_all():
    for proc in CHILDREN:
        stop(proc, timeout=5)


def run_json(args, env=None):
    full_env = dict(os.environ)
    full_env.update(env or {})
    out = subprocess.run(args, env=full_env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def read_log(paths):
    """job id → list of µs timestamps, over every worker's log."""
    seen = {}
    for path in paths:
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) == 2:
                    seen.setdefault(parts[0], []).append(int(parts[1]))
    return seen


class LogProgress:
    """Counts handler runs and distinct jobs in the workers' logs, reading only
    what was appended since the last look (a check every 10 ms must not re-read
    every line and take the CPU from the system measured)."""

    def __init__(self, paths):
        self.offsets = {path: 0 for path in paths}
        self.jobs = set()
        self.runs = 0

    def update(self):
        for path, offset in self.offsets.items():
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits
            self.offsets[path] = offset + len(complete)
            for line in complete.decode().splitlines():
                parts = line.split()
                if len(parts) == 2:
                    self.jobs.add(parts[0])
                    self.runs += 1
        return self


def enqueue_args(jobs, rate, seconds, log_path):
    """The enqueue command's arguments, the same for every system's enqueuer."""
    args = ["--rate", str(rate), "--seconds", str(seconds)] if rate else ["--jobs", str(jobs)]
    return args + (["--log", log_path] if log_path else [])


def quantile(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


# --- the systems --------------------------------------------------------------


class Ours:
    """The platform: db::jobs enqueue + RabbitMQ publisher, the production Consumer and Worker."""

    name = "kubebyon"

    def __init__(self, variant):
        # "default": the production settings (AMQP_PREFETCH=16 per worker);
        # "prefetch-N": N wake-ups in hand per worker, so claims and
        # completions gather into larger sets.
        self.variant = variant
        self.db = "kubebyon_bench_jobs"
        self.prefetch = variant.split("-")[1] if variant.startswith("prefetch-") else "16"

    def env(self, extra=None):
        env = {
            "DATABASE_URL": self.url,
            "AMQP_URL": AMQP_URL,
            "AMQP_EXCHANGE": EXCHANGE,
            "RUST_LOG": "warn",
            "LOG_FORMAT": "json",
            "AMQP_PREFETCH": self.prefetch,
        }
        env.update(extra or {})
        return env

    def prepare(self, jobs):
        self.url = fresh_db(self.db)
        subprocess.run(
            [f"{BIN}/bench-jobs", "prepare", "--clusters", str(jobs)],
            env={**os.environ, **self.env()},
            check=True,
        )

    def enqueue(self, jobs=None, rate=None, seconds=None, log_path=None):
        args = [f"{BIN}/bench-jobs", "enqueue"]
        args += enqueue_args(jobs, rate, seconds, log_path)
        # The enqueuer stands for many API function instances: more connections.
        return run_json(args, self.env({"DATABASE_MAX_CONNECTIONS": "32"}))

    def start_worker(self, log_path, index, extra_env=None):
        return spawn(
            [f"{BIN}/bench-jobs", "work", "--log", log_path],
            self.env({"WORKER_ID": f"bench-{index}", **(extra_env or {})}),
        )

    def start_helpers(self, extra_env):
        """The sweep, which rescues jobs whose lease expired (crash recovery)."""
        return [spawn([f"{BIN}/sweep"], self.env(extra_env))]

    def done(self, jobs, progress):
        # Like graphile-worker's check, a count of what is left (it shrinks as the
        # run goes), asked only once every job has started.
        return len(progress.update().jobs) >= jobs and POLL.scalar(
            self.url, "SELECT count(*) FROM cluster_jobs WHERE status IN ('pending', 'running')") == 0

    def cleanup(self):
        drop_db(self.db)


class Graphile:
    name = "graphile-worker"

    def __init__(self, variant):
        self.variant = variant  # "default" or "batched"
        self.db = "kubebyon_bench_graphile"

    def node(self, *args):
        # Beside its node_modules: ES modules resolve packages from their own folder.
        script = os.path.join(PEERS, "graphile.mjs")
        shutil.copy(os.path.join(HERE, "peers", "graphile.mjs"), script)
        return ["node", script, *args]

    def env(self):
        return {"DATABASE_URL": self.url}

    def prepare(self, jobs):
        self.url = fresh_db(self.db)
        subprocess.run(self.node("migrate"), env={**os.environ, **self.env()}, check=True,
                       cwd=PEERS, capture_output=True)

    def enqueue(self, jobs=None, rate=None, seconds=None, log_path=None):
        args = self.node("enqueue")
        args += enqueue_args(jobs, rate, seconds, log_path)
        out = subprocess.run(args, env={**os.environ, **self.env()}, check=True,
                             capture_output=True, text=True, cwd=PEERS)
        return json.loads(out.stdout.strip().splitlines()[-1])

    def start_worker(self, log_path, index, extra_env=None):
        args = self.node("work", "--log", log_path)
        if self.variant == "batched":
            args.append("--batched")
        return spawn(args, self.env(), cwd=PEERS)

    def start_helpers(self, extra_env):
        return []

    def done(self, jobs, progress):
        return len(progress.update().jobs) >= jobs and POLL.scalar(
            self.url, "SELECT count(*) FROM graphile_worker.jobs") == 0

    def cleanup(self):
        drop_db(self.db)


class CeleryPeer:
    name = "celery"

    def __init__(self, variant):
        self.variant = variant  # "default" or "durable"
        self.queue = f"kubebyon-bench-celery-{variant}"

    def env(self, log_path=None):
        env = {
            "AMQP_URL": AMQP_URL,
            "BENCH_QUEUE": self.queue,
            "BENCH_MODE": self.variant,
            "PYTHONPATH": os.path.join(HERE, "peers"),
        }
        if log_path:
            env["BENCH_LOG"] = log_path
        return env

    def python(self):
        return os.path.join(PEERS, "venv", "bin", "python")

    def prepare(self, jobs):
        subprocess.run(
            [self.python(), "-m", "celery", "-A", "celery_bench", "purge", "-f", "-Q", self.queue],
            env={**os.environ, **self.env()}, check=False, capture_output=True,
        )

    def enqueue(self, jobs=None, rate=None, seconds=None, log_path=None):
        args = [self.python(), os.path.join(HERE, "peers", "celery_bench.py"), "enqueue"]
        args += enqueue_args(jobs, rate, seconds, log_path)
        return run_json(args, self.env())

    def start_worker(self, log_path, index, extra_env=None):
        return spawn(
            [self.python(), "-m", "celery", "-A", "celery_bench", "worker", "--concurrency", "2",
             "--loglevel", "WARNING", "-n", f"bench{index}@%h", "--without-gossip",
             "--without-mingle", "--without-heartbeat"],
            self.env(log_path),
        )

    def start_helpers(self, extra_env):
        return []

    def done(self, jobs, progress):
        return len(progress.update().jobs) >= jobs

    def cleanup(self):
        self.prepare(0)


SYSTEMS = [
    (Ours, "default"),
    (Ours, "prefetch-128"),
    (Graphile, "default"),
    (Graphile, "batched"),
    (CeleryPeer, "default"),
    (CeleryPeer, "durable"),
]


# --- sections -------------------------------------------------------------------


def pgbench(url, script, clients, seconds=None, transactions=None):
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as f:
        f.write(script)
        path = f.name
    args = ["pgbench", "-n", "-M", "prepared", "-f", path, "-c", str(clients),
            "-j", str(min(clients, 2))]
    args += ["-T", str(seconds)] if seconds else ["-t", str(transactions)]
    out = subprocess.run(args + [url], check=True, capture_output=True, text=True).stdout
    os.unlink(path)
    tps = float(re.search(r"tps = ([0-9.]+) \(without initial connection time\)", out).group(1))
    latency = float(re.search(r"latency average = ([0-9.]+) ms", out).group(1))
    return tps, latency


ENQUEUE_SQL = """BEGIN;
WITH operation AS (
    INSERT INTO cluster_operations (cluster_id, type, requested_by_user_id, payload)
    VALUES (md5('c' || nextval('bench_enqueue'))::uuid, 'update', NULL, '{}') RETURNING id, cluster_id
)
INSERT INTO cluster_jobs (cluster_id, operation_id, type, payload, max_attempts)
  SELECT cluster_id, id, 'cluster_update', '{}', 5 FROM operation RETURNING id AS job \\gset
COMMIT;
UPDATE cluster_jobs SET published_at = now(), updated_at = now()
  FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed
  WHERE id = :job AND status = 'pending' AND published_at IS NULL;
"""

# The claim of db::jobs (for one job), by cluster (the ids are not known to
# pgbench; the active-job index makes it the same single-row lookup; finding
# the next cluster costs one more, light, round trip), then the fenced
# completion of db::jobs::complete in its own transaction.
CLAIM_COMPLETE_SQL = """SELECT md5('c' || nextval('bench_claim'))::uuid AS cid \\gset
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
), claimed AS (
    UPDATE cluster_jobs SET status = 'running', attempt_count = attempt_count + 1,
        worker_id = 'pgbench', leased_until = now() + make_interval(secs => 60),
        started_at = coalesce(started_at, now()), updated_at = now()
    FROM relaxed
    WHERE cluster_id = :cid AND type = 'cluster_update'
      AND status = 'pending' AND run_after <= now() AND attempt_count < max_attempts
    RETURNING id, cluster_id, operation_id, payload, attempt_count, max_attempts
), operation AS (
    UPDATE cluster_operations o SET status = 'running', started_at = coalesce(o.started_at, now()),
        updated_at = now()
    FROM claimed WHERE o.id = claimed.operation_id
)
SELECT id AS job, attempt_count AS attempt FROM claimed \\gset
BEGIN;
WITH done AS (
    UPDATE cluster_jobs SET status = 'succeeded', finished_at = now(), leased_until = NULL, last_error = NULL, error_code = NULL,
        updated_at = now()
    WHERE id = :job AND attempt_count = :attempt AND status = 'running'
    RETURNING operation_id
)
UPDATE cluster_operations o SET status = 'succeeded', stage = 'done', finished_at = now(), error_message = NULL,
    updated_at = now()
FROM done WHERE o.id = done.operation_id RETURNING o.id;
COMMIT;
"""


def floors(args):
    machine = {"bench": "floor"}
    tmp = os.path.join(ROOT, "target", "bench-tmp")
    os.makedirs(tmp, exist_ok=True)
    fsync = glob.glob("/usr/lib/postgresql/*/bin/pg_test_fsync")
    if fsync:
        out = subprocess.run([fsync[-1], "-s", "2", "-f", os.path.join(tmp, "fsync.test")],
                             check=True, capture_output=True, text=True).stdout
        section = out.split("Compare file sync methods using one 8kB write")[1].split("Compare")[0]
        for method in ("open_datasync", "fdatasync", "fsync"):
            m = re.search(rf"{method}\s+([0-9.]+) ops/sec\s+([0-9.]+) usecs/op", section)
            if m:
                emit({**machine, "floor": "pg_test_fsync", "method": method,
                      "ops_per_s": float(m.group(1)), "us_per_op": float(m.group(2))})
    url = fresh_db("kubebyon_bench_floor")
    try:
        psql(url, "CREATE TABLE floor (id bigserial PRIMARY KEY, v int NOT NULL)")
        for clients in (1, 8):
            tps, latency = pgbench(url, "INSERT INTO floor (v) VALUES (1);\n", clients, seconds=args.floor_seconds)
            emit({**machine, "floor": "pgbench single-row insert", "clients": clients,
                  "tps": tps, "latency_ms": latency})
        tps, latency = pgbench(url, "SELECT 1;\n", 1, seconds=args.floor_seconds)
        emit({**machine, "floor": "PostgreSQL round trip (SELECT 1)", "clients": 1,
              "tps": tps, "latency_ms": latency})
        for via in WAKE_FLOORS:
            emit({**machine, **wake_floor(url, via, WAKE_FLOOR_RATE, max(args.floor_seconds, 3))})
    finally:
        drop_db("kubebyon_bench_floor")
    emit({**machine, "floor": "loopback TCP round trip", **tcp_rtt()})

    # The SQL floor of our own schema: the statements of our enqueue and of our
    # claim + completion, without the network hop to RabbitMQ or any of our code.
    ours = Ours("default")
    count = 400_000
    ours.prepare(count)
    try:
        psql(ours.url, "UPDATE clusters SET id = md5(name)::uuid")  # known ids for pgbench
        psql(ours.url, "CREATE SEQUENCE bench_enqueue; CREATE SEQUENCE bench_claim")
        for clients in (1, 8):
            tps, latency = pgbench(ours.url, ENQUEUE_SQL, clients, seconds=args.floor_seconds)
            emit({**machine, "floor": "our enqueue transaction (pgbench)", "clients": clients,
                  "tps": tps, "latency_ms": latency})
        enqueued = int(psql(ours.url, "SELECT count(*) FROM cluster_jobs"))
        half = enqueued // 2
        for clients in (1, 8):
            tps, latency = pgbench(ours.url, CLAIM_COMPLETE_SQL, clients,
                                   transactions=min(half, 40_000) // clients)
            emit({**machine, "floor": "our claim + complete (pgbench)", "clients": clients,
                  "tps": tps, "latency_ms": latency})
    finally:
        ours.cleanup()


# The first hop of each system's latency, alone, at the latency section's
# rate: our wake-up (RabbitMQ, the production publisher with its confirm, to a
# consumer that only logs and acks) against graphile-worker's (NOTIFY to a
# LISTENing connection), beside a PostgreSQL round trip from an idle
# connection, which a claim adds to either.
WAKE_FLOORS = {
    "amqp": "wake-up: RabbitMQ publish → delivery",
    "notify": "wake-up: pg_notify → LISTEN",
    "sql": "PostgreSQL round trip, idle connection (SELECT 1)",
}
WAKE_FLOOR_RATE = 100


def wake_floor(url, via, rate, seconds):
    tmp = tempfile.mkdtemp(prefix="bench-wake-")
    sent_log, got_log = os.path.join(tmp, "sent.log"), os.path.join(tmp, "got.log")
    env = {"DATABASE_URL": url, "AMQP_URL": AMQP_URL, "AMQP_EXCHANGE": EXCHANGE, "RUST_LOG": "warn"}
    receiver = None
    try:
        if via != "sql":
            receiver = spawn([f"{BIN}/bench-jobs", "wake-receive", "--via", via, "--log", got_log], env)
            time.sleep(2)  # connected and waiting
        run_json([f"{BIN}/bench-jobs", "wake-send", "--via", via, "--rate", str(rate),
                  "--seconds", str(seconds + 1), "--sent", sent_log, "--log", got_log], env)
        sent = read_log([sent_log])
        wait_until(lambda: len(read_log([got_log]).keys() & sent.keys()) >= len(sent), 10, 0.1)
        got = read_log([got_log])
        first = min(times[0] for times in sent.values())
        # The first second is a warm-up, as in the latency section.
        samples = [got[job][0] - times[0] for job, times in sent.items()
                   if job in got and times[0] >= first + 1_000_000]
        if not samples:
            raise RuntimeError(f"wake-up floor via {via}: nothing arrived")
        return {"floor": WAKE_FLOORS[via], "rate_per_s": rate, "measured": len(samples),
                "lost": len(sent.keys() - got.keys()),
                "p50_us": quantile(samples, 0.5), "p99_us": quantile(samples, 0.99)}
    finally:
        if receiver:
            stop(receiver)
        shutil.rmtree(tmp, ignore_errors=True)


def tcp_rtt(rounds=20_000):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def echo():
        conn, _ = server.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while data := conn.recv(64):
            conn.sendall(data)

    threading.Thread(target=echo, daemon=True).start()
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    samples = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        client.sendall(b"x")
        client.recv(64)
        samples.append((time.perf_counter_ns() - t) / 1000)
    client.close()
    return {"p50_us": quantile(samples, 0.5), "p99_us": quantile(samples, 0.99),
            "note": "measured from Python (a few µs of interpreter included)"}


def wait_until(predicate, timeout, interval=0.01):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def burn_once(system, jobs, workers=2, crash=False, timeout=600):
    load_before = loadavg()
    tmp = tempfile.mkdtemp(prefix="bench-burn-")
    logs = [os.path.join(tmp, f"worker-{i}.log") for i in range(workers + 1)]
    system.prepare(jobs)
    enqueued = system.enqueue(jobs=jobs)
    crash_env = {"JOB_LEASE_MS": str(CRASH_LEASE_MS), "SWEEP_INTERVAL_MS": "1000"} if crash else {}
    helpers = system.start_helpers(crash_env) if crash else []
    procs = [system.start_worker(logs[i], i, crash_env) for i in range(workers)]
    progress = LogProgress(logs)
    record = {"bench": "crash" if crash else "burn-down", "system": system.name,
              "variant": system.variant, "jobs": jobs, "workers": workers,
              "prefill_per_s": round(enqueued["per_second"], 1), "load_before": load_before}
    try:
        if crash:
            # Kill one worker once a third of the jobs ran, then start a replacement,
            # as a supervisor would.
            wait_until(lambda: progress.update().runs >= jobs // 3, timeout)
            os.killpg(procs[0].pid, signal.SIGKILL)
            killed_at = time.time()
            procs[0].wait()
            procs.append(system.start_worker(logs[workers], workers, crash_env))
        finished = wait_until(lambda: system.done(jobs, progress), timeout)
        end = time.time()
        seen = read_log(logs)
        starts = [t for ts in seen.values() for t in ts]
        first = min(starts) / 1e6 if starts else end
        executions = sum(len(v) for v in seen.values())
        record.update({
            "finished": finished,
            "seconds": round(end - first, 3),
            "jobs_per_s": round(jobs / (end - first), 1) if finished else None,
            "lost": jobs - len(seen),
            "duplicates": executions - len(seen),
        })
        if crash:
            record["recovered_s_after_kill"] = round(end - killed_at, 3) if finished else None
            if not finished:
                record["note"] = f"not done {timeout} s after the kill"
    finally:
        for proc in procs + helpers:
            stop(proc)
        system.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    record["load_after"] = loadavg()
    return record


def wait_quiet():
    """Lets the previous run's load pass (at most 45 s)."""
    wait_until(lambda: loadavg()[0] <= QUIET_LOAD, 45, 1)


def repeat(make_record, reps):
    """Runs make_record reps times; a run started on a busy machine is run again (once)."""
    out = []
    for _ in range(reps):
        wait_quiet()
        record = make_record()
        if record["load_before"][0] > BUSY_LOAD:
            log("machine was busy; running that repetition again")
            record = make_record()
        emit(record)
        out.append(record)
    return out


def burn(args):
    for jobs in args.jobs:
        # Warm-up, discarded.
        for cls, variant in SYSTEMS:
            burn_once(cls(variant), min(jobs, 2_000))
        for _ in range(args.reps):  # interleaved across systems
            for cls, variant in SYSTEMS:
                repeat(lambda: burn_once(cls(variant), jobs), 1)


def crash(args):
    for _ in range(args.reps):
        for cls, variant in [(Ours, "default"), (Ours, "prefetch-128"), (Graphile, "batched"),
                             (CeleryPeer, "durable")]:
            repeat(lambda: burn_once(cls(variant), args.crash_jobs, crash=True,
                                     timeout=args.crash_timeout), 1)


# The first second of every latency run is sent but not measured: each run
# starts new worker and enqueuer processes, and their first connections (the
# enqueuer opens up to 32 at once at 1,000/s) stall both cores for a few
# hundred milliseconds, which is a process start, not the steady state the
# run is for. Its worst case is kept as `warmup_max_ms`.
LATENCY_WARMUP_S = 1


def latency_once(system, rate, seconds):
    load_before = loadavg()
    tmp = tempfile.mkdtemp(prefix="bench-latency-")
    enqueue_log = os.path.join(tmp, "enqueue.log")
    logs = [os.path.join(tmp, f"worker-{i}.log") for i in range(2)]
    jobs = rate * (seconds + LATENCY_WARMUP_S)
    system.prepare(jobs)
    procs = [system.start_worker(logs[i], i) for i in range(2)]
    record = {"bench": "latency", "system": system.name, "variant": system.variant,
              "rate_per_s": rate, "seconds": seconds, "warmup_s": LATENCY_WARMUP_S,
              "load_before": load_before}
    try:
        time.sleep(3)  # workers connected and idle
        sent = system.enqueue(rate=rate, seconds=seconds + LATENCY_WARMUP_S, log_path=enqueue_log)
        record["enqueue_failed"] = sent.get("failed", 0)
        progress = LogProgress(logs)
        wait_until(lambda: len(progress.update().jobs) >= jobs, 120, 0.5)
        committed = read_log([enqueue_log])
        started = read_log(logs)
        first = min(times[0] for times in committed.values())
        measured_from = first + LATENCY_WARMUP_S * 1_000_000
        samples, warmup = [], []
        for job, times in committed.items():
            if job in started:
                ms = (min(started[job]) - times[0]) / 1000
                (samples if times[0] >= measured_from else warmup).append(ms)
        record.update({
            "jobs": jobs, "measured": len(samples),
            "p50_ms": round(quantile(samples, 0.5), 3),
            "p99_ms": round(quantile(samples, 0.99), 3),
            "max_ms": round(max(samples), 3),
            "warmup_max_ms": round(max(warmup, default=0.0), 3),
        })
    finally:
        for proc in procs:
            stop(proc)
        system.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    record["load_after"] = loadavg()
    return record


def latency(args):
    for rate in args.rates:
        latency_once(Ours("default"), rate, 3)  # warm-up, discarded
        for _ in range(args.latency_reps or args.reps):
            for cls, variant in SYSTEMS:
                repeat(lambda: latency_once(cls(variant), rate, args.latency_seconds), 1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=20):
    def ready():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return True
        except OSError:
            return False
    if not wait_until(ready, timeout, 0.05):
        raise RuntimeError(f"nothing listens on {port}")


def wrk(url, connections, seconds, script=None):
    args = ["wrk", "-t", "2" if connections > 1 else "1", "-c", str(connections),
            "-d", f"{seconds}s", "--latency"]
    if script:
        args += ["-s", script]
    out = subprocess.run(args + [url], check=True, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1))
    p50 = re.search(r"50%\s+([0-9.]+)(us|ms|s)", out)
    p99 = re.search(r"99%\s+([0-9.]+)(us|ms|s)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    to_ms = lambda m: float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
    return {"requests_per_s": rps, "p50_ms": to_ms(p50), "p99_ms": to_ms(p99),
            "non_2xx": int(non2xx.group(1)) if non2xx else 0}


def http(args):
    url = fresh_db("kubebyon_bench_http")
    tmp = tempfile.mkdtemp(prefix="bench-http-")
    procs = []
    try:
        env = {"DATABASE_URL": url, "AMQP_URL": AMQP_URL, "AMQP_EXCHANGE": EXCHANGE,
               "RUST_LOG": "warn", "KUBEBYON_AUTH_MODE": "accounts",
               "KUBEBYON_INSECURE_COOKIES": "true"}
        key = subprocess.run([f"{BIN}/bench-http-setup"], env={**os.environ, **env}, check=True,
                             capture_output=True, text=True).stdout.strip()
        floor_port, local_port, api_port = free_port(), free_port(), free_port()
        procs.append(spawn([f"{BIN}/bench-axum-floor"], {"PORT": str(floor_port)}))
        # The cluster routes are measured on their own function, as deployed.
        # `local` (only its /healthz is measured) gets a database and an
        # exchange of its own: on the routes' ones it would run every created
        # cluster's job against its simulated host, on the same two cores,
        # while wrk is measuring.
        local_env = {**env, "DATABASE_URL": fresh_db("kubebyon_bench_http_local"),
                     "AMQP_EXCHANGE": EXCHANGE + ".local", "PORT": str(local_port)}
        procs.append(spawn([f"{BIN}/local"], local_env))
        procs.append(spawn([f"{BIN}/api-clusters"], {**env, "PORT": str(api_port)}))
        for port in (floor_port, local_port, api_port):
            wait_port(port)
        auth = os.path.join(tmp, "auth.lua")
        with open(auth, "w") as f:
            f.write(f'wrk.headers["Authorization"] = "Bearer {key}"\n')
        create = os.path.join(tmp, "create.lua")
        with open(create, "w") as f:
            f.write(CREATE_LUA.replace("KEY", key))
        targets = [
            ("axum floor /healthz", f"http://127.0.0.1:{floor_port}/healthz", None),
            ("local /healthz", f"http://127.0.0.1:{local_port}/healthz", None),
            ("api-clusters /healthz", f"http://127.0.0.1:{api_port}/healthz", None),
            ("api-clusters GET /api/console/clusters (API key)",
             f"http://127.0.0.1:{api_port}/api/console/clusters", auth),
            ("api-clusters POST /api/console/clusters (API key)",
             f"http://127.0.0.1:{api_port}/api/console/clusters", create),
        ]
        for connections in (1, 64):
            for name, target, script in targets:
                wrk(target, connections, 2, script)  # warm-up, discarded
        for _ in range(args.reps):
            for connections in (1, 64):
                for name, target, script in targets:
                    wait_quiet()
                    before = loadavg()
                    result = wrk(target, connections, args.http_seconds, script)
                    emit({"bench": "http", "target": name, "connections": connections,
                          **result, "load_before": before, "load_after": loadavg()})
    finally:
        for proc in procs:
            stop(proc)
        drop_db("kubebyon_bench_http")
        drop_db("kubebyon_bench_http_local")
        shutil.rmtree(tmp, ignore_errors=True)


# Each request creates a cluster under a new name (a random number per wrk
# thread and run, then a counter); the job it enqueues is published to RabbitMQ.
CREATE_LUA = """
local counter = 0
local thread_id = 0
local threads = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
local run = 0
function init(args) thread_id = id; math.randomseed(os.time() + id); run = math.random(1, 999999) end
request = function()
  counter = counter + 1
  local body = string.format('{"name":"w%d-%d-%d","workload_cpu_limit_milli_cores":2000,"workload_memory_limit_mib":4096}', run, thread_id, counter)
  return wrk.format("POST", nil, {["Authorization"] = "Bearer KEY",
    ["Content-Type"] = "application/json"}, body)
end
"""


def coldstart(args):
    url = fresh_db("kubebyon_bench_cold")
    env = {"DATABASE_URL": url, "AMQP_URL": AMQP_URL, "AMQP_EXCHANGE": EXCHANGE}
    try:
        subprocess.run([f"{BIN}/bench-jobs", "prepare", "--clusters", "0"],
                       env={**os.environ, **env}, check=True)
        functions = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ROOT, "functions", "*")))
        # `cargo lambda watch --only-lambda-apis`: the emulator's Runtime and
        # invoke APIs, with the function started by bench-coldstart.
        port = free_port()
        emulator_url = f"http://127.0.0.1:{port}"
        watch = spawn([os.path.join(PEERS, "venv", "bin", "cargo-lambda"), "lambda", "watch",
                       "--only-lambda-apis", "-A", "127.0.0.1", "-P", str(port)], cwd=ROOT)
        wait_port(port)
        for function in functions:
            binary = os.path.join(BIN, function)
            modes = []
            if function.startswith("api-") or function in ("join", "local"):
                modes = ["http"] + (["lambda-http"] if function != "local" else [])
            elif function.startswith("job-"):
                modes = ["lambda-job"]
            elif function == "sweep":
                modes = ["lambda-schedule"]
            for mode in modes:
                # Lambda modes twice: under our loopback Runtime API, then
                # under cargo-lambda's emulator.
                for runtime_api in [[]] + ([["--emulator", emulator_url]] if mode != "http" else []):
                    wait_quiet()
                    before = loadavg()
                    result = run_json([f"{BIN}/bench-coldstart", "--binary", binary, "--mode", mode,
                                       "--runs", str(args.cold_runs), *runtime_api], env)
                    emit({**result, "load_before": before, "load_after": loadavg()})
        if shutil.which("hyperfine"):
            out = os.path.join(tempfile.mkdtemp(), "hyperfine.json")
            cmd = f"{BIN}/bench-coldstart --binary {BIN}/api-clusters --mode http --runs 1"
            subprocess.run(["hyperfine", "-N", "--warmup", "3", "--runs", str(args.cold_runs),
                            "--export-json", out, cmd], env={**os.environ, **env}, check=True,
                           capture_output=True)
            with open(out) as f:
                result = json.load(f)["results"][0]
            emit({"bench": "cold-start (hyperfine)", "function": "api-clusters", "mode": "http",
                  "command": "bench-coldstart --runs 1 (spawn, first answer, kill, wait)",
                  "median_ms": round(result["median"] * 1000, 3),
                  "min_ms": round(result["min"] * 1000, 3), "max_ms": round(result["max"] * 1000, 3)})
        stop(watch)
    finally:
        drop_db("kubebyon_bench_cold")


def delete_queues():
    """The benchmark's queues, left empty in RabbitMQ otherwise."""
    if not shutil.which("rabbitmqctl"):
        return
    listed = subprocess.run(["rabbitmqctl", "-q", "list_queues", "name"], capture_output=True, text=True)
    for name in listed.stdout.split():
        if name.startswith(EXCHANGE):
            subprocess.run(["rabbitmqctl", "-q", "delete_queue", name], capture_output=True)


def summary():
    groups = {}
    for r in RESULTS:
        if r["bench"] in ("burn-down", "crash"):
            key = (r["bench"], r["system"], r["variant"], r["jobs"])
            groups.setdefault(key, []).append(r.get("jobs_per_s") or 0)
        elif r["bench"] == "latency":
            key = ("latency p50/p99 ms", r["system"], r["variant"], r["rate_per_s"])
            groups.setdefault(key, []).append(f'{r["p50_ms"]}/{r["p99_ms"]}')
        elif r["bench"] == "http":
            key = ("http req/s", r["target"], r["connections"])
            groups.setdefault(key, []).append(r["requests_per_s"])
    print("\nSummary (median, min–max):", file=sys.stderr)
    for key, values in groups.items():
        if all(isinstance(v, (int, float)) for v in values):
            print(f"  {key}: {statistics.median(values):.1f} ({min(values):.1f}–{max(values):.1f})",
                  file=sys.stderr)
        else:
            print(f"  {key}: {values}", file=sys.stderr)


CRASH_LEASE_MS = 10_000


def main():
    global RESULTS_PATH
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="floors,burn,latency,crash,http,coldstart")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--systems", default="all",
                        help="e.g. kubebyon:default,graphile-worker:batched,celery:durable")
    parser.add_argument("--jobs", default="20000,100000")
    parser.add_argument("--rates", default="100,1000")
    parser.add_argument("--latency-seconds", type=int, default=30)
    parser.add_argument("--latency-reps", type=int, help="repetitions of the latency runs (default --reps)")
    parser.add_argument("--crash-jobs", type=int, default=20_000)
    parser.add_argument("--crash-timeout", type=int, default=90)
    parser.add_argument("--http-seconds", type=int, default=10)
    parser.add_argument("--floor-seconds", type=int, default=10)
    parser.add_argument("--cold-runs", type=int, default=20)
    args = parser.parse_args()
    args.jobs = [int(j) for j in args.jobs.split(",")]
    args.rates = [int(r) for r in args.rates.split(",")]
    global SYSTEMS
    SYSTEMS = [(cls, variant) for cls, variant in SYSTEMS
               if args.systems == "all" or f"{cls.name}:{variant}" in args.systems.split(",")]
    os.makedirs(os.path.join(ROOT, "target", "bench-results"), exist_ok=True)
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    RESULTS_PATH = os.path.join(ROOT, "target", "bench-results", f"backbone-{stamp}.jsonl")
    emit({"bench": "machine", "cores": os.cpu_count(), "kernel": os.uname().release,
          "postgres": psql(SERVER_URL, "SHOW server_version"), "load": loadavg(),
          "started": stamp})
    sections = {"floors": floors, "burn": burn, "latency": latency, "crash": crash,
                "http": http, "coldstart": coldstart}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        for name in args.only.split(","):
            log(f"section {name}")
            sections[name](args)
    finally:
        stop_all()
        delete_queues()
        summary()
        log(f"results in {RESULTS_PATH}")


if __name__ == "__main__":
    main()
