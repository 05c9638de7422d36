// `episode-relay tail URL/ID [--token T] [--routing]`: follow an episode live, readable.
import WebSocket from "ws";
import { watchEpisode } from "../../clients/typescript/watch.js";
import { CLI_HINTS } from "./hints.js";
import { newContext, renderDelta } from "./render.js";
import type { Target } from "./target.js";

export async function tail(
  t: Target,
  opts: { token?: string; routing?: boolean; giveUpMs?: number; out?: NodeJS.WriteStream },
): Promise<number> {
  const out = opts.out ?? process.stdout;
  const tty = Boolean(out.isTTY);
  const ctx = newContext(tty ? out.columns || 100 : 120);
  let status = "";
  const line = (s: string) => {
    if (tty && status) out.write("\r\x1b[2K");
    out.write(`${s}\n`);
    if (tty && status) out.write(status);
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
  w.on((e) => {
    switch (e.type) {
      case "hello":
        line(`episode ${e.episode} (${e.status}, seq ${e.seq}) at ${t.base}`);
        // a watch may start before its producer; a mistyped id looks the same, so say which it could be
        if (e.status === "new" && e.seq === 0)
          line("… nothing written to this episode yet: waiting for its first delta (is the id right? Ctrl-C stops)");
        break;
      case "snapshot":
        if (e.seq > 0) line(`… caught up from a snapshot at seq ${e.seq} (${e.reason}): ${summary()}`);
        break;
      case "delta":
        for (const l of renderDelta(ctx, e.seq, e.delta)) line(l);
        break;
      case "reconnecting":
        if (w.state === "connecting")
          line(
            `… cannot connect yet (${e.code}${e.reason ? ` ${e.reason}` : ""}); retrying in ${Math.round(e.delayMs)} ms`,
          );
        else
          line(
            `… connection lost (${e.code}${e.reason ? ` ${e.reason}` : ""}); resuming after seq ${w.seq} in ${Math.round(e.delayMs)} ms`,
          );
        break;
      case "status":
        if (e.status === "finish_refused")
          line(`⚠ finish refused (the run stays open for a corrected reply): ${e.error}`);
        break;
      case "error":
        line(`! ${e.error.message}`);
        break;
    }
    if (e.type !== "finish") setStatus(`[${w.state}] ${summary()}`);
  });
  // a refusal or an unreachable relay rejects: said once, below
  await w.finished().catch(() => undefined);
  if (tty) out.write("\r\x1b[2K");
  if (w.state === "finished" && w.episode) {
    // without --routing the watch carries no routing bytes: say so, it is not the reference episode
    const size = opts.routing
      ? `episode ${w.episode.length} bytes`
      : `episode ${w.episode.length} bytes without routing (--routing for the full episode)`;
    out.write(`■ finished: ${summary()}; ${size}\n`);
    return 0;
  }
  out.write(`■ ${w.state}${w.error ? `: ${w.error}` : ""}\n`);
  return 1;
}
