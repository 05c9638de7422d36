// `episode-relay tail URL/ID [--token T] [--routing] [--json]`: follow an episode live, from its
// start: the conversation so far (the watch's snapshot), then each delta as it lands, every node
// numbered by its index in its trace and shown once, through reconnects and relay restarts.
// `--json` writes one JSON object a line (render.ts's lines, with the episode and seq) instead.
import WebSocket from "ws";
import { watchEpisode } from "../../clients/typescript/watch.js";
import { CLI_HINTS } from "./hints.js";
import { deltaLines, formatLine, newContext, snapshotLines, type TailLine } from "./render.js";
import type { Target } from "./target.js";

export interface TailOptions {
  token?: string;
  routing?: boolean;
  giveUpMs?: number;
  json?: boolean;
  out?: NodeJS.WriteStream;
}

export async function tail(t: Target, opts: TailOptions): Promise<number> {
  const out = opts.out ?? process.stdout;
  const json = opts.json ?? false;
  const tty = Boolean(out.isTTY) && !json;
  const ctx = newContext(tty ? out.columns || 100 : 120);
  let status = "";
  const write = (s: string) => {
    if (tty && status) out.write("\r\x1b[2K");
    out.write(`${s}\n`);
    if (tty && status) out.write(status);
  };
  /** A note for a person (never in --json's output, which holds only JSON lines). */
  const note = (s: string) => {
    if (!json) write(s);
  };
  const record = (r: Record<string, unknown>) => write(JSON.stringify({ episode: t.id, ...r }));
  const show = (lines: TailLine[], seq: number) => {
    for (const l of lines) {
      if (json) record({ seq, ...l });
      else for (const s of formatLine(l, ctx.width)) write(s);
    }
  };
  const setStatus = (s: string) => {
    status = s;
    if (tty) out.write(`\r\x1b[2K${s}`);
  };
  const w = watchEpisode(t.base, t.id, {
    token: opts.token,
    routing: opts.routing ?? false,
    WebSocket,
    hints: CLI_HINTS,
    ...(opts.giveUpMs === undefined ? {} : { giveUpMs: opts.giveUpMs }),
  });
  const summary = () => {
    let nodes = 0;
    let calls = 0;
    for (const tr of w.assembly.traces.values()) {
      nodes += tr.nodes.length;
      calls += tr.items.calls.count;
    }
    return `seq ${w.seq} · ${w.assembly.traces.size} trace(s) · ${nodes} node(s) · ${calls} call(s)`;
  };
  let hellos = 0;
  w.on((e) => {
    switch (e.type) {
      case "hello":
        // the header once; a later hello is a reconnect (or a rewind), said as such
        if (hellos++ === 0) {
          if (json) record({ type: "episode", url: t.base, status: e.status });
          else write(`episode ${e.episode} at ${t.base} · ${e.status}`);
          // a watch may start before its producer; a mistyped id looks the same, so say which it could be
          if (e.status === "new" && e.seq === 0)
            note("… nothing written to this episode yet: waiting for its first delta (is the id right? Ctrl-C stops)");
        }
        break;
      case "snapshot": {
        // the conversation so far (after a reconnect or a rewind: only the nodes not shown yet)
        const lines = snapshotLines(ctx, w.assembly.tracesBytes());
        if (e.reason !== "join") note(`… resumed from a snapshot at seq ${e.seq} (${e.reason})`);
        show(lines, e.seq);
        break;
      }
      case "delta":
        show(deltaLines(ctx, e.delta, w.assembly.traces.get(e.trace)?.nodes.length ?? 0), e.seq);
        break;
      case "reconnecting":
        if (json) record({ type: "reconnecting", seq: w.seq, code: e.code, reason: e.reason, delay_ms: e.delayMs });
        else if (w.state === "connecting")
          write(
            `… cannot connect yet (${e.code}${e.reason ? ` ${e.reason}` : ""}); retrying in ${Math.round(e.delayMs)} ms`,
          );
        else
          write(
            `… connection lost (${e.code}${e.reason ? ` ${e.reason}` : ""}); resuming after seq ${w.seq} in ${Math.round(e.delayMs)} ms`,
          );
        break;
      case "status":
        if (json) record({ type: "status", seq: e.seq, status: e.status, error: e.error });
        else if (e.status === "finish_refused")
          write(`⚠ finish refused (the run stays open for a corrected reply): ${e.error}`);
        break;
      case "error":
        if (json) record({ type: "warning", message: e.error.message });
        else write(`! ${e.error.message}`);
        break;
    }
    if (e.type !== "finish") setStatus(`[${w.state}] ${summary()}`);
  });
  // a refusal or an unreachable relay rejects: said once, below
  await w.finished().catch(() => undefined);
  if (tty) out.write("\r\x1b[2K");
  const done = w.state === "finished" && w.episode !== null;
  if (json) {
    record({ type: "end", seq: w.seq, state: w.state, bytes: w.episode?.length ?? null, error: w.error });
    return done ? 0 : 1;
  }
  if (done) {
    // without --routing the watch carries no routing bytes: say so, it is not the reference episode
    const size = opts.routing
      ? `episode ${w.episode!.length} bytes`
      : `episode ${w.episode!.length} bytes without routing (--routing for the full episode)`;
    out.write(`■ finished: ${summary()}; ${size}\n`);
    return 0;
  }
  out.write(`■ ${w.state}${w.error ? `: ${w.error}` : ""}\n`);
  return 1;
}
