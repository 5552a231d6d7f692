// What every browser journey shares (e2e/*.spec.mjs, run by @playwright/test
// with playwright.config.js): the `journey` fixture, which gives a journey
// its language's catalogs, the checks every visited page gets (axe-core: no
// serious or critical violation; a screenshot) and the mail, and fails the
// journey on a Content-Security-Policy violation or a page error.
//
// tests/tests/e2e/console.rs starts `local` with a fresh database, an SMTP
// sink and the simulator, then runs each journey with BASE_URL, MAILDIR (the
// sink's maildir), KUBECTL, JOIN_SANDBOX (a machine to join: bin/ shims and
// root/ files), SHOTS (where screenshots go), DATABASE_URL (the journey
// writes the metrics samples the simulator cannot give), JOURNEY_LANGUAGE
// (`en` or `zh-CN`) and, for the admin, ADMIN_EMAIL and USER_EMAIL.
import assert from "node:assert/strict";
import { mkdirSync, readdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { test as base } from "@playwright/test";

const require = createRequire(import.meta.url);
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

/** A variable the runner must set. */
export const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

/** The shared catalog and every page's own (src/pages/<page>.<language>.json). */
export function catalogOf(language) {
  const pagesDir = new URL("../src/pages/", import.meta.url);
  return Object.assign(
    JSON.parse(readFileSync(new URL(`../src/locales/${language}.json`, import.meta.url), "utf8")),
    ...readdirSync(pagesDir)
      .filter((file) => file.endsWith(`.${language}.json`))
      .map((file) => JSON.parse(readFileSync(new URL(file, pagesDir), "utf8"))),
  );
}

export const PASSWORD = "correct horse battery staple 42";

/** A journey's helpers, bound to its page. */
function helpers(page, journey, language, isUser) {
  const BASE = env("BASE_URL");
  const SHOTS = env("SHOTS");
  mkdirSync(SHOTS, { recursive: true });
  const catalog = catalogOf(language);
  /** The text the console shows for `key` in the journey's language. */
  const T = (key, values = {}) => {
    const text = catalog[key] ?? catalog[`${key}_other`];
    assert.ok(text !== undefined, `no key ${key}`);
    return text.replace(/\{\{(\w+)\}\}/g, (_, name) => String(values[name]));
  };
  const step = (what) => console.log(`[${journey} ${language}] ${what}`);
  const shown = new Set();

  /** axe-core on the page as it is, then a screenshot named `name`. */
  async function check(name, shownIn = language) {
    await page.waitForLoadState("networkidle");
    await page.locator("[role=status]:has-text('…')").waitFor({ state: "detached", timeout: 10_000 }).catch(() => {});
    await page.evaluate(axeSource);
    const violations = await page.evaluate(async () => {
      // eslint-disable-next-line no-undef
      const result = await axe.run(document, { resultTypes: ["violations"] });
      return result.violations
        .filter((v) => v.impact === "serious" || v.impact === "critical")
        .map((v) => `${v.id} (${v.impact}): ${v.help} — ${v.nodes.map((n) => n.target.join(" ")).slice(0, 3).join(", ")}`);
    });
    assert.deepEqual(violations, [], `accessibility of ${name}`);
    await page.screenshot({ path: join(SHOTS, `${shownIn}-${name}.png`), fullPage: true });
    shown.add(name);
  }

  /**
   * The page as a phone shows it (390 × 844): no wider than the screen
   * (a table scrolls inside its own box), then `check` as `390-<name>`.
   */
  async function narrow(name, shownIn = language) {
    const size = page.viewportSize();
    await page.setViewportSize({ width: 390, height: 844 });
    try {
      const wide = await page.evaluate(() => document.documentElement.scrollWidth);
      // What reaches past the screen, for the message.
      const past = await page.evaluate(() =>
        [...document.querySelectorAll("body *")]
          .filter((e) => e.getBoundingClientRect().right > 390.5)
          .filter(
            (e) =>
              !e.parentElement?.closest(".table-scroll, .tabs, header.top nav") ||
              // eslint-disable-next-line no-undef
              getComputedStyle(e).position === "absolute",
          )
          .slice(0, 5)
          .map((e) => `${e.tagName.toLowerCase()}.${e.className} (${Math.round(e.getBoundingClientRect().right)} px)`),
      );
      assert.ok(wide <= 390, `${name} at 390 px is ${wide} px wide: ${past.join(", ")}`);
      await check(`390-${name}`, shownIn);
    } finally {
      await page.setViewportSize(size);
    }
  }

  /** The page in dark colours (the system's setting), then `check` as `dark-<name>`. */
  async function dark(name) {
    await page.emulateMedia({ colorScheme: "dark" });
    try {
      await page.waitForFunction(() => document.documentElement.dataset.theme === "dark");
      // eslint-disable-next-line no-undef
      const canvas = await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
      assert.equal(canvas, "rgb(17, 21, 29)", `${name} is drawn in the dark colours`);
      await check(`dark-${name}`);
    } finally {
      await page.emulateMedia({ colorScheme: "light" });
      await page.waitForFunction(() => document.documentElement.dataset.theme === "light");
    }
  }

  /** Waits for `check` to hold, polling, for at most 30 s. */
  async function until(check, what) {
    for (let i = 0; i < 300; i++) {
      if (await check()) return;
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`timed out waiting for ${what}`);
  }

  /** The newest 6-digit code mailed to `to` that was not read before. */
  const read = new Set();
  async function codeFor(to) {
    const box = join(env("MAILDIR"), "new");
    for (let i = 0; i < 200; i++) {
      let files = [];
      try {
        files = readdirSync(box).map((f) => join(box, f));
      } catch {
        // The mailbox is not there yet: look again.
      }
      for (const file of files) {
        const text = readFileSync(file, "utf8");
        if (read.has(file) || !text.split("\n").some((l) => l.startsWith("To:") && l.includes(to))) continue;
        const code = /is (\d{6})/.exec(text)?.[1];
        if (code) {
          read.add(file);
          return code;
        }
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`no code mailed to ${to}`);
  }

  async function signUp(email, name) {
    await page.goto(`${BASE}/clusters`);
    await page.waitForURL(/\/sign-in\?return=%2Fclusters$/);
    await page.getByRole("heading", { name: T("auth.sign_in") }).waitFor();
    await check("sign-in");
    if (isUser) {
      // No OAuth provider is configured: no button that would fail.
      await page.locator("form").getByRole("button", { name: T("auth.sign_in") }).waitFor();
      assert.equal(await page.getByRole("link", { name: T("auth.with_github") }).count(), 0);
    }
    await page.getByRole("link", { name: T("auth.no_account") }).click();
    await page.getByLabel(T("auth.display_name")).fill(name);
    await page.getByLabel(T("auth.email")).fill(email);
    // A weak password is refused by the API, in words.
    await page.getByLabel(T("auth.password")).fill("password12");
    await page.getByRole("button", { name: T("auth.sign_up") }).click();
    await page.getByRole("alert").waitFor();
    await check("sign-up-refused");
    await page.getByLabel(T("auth.password")).fill(PASSWORD);
    await page.getByRole("button", { name: T("auth.sign_up") }).click();
    await page.waitForURL(/\/confirm\?email=/);
    await check("confirm");
    await page.getByLabel(T("auth.code")).fill(await codeFor(email));
    await page.getByLabel(T("auth.password")).fill(PASSWORD);
    await page.getByRole("button", { name: T("auth.confirm") }).click();
    await page.waitForURL(/\/clusters$/);
  }

  return { BASE, SHOTS, T, step, shown, check, narrow, dark, until, codeFor, signUp };
}

/**
 * `test` with the `journey` fixture: `journey.T`, `journey.check`, … for the
 * page of the test, in JOURNEY_LANGUAGE (default `en`).
 */
export const test = base.extend({
  language: [process.env.JOURNEY_LANGUAGE ?? "en", { option: true }],
  journey: async ({ page, context, language }, use, testInfo) => {
    // Generous: the suite runs the journeys beside other tests on two cores.
    context.setDefaultTimeout(45_000);
    const problems = [];
    page.on("console", (message) => {
      const text = message.text();
      if (/Content.Security.Policy|Refused to/i.test(text)) problems.push(`CSP: ${text}`);
    });
    page.on("pageerror", (error) => problems.push(`page error: ${error.message}`));
    const name = testInfo.file.replace(/^.*\/|\.spec\.mjs$/g, "");
    const kit = helpers(page, name, language, name === "user");
    await use(kit);
    if (testInfo.status !== testInfo.expectedStatus) {
      await page.screenshot({ path: join(kit.SHOTS, `${language}-${name}-failure.png`), fullPage: true }).catch(() => {});
      console.error(`failed at ${page.url()}`);
    }
    assert.deepEqual(problems, [], "no CSP violation or page error");
    kit.step(`done: ${[...kit.shown].join(", ")}`);
  },
});
