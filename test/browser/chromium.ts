// The headless Chromium every browser test drives (the machine's, found by global-setup.ts): one
// launch configuration, so the files test the same browser. Playwright gives every launch a fresh,
// temporary --user-data-dir of its own.
import { type Browser, chromium } from "playwright-core";
import { CHROMIUM } from "./global-setup.js";

export function launchChromium(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: [
      "--headless",
      "--no-sandbox",
      "--disable-gpu",
      "--disable-background-networking",
      "--disable-component-update",
      "--no-first-run",
      "--disable-quic",
      "--disable-sync",
    ],
  });
}
