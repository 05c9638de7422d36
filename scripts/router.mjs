// The local relay's front door: one address in front of its two tiers' runtime processes
// (scripts/relay.mjs `tiers`). A watcher's upgrade
// (`/v1/episodes/{id}/watch`) goes to the hub tier; everything else (producers, GET, the
// dashboard, run sockets) to the episode tier. It only moves bytes (after a WebSocket handshake,
// it pipes the two sockets), in a process of its own (a child of the launcher's), so
// a storm of watchers never runs on the episode objects' thread. (On Cloudflare the Worker runs on
// the edge, apart from both.)
//
// While a tier is not up (`notUp`, from the launcher's supervision) or does not answer, the
// router answers `503 unavailable` as the relay (its header, Retry-After) so that clients wait and
// resume; with `tiers`, GET /v1/health says each tier's state (503 while one is not up).
import { Agent, createServer, request as httpRequest } from "node:http";
import { connect } from "node:net";
import { pathToFileURL } from "node:url";

/** A watch upgrade's path (the Worker checks the id and the rest). */
const WATCH_PATH = /^\/v1\/episodes\/[^/?]+\/watch\/?(?:\?|$)/;

/** The relay's header (src/protocol/http/route.ts RELAY_HEADER): the router's own answers are the relay's too. */
const RELAY_HEADER = "x-episode-relay";
/** Seconds a client is told to wait while a tier is not up (Retry-After). */
const RETRY_AFTER_S = 1;

/**
 * The answer while a tier is not up (starting, restarting, or not answering): `503 unavailable`
 * as the relay's, with Retry-After, so clients wait and retry instead of taking it for a foreign
 * answer (src/protocol/http/errors.ts `unavailable`).
 * @param {string} why
 * @param {Record<string, unknown>} [extra]
 */
