#!/usr/bin/env python3
"""The touch report: which files a range of commits changed outside a
capability's own folders, and of what kind.

    scripts/touches.py BASE..HEAD PATH [PATH ...]

PATH are the capability's own folders or files (its module folder in
`shared/src`, its function crates, its console page): what the range changed
under them is counted, not listed. Every other changed file is listed under
its kind, `(new)` after a file the range added:

- manifest: `functions.toml`;
- generated: what a command writes from the manifest, the folders or the
  code — a file that says it is generated (`do not edit`, `Regenerate with`),
  a change only inside a file's generated regions (`>>> name: generated` …
  `<<< name`), `Cargo.lock`, `.sqlx/` (scripts/sqlx-prepare.sh), the
  OpenAPI document and its typed console client;
- registration: the rest of the files that name a function for the
  deployment and the build (the workspace and crate manifests, `infra/`,
  `.config/`);
- migration: `migrations/`;
- docs: `docs/`, `README.md`, `CHANGELOG.md`;
- tests: `tests/`;
- tooling: `scripts/`, `.ci/`;
- product code: everything else, the files a capability should not have had
  to change.

Exits 0; `--self-test` checks the classification on a repository of its own.
"""

import os
import re
import subprocess
import sys
import tempfile

KINDS = [
    ("manifest", lambda p: p == "functions.toml"),
    ("generated", lambda p: p in ("Cargo.lock", "docs/openapi.json") or p.startswith(".sqlx/")
        or p.endswith("/src/api/schema.d.ts")),
    ("registration", lambda p: p == "Cargo.toml"
        or p.endswith("/Cargo.toml") or p.startswith(("infra/", ".config/"))),
    ("migration", lambda p: p.startswith("migrations/")),
    ("docs", lambda p: p.startswith("docs/") or p in ("README.md", "CHANGELOG.md")),
    ("tests", lambda p: p.startswith("tests/")),
    ("tooling", lambda p: p.startswith(("scripts/", ".ci/"))),
    ("product code", lambda p: True),
]
# A region's markers are comment lines of their own: `# >>> name: generated
# …`, `// …`, `<!-- … -->`; the end `<<< name`, `-->` closing the HTML one.
BEGIN = re.compile(r"^\s*(#|//|<!--)\s*>>> [\w -]+: generated")
END = re.compile(r"^\s*(#|//|<!--)\s*<<< [\w -]+?\s*(-->)?\s*$")


def git(args, cwd):
    out = subprocess.run(["git", *args], check=True, capture_output=True, cwd=cwd).stdout
    return out.decode("utf-8", errors="replace")


def text_at(rev, path, cwd):
    try:
        return git(["show", f"{rev}:{path}"], cwd)
    except subprocess.CalledProcessError:
        return None


HEAD_MARK = re.compile(r"do not edit|Regenerate with|^\W*generated (from|by)\b", re.I)


def generated_lines(text):
    """The 1-based numbers of the lines inside a text's generated regions;
    every line when its head says it is generated (`do not edit`,
    `Regenerate with`, or a first words `Generated from`/`by`)."""
    lines = text.splitlines()
    if any(HEAD_MARK.search(line) for line in lines[:3]):
        return set(range(1, len(lines) + 1))
    inside, numbers = False, set()
    for n, line in enumerate(lines, 1):
        if BEGIN.search(line):
            inside = True
        elif inside and END.search(line):
            inside = False
        elif inside:
            numbers.add(n)
    return numbers


def binary(commits, path, cwd):
    """Whether git sees `path`'s change as binary (no line counts)."""
    return git(["diff", "--numstat", "--no-renames", commits, "--", path], cwd).startswith("-\t-\t")


