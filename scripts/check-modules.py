#!/usr/bin/env python3
"""Checks the shared crate's module boundaries (docs/architecture.md, "The
shared crate"): every file of shared/src belongs to one part; a part may use
only the parts `parts_of` lists for it (the kernel none; the backbone and clusters
the kernel; the Kubernetes adapter the kernel and clusters, not the backbone;
the capabilities everything below them, never each other; the layer of
rules that span capabilities (`app`) all of those; the HTTP application
layer all of them); and no two files use each other, directly or through
others.

Reads every path rooted at `crate::`, `super::` (any number of them) or
`self::`, `use` groups included, resolving the relative ones from the file's
module and the inline modules (`mod tests { ... }`) around them. Exits 1
naming every violation. `--self-test` checks that planted violations are
caught.

Also keeps the lists that follow the folders: the capabilities in
shared/src/lib.rs (every root module no fixed part claims), their
declarations collected in shared/src/app/capabilities.rs (each capability's
`CAPABILITY`), and the modules of the end-to-end suite in
tests/tests/e2e/main.rs (one file each). A stale list fails the check;
`--write` writes them.
"""

import os
import re
import sys
import tempfile

# Each part: the parts it may use and its modules, as paths under shared/src
# without `.rs` (`settings`) or directories (`accounts`). Every other module of
# the crate's root is a capability: no list names them (lib.rs's `capabilities`
# region is written from the folders by `--write`). The capabilities may use
# what lies below them, never each other.
BELOW_CAPABILITIES = ["kernel", "backbone", "tenancy", "clusters", "kubernetes", "declaration"]
FIXED = {
    "kernel": ([], ["lib", "config", "error", "extract", "domain", "secretbox", "outbound",
                    "telemetry", "openapi", "runtime", "db", "settings", "audit", "mail"]),
    "backbone": (["kernel"], ["jobs"]),
    # Who owns what: organisations, their members and what each role may do.
    "tenancy": (["kernel"], ["organizations"]),
    "clusters": (["kernel", "tenancy"], ["clusters", "networks"]),
    # The Kubernetes adapter returns its own errors: it never builds job errors.
    "kubernetes": (["kernel", "clusters"], ["host"]),
    # What a capability may declare (`Capability`): it names what lies below
    # the capabilities, and none of them.
    "declaration": (["kernel", "backbone", "tenancy", "clusters", "kubernetes"], ["capability"]),
}
ABOVE = ["app", "http"]
COMMAND = "python3 scripts/check-modules.py --write"


def capabilities(src):
    """The crate root's modules no fixed part or layer claims, sorted."""
    claimed = {m for _, modules in FIXED.values() for m in modules} | set(ABOVE)
    found = set()
    for name in os.listdir(src):
        module = name[:-3] if name.endswith(".rs") else name
        if (name.endswith(".rs") or os.path.isfile(os.path.join(src, name, "mod.rs"))) \
                and module not in claimed:
            found.add(module)
    return sorted(found)


def parts_of(src):
    """Each part: (the parts it may use, its modules)."""
    caps = capabilities(src)
    return {
        **FIXED,
        **{c: (BELOW_CAPABILITIES, [c]) for c in caps},
        # Rules that span capabilities, written once.
        "app": (BELOW_CAPABILITIES + caps, ["app"]),
        "http": (BELOW_CAPABILITIES + caps + ["app"], ["http"]),
    }


def part_of(module, parts):
    """The part a module path (`accounts/auth`, `jobs/worker`) belongs to."""
    best = None
    for part, (_, modules) in parts.items():
        for m in modules:
            if module == m or module.startswith(m + "/"):
                if best is None or len(m) > len(best[1]):
                    best = (part, m)
    return best[0] if best else None


def module_of_file(src, path):
    rel = os.path.relpath(path, src)[:-3]
    if rel.endswith("/mod"):
        rel = rel[: -len("/mod")]
    return rel


def split_top(body):
    """Splits a `use` group's body at its top-level commas."""
    items, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            items.append(cur)
            cur = ""
        else:
            cur += ch
    items.append(cur)
    return [i.strip() for i in items if i.strip()]


def paths_in_group(prefix, body):
    out = []
    for item in split_top(body):
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*)\s*(?:::\s*(.*))?$", item, re.S)
        if not m:
            continue
        name, rest = m.group(1), (m.group(2) or "").strip()
        path = prefix + ([] if name == "self" else [name])
        if rest.startswith("{") and rest.endswith("}"):
            out.extend(paths_in_group(path, rest[1:-1]))
        else:
            out.append(path + re.findall(r"[A-Za-z_][A-Za-z0-9_]*", rest)[:1])
    return out


