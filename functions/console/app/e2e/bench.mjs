// The console's load figures (docs/benchmarks.md#console): the gzip size
// of the first load (index.html, its CSS, its entry script and the modules
// it preloads; the metrics chart and the back office load on demand), and
// the clusters page's time to interactive in headless Chromium against a
// running `local --development` at BASE_URL: from navigation start to the
// list on screen (a `kubebyon:clusters` performance mark), median of 5
// cold loads (a new browser context each time: nothing cached). With
// SEARCH set, each run then searches the list for that text and times the
// answer's rows on screen; with HEALTH, filters the list by that health and
// times its rows on screen; with SORT=name, orders it by name and times
// the first rows on screen. PAGE=<path> times another list page instead
// (`/admin/users`): to its first table row on screen, found by polling
// each animation frame.
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { launch } from "./chromium.mjs";

const dist = new URL("../../dist/", import.meta.url).pathname;
const index = readFileSync(join(dist, "index.html"), "utf8");
const firstLoad = ["index.html", ...[...index.matchAll(/(?:src|href)="\/([^"]+\.(?:js|css))"/g)].map((m) => m[1])];
const gz = (file) => statSync(join(dist, `${file}.gz`)).size;
const js = firstLoad.filter((f) => f.endsWith(".js"));
const kb = (bytes) => (bytes / 1024).toFixed(1);
console.log(`first load: ${firstLoad.join(", ")}`);
console.log(`first-load JS (gzip): ${kb(js.reduce((a, f) => a + gz(f), 0))} KiB`);
console.log(`first load, all (gzip): ${kb(firstLoad.reduce((a, f) => a + gz(f), 0))} KiB`);

const base = process.env.BASE_URL;
if (!base) {
  console.log("BASE_URL not set: no load timing");
  process.exit(0);
}
const browser = await launch();
const path = process.env.PAGE ?? "/clusters";
const runs = [];
for (let i = 0; i < 5; i++) {
  const context = await browser.newContext();
  const page = await context.newPage();
  await page.goto(`${base}${path}`);
  const shown =
    path === "/clusters"
      ? await page.waitForFunction(
          () => performance.getEntriesByName("kubebyon:clusters")[0]?.startTime,
          null,
          { timeout: 10_000 },
        )
      : await page.waitForFunction(() => document.querySelector("main tbody tr") && performance.now(), null, {
          timeout: 10_000,
          polling: "raf",
        });
  const interactive = await shown.jsonValue();
  const run = await page.evaluate((interactive) => {
    const nav = performance.getEntriesByType("navigation")[0];
    return {
      interactive,
      domContentLoaded: nav.domContentLoadedEventEnd,
      transferred: performance.getEntriesByType("resource").reduce((a, r) => a + r.transferSize, nav.transferSize),
    };
  }, interactive);
  if (process.env.SEARCH) {
    const started = Date.now();
    await page.locator("form[role=search] input[name=q]").fill(process.env.SEARCH);
    const answered = page.waitForResponse((r) => r.url().includes("/api/console/clusters?") && r.url().includes("q="));
    await page.locator("form[role=search] button[type=submit]").click();
    await answered;
    await page.locator("tbody tr").first().waitFor();
    run.search = Date.now() - started;
  }
  if (process.env.HEALTH) {
    const started = Date.now();
    const answered = page.waitForResponse((r) => r.url().includes(`health=${process.env.HEALTH}`));
    await page.locator("form[role=search] select[name=health]").selectOption(process.env.HEALTH);
    await answered;
    await page.locator(`tbody tr .badge[data-health="${process.env.HEALTH}"]`).first().waitFor();
    run.health = Date.now() - started;
  }
  if (process.env.SORT) {
    const started = Date.now();
    const answered = page.waitForResponse((r) => r.url().includes(`sort=${process.env.SORT}`));
    await page.locator("form[role=search] select[name=sort]").selectOption(process.env.SORT);
    await answered;
    await page.locator("tbody tr").first().waitFor();
    run.sort = Date.now() - started;
  }
  runs.push(run);
  await context.close();
}
await browser.close();
const median = (key) => runs.map((r) => r[key]).sort((a, b) => a - b)[2];
console.log(`${path} interactive, median of 5: ${median("interactive").toFixed(0)} ms (runs: ${runs.map((r) => r.interactive.toFixed(0)).join(", ")})`);
console.log(`DOMContentLoaded, median: ${median("domContentLoaded").toFixed(0)} ms; bytes transferred, median: ${kb(median("transferred"))} KiB`);
if (process.env.HEALTH) {
  console.log(`health "${process.env.HEALTH}" to its rows on screen, median of 5: ${median("health").toFixed(0)} ms (runs: ${runs.map((r) => r.health).join(", ")})`);
}
if (process.env.SORT) {
  console.log(`sort "${process.env.SORT}" to its rows on screen, median of 5: ${median("sort").toFixed(0)} ms (runs: ${runs.map((r) => r.sort).join(", ")})`);
}
if (process.env.SEARCH) {
  console.log(`search "${process.env.SEARCH}" to its rows on screen, median of 5: ${median("search").toFixed(0)} ms (runs: ${runs.map((r) => r.search).join(", ")})`);
}
