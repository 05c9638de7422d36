// The Worker: checks access (src/protocol/http/auth.ts), answers CORS (src/protocol/http/cors.ts), routes
// (src/protocol/http/route.ts), and calls the episode's Durable Object (or a run's index, or the run directory) over
// RPC;
// WebSocket upgrades are forwarded with fetch: the producer's to the episode, a watcher's to one
// of the episode's viewer hubs (src/protocol/hub/shards.ts), never to the episode itself. It holds no state; an
// unexpected error is logged
// and answered 500 (with CORS headers, so a browser sees it). Everything outside /v1/ is the
// dashboard, served as static assets (wrangler.toml `[assets]`, `run_worker_first = ["/v1/*"]`).

import { ArchiveGate as ArchiveGateObject } from "../objects/archive/gate.js";
import { metered } from "../objects/billing/metered.js";
import { Episode as EpisodeObject } from "../objects/episode/episode.js";
import { ViewerHub as ViewerHubObject } from "../objects/hub/hub.js";
import { EpisodeIndex as EpisodeIndexObject } from "../objects/registry/episode-index.js";
import { RunDirectory as RunDirectoryObject } from "../objects/registry/run-directory.js";
import { readArchived } from "../protocol/archive/archive-read.js";
import type { Usage } from "../protocol/billing/usage.js";
import { MAX_DISPATCH_BYTES } from "../protocol/envelope/dispatch.js";
import { type AuthMode, authMode, authorize, type Claims, need } from "../protocol/http/auth.js";
import { checkDeclaredLength } from "../protocol/http/body.js";
import { corsConfig, isPreflight, listedOrigin, preflightResponse, withCors } from "../protocol/http/cors.js";
import { offeredProtocols, stripCredentials, WS_PROTOCOL } from "../protocol/http/credentials.js";
import {
  answerResponse,
  errorResponse,
  methodNotAllowed,
  RelayError,
  upgradeRequired,
} from "../protocol/http/errors.js";
import { publicOrigin } from "../protocol/http/public-url.js";
import { wantsJson } from "../protocol/http/representation.js";
import {
  allowedMethods,
  EPISODE_ID_HEADER,
  EPISODE_ID_RULE,
  episodeIdProblem,
  isWebSocketUpgrade,
  parseRoute,
  RELAY_HEADER,
  type Route,
} from "../protocol/http/route.js";
import {
  HUB_EPISODE_HEADER,
  HUB_SHARD_HEADER,
  HUBS_HEADER,
  HubCounts,
  hubName,
  parseHubs,
  pickShard,
} from "../protocol/hub/shards.js";
import { limitsFrom } from "../protocol/limits/limits.js";
import { cursorKeys } from "../protocol/registry/list-cursors.js";
import { scopeOf } from "../protocol/registry/rows.js";
import { RUNS_NAME, runIndexName } from "../protocol/registry/run.js";
import { bulkFinished } from "./bulk-finished.js";
import {
  listAcrossRuns,
  listRuns,
  needsWholeRun,
  type RunAccess,
  runAccess,
  runAlerts,
  runEpisodes,
  runGroup,
  runGroups,
  runRules,
  runSearch,
  runSocket,
  runSteps,
  runTasks,
  runTokenizer,
  runView,
  type Viewer,
} from "./run-routes.js";
import { shareRun } from "./share-link.js";

// The objects as wrangler.toml binds them, each counting its billing units (src/objects/billing/metered.ts).
export const Episode = metered(EpisodeObject, { peers: (e) => e.hubNames() });
export type Episode = InstanceType<typeof Episode>;
export const ViewerHub = metered(ViewerHubObject);
export type ViewerHub = InstanceType<typeof ViewerHub>;
export const EpisodeIndex = metered(EpisodeIndexObject);
export type EpisodeIndex = InstanceType<typeof EpisodeIndex>;
export const RunDirectory = metered(RunDirectoryObject);
export type RunDirectory = InstanceType<typeof RunDirectory>;
export const ArchiveGate = metered(ArchiveGateObject);
export type ArchiveGate = InstanceType<typeof ArchiveGate>;

/** How many hubs each episode has, as its hubs last said (per isolate; a miss sends the watcher to shard 0). */
const hubCounts = new HubCounts();

