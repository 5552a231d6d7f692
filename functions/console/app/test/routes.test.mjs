// The table of pages (pageTable.ts) and the console server's client routes
// (functions/console/src/pages.rs) both come from functions.toml: every page
// the app shows is a path the server answers with the app, so a reload or a
// link from outside reaches it, and every component the table names is one
// its module exports.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { test } from "node:test";

const source = (path) => readFileSync(new URL(`../src/${path}`, import.meta.url), "utf8");
const table = source("pageTable.ts");
const served = [...readFileSync(new URL("../../src/pages.rs", import.meta.url), "utf8").matchAll(/^ {4}"([^"]+)",$/gm)].map(
  (m) => m[1],
);
const pages = [...table.matchAll(/\{ path: "([^"]+)", component: ([^,]+),/g)].map((m) => ({ path: m[1], component: m[2] }));

/** The server's route for a page path (`:id` → `{id}`; `/**` → the path and `{*rest}` under it). */
function routes(path) {
  const axum = path.replace(/:([a-z_]+)/g, "{$1}");
  return axum.endsWith("/**") ? [axum.slice(0, -3), axum.slice(0, -3) + "/{*rest}"] : [axum];
}

test("every page of the table is a client route of the console function, and only those", () => {
  assert.ok(pages.length >= 10, `only ${pages.length} pages found in pageTable.ts`);
  const wanted = ["/", ...pages.flatMap((p) => routes(p.path))];
  assert.deepEqual([...served].sort(), [...new Set(wanted)].sort());
});

test("every component the table names is exported by its page module", () => {
  for (const [, names, module] of table.matchAll(/^import \{ ([^}]+) \} from "\.\/pages\/([a-z-]+)";$/gm)) {
    const text = source(`pages/${module}.tsx`);
    for (const name of names.split(", ")) assert.match(text, new RegExp(`export function ${name}\\(`), `${module}: ${name}`);
  }
  for (const [, module, name] of table.matchAll(/import\("\.\/pages\/([a-z-]+)"\)\.then\(\(m\) => \(\{ default: m\.(\w+) \}\)\)/g)) {
    assert.ok(existsSync(new URL(`../src/pages/${module}.tsx`, import.meta.url)), module);
    assert.match(source(`pages/${module}.tsx`), new RegExp(`export function ${name}\\(`), `${module}: ${name}`);
  }
});

test("no page imports another page or the root component", () => {
  for (const module of new Set([...table.matchAll(/\.\/pages\/([a-z-]+)/g)].map((m) => m[1]))) {
    const imports = [...source(`pages/${module}.tsx`).matchAll(/from "([^"]+)"/g)].map((m) => m[1]);
    // Beside it a page may read only its own catalog (for its keys' type).
    const own = new RegExp(`^\\./${module}\\.[a-zA-Z-]+\\.json$`);
    assert.deepEqual(imports.filter((i) => (i.startsWith("./") && !own.test(i)) || i === "../App"), [], module);
  }
});

test("the check tells a route the server does not answer", () => {
  assert.deepEqual(routes("/clusters/:id/nodes/:node"), ["/clusters/{id}/nodes/{node}"]);
  assert.deepEqual(routes("/admin/**"), ["/admin", "/admin/{*rest}"]);
  assert.ok(!served.includes(routes("/teams")[0]));
});