def inline_modules(text):
    """The inline modules of a file (`mod tests { ... }`): (name, start, end)."""
    spans = []
    for m in re.finditer(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", text):
        depth, j = 0, m.end() - 1
        while j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        spans.append((m.group(1), m.end(), j))
    return spans


def rooted_paths(text, module):
    """Every path rooted at `crate::`, `super::` or `self::`, as a path from
    the crate root, groups expanded. In `jobs/worker`, `crate::{clusters,
    nodes::tokens::Token}` gives clusters and nodes/tokens/Token, and
    `super::super::ingress::dns` gives ingress/dns."""
    base = [] if module == "lib" else module.split("/")
    spans = inline_modules(text)
    paths = []
    for m in re.finditer(r"(?<!::)\b(crate|super|self)\s*::", text):
        if m.group(1) == "crate":
            root = []
        else:
            root = base + [name for name, start, end in spans if start <= m.start() < end]
            if m.group(1) == "super":
                root = root[:-1]
        i = m.end()
        while True:
            more = re.match(r"\s*super\s*::", text[i:])
            if not more:
                break
            root, i = root[:-1], i + more.end()
        path = list(root)
        while True:
            ident = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", text[i:])
            if ident:
                path.append(ident.group(1))
                i += ident.end()
                sep = re.match(r"\s*::\s*", text[i:])
                if sep:
                    i += sep.end()
                    continue
                paths.append(path)
                break
            if text[i:i + 1] == "{":
                depth, j = 0, i
                while j < len(text):
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    if depth == 0:
                        break
                    j += 1
                paths.extend(paths_in_group(path, text[i + 1:j]))
            elif path:
                paths.append(path)
            break
    return paths


def used_modules(text, module, known):
    """Modules a file's text names through rooted paths: the longest known
    module each path starts with."""
    text = re.sub(r"//[^\n]*", "", text)
    used = set()
    for p in rooted_paths(text, module):
        for n in range(len(p), 0, -1):
            candidate = "/".join(p[:n])
            if candidate in known:
                used.add(candidate)
                break
    return used


def check(src):
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                path = os.path.join(root, name)
                files[module_of_file(src, path)] = path
    known = set(files) | {m[: -len("/mod")] for m in files if m.endswith("/mod")}
    known |= {m.split("/")[0] for m in files}
    parts = parts_of(src)
    caps = capabilities(src)
    problems, graph = [], {}
    for module, path in sorted(files.items()):
        part = part_of(module, parts)
        if part is None:
            problems.append(f"{path}: belongs to no part (add it to FIXED in scripts/check-modules.py)")
            continue
        allowed = parts[part][0]
        with open(path, encoding="utf-8") as f:
            used = used_modules(f.read(), module, known)
        graph[module] = set()
        for other in sorted(used):
            target = other if other in files else other + "/mod" if other + "/mod" in files else other
            other_part = part_of(target, parts)
            if other_part is None or other_part == part:
                if target in files and target != module:
                    graph[module].add(target)
                continue
            named = "crate::" + other.replace("/", "::")
            if other_part not in allowed:
                if part in caps and other_part in caps:
                    problems.append(f"{path}: the {part} part uses its sibling {other_part} ({named})")
                elif part in parts[other_part][0] or part in BELOW_CAPABILITIES and other_part not in BELOW_CAPABILITIES:
                    problems.append(f"{path}: the {part} part uses {other_part}, above it ({named})")
                else:
                    problems.append(f"{path}: the {part} part uses {other_part}, which it may not ({named})")
            if target in files and target != module:
                graph[module].add(target)
    # File cycles, within a part and across: a depth-first search.
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycle = stack[stack.index(nxt):] + [nxt]
                problems.append("file cycle: " + " -> ".join(files[c] for c in cycle))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state and node != "lib":
            visit(node)
    return problems


# Generated module lists ------------------------------------------------------

HEADER = f"generated by `{COMMAND}` from the folders: do not edit"


def module_lists(root):
    """path → (region, lines): the lists of modules written from the tree."""
    src = os.path.join(root, "shared", "src")
    e2e = os.path.join(root, "tests", "tests", "e2e")
    tests = sorted(n[:-3] for n in os.listdir(e2e) if n.endswith(".rs") and n != "main.rs")
    caps = capabilities(src)
    return {
        "shared/src/lib.rs": ("capabilities", [f"pub mod {c};" for c in caps]),
        "shared/src/app/capabilities.rs": (
            "capabilities", [f"    &crate::{c}::CAPABILITY," for c in caps]),
        "tests/tests/e2e/main.rs": ("modules", [f"mod {t};" for t in tests]),
    }


def with_region(text, region, lines, path):
    begin, end = f"// >>> {region}: {HEADER}", f"// <<< {region}"
    if begin not in text or end not in text:
        raise SystemExit(f"error: {path} has no `{begin}` … `{end}` region")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    indent = head[len(head.rstrip(" ")):]
    return head + begin + "\n" + "".join(line + "\n" for line in lines) + indent + end + tail


def stale_lists(root, write):
    stale = []
    for path, (region, lines) in module_lists(root).items():
        full = os.path.join(root, path)
        with open(full, encoding="utf-8") as f:
            text = f.read()
        wanted = with_region(text, region, lines, path)
        if wanted != text:
            if write:
                with open(full, "w", encoding="utf-8") as f:
                    f.write(wanted)
            else:
                stale.append(f"{path}: its `{region}` region is stale (run {COMMAND})")
    return stale


def self_test():
    planted = {
        "lib.rs": "pub mod accounts; pub mod app; pub mod clusters; pub mod config; pub mod db; pub mod host; pub mod jobs;",
        "config.rs": "use crate::accounts::auth::x;",  # the kernel uses accounts: above it
        "accounts/mod.rs": "pub mod auth; pub mod mail; pub mod users;",
        "accounts/auth.rs": "use crate::{error::E, ingress::dns::Zone};",  # a sibling capability
        "accounts/mail.rs": "fn f() { crate::{accounts::users::get, ingress::records::list}(); }",  # through a group
        "accounts/users.rs": "",
        "ingress/mod.rs": "",
        "ingress/records.rs": "",
        "error.rs": "",
        "db.rs": "",
        "clusters.rs": "",
        "host/mod.rs": "fn f() { crate::config::x(); crate::{db, clusters::Cluster}; }",  # allowed
        "host/error.rs": "impl crate::jobs::StepError for E {}",  # the adapter builds job errors
        "jobs/mod.rs": "",
        "nodes/mod.rs": "",
        "nodes/jointoken.rs": "use crate::nodes::sync;",  # jointoken -> sync -> jointoken
        "nodes/sync.rs": "use crate::{nodes::jointoken::hash, host::HostCluster};",
        "nodes/tokens.rs": "use super::super::accounts::users;",  # a sibling, relatively
        "jobs/worker.rs": "use super::retry; mod tests { use super::super::Job; use super::super::super::nodes; }",
        "metrics.rs": "fn f() { self::inner::g(); }",  # allowed: its own item
        "app/mod.rs": "pub mod plan; use crate::{accounts::users, ingress::records};",  # allowed: the layer above them
        "app/plan.rs": "",
        "ingress/dns.rs": "use crate::app::plan;",  # a capability uses the layer above it
    }
    with tempfile.TemporaryDirectory() as src:
        for name, text in planted.items():
            os.makedirs(os.path.dirname(os.path.join(src, name)), exist_ok=True)
            with open(os.path.join(src, name), "w", encoding="utf-8") as f:
                f.write(text)
        found = "\n".join(check(src))
    expected = [
        "config.rs: the kernel part uses accounts, above it (crate::accounts::auth)",
        "accounts/auth.rs: the accounts part uses its sibling ingress (crate::ingress::dns)",
        "accounts/mail.rs: the accounts part uses its sibling ingress (crate::ingress::records)",
        "host/error.rs: the kubernetes part uses backbone, which it may not (crate::jobs)",
        "nodes/jointoken.rs -> ",
        "nodes/tokens.rs: the nodes part uses its sibling accounts (crate::accounts::users)",
        "jobs/worker.rs: the backbone part uses nodes, above it (crate::nodes)",
        "ingress/dns.rs: the ingress part uses app, above it (crate::app::plan)",
    ]
    missing = [e for e in expected if e not in found]
    allowed_found = "host/mod.rs" in found or "app/mod.rs" in found
    if missing or allowed_found or found.count("\n") + 1 != len(expected):
        print("self-test failed; found:\n" + found, file=sys.stderr)
        sys.exit(1)
    with tempfile.TemporaryDirectory() as root:
        for path, text in {
            "shared/src/lib.rs": f"pub mod config;\n// >>> capabilities: {HEADER}\npub mod gone;\n// <<< capabilities\n",
            "shared/src/config.rs": "",
            "shared/src/labels/mod.rs": "",
            "shared/src/app/capabilities.rs":
                f"const ALL: &[&C] = &[\n    // >>> capabilities: {HEADER}\n    // <<< capabilities\n];\n",
            "tests/tests/e2e/main.rs": f"// >>> modules: {HEADER}\nmod labels;\n// <<< modules\n",
            "tests/tests/e2e/labels.rs": "",
        }.items():
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w", encoding="utf-8") as f:
                f.write(text)
        stale = stale_lists(root, write=False)
        stale_lists(root, write=True)
        with open(os.path.join(root, "shared/src/lib.rs"), encoding="utf-8") as f:
            written = f.read()
        with open(os.path.join(root, "shared/src/app/capabilities.rs"), encoding="utf-8") as f:
            collected = f.read()
        if stale != [f"shared/src/lib.rs: its `capabilities` region is stale (run {COMMAND})",
                     f"shared/src/app/capabilities.rs: its `capabilities` region is stale (run {COMMAND})"] \
                or "pub mod labels;\n// <<<" not in written or "gone" in written \
                or "    &crate::labels::CAPABILITY,\n    // <<< capabilities\n];" not in collected \
                or stale_lists(root, write=False):
            print(f"self-test failed: stale lists {stale}, lib.rs written:\n{written}", file=sys.stderr)
            sys.exit(1)
    print("check-modules self-test: planted violations and a stale module list caught")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    root = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    problems = stale_lists(root, write=sys.argv[1:] == ["--write"])
    problems += check(os.path.join(root, "shared", "src"))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        print(f"error: {len(problems)} module boundary problem(s) in shared/src", file=sys.stderr)
        sys.exit(1)
    print("shared/src: every part uses only the parts below it, no file cycle; the module lists are current")


if __name__ == "__main__":
    main()
