// Every client request to the relay goes through here (watch.ts, bulk.ts, the CLI): the base URL
// and the episode id are checked before anything is sent, a network failure says what failed
// (refused, DNS, TLS or scheme, timeout) and where, and an answer is taken as the relay's only if
// it carries the relay's header: a page (2xx) or a 404 (405, 410) without it is not the relay (a
// wrong address), any other answer without it is something in front of the relay failing for now (a
// proxy's 502, Cloudflare's error page, a local router while the relay starts), so it counts as
// the relay not answering.
// `hints.token` says how to pass a token in the caller's terms (`{ token }` for the library,
// `--token T` for the CLI). A token is never sent in clear text to another machine: over http://
// or ws:// only to this one (localhost, 127.0.0.0/8, [::1]) unless the caller allows it
// (`allowHttp`, or EPISODE_RELAY_ALLOW_HTTP=1 in Node, as for the Python client).

import { episodeIdProblem, RELAY_HEADER } from "../../src/protocol/index.js";
import { RelayRefusal, refusalBody } from "./refusal.js";

/** How the caller passes what a refusal asks for (the library's option names by default). */
export interface Hints {
  token: string;
}

export const LIBRARY_HINTS: Hints = { token: "pass { token }" };

/** What kind of network failure: the relay never answered. */
export type Unreachable = "refused" | "dns" | "tls" | "timeout" | "reset" | "network" | "gateway";

/**
 * The relay did not answer at all (nothing listens there, the name does not resolve, TLS failed,
 * it timed out, or something in front of it answered in its place: `gateway`). Transient: retry.
 */
export class RelayUnreachable extends Error {
  constructor(
    readonly kind: Unreachable,
    readonly url: string,
    message: string,
  ) {
    super(message);
    this.name = "RelayUnreachable";
  }
}

/** What every call that may carry a token takes. */
export interface TokenOptions {
  /** Bearer token. */
  token?: string;
  /**
   * Send the token over plain http:// (or ws://) to a host other than this machine (default false:
   * refused before anything is sent, since anyone on the way could read it). In Node,
   * EPISODE_RELAY_ALLOW_HTTP=1 in the environment does the same.
   */
  allowHttp?: boolean;
}

/** The environment variable that allows a token over plain http:// (Node; the Python client reads it too). */
export const ALLOW_HTTP_ENV = "EPISODE_RELAY_ALLOW_HTTP";

