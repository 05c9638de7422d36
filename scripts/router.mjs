// The local relay's front door: one address for `npm start`, the tests and the benches, in front
// of the two runtime processes they run (scripts/tiers.mjs). A watcher's upgrade
// (`/v1/episodes/{id}/watch`) goes to the hub tier; everything else (producers, GET, the
// dashboard, run sockets) to the episode tier. It only moves bytes (after a WebSocket handshake,
// it pipes the two sockets), in a process of its own (npm start's, or a child of the tests'), so
// a storm of watchers never runs on the episode objects' thread. (On Cloudflare the Worker runs on
// the edge, apart from both.)
//
// `stripDeflateOffer`: a watch upgrade's `Sec-WebSocket-Extensions` is dropped. wrangler dev's own
// front (and Miniflare's entry Worker) would otherwise accept permessage-deflate whatever the
// Worker's `no_web_socket_compression` flag says, and compress every message for every socket; on
// Cloudflare the flag is honoured. Runs through a direct socket to the Worker need no stripping.
import { createServer, request as httpRequest, Agent } from "node:http";
import { connect } from "node:net";
import { pathToFileURL } from "node:url";

/** A watch upgrade's path (the Worker checks the id and the rest). */
const WATCH_PATH = /^\/v1\/episodes\/[^/?]+\/watch\/?(?:\?|$)/;

/** The relay's header (src/http/route.ts RELAY_HEADER): the router's own answers are the relay's too. */
const RELAY_HEADER = "x-episode-relay";
/** Seconds a client is told to wait while a tier is not up (Retry-After). */
const RETRY_AFTER_S = 1;

/**
 * The answer while a tier is not up (starting, restarting, or not answering): `503 unavailable`
 * as the relay's, with Retry-After, so clients wait and retry instead of taking it for a foreign
 * answer (src/http/errors.ts `unavailable`).
 * @param {string} tier
 * @param {string} why
 */
function unavailable(tier, why) {
  const body = JSON.stringify({ error: "unavailable", message: `local relay: the ${tier} tier is not up (${why}); retry after ${RETRY_AFTER_S} s` });
  return {
    body,
    headers: {
      "content-type": "application/json",
      "content-length": String(Buffer.byteLength(body)),
      "retry-after": String(RETRY_AFTER_S),
      [RELAY_HEADER]: "1",
    },
  };
}

/**
 * @typedef {{ host: string, port: number }} Target
 * @typedef {{ host?: string, port?: number, watch: Target, rest: Target, stripDeflateOffer?: boolean }} RouterOptions
 */

/**
 * @param {RouterOptions} o
 * @returns {Promise<{ port: number, close(): Promise<void> }>}
 */
export function startRouter(o) {
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  /** Upgraded connections (the server forgets them once handed over). */
  const piped = new Set();
  const server = createServer((req, res) => {
    /** @type {Buffer[]} */
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => forward(Buffer.concat(chunks), false));
    /** @param {Buffer} body @param {boolean} retried */
    const forward = (body, retried) => {
      // the retry goes on a new connection: every pooled socket may have been closed by the tier
      const up = httpRequest(
        { host: o.rest.host, port: o.rest.port, method: req.method, path: req.url, headers: req.headers, agent: retried ? false : agent },
        (ur) => {
          res.writeHead(ur.statusCode ?? 502, ur.rawHeaders);
          ur.pipe(res);
        },
      );
      up.on("error", (e) => {
        // a kept-alive socket the tier closed as it was reused: sent again, once (deltas and replies
        // are exactly-once by the producer's seq; a DELETE repeated would answer 404, so it is not)
        if (!retried && up.reusedSocket && !res.headersSent && req.method !== "DELETE") return forward(body, true);
        if (res.headersSent) return void res.destroy(); // cut mid-answer: the client sees a reset, and retries
        const a = unavailable("episode", e.message);
        res.writeHead(503, a.headers);
        res.end(a.body);
      });
      up.end(body);
    };
  });
  server.on("upgrade", (req, socket, head) => {
    const watch = WATCH_PATH.test(req.url ?? "");
    const target = watch ? o.watch : o.rest;
    const up = connect(target.port, target.host);
    up.setNoDelay(true);
    if ("setNoDelay" in socket && typeof socket.setNoDelay === "function") socket.setNoDelay(true);
    piped.add(socket);
    piped.add(up);
    let connected = false;
    const fail = () => {
      socket.destroy();
      up.destroy();
    };
    up.on("error", (e) => {
      if (connected || socket.destroyed) return fail();
      // the tier is not there: say so as the relay does, on the socket the upgrade came on
      const a = unavailable(watch ? "hub" : "episode", e.message);
      let text = "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n";
      for (const [k, v] of Object.entries(a.headers)) text += `${k}: ${v}\r\n`;
      socket.end(`${text}\r\n${a.body}`);
      up.destroy();
    });
    socket.on("error", fail);
    up.on("close", () => {
      piped.delete(up);
      socket.end();
    });
    socket.on("close", () => {
      piped.delete(socket);
      up.end();
    });
    up.on("connect", () => {
      connected = true;
      let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
      const raw = req.rawHeaders;
      for (let i = 0; i < raw.length; i += 2) {
        if (watch && o.stripDeflateOffer && raw[i]?.toLowerCase() === "sec-websocket-extensions") continue;
        text += `${raw[i]}: ${raw[i + 1]}\r\n`;
      }
      up.write(`${text}\r\n`);
      if (head.length) up.write(head);
      up.pipe(socket);
      socket.pipe(up);
    });
  });
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port ?? 0, o.host ?? "127.0.0.1", () => {
      const addr = server.address();
      resolve({
        port: typeof addr === "object" && addr ? addr.port : 0,
        close: () =>
          new Promise((r) => {
            server.closeAllConnections();
            for (const s of piped) s.destroy();
            agent.destroy();
            server.close(() => r(undefined));
          }),
      });
    });
  });
}

// As a child process with an IPC channel (tools/local-relay.ts forks it): options come in the
// first message; it says its port, stops when told, and when its parent goes.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href && process.send) {
  process.once("message", async (/** @type {RouterOptions} */ o) => {
    const r = await startRouter(o);
    process.send?.({ port: r.port });
    process.on("message", async (m) => {
      if (m === "stop") {
        await r.close();
        process.exit(0);
      }
    });
  });
  process.on("disconnect", () => process.exit(0));
}
