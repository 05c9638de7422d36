// A run socket (`/v1/runs/{run}`) or the runs socket (`/v1/runs`), read-only JSON, kept up: a plain
// GET first (a refusal, 401/403, is readable there and not on a failed socket), then the socket; when
// it drops, the same again with backoff, or after the relay's retry hint when it closed the socket
// 1013 (busy: too many sockets starting or open). The header's connection pill follows it. Used by the
// runs page and the run page.
import { reconnectDelay } from "../../clients/typescript/watch.js";
import { type AccessProblem, probe, socketProtocols, socketUrl } from "./api.js";
import { type ConnState, refusal, type Shell } from "./shell.js";

export interface RunSocketOptions<M> {
  shell: Shell;
  /** A GET the relay answers under the same rules as the socket. */
  probePath: string;
  socketPath: string;
  /** Decode one text message (throws on anything else: such a message is ignored). */
  parse: (text: string) => M;
  /**
   * The probe's answer (before every connect); false: do not connect (the page says why); "later": probe again after a
   * while (the pill says the page waits); "refused": a definite refusal the relay could not say (a 404 for a run the
   * token covers nothing of), ended as a 403 is.
   */
  onProbe?: (status: number, body: unknown) => boolean | "later" | "refused";
  onMessage: (m: M) => void;
  /** The relay refused (the token form is already shown); no retry until the token changes (a re-route). */
  onRefused: (problem: AccessProblem) => void;
}

/** Idle sockets are closed by proxies: ping now and then (the relay answers "pong" itself). */
const PING_MS = 10_000;

/**
 * Looking again for a run the relay has not got (each look a 404 the browser logs): after 3 s, then twice as long
 * each time, at most 15 s apart (a page opened before its training starts shows the run within 15 s of its first
 * rollout; a mistyped one costs a console line each 15 s).
 */
export const WAIT_FIRST_MS = 3_000;
export const WAIT_CAP_MS = 15_000;
const waitDelay = (looks: number) => Math.min(WAIT_CAP_MS, WAIT_FIRST_MS * 2 ** looks);

export function runSocket<M>(o: RunSocketOptions<M>): () => void {
  let stopped = false;
  let ws: WebSocket | null = null;
  let attempt = 0;
  let retry: ReturnType<typeof setTimeout> | null = null;
  let ping: ReturnType<typeof setInterval> | null = null;

  /** Waiting for something the relay has not got yet (a run with no rollout): each probe keeps the pill saying so. */
  let waiting = false;
  /** Looks for it so far (the wait between them grows). */
  let looks = 0;

  async function connect(): Promise<void> {
    if (stopped) return;
    if (!waiting) o.shell.setConnection(attempt === 0 ? "connecting" : "resuming");
    try {
      const p = await probe(o.probePath);
      if (stopped) return;
      if (!p.ok) {
        o.shell.setConnection(refusal(p.status), p.message);
        o.shell.askToken(p.status === 401 ? `This relay needs a token: ${p.message}` : p.message);
        o.onRefused(p);
        return;
      }
      const go = o.onProbe?.(p.status, p.body) ?? true;
      if (go === false) {
        o.shell.setConnection("closed", `${p.status}`);
        return;
      }
      if (go === "refused") {
        o.shell.setConnection("forbidden", "this token covers nothing here");
        return;
      }
      // "later": look again after a growing wait; nothing dropped, so not "reconnecting"
      if (go === "later") {
        waiting = true;
        o.shell.setConnection("waiting");
        retry = setTimeout(() => void connect(), waitDelay(looks++));
        return;
      }
      looks = 0;
    } catch {
      return schedule();
    }
    if (stopped) return;
    const sock = new WebSocket(socketUrl(o.socketPath), socketProtocols());
    ws = sock;
    let answered = false;
    sock.onopen = () => {
      ping = setInterval(() => sock.readyState === WebSocket.OPEN && sock.send("ping"), PING_MS);
    };
    sock.onmessage = (ev) => {
      if (typeof ev.data !== "string" || ev.data === "pong") return;
      // connected once the relay sent its first message (a socket it refuses opens, then closes 1013)
      if (!answered) {
        answered = true;
        attempt = 0;
        o.shell.setConnection("live");
      }
      let m: M;
      try {
        m = o.parse(ev.data);
      } catch {
        return; // a message this page cannot read
      }
      o.onMessage(m);
    };
    sock.onclose = (ev) => {
      if (ping) clearInterval(ping);
      ping = null;
      if (ws === sock) ws = null;
      if (!stopped) schedule(ev.code, ev.reason);
    };
  }

  /**
   * Try again after the close with `code`: as the relay hinted after a 1013, else with full jitter (pages dropped
   * together, as by a deploy, come back spread out).
   */
  function schedule(code = 1006, reason = "", state: ConnState = "resuming"): void {
    if (stopped) return;
    waiting = state === "waiting";
    o.shell.setConnection(state);
    const delay = reconnectDelay(code, reason, attempt, [250, 10_000]);
    attempt++;
    retry = setTimeout(() => void connect(), delay);
  }

  void connect();
  return () => {
    stopped = true;
    if (retry) clearTimeout(retry);
    if (ping) clearInterval(ping);
    ws?.close(1000, "page closed");
  };
}
