// The headless Chromium every browser test drives (the machine's, found by global-setup.ts): one
// launch configuration, so the files test the same browser. Playwright gives every launch a fresh,
// temporary --user-data-dir of its own.
//
// The suite's files run one after another in one process (vitest.browser.config.ts), and they share
// one Chromium: a launch costs about 1.5 CPU-seconds, once per file before. Each file gets a handle
// on it whose `close()` closes the contexts (and their pages) the file opened, so no page of one
// file outlives it; the process itself goes when the suite's process exits (Playwright kills the
// browsers it launched then).
import type { Browser, BrowserContext, BrowserContextOptions, Page } from "playwright-core";
import { chromium } from "playwright-core";
import { CHROMIUM } from "./global-setup.js";

/** A Chromium process of its own (a script, e.g. readme-screenshot.ts, closes it when it is done). */
export function ownChromium(): Promise<Browser> {
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

let shared: Promise<Browser> | undefined;

/**
 * A context's options with less motion asked for unless the test says otherwise: the dashboard's
 * pulsing dots then stand still (prefers-reduced-motion), and a page no longer keeps the
 * compositor drawing 60 frames a second while it waits (most of the suite's Chromium CPU before).
 */
const calm = (options: BrowserContextOptions = {}): BrowserContextOptions => ({ reducedMotion: "reduce", ...options });

/**
 * The suite's Chromium for one test file: its `newContext` and `newPage` open as usual, and its
 * `close()` closes what they opened, not the browser. A browser that went away (crashed) is
 * launched again for the next file.
 */
export async function chromiumForFile(): Promise<Browser> {
  let browser = shared && (await shared.catch(() => undefined));
  if (!browser?.isConnected()) {
    shared = ownChromium();
    browser = await shared;
  }
  const real = browser;
  const opened = new Set<BrowserContext>();
  const track = (c: BrowserContext) => {
    opened.add(c);
    c.once("close", () => opened.delete(c));
    return c;
  };
  const own: Partial<Browser> = {
    newContext: async (options?: BrowserContextOptions) => track(await real.newContext(calm(options))),
    newPage: async (options?: BrowserContextOptions): Promise<Page> => {
      const page = await real.newPage(calm(options));
      track(page.context());
      return page;
    },
    contexts: () => [...opened],
    close: async () => {
      await Promise.all([...opened].map((c) => c.close()));
    },
  };
  return new Proxy(real, {
    get(target, prop) {
      if (Object.hasOwn(own, prop)) return own[prop as keyof Browser];
      const value = Reflect.get(target, prop, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
}
