// Why a hub tier's resident memory grows by hundreds of MiB in the memory bench's reconnect storm
// (issue 28: "runtime RSS growth ≤ 256 MiB" in the storm): workerd itself keeps memory for every
// WebSocket connection it has served, whatever the Worker does. Here a Worker that only accepts
// (MODE=websocket: `accept()`, no Durable Object; MODE=hibernatable: one Durable Object's
// `acceptWebSocket`; MODE=http: plain requests, a new connection each) gets 150 clients, each
// connecting, staying 20 ms and dropping (as the storm's watchers do), for MS ms (default 40 s);
// the workerd process's RSS is read before and 2 s after.
// Seen on workerd 1.20260426.1 (2026-12-04): websocket 157k connects +402 MiB (20 s: 69k, +190);
// hibernatable 31k +125, 103k +231, 241k +365 MiB; http 257k +468 MiB; never given back. The relay's storm (19k connects through
// wrangler dev, with catch-ups) grows its hub tier +282 MiB, and +285 with catch-ups of ~nothing
// (a variant of no trace): the connections, not what is sent on them.
// Exit 1 when it reproduces (RSS grew 1 KiB or more per connection), 0 when not, 2 when the
// runtime's process was not found.
//
//   MODE=websocket node bench/repro/connect-storm-rss.mjs
import { readdirSync, readFileSync } from "node:fs";
import { request } from "node:http";
import { Log, LogLevel, Miniflare } from "miniflare";
import { WebSocket } from "ws";

const MODE = process.env.MODE ?? "websocket";
const MS = Number(process.env.MS ?? 40_000);
const script = {
  websocket: `export default { fetch() {
    const [client, server] = Object.values(new WebSocketPair());
    server.accept();
    return new Response(null, { status: 101, webSocket: client });
  } };`,
  hibernatable: `import { DurableObject } from "cloudflare:workers";
  export class Sockets extends DurableObject {
    fetch() {
      const [client, server] = Object.values(new WebSocketPair());
      this.ctx.acceptWebSocket(server);
      return new Response(null, { status: 101, webSocket: client });
    }
    webSocketMessage() {}
    webSocketClose() {}
  }
  export default { fetch(request, env) { return env.SOCKETS.getByName("one").fetch(request); } };`,
  http: `export default { fetch() { return new Response("ok"); } };`,
}[MODE];
if (!script) throw new Error(`MODE is websocket, hibernatable or http, not ${MODE}`);

/** workerd processes under this one (its descendants: Miniflare starts the runtime as a child). */
function workerds() {
  const parent = new Map();
  const comm = new Map();
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, "utf8");
      comm.set(Number(e), stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")));
      parent.set(Number(e), Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]));
    } catch {
      // gone
    }
  }
  const under = (pid) => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === process.pid) return true;
    return false;
  };
  return [...comm].filter(([pid, c]) => c === "workerd" && under(pid)).map(([pid]) => pid);
}

const before = new Set(workerds());
const mf = new Miniflare({
  name: "sockets",
  modules: true,
  script,
  compatibilityDate: "2026-05-01",
  compatibilityFlags: ["no_web_socket_compression"],
  ...(MODE === "hibernatable" ? { durableObjects: { SOCKETS: { className: "Sockets", useSQLite: true } } } : {}),
  cf: false,
  host: "127.0.0.1",
  port: 0,
  unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  log: new Log(LogLevel.WARN),
  // the runtime logs each dropped socket of the plain Worker as a hung request: drained, not shown
  handleRuntimeStdio: (stdout, stderr) => {
    stdout.resume();
    stderr.resume();
  },
});
await mf.ready;
const direct = await mf.unsafeGetDirectURL("sockets");
const pid = workerds().find((p) => !before.has(p));
if (pid === undefined) {
  await mf.dispose();
  console.error("no workerd process of this run's own");
  process.exit(2);
}
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))[1]) / 1024;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const once = () =>
  MODE === "http"
    ? new Promise((resolve) => {
        const req = request(direct, { agent: false }, (res) => res.resume().once("end", resolve));
        req.once("error", resolve);
        req.end();
      })
    : (async () => {
        const ws = new WebSocket(direct.toString().replace(/^http/, "ws"));
        ws.on("error", () => {});
        await new Promise((r) => ws.once("open", r).once("close", r).once("unexpected-response", r));
        await sleep(20);
        ws.terminate();
      })();

for (let i = 0; i < 20; i++) await once(); // warm
await sleep(1000);
const base = rss();
let connects = 0;
let on = true;
const client = async () => {
  while (on) {
    await once();
    connects++;
  }
};
const clients = Array.from({ length: 150 }, client);
await sleep(MS);
on = false;
await Promise.all(clients);
await sleep(2000);
const grew = rss() - base;
console.log(`${MODE}: ${connects} connections; workerd RSS ${base.toFixed(0)} MiB, +${grew.toFixed(0)} MiB after`);
await mf.dispose();
process.exit((grew * 1024) / connects < 1 ? 0 : 1);
