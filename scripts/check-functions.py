#!/usr/bin/env python3
"""The platform's functions, from one manifest: `functions.toml`.

Generated from it (`--write` writes them; CI fails when one is stale and
names this command):

- `local`'s registry of every function (functions/local/src/registry.rs):
  the OpenAPI document's parts, the routers, the schedules, the job handlers;
- the route table the chart's HTTPRoute and Ingress read
  (infra/helm/kubebyon/routes.yaml);
- the console's pages (any function's `pages` and `public_pages`): their
  paths for its server (functions/console/src/pages.rs) and the app's table
  of pages (functions/console/app/src/pageTable.ts: path, component, link);
- the marked regions of the Helm values (`http`, `jobs`, `schedules`), the
  compose file's services, the workspace's and `local`'s dependencies, and
  the AWS template's HTTP functions (a resource each, its HTTP API events
  from its routes, `timeout` and `aws_note` from its entry).

Checked against it (the check names the file to change):

- the crates under functions/ (one entry each, and no entry without one);
- the AWS template: one function per entry that runs on Lambda (its
  `Binary`), a schedule run at its interval or once a minute, the
  scheduler's floor;
- each job function's job type (a `JobKind` a capability declares under
  shared/src) and each schedule's interval (its `SCHEDULE`'s `Millis`, in
  its crate);
- docs/architecture.md's table of functions.

Routes: `[METHOD ]PATH`, the method `ANY` when left out; a path ending in
`/**` is that path and everything under it; `{name}` is one path segment.

`--self-test` checks that planted disagreements are caught.
"""

import difflib
import os
import re
import sys
import tempfile
import tomllib

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
COMMAND = "python3 scripts/check-functions.py --write"
HEADER = f"generated from functions.toml by `{COMMAND}`: do not edit"


def read(root, path):
    with open(os.path.join(root, path), encoding="utf-8") as f:
        return f.read()


def of_kind(manifest, kind):
    return {n: f for n, f in manifest.items() if f.get("kind") == kind}


def snake(name):
    return name.replace("-", "_")


# Routes ----------------------------------------------------------------------

def parse_route(route):
    """(method, path, under): `under` when the route covers every path below."""
    method, _, path = route.rpartition(" ")
    under = path.endswith("/**")
    if under:
        path = path[:-3]
    return method or "ANY", path, under


SEGMENT = "[^/]+"


def as_regex(path):
    return "/".join(SEGMENT if re.fullmatch(r"\{[a-z_]+\}", s) else re.escape(s).replace("\\-", "-")
                    for s in path.split("/"))


def route_rules(manifest):
    """Every HTTP function's routes as the chart's routers take them: the
    Gateway API match and the Ingress path (a regular expression matched
    from the start, as ingress-nginx's use-regex does), most specific first."""
    rules = []
    for name, f in of_kind(manifest, "http").items():
        for route in f.get("routes", []):
            _, path, under = parse_route(route)
            params = "{" in path
            if under and path == "":
                gateway, ingress, rank = ("PathPrefix", "/"), "/", (3, 0)
            elif under:
                gateway = ("RegularExpression", as_regex(path) + "(/.*)?") if params else ("PathPrefix", path)
                ingress, rank = as_regex(path) + "(/.*)?$", (1 if params else 2, -len(path))
            else:
                gateway = ("RegularExpression", as_regex(path)) if params else ("Exact", path)
                ingress, rank = as_regex(path) + "$", (1 if params else 0, -len(path))
            rules.append((rank, path, gateway, ingress, name))
    rules.sort(key=lambda r: (r[0], r[1]))
    return [(g, i, n) for _, _, g, i, n in rules]


def yaml_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def routes_yaml(manifest):
    out = [f"# {HEADER}.",
           "# Each public path's function, most specific first: templates/httproute.yaml",
           "# and templates/ingress.yaml route by it; tests/tests/e2e/routing.rs checks",
           "# it against the routers."]
    for (kind, value), ingress, name in route_rules(manifest):
        out += [f"- function: {name}", f"  match: {kind}", f"  value: {yaml_str(value)}", f"  ingress: {yaml_str(ingress)}"]
    return "\n".join(out) + "\n"


# Generated files and regions ------------------------------------------------