export default {
  async fetch(request: Request, env: Env): Promise<Response> {
    const cors = corsConfig(env);
    let response: Response;
    try {
      const url = new URL(request.url);
      const route = parseRoute(url.pathname);
      const mode = authMode(env);
      // A preflight carries no credentials: answer it without a token (but not when fail-closed).
      if (isPreflight(request) && (route.kind === "health" || mode.kind !== "closed"))
        return preflightResponse(request, cors);
      const decision = await authorize(request, url, need(request.method, route), mode, (o) => listedOrigin(cors, o));
      response = decision.ok
        ? await dispatch(request, url, route, env, decision.claims, mode)
        : errorResponse(decision.refusal);
    } catch (e) {
      response = errorResponse(e, `${request.method} ${new URL(request.url).pathname}`);
    }
    return withCors(relayAnswer(response), request, cors);
  },
} satisfies ExportedHandler<Env>;

/** The routing proper (access was checked). */
async function dispatch(
  request: Request,
  url: URL,
  route: Route,
  env: Env,
  claims: Claims | null,
  mode: AuthMode,
): Promise<Response> {
  switch (route.kind) {
    case "health":
      return Response.json({ ok: true, service: "episode-relay" });
    case "not_found":
      throw new RelayError("not_found", `no route for ${url.pathname}`);
    case "bad_id":
      throw new RelayError("bad_episode_id", episodeIdProblem(route.id) ?? EPISODE_ID_RULE);
    case "bad_run":
      throw new RelayError(
        "bad_run",
        "run names are an episode id's part before its last ':' (1-127 of [A-Za-z0-9._:-]), or ~ for ids without one",
      );
  }
  const allowed = allowedMethods(route);
  if (!allowed.includes(request.method)) throw methodNotAllowed(request.method, allowed);
  if (route.kind === "list" || route.kind === "runs" || route.kind === "run")
    return runPaths(request, url, route, env, claims, mode);
  const episode = env.EPISODES.getByName(route.id);
  const id = route.id;
  switch (route.action) {
    case "ingest":
      if (!isWebSocketUpgrade(request)) throw upgradeRequired(`the ${route.action} endpoint`);
      // No token travels past the Worker: Authorization, ?token= and bearer.* protocol entries are removed.
      return answerProtocol(request, await episode.fetch(stripCredentials(request, url, { [EPISODE_ID_HEADER]: id })));
    case "watch":
      if (!isWebSocketUpgrade(request)) throw upgradeRequired(`the ${route.action} endpoint`);
      return answerProtocol(request, await watch(request, url, id, env));
    case "deltas":
      checkDeclaredLength(request, limitsFrom(env).maxMessage);
      return answerResponse(await episode.ingest(id, request.body));
    case "reply":
      checkDeclaredLength(request, limitsFrom(env).maxMessage);
      return answerResponse(await episode.reply(id, request.body));
    case "dispatch":
      checkDeclaredLength(request, 4 * MAX_DISPATCH_BYTES);
      return answerResponse(await episode.dispatch(id, request.body, request.headers.get("content-type")));
    case "annotations": {
      if (request.method === "POST") {
        checkDeclaredLength(request, limitsFrom(env).maxMessage);
        return answerResponse(await episode.annotate(id, request.body, request.headers.get("content-type")));
      }
      return episode.annotations(id, {
        json: wantsJson(request.headers.get("accept")),
        head: request.method === "HEAD",
        ifNoneMatch: request.headers.get("if-none-match"),
      });
    }
    case "status":
      return answerResponse(await episode.status(id));
    case "usage":
      return Response.json(await episodeUsage(env, episode));
    case "episode": {
      if (request.method === "DELETE") return answerResponse(await episode.remove(id));
      const req = {
        json: wantsJson(request.headers.get("accept")),
        head: request.method === "HEAD",
        ifNoneMatch: request.headers.get("if-none-match"),
      };
      // a finished episode is read from its archive without waking its object (src/objects/episode/archive.ts)
      const archived = await readArchived(env.ARCHIVE, id, req);
      if (archived) return archived;
      return episode.read(id, req);
    }
  }
}

