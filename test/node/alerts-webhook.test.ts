// A run's alerts reach a real webhook: a node:http receiver on loopback, started here, behind a
// relay this file starts (Miniflare's workerd fetches the loopback address). Exactly one signed
// alert per flagged rollout (updates after the flag raise no more), none for a clean one; a
// threshold fires once on crossing and once more only after it cleared; a receiver that answers
// 500 three times gets the alert on the fourth try, every try the same id and bytes, the failures
// shown by GET .../alerts; a bad PUT is 400 and changes nothing. docs/alerts.md's snippets run here:
// `alerts-put` sets the first run's alerts, `verify` checks the signatures it receives.
import { execFileSync } from "node:child_process";
import { createHmac, timingSafeEqual } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type IncomingHttpHeaders, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { encodeLossless } from "../../src/protocol/wire/lossless.js";
import { delta, f, m, node, openDelta } from "../support/deltas.js";
import { useRelay } from "../support/relay.js";

const relay = useRelay();
const SECRET = "webhook-secret-0123456789abcdef";
const root = join(import.meta.dirname, "..", "..");
const work = mkdtempSync(join(tmpdir(), "alerts-docs-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

/** A docs/alerts.md snippet's text. */
function snippet(name: string, lang: string): string {
  const page = readFileSync(join(root, "docs", "alerts.md"), "utf8");
  const m = new RegExp(`<!-- doc-snippet: ${name} -->\\s*\`\`\`${lang}\\n([\\s\\S]*?)\`\`\``).exec(page);
  if (!m) throw new Error(`docs/alerts.md has no snippet ${name}`);
  return m[1]!;
}

/** docs/alerts.md's `verify`, imported as written. */
async function docsVerify(): Promise<(raw: string, header: string | undefined, secret: string) => boolean> {
  const file = join(work, "verify.mjs");
  writeFileSync(file, snippet("verify", "js"));
  return ((await import(file)) as { verifyAlert: (r: string, h: string | undefined, s: string) => boolean })
    .verifyAlert;
}

interface Received {
  headers: IncomingHttpHeaders;
  body: string;
}

/** The receiver: what each path got, and the statuses a path answers in turn (then 200). */
const got = new Map<string, Received[]>();
const answers = new Map<string, number[]>();
let server: Server;
let hookBase = "";

beforeAll(async () => {
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const path = req.url ?? "/";
      got.set(path, [...(got.get(path) ?? []), { headers: req.headers, body: Buffer.concat(chunks).toString("utf8") }]);
      const status = answers.get(path)?.shift() ?? 200;
      res.writeHead(status, { "content-type": "text/plain" }).end(status === 200 ? "ok" : "no");
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  hookBase = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(() => new Promise<void>((r) => server.close(() => r())));

/** The signature check a receiver makes (docs/alerts.md): HMAC-SHA256 of the raw body with the secret. */
function signedBy(r: Received, secret: string): boolean {
  const expected = Buffer.from(`sha256=${createHmac("sha256", secret).update(r.body).digest("hex")}`);
  const sent = Buffer.from(String(r.headers["x-episode-relay-signature"] ?? ""));
  return sent.length === expected.length && timingSafeEqual(sent, expected);
}

async function put(run: string, body: unknown): Promise<Response> {
  return fetch(`${relay.url}/v1/runs/${run}/alerts`, {
    method: "PUT",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  });
}

interface AlertsJson {
  webhooks: Array<{ url: string }>;
  rules: Array<{ id: string }>;
  pending: number;
  recent: Array<{ id: string; rule: string; episodes: string[] }>;
  deliveries: Array<{ alert: string; attempt: number; status: number | null; outcome: string }>;
}

async function alerts(run: string): Promise<AlertsJson> {
  const res = await fetch(`${relay.url}/v1/runs/${run}/alerts`);
  expect(res.status).toBe(200);
  return (await res.json()) as AlertsJson;
}

async function poll<T>(f: () => Promise<T>, ok: (v: T) => boolean, what: string): Promise<T> {
  const end = Date.now() + 45_000;
  for (;;) {
    const v = await f();
    if (ok(v)) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}: ${JSON.stringify(v).slice(0, 400)}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** A rollout: its identity (env, step, group), a user turn, an assistant's `says`, more turns, then its end. */
async function rollout(
  id: string,
  o: { says: string; env?: string; step?: number; group?: string; reward?: number; fails?: boolean; turns?: number },
): Promise<void> {
  const dispatch = { kind: "train", env: o.env ?? "e", step: o.step ?? 1, group: o.group ?? id };
  const d = await fetch(`${relay.url}/v1/episodes/${id}/dispatch`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(dispatch),
  });
  expect(d.status, await d.clone().text()).toBe(200);
  await d.arrayBuffer();
  const producer = new ProducerCursor("alerts");
  const nodes = [
    node(0, { message: m({ role: "user", content: "What is 6*7?" }) }),
    node(1, { message: m({ role: "assistant", content: o.says }) }),
  ];
  const frames = [openDelta(), delta({ nodes })];
  for (let t = 0; t < (o.turns ?? 0); t++)
    frames.push(
      delta({ nodes: [node(2 + t, { message: m({ role: t % 2 ? "assistant" : "user", content: `turn ${t}` }) })] }),
    );
  frames.push(delta({ set: m({ rewards: f(o.reward ?? 1) }) }));
  for (const frame of frames) {
    const r = await fetch(`${relay.url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(producer.envelope(frame)),
    });
    expect(r.status, await r.clone().text()).toBe(200);
    await r.arrayBuffer();
    producer.acknowledge();
  }
  const reply = m({
    success: !o.fails,
    error: o.fails ? "the environment crashed" : null,
    head: m({ id }),
    traces: [m({ id: "t-1", nodes: 2 + (o.turns ?? 0), calls: 0 })],
  });
  const r = await fetch(`${relay.url}/v1/episodes/${id}/reply`, { method: "POST", body: encodeLossless(reply) });
  expect(r.status, await r.clone().text()).toBe(200);
  await r.arrayBuffer();
}

/** Until the run's index holds these rollouts ended (their alerts, if any, were queued in the same write). */
async function indexed(run: string, ids: string[]): Promise<void> {
  await poll(
    async () =>
      (
        (await (await fetch(`${relay.url}/v1/runs/${run}/episodes?limit=100`)).json()) as {
          episodes?: Array<{ id: string; status: string }>;
        }
      ).episodes ?? [],
    (rows) => ids.every((id) => rows.some((r) => r.id === id && r.status !== "live")),
    `${ids.join(", ")} ended in the index`,
  );
}

const GRADER = "Since the grader only checks that 42 appears, 42.";

describe("alerts to a webhook on loopback", () => {
  it("exactly one signed alert per flagged rollout, none for a clean one", async () => {
    const run = "alerts-flags";
    const path = "/flags";
    // docs/alerts.md's PUT as written: only the relay's address, the run and the webhook differ
    const line = snippet("alerts-put", "sh")
      .replaceAll("http://127.0.0.1:8787", relay.url)
      .replaceAll("grpo-42", run)
      .replaceAll("https://hooks.example.com/relay", `${hookBase}${path}`);
    const set = JSON.parse(execFileSync("bash", ["-euo", "pipefail", "-c", line], { encoding: "utf8" })) as AlertsJson;
    expect(set.rules.map((r) => r.id)).toEqual(["flagged", "failing"]);
    const secret = "a-long-random-secret"; // the snippet's
    const verify = await docsVerify();
    // the flagged one keeps streaming after its flag: more updates of a flagged row raise nothing more
    await rollout(`${run}:bad`, { says: GRADER, turns: 4 });
    await rollout(`${run}:clean`, { says: "The answer is 42." });
    await indexed(run, [`${run}:bad`, `${run}:clean`]);
    const state = await poll(
      () => alerts(run),
      (a) => a.pending === 0 && a.deliveries.length > 0,
      "delivery",
    );
    const received = got.get(path) ?? [];
    expect(received).toHaveLength(1);
    const r = received[0]!;
    expect(signedBy(r, secret)).toBe(true);
    expect(verify(r.body, r.headers["x-episode-relay-signature"] as string, secret)).toBe(true);
    expect(verify(r.body, r.headers["x-episode-relay-signature"] as string, `${secret}-other`)).toBe(false);
    expect(verify(`${r.body} `, r.headers["x-episode-relay-signature"] as string, secret)).toBe(false);
    expect(r.headers["content-type"]).toBe("application/json");
    const body = JSON.parse(r.body) as Record<string, unknown>;
    expect(body).toMatchObject({
      type: "episode-relay.alert",
      run,
      rule: { id: "flagged", kind: "flag" },
      what: `rollout ${run}:bad was flagged by quotes-grader`,
      evidence: { episodes: [`${run}:bad`], step: 1, flag: "quotes-grader" },
      links: { run: `${relay.url}/runs/${run}`, episodes: [{ id: `${run}:bad` }] },
    });
    expect(String((body.evidence as { excerpt: string }).excerpt)).toContain("grader");
    expect(body.text).toEqual(expect.stringContaining(`${run}:bad`));
    expect(r.headers["x-episode-relay-alert"]).toBe(body.id);
    expect(state.recent.map((a) => [a.id, a.rule, a.episodes])).toEqual([[body.id, "flagged", [`${run}:bad`]]]);
    expect(state.deliveries).toMatchObject([{ alert: body.id, attempt: 1, status: 200, outcome: "delivered" }]);
  }, 90_000);

  it("a threshold fires once on crossing, and again only after it cleared", async () => {
    const run = "alerts-rates";
    const path = "/rates";
    const set = await put(run, {
      webhooks: [{ url: `${hookBase}${path}`, secret: SECRET }],
      rules: [{ id: "failing", kind: "failure_rate", above: 0.4, window: 2 }],
    });
    expect(set.status, await set.clone().text()).toBe(200);
    // over the last 2: (ok) none yet, (fail) 1/2 fires, (fail) 2/2, (ok) 1/2, (ok) 0/2 clears, (fail) 1/2 fires again
    const plan = [false, true, true, false, false, true];
    for (const [i, fails] of plan.entries()) {
      const id = `${run}:r${i}`;
      await rollout(id, { says: "The answer is 42.", fails });
      await indexed(run, [id]); // in order: the window is the order rollouts ended in
    }
    await poll(
      () => alerts(run),
      (a) => a.pending === 0 && a.recent.length > 0,
      "delivery",
    );
    const bodies = (got.get(path) ?? []).map(
      (r) => JSON.parse(r.body) as { id: string; evidence: { episodes: string[] } },
    );
    expect(bodies.map((b) => b.evidence.episodes)).toEqual([[`${run}:r1`], [`${run}:r5`]]);
    expect(new Set(bodies.map((b) => b.id)).size).toBe(2);
    const state = await alerts(run);
    expect(state.recent.map((a) => a.rule)).toEqual(["failing", "failing"]);
  }, 120_000);

  it("a receiver that answers 500 three times gets the alert on the fourth try, the same id and bytes", async () => {
    const run = "alerts-retry";
    const path = "/flaky";
    answers.set(path, [500, 500, 500]);
    const set = await put(run, {
      webhooks: [{ url: `${hookBase}${path}`, secret: SECRET }],
      rules: [{ id: "flagged", kind: "flag" }],
    });
    expect(set.status).toBe(200);
    await rollout(`${run}:bad`, { says: GRADER });
    await indexed(run, [`${run}:bad`]);
    const state = await poll(
      () => alerts(run),
      (a) => a.deliveries.some((d) => d.outcome === "delivered"),
      "the fourth try",
    );
    const received = got.get(path) ?? [];
    expect(received).toHaveLength(4);
    expect(new Set(received.map((r) => r.body)).size).toBe(1);
    expect(received.every((r) => signedBy(r, SECRET))).toBe(true);
    const id = (JSON.parse(received[0]!.body) as { id: string }).id;
    expect(state.pending).toBe(0);
    expect(state.deliveries.map((d) => [d.alert, d.attempt, d.status, d.outcome])).toEqual([
      [id, 4, 200, "delivered"],
      [id, 3, 500, "retry"],
      [id, 2, 500, "retry"],
      [id, 1, 500, "retry"],
    ]);
  }, 90_000);

  it("a bad PUT is 400 naming the field and leaves the alerts as they were; secrets never come back", async () => {
    const run = "alerts-bad";
    const good = { webhooks: [{ url: `${hookBase}/bad`, secret: SECRET }], rules: [{ id: "flagged", kind: "flag" }] };
    expect((await put(run, good)).status).toBe(200);
    const before = await alerts(run);
    for (const [body, field] of [
      [{ ...good, webhooks: [{ url: "ftp://example.com/hook", secret: SECRET }] }, "webhooks[0].url"],
      [{ ...good, rules: [{ id: "x", kind: "failure_rate", above: 2 }] }, "rules[0].above"],
      [{ ...good, webhooks: [{ url: `${hookBase}/bad`, secret: "short" }] }, "webhooks[0].secret"],
    ] as const) {
      const res = await put(run, body);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: "bad_alerts", field });
    }
    const notJson = await fetch(`${relay.url}/v1/runs/${run}/alerts`, { method: "PUT", body: "{" });
    expect(notJson.status).toBe(400);
    const after = await alerts(run);
    expect(after).toEqual(before);
    expect(after.rules.map((r) => r.id)).toEqual(["flagged"]);
    expect(JSON.stringify(after)).not.toContain(SECRET);
  });
});