def registry_rs(manifest):
    http = of_kind(manifest, "http")
    documented = [n for n, f in http.items() if f.get("openapi", True)]
    schedules = of_kind(manifest, "schedule")
    jobs = of_kind(manifest, "job")
    lines = [f"// {HEADER}.", "",
             "//! Every function of the platform, as `functions.toml` lists them.", "",
             "use std::sync::Arc;", "",
             "use axum::Router;",
             "use queues::runtime::Schedule;",
             "use shared::{host::HostCluster, http::AppState, jobs::JobHandler, secretbox::SecretBox};", "",
             "/// The OpenAPI documents of the HTTP functions, to merge: each from the",
             "/// function's routes.",
             f"pub fn documents() -> [utoipa::openapi::OpenApi; {len(documented)}] {{", "    ["]
    lines += [f"        {snake(n)}::routes().into_openapi()," for n in documented]
    lines += ["    ]", "}", "",
              "/// An HTTP function's router.",
              "pub type MakeRouter = fn() -> Router<AppState>;", "",
              "/// Each HTTP function's router, by its name.",
              f"pub const ROUTERS: [(&str, MakeRouter); {len(http)}] = ["]
    lines += [f'    ("{n}", {snake(n)}::router),' for n in http]
    lines += ["];", "",
              "/// Every schedule function.",
              f"pub fn schedules() -> [&'static Schedule; {len(schedules)}] {{", "    ["]
    lines += [f"        &{snake(n)}::SCHEDULE," for n in schedules]
    lines += ["    ]", "}", "",
              "/// Every job function's handler, acting on `host`; those that hold the",
              "/// settings key (`secrets` naming `settings_key`) seal and open with `key`.",
              "pub fn handlers(",
              "    host: Option<Arc<HostCluster>>,",
              "    key: Option<Arc<SecretBox>>,",
              ") -> Vec<Arc<dyn JobHandler>> {", "    vec!["]
    for n, f in jobs.items():
        args = ["host.clone()"] + (["key.clone()"] if "settings_key" in f.get("secrets", []) else [])
        call = f"{snake(n)}::{f['handler']}::new({', '.join(args)})"
        line = f"        Arc::new({call}),"
        if len(call) > 60:
            # As rustfmt writes a call wider than its `fn_call_width`.
            line = "\n".join([f"        Arc::new({snake(n)}::{f['handler']}::new("]
                             + [f"            {a}," for a in args] + ["        )),"])
        lines.append(line)
    lines += ["    ]", "}"]
    return "\n".join(lines) + "\n"


def console_pages(manifest):
    """(public pages, pages): every function's console pages, in the
    manifest's order; a page is `{ path, module, component }` and, for the
    signed-in pages, `nav` (the i18n key of its link), `href` (where the link
    goes, its path otherwise), `role` (the role it needs) and `lazy` (loaded
    when first shown)."""
    public, pages = [], []
    for f in manifest.values():
        public += f.get("public_pages", [])
        pages += f.get("pages", [])
    return public, pages


def axum_paths(path):
    """A page's path as the console server's router writes it: `/**` is the
    path itself and every path under it."""
    path = re.sub(r":([a-z_]+)", r"{\1}", path)
    return [path[:-3], path[:-3] + "/{*rest}"] if path.endswith("/**") else [path]


def pages_rs(manifest):
    public, pages = console_pages(manifest)
    lines = [f"// {HEADER}.", "",
             "/// The paths the single-page app answers itself: each gets `index.html`.",
             "/// Anything else is the API's or a 404.",
             "pub const CLIENT_ROUTES: &[&str] = &[", '    "/",']
    lines += [f'    "{a}",' for p in public + pages for a in axum_paths(p["path"])]
    return "\n".join(lines + ["];"]) + "\n"


