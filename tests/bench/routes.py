#!/usr/bin/env python3
"""The route benchmark at fleet data: the GET routes users and administrators
call most, each at 1 and at 64 concurrent connections, beside two floors
measured in the same run: the HTTP floor (the function's own /healthz) and the
route's main SQL statement run alone at the same concurrency (pgbench, its
statement prepared as the platform prepares it).

Run on a scratch database that holds the fleet data (tests/bench/fleet.sql),
with the functions built optimised:

    cargo build --profile perf -p api-clusters -p api-nodes -p api-admin \
        -p api-account -p api-billing -p api-organizations -p bench --bins
    python3 tests/bench/routes.py --database-url "$FLEET_DATABASE_URL" [--seconds 5] [--only text]

Needs wrk and pgbench (Debian's `wrk`; `postgresql` has pgbench). Prints one JSON line per measurement, then a Markdown
table. GET routes only: they change nothing, so a run can be repeated.
"""

import argparse
import base64
import glob
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FUNCTIONS = ["api-clusters", "api-nodes", "api-admin", "api-account", "api-billing",
             "api-organizations"]


def routes(ids):
    """(name, function, path, caller, main statement with its values)."""
    big, org = ids["big_cluster"], ids["organization"]
    return [
        ("clusters, page 1 (5,000-cluster user)", "api-clusters", "/api/console/clusters", "big",
         "SELECT * FROM clusters WHERE organization_id = :org AND deleted_at IS NULL "
         "AND (created_at, id) < (:far, :last) "
         "ORDER BY created_at DESC, id DESC LIMIT 51"),
        ("clusters, page 1 (small user)", "api-clusters", "/api/console/clusters", "small", None),
        ("cluster detail", "api-clusters", f"/api/console/clusters/{big}", "big",
         "SELECT * FROM clusters WHERE id = :cluster AND deleted_at IS NULL"),
        ("cluster operations", "api-clusters", f"/api/console/clusters/{big}/operations", "big",
         "SELECT * FROM cluster_operations WHERE cluster_id = :cluster "
         "ORDER BY created_at DESC, id DESC LIMIT 100"),
        ("cluster jobs", "api-clusters", f"/api/console/clusters/{big}/jobs", "big", None),
        ("metrics 24 h", "api-clusters", f"/api/console/clusters/{big}/metrics", "big",
         "SELECT * FROM control_plane_metrics_rollups WHERE cluster_id = :cluster "
         "AND bucket_seconds = 600 AND starts_at >= now() - interval '1 day'"),
        ("metrics 7 d", "api-clusters",
         f"/api/console/clusters/{big}/metrics?from=" + urllib.parse.quote(
             time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 7 * 86400))),
         "big",
         "SELECT * FROM control_plane_metrics_rollups WHERE cluster_id = :cluster "
         "AND bucket_seconds = 3600 AND starts_at >= now() - interval '7 days'"),
        ("nodes of a cluster", "api-nodes", f"/api/console/clusters/{big}/nodes", "big",
         "SELECT * FROM nodes WHERE cluster_id = :cluster AND name > '' AND deleted_at IS NULL "
         "ORDER BY name LIMIT 101"),
        ("node events", "api-nodes", f"/api/console/node-events?cluster_id={big}", "big",
         "SELECT * FROM node_events WHERE cluster_id = :cluster AND type = ANY(:types) "
         "ORDER BY observed_at DESC, id DESC LIMIT 100"),
        ("node timeline 24 h", "api-nodes",
         f"/api/console/clusters/{big}/nodes/{ids['node']}/timeline", "big", None),
        ("tokens", "api-nodes", f"/api/console/clusters/{big}/tokens", "big", None),
        ("entitlements (5,000-cluster user)", "api-account", "/api/console/account/entitlements",
         "big", "SELECT * FROM organization_usage WHERE organization_id = :org"),
        ("entitlements (small user)", "api-account", "/api/console/account/entitlements",
         "small", None),
        ("account activity", "api-account", "/api/console/account/activity", "big", None),
        ("account sign-ins", "api-account", "/api/console/account/logins", "big", None),
        ("organization activity (5,000 clusters)", "api-organizations",
         f"/api/console/organizations/{org}/activity", "big",
         "SELECT * FROM audit_events WHERE organization_id = :org AND id < :maxid "
         "ORDER BY id DESC LIMIT 100"),
        ("billing orders", "api-billing", "/api/console/billing/orders", "big", None),
        ("admin users", "api-admin", "/api/console/admin/users", "admin",
         "SELECT * FROM users WHERE deleted_at IS NULL AND (created_at, id) < (:far, :last) "
         "ORDER BY created_at DESC, id DESC LIMIT 100"),
        ("admin users ?q=", "api-admin", "/api/console/admin/users?q=user%2077", "admin",
         "SELECT * FROM users WHERE deleted_at IS NULL "
         "AND (email::text ILIKE '%' || :q || '%' OR display_name ILIKE '%' || :q || '%') "
         "AND status = ANY(:statuses) AND role = ANY(:roles) AND (created_at, id) < (:far, :last) "
         "ORDER BY created_at DESC, id DESC LIMIT 100"),
        ("admin users ?role=admin", "api-admin", "/api/console/admin/users?role=admin", "admin",
         "SELECT * FROM users WHERE deleted_at IS NULL AND role = 'admin' "
         "AND status = ANY(:statuses) AND (created_at, id) < (:far, :last) "
         "ORDER BY created_at DESC, id DESC LIMIT 100"),
        ("admin orders", "api-admin", "/api/console/admin/orders", "admin",
         "SELECT * FROM orders o JOIN plans p ON p.id = o.plan_id WHERE o.created_at < :far "
         "ORDER BY o.created_at DESC, o.id DESC LIMIT 100"),
        ("admin cluster jobs", "api-admin", "/api/console/admin/cluster-jobs", "admin",
         "SELECT * FROM cluster_jobs ORDER BY created_at DESC, id DESC LIMIT 100"),
        ("admin cluster jobs ?status=failed", "api-admin",
         "/api/console/admin/cluster-jobs?status=failed", "admin",
         "SELECT * FROM cluster_jobs WHERE status = :failed "
         "ORDER BY created_at DESC, id DESC LIMIT 100"),
        ("admin audit events", "api-admin", "/api/console/admin/audit-events", "admin",
         "SELECT * FROM audit_events WHERE id < :maxid ORDER BY id DESC LIMIT 100"),
        ("admin audit events of one user", "api-admin",
         f"/api/console/admin/audit-events?actor_user_id={ids['big']}", "admin", None),
    ]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def wrk(url, connections, seconds, header=None):
    args = ["wrk", "-t", "2" if connections > 1 else "1", "-c", str(connections),
            "-d", f"{seconds}s", "--latency", "--timeout", "10s"]
    if header:
        args += ["-H", header]
    out = subprocess.run(args + [url], check=True, capture_output=True, text=True).stdout
    to_ms = lambda m: float(m.group(1)) * {"us": 0.001, "ms": 1, "s": 1000}[m.group(2)]
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {"rps": float(re.search(r"Requests/sec:\s+([0-9.]+)", out).group(1)),
            "p50": to_ms(re.search(r"50%\s+([0-9.]+)(us|ms|s)", out)),
            "p99": to_ms(re.search(r"99%\s+([0-9.]+)(us|ms|s)", out)),
            "non_2xx": int(non2xx.group(1)) if non2xx else 0}