/** Whether `hostname` (as `URL.hostname` gives it) is this machine. */
export function isLoopbackHost(hostname: string): boolean {
  const h = hostname.toLowerCase().replace(/\.$/, "");
  return h === "localhost" || h.endsWith(".localhost") || h === "[::1]" || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

/**
 * Throws a RelayRefusal (`insecure_url`, nothing sent) when `options.token` would travel in clear
 * text to another machine: `url` is http:// or ws:// to a host that is not this one, and the caller
 * did not allow it.
 */
export function checkTokenTransport(url: string | URL, options: TokenOptions): void {
  if (!options.token) return;
  const u = new URL(url);
  if (!(u.protocol === "http:" || u.protocol === "ws:") || isLoopbackHost(u.hostname)) return;
  const env = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process?.env;
  if (options.allowHttp || env?.[ALLOW_HTTP_ENV] === "1") return;
  throw new RelayRefusal(
    0,
    "insecure_url",
    `refusing to send a bearer token over plain ${u.protocol}// to ${u.hostname}: anyone on the way could read it; use https:// (or pass { allowHttp: true }, or set ${ALLOW_HTTP_ENV}=1, e.g. inside a private network)`,
  );
}

/** `Authorization: Bearer` for the token (none: no header), once `url` may carry it (`checkTokenTransport`). */
export function bearer(url: string | URL, options: TokenOptions): Record<string, string> {
  checkTokenTransport(url, options);
  return options.token ? { authorization: `Bearer ${options.token}` } : {};
}

/** A relay base URL as given (`http://host:port[/prefix]`), without a trailing `/`; throws at once on anything else. */
export function checkBaseUrl(url: string): string {
  if (!/^https?:\/\//i.test(url)) {
    throw new RelayRefusal(
      0,
      "bad_url",
      `the relay's URL must start with http:// or https://, got ${JSON.stringify(url)} (e.g. http://127.0.0.1:8787)`,
    );
  }
  try {
    new URL(url);
  } catch {
    throw new RelayRefusal(0, "bad_url", `${JSON.stringify(url)} is not a URL`);
  }
  return url.replace(/\/+$/, "");
}

/** Throws a RelayRefusal (nothing sent) when `id` cannot name an episode. */
export function checkEpisodeId(id: string): void {
  const problem = episodeIdProblem(id);
  if (problem) throw new RelayRefusal(400, "bad_episode_id", problem);
}

/** The network failure behind a failed fetch, in words, naming the URL. */
export function unreachable(e: unknown, url: string): RelayUnreachable {
  const err = e as { name?: string; message?: string; cause?: { code?: string; message?: string; name?: string } };
  const code = err.cause?.code ?? "";
  const detail = `${err.cause?.message ?? err.message ?? String(e)}`;
  const host = (() => {
    try {
      return new URL(url).host;
    } catch {
      return url;
    }
  })();
  if (
    err.name === "TimeoutError" ||
    code === "UND_ERR_CONNECT_TIMEOUT" ||
    code === "ETIMEDOUT" ||
    code === "UND_ERR_HEADERS_TIMEOUT"
  ) {
    // a server that speaks plain HTTP often just waits on a TLS hello: say so for https URLs
    const tls = url.startsWith("https:") ? ": an https:// URL for a relay that speaks http://?" : "";
    return new RelayUnreachable("timeout", url, `no answer from ${host} in time${tls} (${url})`);
  }
  if (code === "ECONNREFUSED")
    return new RelayUnreachable("refused", url, `connection refused by ${host}: is the relay running there? (${url})`);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN")
    return new RelayUnreachable("dns", url, `the name ${host} does not resolve (${url})`);
  if (/SSL|TLS|EPROTO|CERT|wrong version number|certificate/i.test(`${code} ${detail}`)) {
    return new RelayUnreachable(
      "tls",
      url,
      `TLS failed with ${host} (${detail}): an https:// URL for a relay that speaks http://? (${url})`,
    );
  }
  if (code === "ECONNRESET" || code === "UND_ERR_SOCKET")
    return new RelayUnreachable("reset", url, `${host} closed the connection (${detail}) (${url})`);
  return new RelayUnreachable("network", url, `cannot reach ${host}: ${detail} (${url})`);
}

/** A refusal for an answer that is not the relay's: what came, and where to look. */
export async function notTheRelay(res: Response, url: string): Promise<RelayRefusal> {
  const type = res.headers.get("content-type") ?? "no content type";
  await res.body?.cancel().catch(() => {});
  return new RelayRefusal(
    res.status,
    "not_the_relay",
    `${url} answered ${res.status} (${type}) but not as an Episode Relay: check the relay's base URL (a page such as the dashboard is not the API)`,
  );
}

/**
 * Whether an answer without the relay's header says for sure that the relay is not at that
 * address: a page (2xx), or a 404 (and its kin 405 and 410: no such path, not that method), is what
 * a web server or another API answers there. Any other status is a proxy or gateway failing in the
 * relay's place for now.
 */
export function foreignAnswerIsFinal(status: number): boolean {
  return (status >= 200 && status < 300) || status === 404 || status === 405 || status === 410;
}

/** A RelayUnreachable for an answer something in front of the relay gave in its place (transient). */
export async function gatewayAnswer(res: Response, url: string): Promise<RelayUnreachable> {
  const type = res.headers.get("content-type") ?? "no content type";
  await res.body?.cancel().catch(() => {});
  const host = new URL(url).host;
  return new RelayUnreachable(
    "gateway",
    url,
    `${host} answered ${res.status} (${type}) in the relay's place (a proxy, or a local relay still starting): try again later (${url})`,
  );
}

/**
 * `fetch`, with network failures named (RelayUnreachable), an answer that is not the relay's
 * refused (RelayRefusal `not_the_relay`), and one given in its place by a gateway taken as the
 * relay not answering (RelayUnreachable `gateway`). The relay's own 503 with Retry-After
 * (`overloaded`: out of memory for storage for now; `unavailable`: a local tier not up) is sent
 * again after it, for up to `retryFor`. `timeoutMs` bounds the wait for each answer's headers.
 */
export async function relayFetch(
  url: string | URL,
  init: RequestInit = {},
  timeoutMs = 30_000,
  /** How long the relay's 503s are waited out (0: answered at once: a watch retries by itself, and says so). */
  retryFor = RETRY_503_FOR_MS,
): Promise<Response> {
  const href = url.toString();
  const giveUp = Date.now() + retryFor;
  for (;;) {
    let res: Response;
    try {
      const timeout = AbortSignal.timeout(timeoutMs);
      res = await fetch(url, { ...init, signal: init.signal ? AbortSignal.any([init.signal, timeout]) : timeout });
    } catch (e) {
      if (init.signal?.aborted) throw e;
      throw unreachable(e, href);
    }
    if (res.headers.get(RELAY_HEADER) === null)
      throw await (foreignAnswerIsFinal(res.status) ? notTheRelay(res, href) : gatewayAnswer(res, href));
    // the relay's own "send it again" (a 503 with Retry-After: overloaded, or a local tier not up;
    // auth_not_configured has none, it is final): after its Retry-After
    const after = res.status === 503 ? res.headers.get("retry-after") : null;
    if (after === null || !resendable(init.body)) return res;
    const wait = retryAfterMs(after);
    if (Date.now() + wait > giveUp) return res;
    await res.body?.cancel().catch(() => {});
    await new Promise((r) => setTimeout(r, wait));
    if (init.signal?.aborted) throw init.signal.reason;
  }
}

/** How long a call waits out the relay's 503s (`overloaded`, `unavailable`) before it answers with one. */
export const RETRY_503_FOR_MS = 30_000;

/** A Retry-After in ms (1 s when it is not a number of seconds), drawn between half and all of it (callers spread out). */
export function retryAfterMs(header: string): number {
  const s = Number(header);
  return 1000 * (Number.isFinite(s) && s > 0 ? Math.min(s, 30) : 1) * (0.5 + Math.random() / 2);
}

/** Whether a request's body can be sent again as it was (none, text or bytes; not a stream). */
function resendable(body: RequestInit["body"]): boolean {
  return body == null || typeof body === "string" || body instanceof Uint8Array || body instanceof ArrayBuffer;
}

/** A RelayRefusal from the relay's refused answer (4xx), saying what to do in the caller's terms. */
export async function refusalOf(res: Response, what: string, base: string, hints: Hints): Promise<RelayRefusal> {
  const { code, message, field } = await refusalBody(res);
  return new RelayRefusal(
    res.status,
    code,
    `${res.status} ${code}: ${message}; ${advice(res.status, code, base, what, hints)}`,
    field,
  );
}

function advice(status: number, code: string, base: string, what: string, hints: Hints): string {
  if (status === 401)
    return `the relay needs a valid bearer token: ${hints.token} (a token whose episodes cover ${what}, e.g. from \`npm run token -- --role watcher --episode ID\`)`;
  if (status === 403) return `the token may not read ${what}: use one whose \`episodes\` patterns cover it`;
  if (code === "auth_not_configured")
    return "the relay has no RELAY_SECRET set, so it refuses everything: set it (`wrangler secret put RELAY_SECRET`)";
  if (code === "bad_cursor") return "pass the `cursor` of an element this run's fetch returned";
  if (code === "bad_filter") return "change that filter value";
  return `check the relay's base URL (${base}) and ${what}`;
}
