// Debian's Chromium, headless, as the journeys (playwright.config.js) and the
// benchmark launch it: no sandbox (the tests run as root), and none of the
// background traffic that a machine without internet would refuse at every
// start.
import { chromium } from "playwright-core";

export const ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

export function launch() {
  return chromium.launch({ executablePath: process.env.CHROMIUM ?? "/usr/bin/chromium", args: ARGS });
}
