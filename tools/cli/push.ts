// `episode-relay push FILE URL/ID [--fast] [--dispatch JSON] [--token T]`: replay a recording
// into a relay as a producer would (envelopes, exactly-once), then post its reply. `--dispatch`
// gives the rollout its identity in the trainer (src/protocol/envelope/dispatch.ts): it rides with the
// envelopes until one is acknowledged, as the Python sink sends it.
// FILE is a golden case (`*.msgpack`, test/fixtures/golden/README.md format; frames are sent 250 ms apart
// unless --fast) or a JSON-lines recording: one `{"t": seconds, "delta": "<base64 msgpack>"}`
// per line and optionally a last `{"t": seconds, "reply": "<base64 msgpack>"}` (sent at `t`).
// A frame marked lost (a golden case's `ack_lost`, or `"ack_lost": true` on a line) is sent but
// its ack is treated as lost, as the recorded worker saw it: the producer's cursor stays, and the
// relay retracts the frame when the next one arrives.
import { readFileSync } from "node:fs";
import { refusalOf, relayFetch } from "../../clients/typescript/relay-fetch.js";
import { dispatchFromJson, encodeEnvelope, ProducerCursor, parseAnswer } from "../../src/protocol/index.js";
import { parseCase } from "../conformance/case-format.js";
import { CLI_HINTS } from "./hints.js";
import type { Target } from "./target.js";

interface Recording {
  frames: Array<{ t: number; delta: Uint8Array; ackLost?: boolean }>;
  reply: { t: number; bytes: Uint8Array } | null;
}

export function loadRecording(path: string): Recording {
  const raw = readFileSync(path);
  if (path.endsWith(".jsonl") || path.endsWith(".ndjson")) {
    const frames: Recording["frames"] = [];
    let reply: Recording["reply"] = null;
    for (const [n, l] of raw.toString("utf8").split("\n").entries()) {
      if (!l.trim()) continue;
      const o = JSON.parse(l) as { t?: number; delta?: string; reply?: string; ack_lost?: boolean };
      const t = Number(o.t ?? 0);
      if (o.delta)
        frames.push({ t, delta: new Uint8Array(Buffer.from(o.delta, "base64")), ackLost: o.ack_lost === true });
      else if (o.reply) reply = { t, bytes: new Uint8Array(Buffer.from(o.reply, "base64")) };
      else throw new Error(`${path}:${n + 1}: expected "delta" or "reply"`);
    }
    return { frames, reply };
  }
  const c = parseCase(raw, path);
  const lost = new Set(c.ack_lost);
  return {
    frames: c.frames.map((delta, i) => ({ t: i * 0.25, delta, ackLost: lost.has(i) })),
    reply: { t: c.frames.length * 0.25, bytes: c.reply },
  };
}

export async function push(
  file: string,
  t: Target,
  opts: { fast?: boolean; token?: string; dispatch?: string; err?: NodeJS.WriteStream },
): Promise<number> {
  const err = opts.err ?? process.stderr;
  let dispatch: Uint8Array | undefined;
  if (opts.dispatch !== undefined) {
    try {
      dispatch = dispatchFromJson(JSON.parse(opts.dispatch));
    } catch (e) {
      throw new Error(
        `--dispatch: ${e instanceof SyntaxError ? "not JSON" : (e as Error).message} (expected an object such as {"kind":"train","step":3})`,
      );
    }
  }
  const rec = loadRecording(file);
  const auth: Record<string, string> = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
  const url = `${t.base}/v1/episodes/${encodeURIComponent(t.id)}`;
  const producer = new ProducerCursor(`push-${process.pid}`);
  const start = Date.now();
  const wait = async (at: number) => {
    if (opts.fast) return;
    const ms = start + at * 1000 - Date.now();
    if (ms > 0) await new Promise((r) => setTimeout(r, ms));
  };
  const total = rec.frames.length;
  let bytes = 0;
  const bar = (i: number) => {
    const width = 30;
    const done = Math.round((i / Math.max(total, 1)) * width);
    return `[${"#".repeat(done)}${"-".repeat(width - done)}] ${i}/${total} deltas, ${(bytes / 1024).toFixed(0)} KiB`;
  };
  // delta keys the relay said it does not know (kept as sent): told once, after the deltas
  const unknown: string[] = [];
  for (const [i, f] of rec.frames.entries()) {
    await wait(f.t);
    const res = await relayFetch(`${url}/deltas`, {
      method: "POST",
      body: encodeEnvelope({
        ...producer.envelope(f.delta),
        ...(dispatch && producer.cursor === 0 ? { dispatch } : {}),
      }),
      headers: { "content-type": "application/msgpack", ...auth },
    });
    if (res.status !== 200) {
      const why =
        res.status >= 400 && res.status < 500
          ? (await refusalOf(res, `episode ${JSON.stringify(t.id)}`, t.base, CLI_HINTS)).message
          : `${res.status} ${await res.text()}`;
      err.write(`\npush: delta ${i} refused: ${why}\n`);
      return 1;
    }
    const ack = parseAnswer(await res.text());
    for (const k of (ack.ok && ack.unknown) || []) if (!unknown.includes(k)) unknown.push(k);
    if (!f.ackLost) producer.acknowledge();
    bytes += f.delta.length;
    err.write(`\r${bar(i + 1)}`);
  }
  err.write("\n");
  if (unknown.length)
    err.write(`push: the relay does not know the delta key(s) ${unknown.join(", ")} (kept as sent)\n`);
  if (rec.reply) {
    await wait(rec.reply.t);
    const res = await relayFetch(`${url}/reply`, {
      method: "POST",
      body: rec.reply.bytes,
      headers: { "content-type": "application/msgpack", ...auth },
    });
    const body = await res.text();
    err.write(`reply: ${res.status} ${body}\n`);
    if (res.status !== 200) return 1;
  }
  return 0;
}
