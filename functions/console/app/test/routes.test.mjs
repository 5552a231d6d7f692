// The pages App.tsx draws are the pages the `console` function answers:
// every path it routes (`path === "/x"`, `match("/x/:id", path)`,
// `path.startsWith("/x")`) lies under one of functions.toml's console pages
// (clientRoutes.ts, generated), so a reload or a link from outside reaches it.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

const source = (name) => readFileSync(new URL(`../src/${name}`, import.meta.url), "utf8");
const list = (name) =>
  JSON.parse(source("clientRoutes.ts").match(new RegExp(`export const ${name}: readonly string\\[\\] = (\\[[^\\]]*\\]);`))[1]);
const served = [...list("PAGES"), ...list("PUBLIC_PAGES")];

/** Whether the console function answers `path` (`:param` is one segment). */
function answered(path) {
  const concrete = path.replace(/:[a-z]+/g, "x");
  return served.some((page) =>
    page.endsWith("/**") ? concrete.startsWith(page.slice(0, -3) + "/") : concrete === page,
  );
}

test("every page App.tsx routes is a client route of the console function", () => {
  const app = source("App.tsx");
  const routed = [
    ...app.matchAll(/path === "([^"]+)"/g),
    ...app.matchAll(/match\("([^"]+)", path\)/g),
    ...app.matchAll(/path\.startsWith\("([^"]+)"\)/g),
  ].map((m) => m[1]);
  assert.ok(routed.length >= 8, `only ${routed.length} routes found in App.tsx`);
  assert.deepEqual(routed.filter((path) => !answered(path)), []);
});

test("the check tells a page the console function does not answer", () => {
  assert.equal(answered("/clusters/:id/nodes/:node"), true);
  assert.equal(answered("/billing"), true);
  assert.equal(answered("/teams"), false);
  assert.equal(answered("/billing/history"), false);
});