def only_generated(commits, path, cwd):
    """Whether every line the range changed in `path` lies in a generated
    region, on its side of the change; never for a binary file."""
    if binary(commits, path, cwd):
        return False
    base, head = commits.split("..")
    old, new = text_at(base, path, cwd), text_at(head or "HEAD", path, cwd)
    if new is None:
        return False
    old_gen, new_gen = generated_lines(old or ""), generated_lines(new)
    diff = git(["diff", "-U0", "--no-renames", commits, "--", path], cwd)
    for hunk in re.finditer(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@", diff, re.M):
        o, oc, n, nc = int(hunk[1]), int(hunk[2] or 1), int(hunk[3]), int(hunk[4] or 1)
        if any(line not in old_gen for line in range(o, o + oc)) \
                or any(line not in new_gen for line in range(n, n + nc)):
            return False
    return True


def kind_of(path, commits=None, cwd=None):
    kind = next(name for name, matches in KINDS if matches(path))
    if kind not in ("manifest", "generated") and commits and only_generated(commits, path, cwd):
        return "generated"
    return kind


def own(path, folders):
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def changed(commits, cwd=None):
    """(path, added) for every file the range changed."""
    out = git(["diff", "--name-status", "--no-renames", commits], cwd)
    return sorted((line.split("\t", 1)[1], line.startswith("A")) for line in out.splitlines() if line)


def report(commits, folders, cwd=None):
    files = changed(commits, cwd)
    inside = [f for f, _ in files if own(f, folders)]
    outside = [(f, added) for f, added in files if not own(f, folders)]
    lines = [f"{commits}: {len(files)} files changed, {len(inside)} in the capability's own folders, "
             f"{len(outside)} outside them"]
    kinds = {f: kind_of(f, commits, cwd) for f, _ in outside}
    for name, _ in KINDS:
        of_kind = [(f, added) for f, added in outside if kinds[f] == name]
        if of_kind:
            lines.append(f"  {name} ({len(of_kind)}):")
            lines.extend(f"    {f}" + (" (new)" if added else "") for f, added in of_kind)
    return "\n".join(lines)


def self_test():
    with tempfile.TemporaryDirectory() as repo:
        git = lambda *args: subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        git("init", "-q")
        region = "[x]\n# >>> functions: generated by a tool\na\n# <<< functions\n"

        def commit(files, message):
            for path, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(repo, path)) or repo, exist_ok=True)
                with open(os.path.join(repo, path), "wb") as f:
                    f.write(text if isinstance(text, bytes) else text.encode())
            git("add", "-A")
            git("-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", message)

        page = "# B\n<!-- >>> table: generated by a tool -->\n| a |\n<!-- <<< table -->\ntext\n"
        tool = 'MARK = ">>> name: generated"\nx = 1\n'
        commit({"Cargo.toml": region, "infra/helm/values.yaml": region, "shared/src/error.rs": "x\n",
                "docs/bench.md": page, "scripts/tool.py": tool,
                "infra/k8s/all.yaml": "# Generated from infra/helm with its defaults\na\n",
                "docs/shot.png": b"\x89PNG\r\n\x1a\n\xff\xfe\x00",
                "functions/local/src/registry.rs": "// generated: do not edit\na\n", "functions.toml": ""},
               "base")
        commit({"shared/src/labels/mod.rs": "x\n", "functions/api-labels/src/lib.rs": "x\n",
                "Cargo.toml": region.replace("a\n", "a\nb\n"),
                "infra/helm/values.yaml": region.replace("[x]", "[y]").replace("a\n", "a\nb\n"),
                "functions/local/src/registry.rs": "// generated: do not edit\na\nb\n",
                "functions.toml": "[api-labels]\n", "migrations/1_labels.sql": "x\n", "docs/labels.md": "x\n",
                "shared/src/error.rs": "y\n", "tests/tests/e2e/labels.rs": "x\n", ".sqlx/query-1.json": "x\n",
                "infra/k8s/all.yaml": "# Generated from infra/helm with its defaults\na\nb\n",
                "docs/shot.png": b"\x89PNG\r\n\x1a\n\xff\xfd\x00\x01",
                "docs/bench.md": page.replace("| a |", "| b |"),
                "scripts/tool.py": tool.replace("x = 1", "x = 2")},
               "labels")
        text = report("HEAD~1..HEAD", ["shared/src/labels", "functions/api-labels"], cwd=repo)
    expected = [
        "15 files changed, 2 in the capability's own folders, 13 outside them",
        "  manifest (1):\n    functions.toml\n",
        "  generated (5):\n    .sqlx/query-1.json (new)\n    Cargo.toml\n    docs/bench.md\n"
        "    functions/local/src/registry.rs\n    infra/k8s/all.yaml\n",
        "  registration (1):\n    infra/helm/values.yaml\n",
        "  migration (1):\n    migrations/1_labels.sql (new)",
        "  docs (2):\n    docs/labels.md (new)\n    docs/shot.png\n",
        "  tooling (1):\n    scripts/tool.py\n",
        "  tests (1):\n    tests/tests/e2e/labels.rs (new)",
        "  product code (1):\n    shared/src/error.rs",
    ]
    missing = [e for e in expected if e not in text]
    if missing:
        print("self-test failed; the report:\n" + text, file=sys.stderr)
        sys.exit(1)
    print("touches self-test: every kind classified")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    if len(sys.argv) < 3 or ".." not in sys.argv[1]:
        print(__doc__.strip().split("\n\n")[1], file=sys.stderr)
        sys.exit(2)
    print(report(sys.argv[1], sys.argv[2:]))


if __name__ == "__main__":
    main()
