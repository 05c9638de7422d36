// The fan-out bench's second baseline: a bare broadcast server on workerd itself (no relay logic),
// to tell what the runtime costs from what the relay adds. One Durable Object holds every socket,
// hibernatable as the relay's hubs hold theirs (acceptWebSocket, pings answered by the runtime):
// every binary message on a `/producer` socket goes to every `/watch` socket, the same bytes, the
// sockets kept in memory as a hub keeps its live ones. Reached as the relay's hub tier is (a
// Worker in front, its direct socket: no Miniflare entry in between), in a workerd process of its
// own, on the relay's compatibility date and flags (no permessage-deflate, as the relay).

import { Log, LogLevel, Miniflare } from "miniflare";
import { descendantPids } from "./helpers.js";

const SCRIPT = `
import { DurableObject } from "cloudflare:workers";
export class Broadcast extends DurableObject {
  constructor(ctx, env) {
    super(ctx, env);
    // (an object evicted while its sockets stayed open finds them again)
    this.watchers = new Set(ctx.getWebSockets("watcher"));
    ctx.setWebSocketAutoResponse(new WebSocketRequestResponsePair("ping", "pong"));
  }
  async fetch(request) {
    const producer = new URL(request.url).pathname.startsWith("/producer");
    const [client, server] = Object.values(new WebSocketPair());
    this.ctx.acceptWebSocket(server, [producer ? "producer" : "watcher"]);
    if (!producer) this.watchers.add(server);
    return new Response(null, { status: 101, webSocket: client });
  }
  webSocketMessage(ws, message) {
    if (typeof message === "string" || this.ctx.getTags(ws)[0] !== "producer") return;
    for (const w of this.watchers) w.send(message);
  }
  webSocketClose(ws) {
    this.watchers.delete(ws);
  }
  webSocketError(ws) {
    this.watchers.delete(ws);
  }
}
export default {
  fetch(request, env) {
    return env.BROADCAST.getByName("one").fetch(request);
  },
};
`;

export interface BareWorkerd {
  url: string;
  /** Its workerd process (its CPU time is this baseline's server cost). */
  pids: number[];
  stop(): Promise<void>;
}

export async function startBareWorkerd(compat: { date: string; flags: string[] }): Promise<BareWorkerd> {
  const before = new Set(descendantPids("workerd"));
  const mf = new Miniflare({
    name: "bare-broadcast",
    modules: true,
    script: SCRIPT,
    compatibilityDate: compat.date,
    compatibilityFlags: compat.flags,
    durableObjects: { BROADCAST: { className: "Broadcast", useSQLite: true } },
    host: "127.0.0.1",
    port: 0,
    // no network: no Request.cf fetched (its warning would go to stdout, which --json owns)
    cf: false,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    log: new Log(LogLevel.WARN),
  });
  try {
    await mf.ready;
    const direct = await mf.unsafeGetDirectURL("bare-broadcast");
    const pids = descendantPids("workerd").filter((p) => !before.has(p));
    if (pids.length === 0) throw new Error("bare workerd: no workerd process of its own");
    return { url: direct.toString().replace(/\/$/, ""), pids, stop: () => mf.dispose() };
  } catch (e) {
    await mf.dispose(); // its runtime would outlive the bench
    throw e;
  }
}