/** The list, the runs and every run path: the viewer's patterns (with auth off, all) go to the index objects. */
async function runPaths(
  request: Request,
  url: URL,
  route: Extract<Route, { kind: "list" | "runs" | "run" }>,
  env: Env,
  claims: Claims | null,
  mode: AuthMode,
): Promise<Response> {
  const head = request.method === "HEAD";
  const viewer: Viewer = {
    scope: scopeOf(claims === null ? ["*"] : claims.episodes),
    cursors: await cursorKeys(mode.kind === "on" ? mode.secrets : []),
  };
  if (route.kind === "list") return listAcrossRuns(env, url, viewer, head);
  if (route.kind === "runs") {
    if (isWebSocketUpgrade(request)) return answerProtocol(request, await runSocket(env, request, url, null, viewer));
    return listRuns(env, url, viewer, head);
  }
  // every run route: a token covering no episode of the run is answered as for a run nobody wrote
  const run = runAccess(viewer, route.run);
  switch (route.action) {
    case "episodes":
      return runEpisodes(env, run, url, head);
    case "finished":
      return bulkFinished(env, run, url, request);
    case "usage":
      return Response.json(await runUsage(env, run));
    case "groups":
      return runGroups(env, run, url, head);
    case "group":
      return runGroup(env, run, route.group!, head);
    case "tasks":
      return runTasks(env, run, url, head);
    case "steps":
      return runSteps(env, run, url, head);
    case "search":
      return runSearch(env, run, url, head);
    case "rules":
      return runRules(env, run, request, claims);
    case "alerts":
      return runAlerts(env, run, request, claims, () => publicOrigin(env.PUBLIC_URL, url));
    case "tokenizer":
      return runTokenizer(env, run, request, claims, limitsFrom(env).maxTokenizer);
    case "share":
      return Response.json(await shareRun(run, mode, claims, url, publicOrigin(env.PUBLIC_URL, url)), {
        headers: { "cache-control": "no-store" },
      });
    case "run":
      if (isWebSocketUpgrade(request)) return answerProtocol(request, await runSocket(env, request, url, run, viewer));
      return runView(env, run, head);
  }
}

/** `GET /v1/episodes/{id}/usage`: the episode's billing units, and its hubs' (those it names). */
async function episodeUsage(
  env: Env,
  episode: ReturnType<Env["EPISODES"]["get"]>,
): Promise<{ episode: Usage; hubs: Usage[] }> {
  const { peers, ...own } = await episode.usage();
  const hubs = await Promise.all((peers ?? []).map((name) => env.HUBS.getByName(name).usage()));
  return { episode: own, hubs };
}

/**
 * `GET /v1/runs/{run}/usage` (admin, covering the whole run): the run index's billing units, and
 * the run directory's (it serves every run: only to an admin token covering every episode).
 */
async function runUsage(env: Env, a: RunAccess): Promise<{ index: Usage; directory: Usage | null }> {
  needsWholeRun(a, "a run's usage");
  const [index, directory] = await Promise.all([
    env.EPISODE_INDEX.getByName(runIndexName(a.run)).usage(),
    a.viewer.scope === null ? env.RUN_DIRECTORY.getByName(RUNS_NAME).usage() : null,
  ]);
  return { index, directory };
}

/** The answer marked as the relay's (RELAY_HEADER), so a client told the wrong address can say so. */
function relayAnswer(res: Response): Response {
  if (res.status === 101) return res;
  const out = new Response(res.body, res); // answers from stubs have immutable headers
  out.headers.set(RELAY_HEADER, "1");
  return out;
}

/**
 * A watcher's upgrade goes to one of the episode's hubs, drawn at random below the count its hubs last gave. The hub
 * is told that count and names the count in its answer only when it differs, so most 101s pass through unchanged (a
 * reconnect storm rebuilds no answer per connection).
 */
async function watch(request: Request, url: URL, id: string, env: Env): Promise<Response> {
  const known = hubCounts.get(id);
  const shard = pickShard(known);
  const hub = env.HUBS.getByName(hubName(id, shard));
  const res = await hub.fetch(
    stripCredentials(request, url, {
      [HUB_EPISODE_HEADER]: id,
      [HUB_SHARD_HEADER]: String(shard),
      [HUBS_HEADER]: String(known),
    }),
  );
  const said = res.headers.get(HUBS_HEADER);
  if (said === null) {
    if (res.status === 101) hubCounts.set(id, known); // still so: kept for another while
    return res;
  }
  const hubs = parseHubs(said, limitsFrom(env).maxHubs);
  if (hubs !== null) hubCounts.set(id, hubs);
  if (res.status !== 101 || !res.webSocket) return res;
  const headers = new Headers(res.headers);
  headers.delete(HUBS_HEADER);
  return new Response(null, { status: 101, webSocket: res.webSocket, headers });
}

/** A 101 to a client that offered our subprotocol (browsers send it with bearer.<token>) must name it. */
function answerProtocol(request: Request, res: Response): Response {
  if (
    res.status === 101 &&
    res.webSocket &&
    !res.headers.has("sec-websocket-protocol") &&
    offeredProtocols(request).includes(WS_PROTOCOL)
  ) {
    const headers = new Headers(res.headers);
    headers.set("sec-websocket-protocol", WS_PROTOCOL);
    return new Response(null, { status: 101, webSocket: res.webSocket, headers });
  }
  return res;
}
