// What the browser tests do with a page: open one (collecting its errors), and screenshot it at
// desktop and phone size (no sideways scroll on the phone).
import { existsSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Browser, BrowserContext, BrowserContextOptions, Page, Response } from "playwright-core";
import { expect } from "vitest";

export const SHOTS = join(import.meta.dirname, "..", "..", "test-results", "screenshots");
export const DESKTOP = { width: 1280, height: 800 };
export const PHONE = { width: 390, height: 844 };

/**
 * A fresh context at desktop size (with `options`, e.g. a time zone) on `url`; `errors` collects
 * page errors and console errors (not socket noise). `clock`: the page's timers on Playwright's
 * clock (time flows as usual; `page.clock.fastForward` fires a timer that is due later at once).
 */
export async function openPage(
  browser: Browser,
  url: string,
  options: BrowserContextOptions = {},
  { clock = false }: { clock?: boolean } = {},
): Promise<{ context: BrowserContext; page: Page; errors: string[] }> {
  const context = await browser.newContext({ viewport: DESKTOP, deviceScaleFactor: 1, ...options });
  if (clock) await context.clock.install();
  const page = await context.newPage();
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("console", (msg) => {
    if (msg.type() === "error" && !/WebSocket|Failed to load resource|ERR_CONNECTION_REFUSED/.test(msg.text()))
      errors.push(msg.text());
  });
  await gotoPage(page, url);
  await booted(page, url);
  return { context, page, errors };
}

/** The app drew into #app (a page that is not the app's passes at once). */
const APP_DRAWN =
  "() => { const app = document.querySelector('#app'); return app === null || app.childElementCount > 0; }";

/**
 * Wait for the app to draw; loaded again (up to twice, after 1 and 2 s) if it did not within 10 s. On a busy machine
 * the local asset server answered an empty 500 for the app's script (CI run 40: the page loaded, the app never
 * started, and every test of the file failed), which no load status shows. Each reload is said.
 */
async function booted(page: Page, url: string): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      await page.waitForFunction(APP_DRAWN, null, { timeout: 10_000, polling: 100 });
      return;
    } catch (e) {
      if (attempt >= 3) throw e;
      console.warn(`[browser] ${url.split("#")[0]}: the app did not start; loading it again`);
      await page.waitForTimeout(1000 * attempt);
      await gotoPage(page, url);
    }
  }
}

/**
 * One page the tests of a describe share, in `browser()` on the relay at `base()` (both read when
 * first visited, after the file's beforeAll): the first `visit` opens it
 * (openPage: one page load), each later one routes inside the app as its own links do
 * (history.pushState, then popstate: dashboard/src/main.ts mounts the path's page afresh), after
 * emptying the storage a fresh context starts without (the reward scope, the picks, a token) and
 * setting the window back to the context's size (a test may leave it at a phone's).
 * A page load costs Chromium 1.3-2.5 CPU-s (a new renderer, the bundle parsed again); a route
 * change only draws the page. `errors` is emptied at each visit: a test reads its own.
 */
export function sharedPage(browser: () => Browser, base: () => string, options: BrowserContextOptions = {}) {
  let opened: Promise<{ context: BrowserContext; page: Page; errors: string[] }> | undefined;
  return {
    async visit(path: string): Promise<{ page: Page; errors: string[] }> {
      if (!opened) return await (opened = openPage(browser(), `${base()}${path}`, options));
      const { page, errors } = await opened;
      errors.length = 0;
      await page.setViewportSize(options.viewport ?? DESKTOP);
      // a test that left the page off the dashboard (an error page: no storage to clear, no app to route) does not
      // spoil the next: it loads the path for real, then starts from cleared storage as the others do
      if (!page.url().startsWith(base())) await gotoPage(page, `${base()}${path}`);
      await page.evaluate((to) => {
        const w = globalThis as any;
        w.localStorage.clear();
        w.sessionStorage.clear();
        w.history.pushState(null, "", to);
        w.dispatchEvent(new w.PopStateEvent("popstate"));
      }, path);
      return { page, errors };
    },
    async close(): Promise<void> {
      const was = opened;
      opened = undefined;
      await (await was?.catch(() => undefined))?.context.close();
    },
  };
}

/**
 * `page.goto(url)`, loaded again (up to three times, after 0.5, 1 and 2 s) when the navigation fails with an error status and
 * no body (ERR_HTTP_RESPONSE_CODE_FAILURE), as a reader would reload. The local runtime's asset
 * server answers 500 with an empty body when a read of dashboard/dist fails inside workerd (seen
 * once, mid-suite, for a page the same test had loaded seconds before); the pages' own behaviour
 * is what the tests assert. Each reload is said, the URL's fragment (a token) left out.
 */
