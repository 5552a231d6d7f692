#!/usr/bin/env python3
"""Breaking changes of the HTTP API must be announced: compares the OpenAPI
document (`docs/openapi.json`) with the last release's
(`docs/openapi.released.json`) and fails when a breaking change is not named
in `CHANGELOG.md`'s `[Unreleased]` section (by its path, as the document
writes it).

Breaking, for a client written against the released document:
- an operation removed;
- a request parameter added as required, or made required;
- a request body property added to `required`, or a body made required;
- a property of a success (2xx) answer removed, or its type changed.

At a release, `docs/openapi.json` is copied over the released document and
`[Unreleased]` gets the release's name. `--self-test` checks the rules on
documents of its own.
"""

import json
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
METHODS = ("get", "put", "post", "delete", "patch")


def resolve(doc, schema, seen=()):
    """The schema with `$ref`s followed (and `allOf` merged), at most once per name."""
    if not isinstance(schema, dict):
        return {}
    ref = schema.get("$ref")
    if ref:
        name = ref.rsplit("/", 1)[-1]
        if name in seen:
            return {}
        return resolve(doc, doc.get("components", {}).get("schemas", {}).get(name, {}), seen + (name,))
    if "allOf" in schema:
        merged = {"properties": {}, "required": []}
        for part in schema["allOf"]:
            part = resolve(doc, part, seen)
            merged["properties"].update(part.get("properties", {}))
            merged["required"] += part.get("required", [])
        return merged
    return schema


def type_of(doc, schema):
    """The JSON types a schema allows besides null, as a sorted list."""
    schema = resolve(doc, schema)
    alternatives = schema.get("oneOf") or schema.get("anyOf")
    if alternatives:
        return sorted({t for a in alternatives for t in type_of(doc, a)})
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    return sorted(k for k in kinds if k != "null")


def answer_schemas(op):
    for status, response in op.get("responses", {}).items():
        if str(status).startswith("2"):
            for media in response.get("content", {}).values():
                if "schema" in media:
                    yield media["schema"]


def body_schema(op):
    for media in op.get("requestBody", {}).get("content", {}).values():
        if "schema" in media:
            return media["schema"]
    return None


def compare_answers(old_doc, new_doc, old, new, where, out, depth=0):
    old, new = resolve(old_doc, old), resolve(new_doc, new)
    if depth > 6:
        return
    if old.get("type") == "array" and new.get("type") == "array":
        compare_answers(old_doc, new_doc, old.get("items"), new.get("items"), where + "[]", out, depth + 1)
        return
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name, schema in old_props.items():
        if name not in new_props:
            out.append(f"{where}.{name} is no longer in the answer")
        elif type_of(old_doc, schema) != type_of(new_doc, new_props[name]):
            out.append(f"{where}.{name} changed type ({type_of(old_doc, schema)} -> {type_of(new_doc, new_props[name])})")
        else:
            compare_answers(old_doc, new_doc, schema, new_props[name], f"{where}.{name}", out, depth + 1)


def breaking(old_doc, new_doc):
    """(path, what) for each breaking change."""
    found = []
    for path, old_item in old_doc.get("paths", {}).items():
        new_item = new_doc.get("paths", {}).get(path, {})
        for method in METHODS:
            if method not in old_item:
                continue
            op_name = f"{method.upper()} {path}"
            if method not in new_item:
                found.append((path, f"{op_name} was removed"))
                continue
            old_op, new_op = old_item[method], new_item[method]
            old_params = {(p.get("in"), p.get("name")): p for p in old_op.get("parameters", [])}
            for p in new_op.get("parameters", []):
                key = (p.get("in"), p.get("name"))
                if p.get("required") and not old_params.get(key, {}).get("required"):
                    found.append((path, f"{op_name}: the {p.get('in')} parameter {p.get('name')} is required now"))
            old_body, new_body = body_schema(old_op), body_schema(new_op)
            if new_body is not None:
                if new_op.get("requestBody", {}).get("required") and not old_op.get("requestBody", {}).get("required"):
                    found.append((path, f"{op_name}: a body is required now"))
                old_required = set(resolve(old_doc, old_body).get("required", [])) if old_body else set()
                for name in sorted(set(resolve(new_doc, new_body).get("required", [])) - old_required):
                    found.append((path, f"{op_name}: the body field {name} is required now"))
            answers = []
            for old_answer, new_answer in zip(answer_schemas(old_op), answer_schemas(new_op)):
                compare_answers(old_doc, new_doc, old_answer, new_answer, "answer", answers)
            found += [(path, f"{op_name}: {a}") for a in answers]
    return found


