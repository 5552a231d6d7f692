// The browser journeys (e2e/*.spec.mjs) in Debian's Chromium: no browser is
// downloaded. tests/tests/e2e/console.rs runs one journey at a time against
// the `local` it started (e2e/support.mjs lists the variables).
import { defineConfig } from "@playwright/test";
import { ARGS } from "./e2e/chromium.mjs";

export default defineConfig({
  testDir: "e2e",
  testMatch: "*.spec.mjs",
  // A journey is one long test whose steps depend on each other.
  timeout: 300_000,
  workers: 1,
  retries: 0,
  forbidOnly: true,
  reporter: [["list"]],
  // A directory per run: the runner empties its own at start, and two
  // journeys may run at once (the console's test and the command line's).
  outputDir: `../../../target/console-results/${process.env.JOURNEY_RUN ?? "journey"}`,
  use: {
    browserName: "chromium",
    launchOptions: { executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ARGS },
    locale: process.env.JOURNEY_LANGUAGE ?? "en",
    viewport: { width: 1280, height: 860 },
    acceptDownloads: true,
    permissions: ["clipboard-read", "clipboard-write"],
    trace: "retain-on-failure",
  },
});