export async function gotoPage(page: Page, url: string): Promise<Response | null> {
  return await loadAgain(page, url, () => page.goto(url));
}

/** `page.reload()`, loaded again as gotoPage does when it fails with an error status and no body. */
export async function reloadPage(page: Page): Promise<Response | null> {
  return await loadAgain(page, page.url(), () => page.reload());
}

async function loadAgain(page: Page, url: string, load: () => Promise<Response | null>): Promise<Response | null> {
  for (let attempt = 1; ; attempt++) {
    const status: number[] = [];
    const onResponse = (r: Response) => {
      if (r.request().isNavigationRequest()) status.push(r.status());
    };
    page.on("response", onResponse);
    try {
      return await load();
    } catch (e) {
      if (attempt >= 4 || !String(e).includes("ERR_HTTP_RESPONSE_CODE_FAILURE")) throw e;
      console.warn(
        `[browser] ${url.split("#")[0]} answered ${status.join(", ") || "an error"} with no body; loading it again`,
      );
      // a reload of the error page would load the error page: the URL it failed on is loaded instead, after a
      // growing pause (CI run 39: three loads in a row met it on a busy machine, so the condition lasts a moment)
      await page.waitForTimeout(500 * 2 ** (attempt - 1));
      load = () => page.goto(url);
    } finally {
      page.off("response", onResponse);
    }
  }
}

const pageWidth = (page: Page) =>
  page.evaluate(() => (globalThis as any).document.documentElement.scrollWidth as number);

/**
 * Screenshots of the whole page with `SCREENSHOTS=full`, else of what the window shows (its top): a
 * full-page capture lays out and paints the whole page at its full height, about 1.1 Chromium
 * CPU-s against 0.15 for the window (a run page, measured), and `npm test` takes some sixty.
 */
const FULL_PAGE = process.env.SCREENSHOTS === "full";

/**
 * `name-desktop.png` and `name-phone.png` in SHOTS (the whole page with SCREENSHOTS=full); both
 * written and non-empty; no sideways scroll on the phone.
 */
export async function shoot(page: Page, name: string): Promise<string[]> {
  await page.evaluate(() => (globalThis as any).scrollTo(0, 0));
  await page.setViewportSize(DESKTOP);
  await page.waitForTimeout(150);
  const desktop = join(SHOTS, `${name}-desktop.png`);
  await page.screenshot({ path: desktop, fullPage: FULL_PAGE });
  await page.setViewportSize(PHONE);
  await page.waitForTimeout(150);
  await page.evaluate(() => (globalThis as any).scrollTo(0, 0));
  expect(await pageWidth(page), `${name}: no sideways scroll at ${PHONE.width} px`).toBeLessThanOrEqual(PHONE.width);
  const phone = join(SHOTS, `${name}-phone.png`);
  await page.screenshot({ path: phone, fullPage: FULL_PAGE });
  await page.setViewportSize(DESKTOP);
  for (const file of [desktop, phone]) {
    expect(existsSync(file), file).toBe(true);
    expect(statSync(file).size, file).toBeGreaterThan(0);
  }
  return [desktop, phone];
}

/** `name-desktop.png` and `name-phone.png` of the element `selector` only (no sideways scroll on the phone either). */
export async function shootPart(page: Page, selector: string, name: string): Promise<string[]> {
  const files: string[] = [];
  for (const [size, viewport] of [
    ["desktop", DESKTOP],
    ["phone", PHONE],
  ] as const) {
    await page.setViewportSize(viewport);
    await page.waitForTimeout(150);
    if (size === "phone")
      expect(await pageWidth(page), `${name}: no sideways scroll at ${PHONE.width} px`).toBeLessThanOrEqual(
        PHONE.width,
      );
    const file = join(SHOTS, `${name}-${size}.png`);
    // the sticky top bar would cover the part's top once it is scrolled into view: set aside through
    // the CSSOM (Playwright's `style` option injects a <style>, which the pages' CSP refuses)
    await page.evaluate(`document.querySelector(".topbar")?.style.setProperty("position", "static", "important")`);
    await page.locator(selector).first().screenshot({ path: file });
    await page.evaluate(`document.querySelector(".topbar")?.style.removeProperty("position")`);
    expect(statSync(file).size, file).toBeGreaterThan(0);
    files.push(file);
  }
  await page.setViewportSize(DESKTOP);
  return files;
}