function unavailable(why, extra = {}) {
  const body = JSON.stringify({
    error: "unavailable",
    message: `local relay: ${why}; retry after ${RETRY_AFTER_S} s`,
    ...extra,
  });
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
 * @param {import("node:net").Socket | import("node:stream").Duplex} socket @param {{ body: string, headers:
 * Record<string, string> }} a
 */
function answerOnSocket(socket, a) {
  let text = "HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\n";
  for (const [k, v] of Object.entries(a.headers)) text += `${k}: ${v}\r\n`;
  socket.end(`${text}\r\n${a.body}`);
}

const HEALTH_PATH = /^\/v1\/health\/?(?:\?|$)/;

/**
 * @typedef {{ host: string, port: number }} Target
 * @typedef {{
 *   host?: string, port?: number, watch: Target, rest: Target,
 *   notUp?: (to: "rest" | "watch") => string | null,
 *   tiers?: () => Record<string, unknown>,
 * }} RouterOptions
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
    const down = o.notUp?.("rest") ?? null;
    const health = o.tiers && HEALTH_PATH.test(req.url ?? "") && (req.method === "GET" || req.method === "HEAD");
    if (down || (health && o.notUp?.("watch"))) {
      req.resume();
      const a = unavailable(down ?? o.notUp?.("watch") ?? "", health && o.tiers ? { ok: false, tiers: o.tiers() } : {});
      res.writeHead(503, a.headers);
      return void res.end(req.method === "HEAD" ? undefined : a.body);
    }
    /** @type {Buffer[]} */
    const chunks = [];
    req.on("data", (c) => chunks.push(c));
    req.on("end", () => forward(Buffer.concat(chunks), false));
    /** @param {Buffer} body @param {boolean} retried */
    const forward = (body, retried) => {
      // the retry goes on a new connection: every pooled socket may have been closed by the tier
      const up = httpRequest(
        // the health answer is read here to add the tiers: asked for uncompressed
        {
          host: o.rest.host,
          port: o.rest.port,
          method: req.method,
          path: req.url,
          headers: health ? { ...req.headers, "accept-encoding": "identity" } : req.headers,
          agent: retried ? false : agent,
        },
        (ur) => {
          if (health && o.tiers && ur.statusCode === 200) return void withTiers(ur, res, o.tiers());
          res.writeHead(ur.statusCode ?? 502, ur.rawHeaders);
          ur.pipe(res);
        },
      );
      up.on("error", (e) => {
        // a kept-alive socket the tier closed as it was reused: sent again, once (deltas and replies
        // are exactly-once by the producer's seq; a DELETE repeated would answer 404, so it is not)
        if (!retried && up.reusedSocket && !res.headersSent && req.method !== "DELETE") return forward(body, true);
        if (res.headersSent) return void res.destroy(); // cut mid-answer: the client sees a reset, and retries
        const a = unavailable(`the episode tier did not answer (${e.message})`);
        res.writeHead(503, a.headers);
        res.end(a.body);
      });
      up.end(body);
    };
  });
  server.on("upgrade", (req, socket, head) => {
    const watch = WATCH_PATH.test(req.url ?? "");
    const down = o.notUp?.(watch ? "watch" : "rest") ?? null;
    if (down) return void answerOnSocket(socket, unavailable(down));
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
      answerOnSocket(socket, unavailable(`the ${watch ? "hub" : "episode"} tier did not answer (${e.message})`));
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

/**
 * The episode tier's health answer with each tier's state added.
 * @param {import("node:http").IncomingMessage} ur
 * @param {import("node:http").ServerResponse} res
 * @param {Record<string, unknown>} tiers
 */
function withTiers(ur, res, tiers) {
  /** @type {Buffer[]} */
  const parts = [];
  ur.on("data", (c) => parts.push(c));
  ur.on("end", () => {
    let body;
    try {
      body = JSON.stringify({ ...JSON.parse(Buffer.concat(parts).toString("utf8")), tiers });
    } catch {
      body = Buffer.concat(parts).toString("utf8");
    }
    /** @type {Record<string, string | string[]>} */
    const headers = {};
    for (const [k, v] of Object.entries(ur.headers))
      if (v !== undefined && k !== "content-length" && k !== "transfer-encoding") headers[k] = v;
    headers["content-length"] = String(Buffer.byteLength(body));
    res.writeHead(200, headers);
    res.end(res.req.method === "HEAD" ? undefined : body);
  });
}

// As a child process with an IPC channel (scripts/relay.mjs forks it): `{ start: options }` comes
// first and it says its port (or its error); `{ tiers: report }` says each tier's state (a tier
// not "up" is answered 503: REST needs the episode tier, a watch both); "stop" stops it, and so
// does its parent going.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href && process.send) {
  /** @type {Record<string, { state: string }>} */
  let tiers = {};
  /** @type {Record<"rest" | "watch", string[]>} */
  const needs = { rest: ["episodes"], watch: ["episodes", "hubs"] };
  /** @type {Awaited<ReturnType<typeof startRouter>> | null} */
  let router = null;
  process.on("message", async (/** @type {any} */ m) => {
    if (m === "stop") {
      await router?.close();
      process.exit(0);
    } else if (m.tiers) tiers = m.tiers;
    else if (m.start) {
      try {
        router = await startRouter({
          ...m.start,
          notUp: (to) => {
            const down = needs[to].filter((n) => tiers[n] && tiers[n].state !== "up");
            if (!down.length) return null;
            const named = down.map((n) => (n === "hubs" ? "hub" : "episode")).join(" and ");
            return `the ${named} tier${down.length > 1 ? "s are" : " is"} not up`;
          },
          tiers: () => tiers,
        });
        process.send?.({ port: router.port });
      } catch (e) {
        const err = /** @type {NodeJS.ErrnoException} */ (e);
        process.send?.({ error: { code: err.code, message: err.message } });
      }
    }
  });
  process.on("disconnect", () => process.exit(0));
}
