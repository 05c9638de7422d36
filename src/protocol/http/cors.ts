// CORS for dashboards served from other origins. CORS_ORIGINS: "" (none), "*" (any), or a comma
// list of origins ("https://dash.example.com, http://localhost:5173"). Tokens travel in the
// Authorization header, never in cookies, so credentials mode is never allowed.

export interface CorsConfig {
  any: boolean;
  /** Normalized origins (scheme://host[:port], lower case, no trailing slash). */
  origins: ReadonlySet<string>;
}

export const ALLOW_METHODS = "GET, HEAD, POST, DELETE, OPTIONS";
export const ALLOW_HEADERS = "Authorization, Content-Type, Accept, If-None-Match";
export const EXPOSE_HEADERS = "ETag, WWW-Authenticate, Content-Length, X-Episode-Relay";
/** Seconds a browser may cache a preflight (Chromium caps at 7200). */
export const MAX_AGE = "7200";

function normalizeOrigin(o: string): string {
  return o.trim().toLowerCase().replace(/\/+$/, "");
}

export function corsConfig(env: { CORS_ORIGINS?: string }): CorsConfig {
  const raw = (env.CORS_ORIGINS ?? "").trim();
  if (raw === "*") return { any: true, origins: new Set() };
  return {
    any: false,
    origins: new Set(
      raw
        .split(",")
        .map(normalizeOrigin)
        .filter((o) => o !== "" && o !== "*"),
    ),
  };
}

/** Whether `origin` is listed by name (a "*" configuration lists nothing by name). */
export function listedOrigin(cfg: CorsConfig, origin: string): boolean {
  return cfg.origins.has(normalizeOrigin(origin));
}

/** The Access-Control-Allow-Origin value for this request's Origin, or null. */
export function allowOrigin(cfg: CorsConfig, origin: string | null): string | null {
  if (origin === null) return null;
  if (cfg.any) return "*";
  return listedOrigin(cfg, origin) ? origin : null;
}

/** A CORS preflight: OPTIONS with Origin and Access-Control-Request-Method. */
export function isPreflight(request: Request): boolean {
  return (
    request.method === "OPTIONS" &&
    request.headers.has("origin") &&
    request.headers.has("access-control-request-method")
  );
}

/** 204; the Access-Control-Allow-* headers only when the origin is allowed (else the browser refuses). */
export function preflightResponse(request: Request, cfg: CorsConfig): Response {
  const headers = new Headers({ vary: "Origin, Access-Control-Request-Method, Access-Control-Request-Headers" });
  const allowed = allowOrigin(cfg, request.headers.get("origin"));
  if (allowed !== null) {
    headers.set("access-control-allow-origin", allowed);
    headers.set("access-control-allow-methods", ALLOW_METHODS);
    headers.set("access-control-allow-headers", ALLOW_HEADERS);
    headers.set("access-control-max-age", MAX_AGE);
  }
  return new Response(null, { status: 204, headers });
}

/** `response` with Access-Control-Allow-Origin / Expose-Headers when allowed, and Vary: Origin. */
export function withCors(response: Response, request: Request, cfg: CorsConfig): Response {
  if (response.status === 101) return response; // upgrades (a WebSocket is always a 101): CORS does not apply
  const allowed = allowOrigin(cfg, request.headers.get("origin"));
  const varies = !cfg.any && cfg.origins.size > 0;
  if (allowed === null && !varies) return response;
  const out = new Response(response.body, response); // responses from stubs have immutable headers
  if (allowed !== null) {
    out.headers.set("access-control-allow-origin", allowed);
    out.headers.set("access-control-expose-headers", EXPOSE_HEADERS);
  }
  if (varies || allowed !== null) appendVary(out.headers, "Origin");
  return out;
}

function appendVary(headers: Headers, name: string): void {
  const cur = headers.get("vary");
  if (!cur) return headers.set("vary", name);
  const parts = cur.split(",").map((s) => s.trim().toLowerCase());
  if (!parts.includes(name.toLowerCase()) && !parts.includes("*")) headers.set("vary", `${cur}, ${name}`);
}
