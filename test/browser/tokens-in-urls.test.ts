// No token in a URL, in a real browser (Debian's headless Chromium, playwright-core) against the
// relay bundle with a secret: an admin makes a read-only share link on a run's page; opened in a
// fresh browser (no session), it shows the run, and a link of that page opened in a new tab (whose
// session starts empty) shows its episode, live to the end. Every request the pages make (the
// documents, their scripts, fetches and WebSocket handshakes) is recorded: none carries `token=`,
// the watch's socket offers its token as a subprotocol entry. The dashboard is served with its
// security headers and runs under its Content-Security-Policy without a violation. A storm of
// run-directory sockets: a page told 1013 waits the relay's hint before it tries again.
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { mintToken } from "../../src/protocol/http/auth.js";
import { RETRY_MIN_MS } from "../../src/protocol/hub/admission.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { chromiumForFile } from "./chromium.js";
import { DESKTOP, gotoPage, shoot } from "./pages.js";

const SECRET = "browser-urls-secret-5f2e8d1c0b9a7f6e5d4c3b2a1908";
let browser: Browser;
let relay: LocalRelay;

beforeAll(async () => {
  browser = await chromiumForFile();
  relay = await startRelay({ vars: { RELAY_SECRET: SECRET } });
});

afterAll(async () => {
  await browser?.close();
  await relay?.stop();
});

const chat = loadCase(fixturePath("chat_basic"));

/** chat_basic into `id` through the relay's HTTP API, with a producer token; the reply too unless `live`. */
async function pushChat(id: string, token: string, live = false): Promise<void> {
  const producer = new ProducerCursor("browser");
  const frames = live ? chat.frames.slice(0, 2) : chat.frames;
  for (const f of frames) {
    const r = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(f)),
      headers: { authorization: `Bearer ${token}` },
    });
    expect(r.status).toBe(200);
    await r.arrayBuffer();
    producer.acknowledge();
  }
  if (live) return;
  const r = await fetch(`${relay.url}/v1/episodes/${id}/reply`, {
    method: "POST",
    body: chat.reply,
    headers: { authorization: `Bearer ${token}` },
  });
  expect(r.status).toBe(200);
  await r.arrayBuffer();
}

/** Every URL a page of `context` asks for (documents, scripts, fetches, sockets), and its page and console errors. */
function record(context: BrowserContext): {
  urls: string[];
  sockets: Array<{ url: string; protocol: string }>;
  errors: string[];
} {
  const seen = {
    urls: [] as string[],
    sockets: [] as Array<{ url: string; protocol: string }>,
    errors: [] as string[],
  };
  context.on("request", (r) => seen.urls.push(r.url()));
  context.on("page", (p) => watchPage(p, seen));
  return seen;
}

function watchPage(
  page: Page,
  seen: { urls: string[]; sockets: Array<{ url: string; protocol: string }>; errors: string[] },
): void {
  page.on("pageerror", (e) => seen.errors.push(e.message));
  page.on("console", (m) => {
    if (m.type() === "error" && !/Failed to load resource|WebSocket connection/.test(m.text()))
      seen.errors.push(m.text());
  });
  page.on("websocket", (ws) => seen.urls.push(ws.url()));
  void page
    .context()
    .newCDPSession(page)
    .then(async (cdp) => {
      await cdp.send("Network.enable");
      cdp.on("Network.webSocketWillSendHandshakeRequest", (e: { request: { headers: Record<string, string> } }) => {
        const h =
          Object.entries(e.request.headers).find(([k]) => k.toLowerCase() === "sec-websocket-protocol")?.[1] ?? "";
        seen.sockets.push({ url: "", protocol: h });
      });
      cdp.on("Network.webSocketCreated", (e: { url: string }) => seen.urls.push(e.url));
    })
    .catch(() => {});
}

async function connection(page: Page, state: string, timeout = 15_000): Promise<void> {
  await page.waitForFunction(
    (s) => (globalThis as any).document.querySelector("#connection")?.dataset.state === s,
    state,
    { timeout },
  );
}

describe("the dashboard's security headers", () => {
  it("every page: Content-Security-Policy (self only, frame-ancestors 'none'), nosniff, Referrer-Policy; no source map served", async () => {
    for (const path of ["/", "/runs/x", "/episodes/x:1"]) {
      const res = await fetch(`${relay.url}${path}`);
      expect(res.status).toBe(200);
      const csp = res.headers.get("content-security-policy") ?? "";
      for (const d of [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "connect-src 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
      ]) {
        expect(csp, path).toContain(d);
      }
      expect(res.headers.get("x-content-type-options")).toBe("nosniff");
      expect(res.headers.get("referrer-policy")).toBe("no-referrer");
      const html = await res.text();
      const script = /<script[^>]+src="([^"]+)"/.exec(html)?.[1];
      expect(script).toBeDefined();
      const js = await (await fetch(`${relay.url}${script}`)).text();
      expect(js).not.toMatch(/sourceMappingURL/);
      expect((await fetch(`${relay.url}${script}.map`)).headers.get("content-type")).toMatch(/text\/html/); // the page, not a map
    }
  });
});

