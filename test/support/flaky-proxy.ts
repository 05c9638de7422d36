// A small proxy in front of a relay, for tests of what clients do with trouble between them and
// the relay: it passes requests and WebSocket upgrades through (node:http, sockets piped), or
// answers the next ones with a fault: a gateway's error without the relay's header, a web page,
// a connection cut mid-stream. It can stop listening (connections refused) and listen again on
// the same port, as a relay does while it restarts.
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http";
import { connect, type Socket } from "node:net";
import type { Duplex } from "node:stream";

/** What the proxy does instead of passing a request or upgrade through. */
export type Fault =
  /** Answer this, whatever was asked (never with the relay's header unless `headers` says so). */
  | { kind: "answer"; status: number; type: string; body: string; headers?: Record<string, string> }
  /** Pass it through, then cut both connections once `afterBytes` went toward the client. */
  | { kind: "reset"; afterBytes: number };

export const GATEWAY_502: Fault = {
  kind: "answer",
  status: 502,
  type: "application/json",
  body: '{"error":"bad_gateway","message":"upstream down"}',
};
export const GATEWAY_503_PAGE: Fault = {
  kind: "answer",
  status: 503,
  type: "text/html",
  body: "<!doctype html><title>503</title>Service Unavailable",
};
export const GATEWAY_500_EMPTY: Fault = { kind: "answer", status: 500, type: "text/plain", body: "" };
/** A proxy's own 401 (its login, not the relay's refusal: no relay header). */
export const PROXY_401: Fault = {
  kind: "answer",
  status: 401,
  type: "text/html",
  body: "<!doctype html><title>Sign in</title>",
};
export const PAGE_200: Fault = {
  kind: "answer",
  status: 200,
  type: "text/html",
  body: "<!doctype html><title>Welcome</title>Hello",
};
export const PAGE_404: Fault = {
  kind: "answer",
  status: 404,
  type: "text/html",
  body: "<!doctype html><title>Not Found</title>",
};
/** A static server's answer to a method it does not take at that path. */
export const PAGE_405: Fault = { kind: "answer", status: 405, type: "text/html", body: "" };
export const resetAfter = (afterBytes: number): Fault => ({ kind: "reset", afterBytes });

export interface FlakyProxy {
  readonly url: string;
  /**
   * Answer the next `n` requests and upgrades (together; only those whose path matches `only`,
   * when given) with `fault`, then pass again. Open connections are cut first.
   */
  fail(fault: Fault, n: number, only?: RegExp): void;
  /** How many requests and upgrades got a fault, and how many passed. */
  readonly faulted: number;
  readonly passed: number;
  /** Cut every open connection (the clients see a reset). */
  drop(): void;
  /** Stop listening: connections are refused until `up()`. */
  down(): Promise<void>;
  up(): Promise<void>;
  close(): Promise<void>;
}

/** A proxy to the relay at `target()` (read on each request, so it may start later). */
export async function startFlakyProxy(target: () => string): Promise<FlakyProxy> {
  let plan: { fault: Fault; left: number; only?: RegExp } | null = null;
  let faulted = 0;
  let passed = 0;
  const open = new Set<Duplex>();
  const track = (s: Duplex) => {
    open.add(s);
    s.once("close", () => open.delete(s));
  };
  /** The fault for this request or upgrade, if one is planned. */
  const take = (path = ""): Fault | null => {
    if (!plan || plan.left <= 0 || (plan.only && !plan.only.test(path))) return null;
    plan.left--;
    faulted++;
    return plan.fault;
  };
  const where = () => new URL(target());
  /** Counts bytes toward the client and cuts both sides past `fault.afterBytes`. */
  const cutter = (fault: Fault | null, a: { destroy(): void }, b: { destroy(): void }) => (chunk: Buffer) => {
    if (fault?.kind !== "reset") return;
    fault = { ...fault, afterBytes: fault.afterBytes - chunk.length };
    if (fault.afterBytes < 0) {
      a.destroy();
      b.destroy();
    }
  };

  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const fault = take(req.url);
    if (fault?.kind === "answer") {
      req.resume();
      res.writeHead(fault.status, { "content-type": fault.type, connection: "close", ...fault.headers });
      return void res.end(fault.body);
    }
    if (!fault) passed++;
    const t = where();
    const up = httpRequest(
      { host: t.hostname, port: t.port, method: req.method, path: req.url, headers: req.headers, agent: false },
      (ur) => {
        res.writeHead(ur.statusCode ?? 500, ur.rawHeaders);
        ur.on("data", cutter(fault, req.socket, ur));
        ur.pipe(res);
      },
    );
    up.on("error", () => res.destroy());
    req.pipe(up);
  });
  server.on("connection", track);
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const fault = take(req.url);
    if (fault?.kind === "answer") {
      let text = `HTTP/1.1 ${fault.status} Fault\r\ncontent-type: ${fault.type}\r\ncontent-length: ${Buffer.byteLength(fault.body)}\r\nconnection: close\r\n`;
      for (const [k, v] of Object.entries(fault.headers ?? {})) text += `${k}: ${v}\r\n`;
      return void socket.end(`${text}\r\n${fault.body}`);
    }
    if (!fault) passed++;
    const t = where();
    const up: Socket = connect(Number(t.port), t.hostname);
    track(up);
    const cut = () => {
      socket.destroy();
      up.destroy();
    };
    up.on("error", cut);
    socket.on("error", cut);
    up.on("close", cut);
    socket.on("close", cut);
    up.on("connect", () => {
      let text = `${req.method} ${req.url} HTTP/1.1\r\n`;
      for (let i = 0; i < req.rawHeaders.length; i += 2) text += `${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}\r\n`;
      up.write(`${text}\r\n`);
      if (head.length) up.write(head);
      up.on("data", cutter(fault, socket, up));
      up.pipe(socket);
      socket.pipe(up);
    });
  });

  const listen = (port: number) =>
    new Promise<number>((resolve, reject) => {
      server.once("error", reject);
      server.listen(port, "127.0.0.1", () => {
        server.off("error", reject);
        resolve((server.address() as { port: number }).port);
      });
    });
  const port = await listen(0);
  const drop = () => {
    for (const s of open) s.destroy();
  };
  return {
    url: `http://127.0.0.1:${port}`,
    fail(fault, n, only) {
      plan = only ? { fault, left: n, only } : { fault, left: n };
      drop();
    },
    get faulted() {
      return faulted;
    },
    get passed() {
      return passed;
    },
    drop,
    down: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        drop();
      }),
    up: async () => {
      await listen(port);
    },
    close: () =>
      new Promise<void>((resolve) => {
        drop();
        if (!server.listening) return resolve();
        server.close(() => resolve());
      }),
  };
}