def page_table_ts(manifest):
    """The console app's table of pages: path, component, link."""
    public, pages = console_pages(manifest)
    eager = {}
    for p in public + pages:
        if not p.get("lazy"):
            eager.setdefault(p["module"], []).append(p["component"])
    lines = [f"// {HEADER}.", "",
             'import { lazy } from "react";',
             'import type { PageRoute, PublicPageRoute } from "./page";']
    lines += [f'import {{ {", ".join(sorted(set(c)))} }} from "./pages/{m}";' for m, c in sorted(eager.items())]

    def entry(p):
        component = (f'lazy(() => import("./pages/{p["module"]}").then((m) => ({{ default: m.{p["component"]} }})))'
                     if p.get("lazy") else p["component"])
        fields = [f'path: "{p["path"]}"', f"component: {component}"]
        fields += [f'{key}: "{p[key]}"' for key in ("nav", "href", "role") if key in p]
        return f"  {{ {', '.join(fields)} }},"
    lines += ["", "/// The pages a signed-out reader may see; every other page asks to sign in.",
              "export const PUBLIC_PAGES: readonly PublicPageRoute[] = ["]
    lines += [entry(p) for p in public]
    lines += ["];", "", "/// The pages of a signed-in reader: the first whose path matches is shown;",
              "/// `nav` is its link's label in the header.",
              "export const PAGES: readonly PageRoute[] = ["]
    lines += [entry(p) for p in pages]
    return "\n".join(lines + ["];"]) + "\n"


def values_regions(manifest):
    def entry(name, f, keys):
        fields = []
        for key in keys:
            if key in f:
                v = f[key]
                v = str(v).lower() if isinstance(v, bool) else (f'"{v}"' if key == "cron" else v)
                fields.append(f"{key}: {v}")
        return f"  {name}: {{ {', '.join(fields)} }}"
    return {
        "http": [entry(n, f, ["replicas", "host"]) for n, f in of_kind(manifest, "http").items()],
        "jobs": [entry(n, f, ["replicas"]) for n, f in of_kind(manifest, "job").items()],
        "schedules": [entry(n, f, ["mode", "cron", "host"]) for n, f in of_kind(manifest, "schedule").items()],
    }


def compose_region(manifest):
    lines = []
    for name, f in manifest.items():
        if f.get("kind") == "tool":
            continue
        lines += [f"  {name}:", "    <<: *kubebyon", f'    command: ["{name}"]']
        if "port" in f:
            lines += ["    environment:", "      <<: *env", f'      PORT: "{f["port"]}"',
                      f'    ports: ["{f["port"]}:{f["port"]}"]']
    return lines


def dependency_region(manifest, form):
    return [form.format(name=n) for n, f in manifest.items() if f.get("kind") != "tool"]


def camel(text):
    return "".join(part[:1].upper() + part[1:] for part in re.split(r"[^A-Za-z0-9]+", text) if part)


# The optional secrets a function may be given (functions.toml's `secrets`):
# its variable, the template's condition, parameter and policy.
OPTIONAL_SECRETS = {
    "settings_key": ("KUBEBYON_SETTINGS_KEY_SECRET_ARN", "HasSettingsKey", "SettingsKeySecretArn", "ReadSettingsKey"),
    "smtp": ("SMTP_URL_SECRET_ARN", "HasSmtp", "SmtpUrlSecretArn", "ReadSmtp"),
}


def secret_lines(f, host):
    """A function's Policies and the secrets' variables: the database's and
    the broker's, the host kubeconfig it acts with (`jobs`: the host's,
    `credentials`: the HTTP functions' own), and its optional secrets."""
    policies = ["ReadSecrets"]
    variables = []
    if host == "jobs":
        policies.append("ReadHostKubeconfig")
        variables.append(("KUBEBYON_HOST_KUBECONFIG_SECRET_ARN", "!Ref HostKubeconfigSecretArn"))
    elif host == "credentials":
        # A cluster's kubeconfig Secret only, as its own identity.
        policies.append("ReadCredentialsKubeconfig")
        variables.append(("KUBEBYON_HOST_KUBECONFIG_SECRET_ARN",
                          "\n            !If [HasCredentialsKubeconfig, !Ref HostCredentialsKubeconfigSecretArn, "
                          "!Ref HostKubeconfigSecretArn]"))
    lines = ["      Policies:"] + [f"        - !Ref {p}" for p in policies]
    for secret in f.get("secrets", []):
        variable, condition, parameter, policy = OPTIONAL_SECRETS[secret]
        lines.append(f"        - !If [{condition}, !Ref {policy}, !Ref AWS::NoValue]")
        variables.append((variable, f"!If [{condition}, !Ref {parameter}, !Ref AWS::NoValue]"))
    if variables:
        lines += ["      Environment:", "        Variables:"]
        lines += [f"          {name}:{'' if value.startswith(chr(10)) else ' '}{value}" for name, value in variables]
    return lines