describe("a share link", () => {
  it("an admin shares a run read-only; the link works in a fresh browser and in new tabs; no request carries token=", async () => {
    const run = `share-${Date.now().toString(36)}`;
    const [done, live] = [`${run}:done`, `${run}:live`];
    const producer = await mintToken(SECRET, { role: "producer", episodes: [`${run}:*`], ttl: 600 });
    await pushChat(done, producer);
    await pushChat(live, producer, true);
    const admin = await mintToken(SECRET, { role: "admin", episodes: [`${run}:*`], ttl: 600 });

    // the admin opens the run with their token in the fragment, and makes a link
    const adminContext = await browser.newContext({ viewport: DESKTOP });
    const adminSeen = record(adminContext);
    const adminPage = await adminContext.newPage();
    await gotoPage(adminPage, `${relay.url}/runs/${encodeURIComponent(run)}#token=${admin}`);
    await connection(adminPage, "live");
    expect(adminPage.url()).not.toContain("token");
    await adminPage.locator(`.ep-row[data-id="${done}"]`).waitFor();
    await adminPage.click("#share-run");
    await adminPage.locator("#share-url").waitFor({ state: "visible" });
    const link = await adminPage.inputValue("#share-url");
    expect(link).toMatch(new RegExp(`/runs/${encodeURIComponent(run)}#token=[\\w.-]+$`));
    expect(await adminPage.locator("#share-note").innerText()).toMatch(/read-only, until/);
    await shoot(adminPage, "share-link");
    const shared = decodeURIComponent(link.split("#token=")[1]!);
    const claims = JSON.parse(Buffer.from(shared.split(".")[1]!, "base64url").toString()) as {
      role: string;
      episodes: string[];
    };
    expect(claims).toMatchObject({ role: "watcher", episodes: [`${run}:*`] });

    // someone else opens the link: a fresh browser, no session
    const guest = await browser.newContext({ viewport: DESKTOP });
    const guestSeen = record(guest);
    const page = await guest.newPage();
    await gotoPage(page, link);
    await connection(page, "live");
    expect(page.url()).toBe(`${relay.url}/runs/${encodeURIComponent(run)}`);
    await page.locator(`.ep-row[data-id="${done}"]`).waitFor();
    await page.locator(`.ep-row[data-id="${live}"]`).waitFor();
    expect(await page.locator("#share-run").count()).toBe(0); // a watcher's token: nothing to share
    // the page's own links carry the token in their fragment: a new tab (an empty session) opened from one works
    const href = await page.locator(`.ep-row[data-id="${live}"]`).getAttribute("href");
    expect(href).toMatch(/#token=/);
    const tab = await guest.newPage();
    await gotoPage(tab, `${relay.url}${href}`);
    await connection(tab, "live");
    expect(tab.url()).toBe(`${relay.url}/episodes/${encodeURIComponent(live)}`);
    // the tab's own session holds the token, from the link
    expect(await tab.evaluate(() => (globalThis as any).sessionStorage.getItem("episode-relay-token"))).toBe(shared);
    // the rest of the run arrives: the new tab's watch follows it to the end
    const rest = new ProducerCursor("browser-rest", 3);
    for (const f of chat.frames.slice(2)) {
      const r = await fetch(`${relay.url}/v1/episodes/${live}/deltas`, {
        method: "POST",
        body: encodeEnvelope(rest.envelope(f)),
        headers: { authorization: `Bearer ${producer}` },
      });
      await r.arrayBuffer();
      rest.acknowledge();
    }
    await (
      await fetch(`${relay.url}/v1/episodes/${live}/reply`, {
        method: "POST",
        body: chat.reply,
        headers: { authorization: `Bearer ${producer}` },
      })
    ).arrayBuffer();
    await connection(tab, "finished");
    // the pill turns at once; the page draws the last turns in its next animation frame, with the status badge
    await tab.waitForFunction(
      () => (globalThis as any).document.querySelector("#ep-status")?.dataset.status === "finished",
    );
    expect(await tab.locator("li.turn").count()).toBe(7);
    // read-only: the shared token cannot delete (the relay says so)
    const del = await fetch(`${relay.url}/v1/episodes/${done}`, {
      method: "DELETE",
      headers: { authorization: `Bearer ${shared}` },
    });
    expect(del.status).toBe(403);

    for (const seen of [adminSeen, guestSeen]) {
      expect(seen.urls.length).toBeGreaterThan(5);
      const leaking = seen.urls.filter((u) => /[?&]token=/.test(u) || u.includes(shared) || u.includes(admin));
      expect(leaking, "no request URL carries a token").toEqual([]);
      expect(seen.errors, "no page error, no Content-Security-Policy violation").toEqual([]);
    }
    expect(
      guestSeen.urls.some((u) => /^ws:.*\/v1\/episodes\/.*\/watch/.test(u)),
      "the watch socket was opened",
    ).toBe(true);
    expect(
      guestSeen.sockets.some((s) => s.protocol.includes(`bearer.${shared}`) && s.protocol.includes("episode-relay")),
    ).toBe(true);
    await adminContext.close();
    await guest.close();
  }, 120_000);
});

describe("a busy relay's sockets", () => {
  it("pages whose runs socket is refused 1013 wait the relay's retry hint, then connect", async () => {
    const busy = await startRelay({ vars: { RUN_SOCKET_RATE: "0.25" } }); // one start, then one per 4 s
    try {
      const context = await browser.newContext({ viewport: DESKTOP });
      const pages = await Promise.all([0, 1, 2].map(() => context.newPage()));
      const opened = pages.map(() => [] as number[]);
      for (const [i, p] of pages.entries()) p.on("websocket", () => opened[i]!.push(Date.now()));
      await Promise.all(pages.map((p) => gotoPage(p, `${busy.url}/`)));
      await Promise.all(pages.map((p) => connection(p, "live", 40_000)));
      // the first in got the one start; the others were refused and came back after the hint, not the usual fast backoff
      const refused = opened.filter((o) => o.length >= 2);
      expect(refused.length).toBeGreaterThanOrEqual(2);
      for (const o of refused)
        for (let k = 1; k < o.length; k++) expect(o[k]! - o[k - 1]!).toBeGreaterThanOrEqual(RETRY_MIN_MS);
      await context.close();
    } finally {
      await busy.stop();
    }
  }, 60_000);
});