def unreleased(changelog):
    m = re.search(r"^## \[Unreleased\]\s*$(.*?)(?=^## \[|\Z)", changelog, re.M | re.S)
    return m.group(1) if m else ""


def unannounced(old_doc, new_doc, changelog):
    notes = unreleased(changelog)
    return [(path, what) for path, what in breaking(old_doc, new_doc) if path not in notes]


def self_test():
    old = {"paths": {
        "/a": {"get": {"responses": {"200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}}}},
        "/b": {"post": {"requestBody": {"content": {"application/json": {"schema": {"type": "object", "required": ["x"], "properties": {}}}}},
                        "parameters": [{"in": "query", "name": "q"}], "responses": {}}},
        "/c": {"delete": {"responses": {}}},
        "/d": {"get": {"responses": {}}},
    }, "components": {"schemas": {"A": {"type": "object", "properties": {"id": {"type": "string"}, "n": {"type": "integer"}, "kept": {"type": "string"}}}}}}
    new = json.loads(json.dumps(old))
    new["components"]["schemas"]["A"]["properties"].pop("id")
    new["components"]["schemas"]["A"]["properties"]["n"] = {"type": "string"}
    new["components"]["schemas"]["A"]["properties"]["added"] = {"type": "string"}
    new["paths"]["/b"]["post"]["requestBody"]["content"]["application/json"]["schema"]["required"] = ["x", "y"]
    new["paths"]["/b"]["post"]["parameters"] = [{"in": "query", "name": "q", "required": True}]
    del new["paths"]["/c"]
    found = [what for _, what in breaking(old, new)]
    expected = [
        "GET /a: answer.id is no longer in the answer",
        "GET /a: answer.n changed type (['integer'] -> ['string'])",
        "POST /b: the query parameter q is required now",
        "POST /b: the body field y is required now",
        "DELETE /c was removed",
    ]
    changelog = "# Changelog\n\n## [Unreleased]\n\n- `DELETE /c` went: use `/d`.\n\n## [1.0.0]\n\n- `/a` and `/b` changed long ago.\n"
    still = [what for _, what in unannounced(old, new, changelog)]
    if sorted(found) != sorted(expected) or any("/c" in w for w in still) or len(still) != 4:
        print(f"self-test failed:\n  found {found}\n  unannounced {still}", file=sys.stderr)
        sys.exit(1)
    print("check-api-changes self-test: breaking changes found, announced ones passed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return
    read = lambda path: open(os.path.join(ROOT, path), encoding="utf-8").read()
    old_doc = json.loads(read("docs/openapi.released.json"))
    new_doc = json.loads(read("docs/openapi.json"))
    missing = unannounced(old_doc, new_doc, read("CHANGELOG.md"))
    if missing:
        print("breaking changes of the HTTP API that CHANGELOG.md's [Unreleased] does not name:", file=sys.stderr)
        for path, what in missing:
            print(f"  {what}  (name `{path}` in an entry that says how to migrate)", file=sys.stderr)
        sys.exit(1)
    total = len(breaking(old_doc, new_doc))
    print(f"docs/openapi.json against the last release: {total} breaking change(s), each in CHANGELOG.md")


if __name__ == "__main__":
    main()