def sam_http_functions(manifest):
    """The AWS template's HTTP functions: one resource each, its events from its routes."""
    lines = []
    for name, f in of_kind(manifest, "http").items():
        if not f.get("lambda", True):
            continue
        lines.append("")
        for note in f.get("aws_note", "").strip().splitlines():
            lines.append(f"  # {note}".rstrip())
        lines += [f"  {camel(name)}Function:",
                  "    Type: AWS::Serverless::Function",
                  "    DependsOn: Migration",
                  "    Metadata:",
                  "      BuildMethod: rust-cargolambda",
                  "      BuildProperties:",
                  f"        Binary: {name}",
                  "    Properties:",
                  "      CodeUri: ../.."]
        lines += secret_lines(f, "credentials" if f.get("host") else None)
        if "timeout" in f:
            lines.append(f"      Timeout: {f['timeout']}")
        if "memory" in f:
            lines.append(f"      MemorySize: {f['memory']}")
        lines.append(f"      ReservedConcurrentExecutions: {f['concurrency']}")
        if f.get("provisioned"):
            # Events then reach the alias, whose instances are kept warm.
            lines += ["      AutoPublishAlias: live",
                      "      ProvisionedConcurrencyConfig:",
                      "        ProvisionedConcurrentExecutions: !Ref AdmissionProvisionedConcurrency"]
        lines.append("      Events:")
        for route in f["routes"]:
            method, path, under = parse_route(route)
            events = [(path or "/", method, "Root" if under else "")]
            if under:
                events.append((f"{path}/{{proxy+}}", method, ""))
            for event_path, event_method, suffix in events:
                event = camel(path.replace("/api/console/", "/").replace("/api/", "/")) or "Pages"
                lines += [f"        {event}{suffix}:",
                          "          Type: HttpApi",
                          "          Properties:",
                          "            ApiId: !Ref HttpApi",
                          f"            Path: {event_path}",
                          f"            Method: {event_method}"]
    return lines[1:]


def generated(manifest):
    """path → whole file, or path → {region: lines}."""
    return {
        "functions/local/src/registry.rs": registry_rs(manifest),
        "functions/console/src/pages.rs": pages_rs(manifest),
        "functions/console/app/src/pageTable.ts": page_table_ts(manifest),
        "infra/helm/kubebyon/routes.yaml": routes_yaml(manifest),
        "infra/helm/kubebyon/values.yaml": values_regions(manifest),
        "infra/compose/compose.yaml": {"services": compose_region(manifest)},
        "Cargo.toml": {"functions": dependency_region(manifest, '{name} = {{ path = "functions/{name}" }}')},
        "functions/local/Cargo.toml": {"functions": dependency_region(manifest, "{name}.workspace = true")},
        "infra/aws/template.yaml": {"http functions": sam_http_functions(manifest)},
    }


def begin(region):
    return f"# >>> {region}: {HEADER}"


def end(region):
    return f"# <<< {region}"


def fill(text, regions, path):
    """`text` with each marked region's lines replaced; a missing marker is an error."""
    lines = text.split("\n")
    stripped = lambda: [line.strip() for line in lines]
    for region, body in regions.items():
        try:
            i = stripped().index(begin(region))
            j = stripped().index(end(region), i)
        except ValueError:
            raise SystemExit(f"{path}: no region marked `{begin(region)}` … `{end(region)}`")
        lines[i + 1:j] = body
    return "\n".join(lines)


def expected_files(root, manifest):
    out = {}
    for path, content in generated(manifest).items():
        if isinstance(content, dict):
            content = fill(read(root, path), content, path)
        out[path] = content
    return out


def stale(root, manifest):
    """(path, diff) of each generated file that is not what the manifest makes."""
    out = []
    for path, want in expected_files(root, manifest).items():
        full = os.path.join(root, path)
        have = read(root, path) if os.path.exists(full) else ""
        if have != want:
            diff = "".join(difflib.unified_diff(have.splitlines(True), want.splitlines(True),
                                                f"{path} (as it is)", f"{path} (from functions.toml)", n=1))
            out.append((path, diff))
    return out


def write(root, manifest):
    for path, want in expected_files(root, manifest).items():
        with open(os.path.join(root, path), "w", encoding="utf-8") as f:
            f.write(want)


