#!/usr/bin/env python3
"""Checks every file that names the platform's functions against the
manifest, `functions.toml`:

- the crates under functions/ (one entry each, and no entry without one);
- the Helm chart's default values: `http`, `jobs` and `schedules` (replicas,
  host, mode, cron);
- the AWS template: one function per entry that runs on Lambda (its
  `Binary`), a schedule run at its interval or once a minute, the
  scheduler's floor;
- the image's binary list (infra/Dockerfile);
- `local`'s dependencies (every HTTP, job and schedule function runs in it);
- each job function's job type (`JobType` in shared/src/domain.rs) and each
  schedule's default interval (shared/src/config.rs);
- docs/architecture.md's table of functions.

Exits 1 naming each disagreement and the file to change; `--self-test`
checks that planted disagreements are caught.
"""

import os
import re
import sys
import tempfile
import tomllib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def values_section(text, section):
    """`name: { key: value, ... }` lines of a top-level section of values.yaml."""
    out, inside = {}, False
    for line in text.splitlines():
        if re.match(rf"^{section}:\s*$", line):
            inside = True
            continue
        if inside and line and not line.startswith((" ", "#")):
            break
        m = re.match(r"^\s+([a-z0-9-]+):\s*\{(.*)\}\s*$", line) if inside else None
        if m:
            fields = dict(re.findall(r"([a-z_]+):\s*(\"[^\"]*\"|[^,]+?)\s*(?:,|$)", m.group(2)))
            out[m.group(1)] = {k: v.strip('"') for k, v in fields.items()}
    return out


def template_functions(text):
    """Binary → the ScheduleExpression of its resource, if it has one."""
    out = {}
    blocks = re.split(r"\n  (?=[A-Z][A-Za-z0-9]*:\n)", text)
    for block in blocks:
        binary = re.search(r"^\s+Binary:\s*([a-z0-9-]+)\s*$", block, re.M)
        if binary:
            rate = re.search(r"ScheduleExpression:\s*(rate\([^)]*\))", block)
            out[binary.group(1)] = rate.group(1) if rate else None
    return out