def pgbench(url, sql, connections, seconds, tmp, variables):
    script = os.path.join(tmp, "statement.sql")
    with open(script, "w") as f:
        f.write(sql + ";\n")
    for old in os.listdir(tmp):
        if old.startswith("pgbench_log"):
            os.remove(os.path.join(tmp, old))
    defines = [arg for name, value in variables.items() for arg in ("-D", f"{name}={value}")]
    run = subprocess.run(["pgbench", "-n", "-M", "prepared", "-f", script, *defines, "-c", str(connections),
                          "-j", str(min(connections, 2)), "-T", str(seconds), "-l",
                          "--log-prefix", os.path.join(tmp, "pgbench_log"), url],
                         capture_output=True, text=True)
    if run.returncode:
        # Recorded, not fatal: the route's own figures stand without it.
        return {"error": f"pgbench exited {run.returncode}: {run.stderr.strip()[-200:]}"}
    latencies = []
    for name in os.listdir(tmp):
        if name.startswith("pgbench_log"):
            with open(os.path.join(tmp, name)) as f:
                latencies += [int(line.split()[2]) / 1000 for line in f]
    latencies.sort()
    q = lambda p: latencies[min(len(latencies) - 1, int(p * len(latencies)))]
    return {"rps": len(latencies) / seconds, "p50": q(0.5), "p99": q(0.99)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--bin", default=os.path.join(ROOT, "target", "perf"))
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--only", default="", help="a regular expression the routes' names match")
    args = parser.parse_args()
    # Debian keeps pgbench with the server's programs, off the PATH.
    os.environ["PATH"] += "".join(":" + d for d in sorted(glob.glob("/usr/lib/postgresql/*/bin")))
    for tool in ("wrk", "pgbench"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is missing (Debian: apt-get install wrk postgresql)")

    env = {**os.environ, "DATABASE_URL": args.database_url}
    ids = json.loads(subprocess.run([os.path.join(args.bin, "bench-fleet-setup")], env=env,
                                    check=True, capture_output=True, text=True).stdout)
    tmp = tempfile.mkdtemp(prefix="bench-routes-")
    procs, ports = [], {}
    try:
        for function in FUNCTIONS:
            ports[function] = free_port()
            procs.append(subprocess.Popen(
                [os.path.join(args.bin, function)],
                env={**env, "PORT": str(ports[function]), "RUST_LOG": "warn",
                     "AMQP_URL": os.environ.get("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f"),
                     "AMQP_EXCHANGE": "kubebyon.bench.routes",
                     "KUBEBYON_AUTH_MODE": "accounts",
                     # Six functions and pgbench's 64 clients within
                     # PostgreSQL's 100 connections.
                     "DATABASE_MAX_CONNECTIONS": "4",
                     "KUBEBYON_SETTINGS_KEY": base64.b64encode(secrets.token_bytes(32)).decode()},
                start_new_session=True, stdout=subprocess.DEVNULL,
                stderr=open(os.path.join(tmp, function + ".log"), "w")))
        for port in ports.values():
            wait_port(port)
        # The statements' parameters, bound as the platform binds them
        # (`-M prepared`: each `:name` is a parameter of the prepared
        # statement, so PostgreSQL plans it as it plans the platform's).
        variables = {"org": ids["organization"], "cluster": ids["big_cluster"],
                     "far": "9999-12-31T23:59:59Z", "last": "ffffffff-ffff-ffff-ffff-ffffffffffff",
                     "maxid": 2**63 - 1, "types": "{joined,ready,not_ready,pending,offline,deleted}",
                     "statuses": "{active,disabled}", "roles": "{user,admin}", "q": "user 77",
                     "failed": "failed"}
        rows = []
        targets = [("HTTP floor: /healthz", "api-clusters", "/healthz", None, None)]
        targets += [r for r in routes(ids) if re.search(args.only, r[0])]
        for name, function, path, caller, sql in targets:
            url = f"http://127.0.0.1:{ports[function]}{path}"
            header = f"Authorization: Bearer {ids[caller + '_key']}" if caller else None
            wrk(url, 8, 1, header)  # warm-up, discarded
            row = {"route": name, "path": path}
            for connections in (1, 64):
                result = wrk(url, connections, args.seconds, header)
                if result["non_2xx"]:
                    sys.exit(f"{name}: {result['non_2xx']} answers were not 2xx")
                row[f"http_{connections}"] = result
                if sql:
                    row[f"sql_{connections}"] = pgbench(args.database_url, sql, connections,
                                                       args.seconds, tmp, variables)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=15)

    print("\n| route | p50 / p99 at 1 conn | its SQL alone: p99 at 1 | req/s at 64 | its SQL alone: /s at 64 |")
    print("|---|---|---|---|---|")
    for row in rows:
        h1, h64 = row["http_1"], row["http_64"]
        s1, s64 = row.get("sql_1"), row.get("sql_64")
        sql_p99 = f"{s1['p99']:.2f} ms" if s1 and "p99" in s1 else "–"
        sql_rps = f"{s64['rps']:,.0f}" if s64 and "rps" in s64 else "–"
        print(f"| {row['route']} | {h1['p50']:.2f} / {h1['p99']:.2f} ms | {sql_p99} | "
              f"{h64['rps']:,.0f} | {sql_rps} |")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