# Checks ---------------------------------------------------------------------

def template_functions(text):
    """Binary → (its ScheduleExpression or None, its HttpApi events, its
    MemorySize or None, its schedule's Name or None, its Timeout or None,
    the Read* policies it names, its KUBEBYON_HOST_KUBECONFIG_SECRET_ARN or None,
    its ReservedConcurrentExecutions or None, its text)."""
    out = {}
    for block in re.split(r"\n  (?=[A-Z][A-Za-z0-9]*:\n)", text):
        binary = re.search(r"^\s+Binary:\s*([a-z0-9-]+)\s*$", block, re.M)
        if binary:
            rate = re.search(r"ScheduleExpression:\s*(rate\([^)]*\))", block)
            events = set((m, p) for p, m in re.findall(r"Path:\s*(\S+)\s*\n\s*Method:\s*(\S+)", block))
            memory = re.search(r"^\s+MemorySize:\s*([0-9]+)\s*$", block, re.M)
            name = re.search(r"^\s+Name:\s*(.+?)\s*$", block, re.M)
            timeout = re.search(r"^      Timeout:\s*([0-9]+)\s*$", block, re.M)
            reserved = re.search(r"^\s+ReservedConcurrentExecutions:\s*([0-9]+)\s*$", block, re.M)
            policies = set(re.findall(r"!Ref (Read[A-Za-z]+)", block))
            arn = re.search(r"^\s+KUBEBYON_HOST_KUBECONFIG_SECRET_ARN:\s*(.+?)\s*$", block, re.M)
            out[binary.group(1)] = (rate.group(1) if rate else None, events,
                                    int(memory.group(1)) if memory else None,
                                    name.group(1) if name else None,
                                    int(timeout.group(1)) if timeout else None,
                                    policies, arn.group(1) if arn else None,
                                    int(reserved.group(1)) if reserved else None, block)
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
    shape = len(problems)
    for name, f in manifest.items():
        kind = f.get("kind")
        if kind not in ("http", "job", "schedule", "tool"):
            say("functions.toml", f"{name}: kind must be http, job, schedule or tool")
        if kind == "http" and not f.get("routes"):
            say("functions.toml", f"{name}: an http function needs its routes")
        if kind == "job" and not f.get("handler"):
            say("functions.toml", f"{name}: a job function needs its handler type")
        for route in f.get("routes", []):
            method, path, _ = parse_route(route)
            if method not in ("ANY", "GET", "POST", "PUT", "PATCH", "DELETE") or not re.fullmatch(
                    r"(/([a-z0-9._-]+|\{[a-z_]+\}))*/?", path):
                say("functions.toml", f"{name}: route {route!r} is not `[METHOD ]/path[/**]`")

    if len(problems) == shape:  # the manifest can be read: its generated files
        for path, diff in stale(root, manifest):
            say(path, f"stale; `{COMMAND}` regenerates it:\n{diff}")

    deployed = template_functions(read(root, "infra/aws/template.yaml"))
    on_lambda = {n for n, f in manifest.items() if f.get("lambda", True)}
    for name in sorted(on_lambda - deployed.keys()):
        say("infra/aws/template.yaml", f"no function with `Binary: {name}`")
    for name in sorted(deployed.keys() - on_lambda):
        say("infra/aws/template.yaml", f"`Binary: {name}` is not a Lambda function of functions.toml")
    for name, f in sorted(of_kind(manifest, "schedule").items()):
        if name in deployed and deployed[name][0] != rate_for(f["interval_ms"]):
            say("infra/aws/template.yaml",
                f"{name} runs at {deployed[name][0]}; functions.toml's {f['interval_ms']} ms is {rate_for(f['interval_ms'])}")
        # Schedules are account-wide names: two stacks must not collide.
        stack_scoped = f'!Sub "${{AWS::StackName}}-{name}"'
        if name in deployed and deployed[name][3] != stack_scoped:
            say("infra/aws/template.yaml",
                f"{name}'s schedule is named {deployed[name][3]}, not {stack_scoped}")
    # The host kubeconfig: only where functions.toml says the function acts
    # on the host (every job; a schedule or http function with `host`), and
    # the HTTP functions' is their own, narrower one.
    template = read(root, "infra/aws/template.yaml")
    globals_part = template.split("\nResources:", 1)[0]
    if "KUBEBYON_HOST_KUBECONFIG_SECRET_ARN" in globals_part:
        say("infra/aws/template.yaml", "the host kubeconfig is given to every function (Globals)")
    for name in sorted(on_lambda & deployed.keys()):
        f = manifest[name]
        access = ("jobs" if f.get("kind") == "job" or (f.get("kind") == "schedule" and f.get("host"))
                  else "credentials" if f.get("kind") == "http" and f.get("host") else None)
        policies, arn = deployed[name][5], deployed[name][6]
        want_policy = {"jobs": "ReadHostKubeconfig", "credentials": "ReadCredentialsKubeconfig"}.get(access)
        host_policies = {"ReadHostKubeconfig", "ReadCredentialsKubeconfig"} & policies
        if host_policies != ({want_policy} if want_policy else set()) or (arn is not None) != (access is not None):
            say("infra/aws/template.yaml",
                f"{name} reads {sorted(host_policies) or 'no host kubeconfig'} with "
                f"KUBEBYON_HOST_KUBECONFIG_SECRET_ARN {'set' if arn else 'unset'}; functions.toml gives it "
                f"{want_policy or 'no host access'}")
        elif access == "jobs" and "HostCredentials" in arn:
            say("infra/aws/template.yaml", f"{name} is given the HTTP functions' kubeconfig")
    for name in sorted(on_lambda):
        if not isinstance(manifest[name].get("concurrency"), int) or manifest[name]["concurrency"] < 1:
            say("functions.toml", f"{name}: a Lambda function needs its `concurrency` (reserved)")
        elif name in deployed and deployed[name][7] != manifest[name]["concurrency"]:
            say("infra/aws/template.yaml",
                f"{name} has ReservedConcurrentExecutions {deployed[name][7]}; "
                f"functions.toml says {manifest[name]['concurrency']}")
    # The optional secrets: exactly those functions.toml's `secrets` names,
    # each with its variable and its policy.
    for name in sorted(on_lambda & deployed.keys()):
        for secret, (variable, _, _, policy) in OPTIONAL_SECRETS.items():
            wanted = secret in manifest[name].get("secrets", [])
            block = deployed[name][8]
            if (variable in block) != wanted or (f"!Ref {policy}," in block) != wanted:
                say("infra/aws/template.yaml",
                    f"{name} {'lacks' if wanted else 'is given'} {variable} or {policy}; "
                    f"functions.toml's secrets: {manifest[name].get('secrets', [])}")
    for name in sorted(on_lambda & deployed.keys()):
        if deployed[name][2] != manifest[name].get("memory"):
            say("infra/aws/template.yaml",
                f"{name} has MemorySize {deployed[name][2]}; functions.toml says {manifest[name].get('memory')}")
    # A job that waits for a control plane gives up, retryably, before
    # Lambda ends it: the wait is under each job function's timeout, with
    # two minutes for the rest of the attempt.
    ready = re.search(r"KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS:\s*\"?([0-9]+)",
                      read(root, "infra/aws/template.yaml"))
    for name in sorted(of_kind(manifest, "job")):
        timeout = deployed.get(name, (None,) * 9)[4]
        if name in deployed and (not ready or not timeout or int(ready.group(1)) > (timeout - 120) * 1000):
            say("infra/aws/template.yaml",
                f"{name}'s Timeout {timeout} s leaves no room after KUBEBYON_CONTROL_PLANE_READY_TIMEOUT_MS "
                f"{ready.group(1) if ready else 'unset (900000)'}")
    declared = set()
    for base, _, files in os.walk(os.path.join(root, "shared", "src")):
        for file in files:
            if file.endswith(".rs"):
                with open(os.path.join(base, file), encoding="utf-8") as source:
                    declared.update(re.findall(
                        r'JobKind::(?:new|moving_the_cluster)\(\s*"([a-z0-9_]+)"', source.read()))
    for name, f in sorted(of_kind(manifest, "job").items()):
        if f.get("job_type") not in declared:
            say("shared/src", f"{name}'s job type {f.get('job_type')!r} is no JobKind a capability declares")

    for name, f in sorted(of_kind(manifest, "schedule").items()):
        source = f"functions/{name}/src/lib.rs"
        m = re.search(rf'interval: Millis::new\("{re.escape(f["interval_env"])}",\s*([0-9_]+)\)',
                      read(root, source) if os.path.exists(os.path.join(root, source)) else "")
        default = int(m.group(1).replace("_", "")) if m else None
        if default != f["interval_ms"]:
            say(source, f"{name}'s interval is `Millis::new({f['interval_env']!r}, {default})`, "
                        f"functions.toml says {f['interval_ms']}")

    architecture = read(root, "docs/architecture.md")
    for name in sorted(manifest):
        prefix, _, suffix = name.rpartition("-")
        if f"`functions/{name}`" not in architecture and not (
                re.search(rf"`functions/{re.escape(prefix)}-[a-z]+`[^\n]*`-{re.escape(suffix)}`", architecture)):
            say("docs/architecture.md", f"the table of functions has no row for functions/{name}")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def put(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        for name in ["api-a", "job-b", "sync-c", "extra", "local"]:
            put(f"functions/{name}/Cargo.toml", "")
        manifest = ('[api-a]\nkind = "http"\nhost = true\nreplicas = 2\nconcurrency = 4\n'
                    'routes = ["/api/a/**", "GET /api/x/{id}"]\n'
                    '[job-b]\nkind = "job"\njob_type = "b_job"\nreplicas = 1\nhandler = "B"\nconcurrency = 2\n'
                    '[sync-c]\nkind = "schedule"\nmode = "loop"\nhost = false\nconcurrency = 1\n'
                    'interval_env = "C_MS"\ninterval_ms = 120000\nmemory = 256\n'
                    '[local]\nkind = "tool"\nlambda = false\n')
        put("functions.toml", manifest)
        marked = lambda *regions: "".join(f"{begin(r)}\n{end(r)}\n" for r in regions)
        put("infra/helm/kubebyon/values.yaml", "image: x\n" + marked("http", "jobs", "schedules"))
        put("infra/compose/compose.yaml", marked("services"))
        put("Cargo.toml", marked("functions"))
        put("functions/local/Cargo.toml", marked("functions"))
        put("infra/aws/template.yaml",
            "Resources:\n" + marked("http functions") +
            "  C:\n    Metadata:\n      BuildProperties:\n        Binary: sync-c\n"
            "    Properties:\n      Events:\n        E:\n          Properties:\n            ScheduleExpression: rate(1 minute)\n")
        put("shared/src/b/mod.rs", 'const KIND: JobKind = JobKind::new("b_job", "b");\n')
        put("functions/sync-c/src/lib.rs", '    interval: Millis::new("C_MS", 60_000),\n')
        put("docs/architecture.md", "| `functions/api-a` | |\n| `functions/job-a`, `-b` | |\n| `functions/local` | |\n")
        for path in ["functions/local/src/registry.rs", "functions/console/src/pages.rs",
                     "functions/console/app/src/pageTable.ts", "infra/helm/kubebyon/routes.yaml"]:
            put(path, "")
        write(root, tomllib.loads(manifest))
        clean = check(root)
        # Now plant disagreements.
        values = read(root, "infra/helm/kubebyon/values.yaml")
        put("infra/helm/kubebyon/values.yaml", values.replace("replicas: 2", "replicas: 3"))
        put("infra/helm/kubebyon/routes.yaml", "")
        template = read(root, "infra/aws/template.yaml")
        generated_template = template
        put("infra/aws/template.yaml",
            "Globals:\n  Function:\n    Environment:\n      Variables:\n"
            "        KUBEBYON_HOST_KUBECONFIG_SECRET_ARN: !Ref HostKubeconfigSecretArn\n"
            + template.replace("Path: /api/x/{id}", "Path: /api/y").replace(
                "        Binary: sync-c\n    Properties:\n",
                "        Binary: sync-c\n    Properties:\n      Environment:\n        Variables:\n"
                "          KUBEBYON_HOST_KUBECONFIG_SECRET_ARN: !Ref HostKubeconfigSecretArn\n"
                "          SMTP_URL_SECRET_ARN: !If [HasSmtp, !Ref SmtpUrlSecretArn, !Ref AWS::NoValue]\n"))
        put("shared/src/b/mod.rs", 'const KIND: JobKind = JobKind::new("b_jobs", "b");\n')
        found = "\n".join(check(root))
        put("functions.toml", manifest.replace('handler = "B"\n', "") + '[gone]\nkind = "tool"\n')
        found_manifest = "\n".join(check(root))
    routes = routes_yaml(tomllib.loads(manifest))
    expected = [
        "functions.toml: functions/extra has no entry",
        "infra/helm/kubebyon/values.yaml: stale; `python3 scripts/check-functions.py --write` regenerates it",
        "+  api-a: { replicas: 2, host: true }",
        "infra/helm/kubebyon/routes.yaml: stale",
        "infra/aws/template.yaml: no function with `Binary: job-b`",
        "infra/aws/template.yaml: sync-c runs at rate(1 minute); functions.toml's 120000 ms is rate(2 minutes)",
        'infra/aws/template.yaml: sync-c\'s schedule is named None, not !Sub "${AWS::StackName}-sync-c"',
        "infra/aws/template.yaml: sync-c has MemorySize None; functions.toml says 256",
        "infra/aws/template.yaml: sync-c has ReservedConcurrentExecutions None; functions.toml says 1",
        "infra/aws/template.yaml: stale",
        "+            Path: /api/x/{id}",
        "infra/aws/template.yaml: the host kubeconfig is given to every function (Globals)",
        "infra/aws/template.yaml: sync-c reads no host kubeconfig with KUBEBYON_HOST_KUBECONFIG_SECRET_ARN set; "
        "functions.toml gives it no host access",
        "infra/aws/template.yaml: sync-c is given SMTP_URL_SECRET_ARN or ReadSmtp; functions.toml's secrets: []",
        "functions/sync-c/src/lib.rs: sync-c's interval is `Millis::new('C_MS', 60000)`, functions.toml says 120000",
        "docs/architecture.md: the table of functions has no row for functions/sync-c",
        "shared/src: job-b's job type 'b_job' is no JobKind a capability declares",
    ]
    expected_manifest = [
        "functions.toml: gone has no crate under functions/",
        "functions.toml: job-b: a job function needs its handler type",
    ]
    missing = [e for e in expected if e not in found] + [e for e in expected_manifest if e not in found_manifest]
    wrong = [
        any("stale" in p or "JobKind" in p for p in clean),  # what --write wrote is current
        "no row for functions/job-b" in found or "no row for functions/api-a" in found,
        '- function: api-a\n  match: RegularExpression\n  value: "/api/x/[^/]+"\n  ingress: "/api/x/[^/]+$"' not in routes,
        '- function: api-a\n  match: PathPrefix\n  value: "/api/a"\n  ingress: "/api/a(/.*)?$"' not in routes,
        routes.index("/api/x/") > routes.index("/api/a"),  # the regular expression first
        # The function's resource, each route's events (a subtree: its root too).
        not all(line in generated_template for line in [
            "  ApiAFunction:", "        Binary: api-a", "        ARoot:", "            Path: /api/a",
            "        A:", "            Path: /api/a/{proxy+}", "            Method: ANY",
            "        XId:", "            Path: /api/x/{id}", "            Method: GET",
            "        - !Ref ReadCredentialsKubeconfig",
            "      ReservedConcurrentExecutions: 4"]),
    ]
    if missing or any(wrong):
        print("self-test failed; missing:\n" + "\n".join(missing) + "\nfound:\n" + found
              + "\n" + found_manifest + f"\nclean: {clean}\nchecks: {wrong}\nroutes:\n{routes}", file=sys.stderr)
        sys.exit(1)
    print("check-functions self-test: planted disagreements caught, --write output is current")


def main():
    args = sys.argv[1:]
    if args == ["--self-test"]:
        self_test()
        return
    if args == ["--write"]:
        write(ROOT, tomllib.loads(read(ROOT, "functions.toml")))
    elif args:
        sys.exit(f"usage: {sys.argv[0]} [--write | --self-test]")
    problems = check(ROOT)
    if problems:
        print("functions.toml and the files that name functions disagree:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print(f"Run `{COMMAND}` for the generated files; change the file named, or the manifest"
              " when it is the manifest that is wrong.", file=sys.stderr)
        sys.exit(1)
    print(f"functions.toml: {len(tomllib.loads(read(ROOT, 'functions.toml')))} functions, every file agrees")


if __name__ == "__main__":
    main()