def rate_for(interval_ms):
    minutes = max(1, interval_ms // 60000)
    return f"rate({minutes} minute{'s' if minutes > 1 else ''})"


def check(root):
    problems = []
    manifest = tomllib.loads(read(root, "functions.toml"))
    say = lambda where, what: problems.append(f"{where}: {what}")

    crates = {d for d in os.listdir(os.path.join(root, "functions"))
              if os.path.isfile(os.path.join(root, "functions", d, "Cargo.toml"))}
    for name in sorted(crates - manifest.keys()):
        say("functions.toml", f"functions/{name} has no entry")
    for name in sorted(manifest.keys() - crates):
        say("functions.toml", f"{name} has no crate under functions/")
    of_kind = lambda kind: {n: f for n, f in manifest.items() if f.get("kind") == kind}
    for name, f in manifest.items():
        if f.get("kind") not in ("http", "job", "schedule", "tool"):
            say("functions.toml", f"{name}: kind must be http, job, schedule or tool")

    values = read(root, "infra/helm/kubebyon/values.yaml")
    for section, kind, keys in [("http", "http", ["replicas", "host"]),
                                ("jobs", "job", ["replicas"]),
                                ("schedules", "schedule", ["mode", "host", "cron"])]:
        listed = values_section(values, section)
        wanted = of_kind(kind)
        for name in sorted(wanted.keys() - listed.keys()):
            say("infra/helm/kubebyon/values.yaml", f"`{section}` lacks {name}")
        for name in sorted(listed.keys() - wanted.keys()):
            say("infra/helm/kubebyon/values.yaml", f"`{section}` lists {name}, which functions.toml does not")
        for name in sorted(wanted.keys() & listed.keys()):
            for key in keys:
                want = wanted[name].get(key)
                if want is None:
                    continue
                want = str(want).lower()
                if listed[name].get(key) != want:
                    say("infra/helm/kubebyon/values.yaml",
                        f"{section}.{name}.{key} is {listed[name].get(key)!r}, functions.toml says {want!r}")

    deployed = template_functions(read(root, "infra/aws/template.yaml"))
    on_lambda = {n for n, f in manifest.items() if f.get("lambda", True)}
    for name in sorted(on_lambda - deployed.keys()):
        say("infra/aws/template.yaml", f"no function with `Binary: {name}`")
    for name in sorted(deployed.keys() - on_lambda):
        say("infra/aws/template.yaml", f"`Binary: {name}` is not a Lambda function of functions.toml")
    for name, f in sorted(of_kind("schedule").items()):
        if name in deployed and deployed[name] != rate_for(f["interval_ms"]):
            say("infra/aws/template.yaml",
                f"{name} runs at {deployed[name]}; functions.toml's {f['interval_ms']} ms is {rate_for(f['interval_ms'])}")

    image = re.search(r"for f in ([^;]+); do", read(root, "infra/Dockerfile").replace("\\\n", " "))
    binaries = set(image.group(1).split()) if image else set()
    for name in sorted(manifest.keys() - binaries):
        say("infra/Dockerfile", f"the image's binary list lacks {name}")
    for name in sorted(binaries - manifest.keys()):
        say("infra/Dockerfile", f"the image's binary list names {name}, which functions.toml does not")

    local = read(root, "functions/local/Cargo.toml")
    for name, f in sorted(manifest.items()):
        if f.get("kind") != "tool" and not re.search(rf"^{re.escape(name)}\.workspace = true", local, re.M):
            say("functions/local/Cargo.toml", f"`local` does not depend on {name}")

    domain = read(root, "shared/src/domain.rs")
    for name, f in sorted(of_kind("job").items()):
        if f'=> "{f.get("job_type")}"' not in domain:
            say("shared/src/domain.rs", f"{name}'s job type {f.get('job_type')!r} is not a JobType")

    config = read(root, "shared/src/config.rs")
    for name, f in sorted(of_kind("schedule").items()):
        m = re.search(rf'"{re.escape(f["interval_env"])}",\s*([0-9_]+)\)', config)
        default = int(m.group(1).replace("_", "")) if m else None
        if default != f["interval_ms"]:
            say("shared/src/config.rs",
                f"{f['interval_env']} defaults to {default}, functions.toml says {f['interval_ms']} for {name}")

    architecture = read(root, "docs/architecture.md")
    for name in sorted(manifest):
        prefix, _, suffix = name.rpartition("-")
        if f"`functions/{name}`" not in architecture and not (
                re.search(rf"`functions/{re.escape(prefix)}-[a-z]+`[^\n]*`-{re.escape(suffix)}`", architecture)):
            say("docs/architecture.md", f"the table of functions has no row for functions/{name}")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        for name in ["api-a", "job-b", "sync-c", "extra"]:
            write(f"functions/{name}/Cargo.toml", "")
        write("functions.toml", '[api-a]\nkind = "http"\nhost = true\nreplicas = 2\n'
              '[job-b]\nkind = "job"\njob_type = "b_job"\nreplicas = 1\n'
              '[sync-c]\nkind = "schedule"\nmode = "loop"\nhost = false\n'
              'interval_env = "C_MS"\ninterval_ms = 120000\n'
              '[gone]\nkind = "tool"\nlambda = false\n[local]\nkind = "tool"\nlambda = false\n')
        write("infra/helm/kubebyon/values.yaml", "http:\n  api-a: { replicas: 3, host: true }\n"
              "jobs:\n  job-b: { replicas: 1 }\n  job-x: { replicas: 1 }\n"
              "schedules:\n  sync-c: { mode: loop, host: false }\n")
        write("infra/aws/template.yaml", "Resources:\n  A:\n    Metadata:\n      BuildProperties:\n        Binary: api-a\n"
              "  C:\n    Metadata:\n      BuildProperties:\n        Binary: sync-c\n"
              "    Properties:\n      Events:\n        E:\n          Properties:\n            ScheduleExpression: rate(1 minute)\n")
        write("infra/Dockerfile", "RUN for f in api-a job-b gone local; do cp; done\n")
        write("functions/local/Cargo.toml", "api-a.workspace = true\njob-b.workspace = true\n")
        write("shared/src/domain.rs", 'Self::B => "b_job",\n')
        write("shared/src/config.rs", 'positive_millis(source, "C_MS", 60_000)?,\n')
        write("docs/architecture.md", "| `functions/api-a` | |\n| `functions/job-a`, `-b` | |\n| `functions/local` | |\n")
        found = "\n".join(check(root))
    expected = [
        "functions.toml: functions/extra has no entry",
        "functions.toml: gone has no crate under functions/",
        "infra/helm/kubebyon/values.yaml: http.api-a.replicas is '3', functions.toml says '2'",
        "infra/helm/kubebyon/values.yaml: `jobs` lists job-x, which functions.toml does not",
        "infra/aws/template.yaml: no function with `Binary: job-b`",
        "infra/aws/template.yaml: sync-c runs at rate(1 minute); functions.toml's 120000 ms is rate(2 minutes)",
        "infra/Dockerfile: the image's binary list lacks sync-c",
        "functions/local/Cargo.toml: `local` does not depend on sync-c",
        "shared/src/config.rs: C_MS defaults to 60000, functions.toml says 120000 for sync-c",
        "docs/architecture.md: the table of functions has no row for functions/sync-c",
    ]
    missing = [e for e in expected if e not in found]
    if missing or "no row for functions/job-b" in found or "no row for functions/api-a" in found:
        print("self-test failed; found:\n" + found, file=sys.stderr)
        sys.exit(1)
    print("check-functions self-test: planted disagreements caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    problems = check(ROOT)
    if problems:
        print("functions.toml and the files that name functions disagree:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print("Change the file named, or the manifest when it is the manifest that is wrong.", file=sys.stderr)
        sys.exit(1)
    print(f"functions.toml: {len(tomllib.loads(read(ROOT, 'functions.toml')))} functions, every file agrees")


if __name__ == "__main__":
    main()
