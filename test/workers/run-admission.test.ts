// Run and runs sockets are admitted like a hub's watchers (src/protocol/hub/admission.ts through
// src/objects/registry/run-sockets.ts): a storm of connects is refused past the start rate with 1013 and a
// jittered retry hint, and a socket that waits its hint gets in; past the cap per object every
// newcomer is refused until one leaves. This config: MAX_RUN_SOCKETS 40, RUN_SOCKET_RATE 10.
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { RETRY_MAX_MS, RETRY_MIN_MS } from "../../src/protocol/hub/admission.js";
import { parseRunMessage, parseRunsMessage } from "../../src/protocol/registry/index-protocol.js";
import { retryHintMs } from "../../src/protocol/watch/protocol.js";
import { freshId, inbox } from "./support.js";

const RATE = Number(env.RUN_SOCKET_RATE);
const CAP = Number(env.MAX_RUN_SOCKETS);

type Outcome = { ws: WebSocket; first: string } | { code: number; reason: string };

/** Open a socket at `path`; its first message, or the close it got instead. */
async function connect(path: string): Promise<Outcome> {
  const res = await exports.default.fetch(`http://relay.test${path}`, { headers: { upgrade: "websocket" } });
  if (res.status !== 101) throw new Error(`${path}: ${res.status} ${await res.text()}`);
  const ws = res.webSocket!;
  ws.accept();
  const box = inbox(ws);
  const first = await Promise.race([box.next(5000).then((m) => ({ m })), box.closed(5000).then((c) => ({ c }))]);
  if ("c" in first) return first.c;
  return { ws, first: first.m as string };
}

const refusedOf = (all: Outcome[]) => all.filter((o): o is { code: number; reason: string } => "code" in o);
const openOf = (all: Outcome[]) => all.filter((o): o is { ws: WebSocket; first: string } => "ws" in o);

describe("admission of run and runs sockets", () => {
  for (const [what, path, parse] of [
    ["a run's sockets", () => `/v1/runs/${freshId("storm")}`, (t: string) => parseRunMessage(t).type],
    ["the runs sockets", () => "/v1/runs", (t: string) => parseRunsMessage(t).type],
  ] as const) {
    it(`${what}: a storm is refused past the start rate with 1013 and a jittered hint; each gets in after its hint`, async () => {
      const p = path();
      const storm = await Promise.all(Array.from({ length: 3 * RATE }, () => connect(p)));
      const open = openOf(storm);
      const refused = refusedOf(storm);
      // the burst gets in (the rate's worth), the rest is told to come back
      expect(open.length).toBeGreaterThanOrEqual(RATE);
      expect(open.length).toBeLessThan(storm.length);
      expect(refused.length).toBe(storm.length - open.length);
      for (const o of open) expect(["snapshot", "runs"]).toContain(parse(o.first));
      const hints = refused.map((r) => {
        expect(r.code).toBe(1013);
        expect(r.reason).toMatch(/^busy: sockets are starting faster than 10 a second; retry in \d+ ms$/);
        return retryHintMs(r.reason)!;
      });
      for (const h of hints) {
        expect(h).toBeGreaterThanOrEqual(RETRY_MIN_MS);
        expect(h).toBeLessThanOrEqual(RETRY_MAX_MS);
      }
      // jittered: the refused ones are not all told the same time
      expect(new Set(hints).size).toBeGreaterThan(1);
      // each waits its hint (as the dashboard does), then gets in: at most the rate start per second
      const retried = await Promise.all(hints.map((h) => new Promise((r) => setTimeout(r, h)).then(() => connect(p))));
      const late = refusedOf(retried);
      const again = await Promise.all(
        late.map((r) => new Promise((x) => setTimeout(x, retryHintMs(r.reason)!)).then(() => connect(p))),
      );
      expect(refusedOf(again)).toEqual([]);
      for (const o of [...open, ...openOf(retried), ...openOf(again)]) o.ws.close(1000, "done");
    }, 60_000);
  }

  it(`past ${CAP} sockets on one run every newcomer is refused until one leaves`, async () => {
    const p = `/v1/runs/${freshId("cap")}`;
    const open: WebSocket[] = [];
    while (open.length < CAP) {
      const o = await connect(p);
      if ("ws" in o) open.push(o.ws);
      else await new Promise((r) => setTimeout(r, 1000 / RATE));
    }
    await new Promise((r) => setTimeout(r, 1000)); // the start rate is not the reason below
    const over = await connect(p);
    expect(over).toMatchObject({
      code: 1013,
      reason: expect.stringMatching(
        new RegExp(`^too many sockets on this object \\(limit ${CAP}\\); retry in \\d+ ms$`),
      ),
    });
    open.pop()!.close(1000, "one leaves");
    await new Promise((r) => setTimeout(r, 200));
    const after = await connect(p);
    expect("ws" in after).toBe(true);
    for (const ws of [...open, ...("ws" in after ? [after.ws] : [])]) ws.close(1000, "done");
  }, 60_000);
});
