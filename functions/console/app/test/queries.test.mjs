// Every query key comes from a factory (src/queryKeys.ts, or a page's own
// for the resources it alone reads): a key written by hand in two places
// drifts, and an invalidation then misses the query it meant.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

const root = new URL("../src/", import.meta.url).pathname;

function files(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) return files(path);
    return /\.tsx?$/.test(name) && !name.endsWith(".d.ts") ? [path] : [];
  });
}

test("no query key is written by hand", () => {
  const literal = files(root).flatMap((path) => {
    const text = readFileSync(path, "utf8");
    return [...text.matchAll(/queryKey: \[/g)].map(() => path.slice(root.length));
  });
  assert.deepEqual(literal, []);
});

test("the check sees a key written by hand", () => {
  assert.match('useQuery({ queryKey: ["clusters"] })', /queryKey: \[/);
  assert.doesNotMatch("useQuery({ queryKey: keys.clusters() })", /queryKey: \[/);
});
