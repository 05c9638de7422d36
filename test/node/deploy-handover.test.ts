// A deploy with watchers connected, as a local runtime can show it: the relay running one build
// (the "old" code) with watchers on an episode, then stopped and started again on the same
// persisted state and port running another build (the "new" code: this tree's bundle with a
// changed version marker in its health answer), while the producer goes on. Every watcher says it
// is reconnecting, resumes after the last seq it applied, and ends with exactly the bytes of GET
// /v1/episodes/{id} (the golden episode): no seq twice, none skipped, nothing but the resume seen.
// On Cloudflare, deferred code updates keep hibernated sockets connected through most deploys
// (docs/deploy.md); those that still drop resume this way.
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import WebSocket from "ws";
import { type SocketFactory, type WatchEvent, watchEpisode } from "../../clients/typescript/watch.js";
import { buildDashboard } from "../../scripts/build-dashboard.mjs";
import { bundle, type LocalRelay, startRelay } from "../../scripts/relay.mjs";
import { encodeEnvelope } from "../../src/protocol/envelope/envelope.js";
import { ProducerCursor } from "../../src/protocol/envelope/producer.js";
import { fixturePath, type GoldenCase, loadCase } from "../../tools/conformance/cases.js";
import { freePort } from "../../tools/free-port.js";
import { until } from "../support/relay.js";

const WS: SocketFactory = WebSocket;
/** The health answer as the source writes it; the "new" build adds its marker to it. */
const HEALTH = '{ ok: true, service: "episode-relay" }';
const NEW_HEALTH = '{ ok: true, service: "episode-relay", build: "handover-new" }';

const dirs: string[] = [];
const relays: LocalRelay[] = [];
afterAll(async () => {
  for (const r of relays) await r.stop().catch(() => undefined);
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** This tree's bundle with its health answer marked: the same relay, a different build. */
function newBuild(): string {
  const old = bundle();
  const dir = mkdtempSync(join(tmpdir(), "episode-relay-new-build-"));
  dirs.push(dir);
  for (const f of readdirSync(dirname(old))) if (f !== "index.js") copyFileSync(join(dirname(old), f), join(dir, f));
  const text = readFileSync(old, "utf8");
  // exactly one: the marker must land where the health answer is built, or the test is void
  expect(text.split(HEALTH).length - 1, "the health answer in the bundle").toBe(1);
  writeFileSync(join(dir, "index.js"), text.replace(HEALTH, NEW_HEALTH));
  return join(dir, "index.js");
}

async function push(url: string, id: string, c: GoldenCase, from: number, to: number, p: ProducerCursor) {
  for (let i = from; i < to; i++) {
    const res = await fetch(`${url}/v1/episodes/${id}/deltas`, {
      method: "POST",
      body: encodeEnvelope(p.envelope(c.frames[i]!)),
    });
    expect(res.status).toBe(200);
    await res.arrayBuffer();
    if (!c.ack_lost.includes(i)) p.acknowledge();
  }
}

function watch(url: string, id: string) {
  const w = watchEpisode(url, id, { WebSocket: WS, backoffMs: [50, 250], giveUpMs: 120_000 });
  const events: WatchEvent[] = [];
  w.on((e) => events.push(e));
  return { w, events };
}

describe("a deploy hands over to new code with watchers connected", () => {
  it("old build → new build on the same state: every watcher resumes and ends with GET's exact bytes", async () => {
    await buildDashboard({ ifMissing: true });
    const next = newBuild();
    const persist = mkdtempSync(join(tmpdir(), "episode-relay-handover-"));
    dirs.push(persist);
    const port = await freePort();
    const old = await startRelay({ persistDir: persist, port });
    relays.push(old);
    const url = old.url;
    expect(await (await fetch(`${url}/v1/health`)).json()).toEqual({ ok: true, service: "episode-relay" });

    const c = loadCase(fixturePath("multi_trace_links"));
    const id = `handover-${Date.now().toString(36)}`;
    const producer = new ProducerCursor("worker-1");
    const first = watch(url, id); // from before the first frame
    await until(() => first.w.state === "live", 20_000, "the first watcher live");
    await push(url, id, c, 0, 5, producer);
    const second = watch(url, id); // caught up by snapshot
    await push(url, id, c, 5, 9, producer);
    const third = watch(url, id); // joined just before the deploy
    const all = [first, second, third];
    await until(() => all.every((x) => x.w.state === "live" && x.w.seq === 9), 30_000, "watchers at seq 9");

    // the deploy: the old runtime goes, the new build starts on the same storage and address
    await old.stop();
    relays.splice(relays.indexOf(old), 1);
    const fresh = await startRelay({ persistDir: persist, port, script: next });
    relays.push(fresh);
    expect(fresh.url).toBe(url);
    expect(await (await fetch(`${url}/v1/health`)).json()).toEqual({
      ok: true,
      service: "episode-relay",
      build: "handover-new",
    });

    await push(url, id, c, 9, c.frames.length, producer);
    const reply = await fetch(`${url}/v1/episodes/${id}/reply`, { method: "POST", body: c.reply });
    expect(reply.status).toBe(200);
    await reply.arrayBuffer();
    await Promise.all(all.map((x) => x.w.finished()));

    const got = new Uint8Array(await (await fetch(`${url}/v1/episodes/${id}`)).arrayBuffer());
    expect(Buffer.compare(Buffer.from(got), Buffer.from(c.episode!))).toBe(0);
    for (const [i, x] of all.entries()) {
      expect(Buffer.compare(Buffer.from(x.w.episode!), Buffer.from(got)), `watcher ${i} exact`).toBe(0);
      // the only thing a watcher saw of the deploy: it reconnected, and resumed where it was
      expect(x.events.filter((e) => e.type === "reconnecting").length, `watcher ${i} resumed`).toBeGreaterThanOrEqual(
        1,
      );
      expect(x.events.some((e) => e.type === "refused" || e.type === "unreachable" || e.type === "error")).toBe(false);
      const seqs = x.events.flatMap((e) => (e.type === "delta" ? [e.seq] : []));
      const after = seqs.filter((s) => s > 9);
      expect(after, `watcher ${i}: every frame after the deploy once, in order`).toEqual(
        Array.from({ length: c.frames.length - 9 }, (_, k) => k + 10),
      );
      expect(new Set(seqs).size, `watcher ${i}: no seq twice`).toBe(seqs.length);
      expect(x.w.state).toBe("finished");
    }
  }, 180_000);
});
