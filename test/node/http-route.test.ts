// The public API's path grammar (src/protocol/http/route.ts): every path kind, trailing slashes,
// percent-encoding, bad and reserved ids, and the method tables (docs/http-api.md).
import { describe, expect, it } from "vitest";
import {
  allowedMethods,
  EPISODE_ID,
  type EpisodeAction,
  INDEX_METHODS,
  METHODS,
  parseRoute,
  RESERVED_IDS,
  type Route,
  RUN_METHODS,
} from "../../src/protocol/http/route.js";

const ep = (id: string, action: EpisodeAction = "episode"): Route => ({ kind: "episode", id, action });
const ID128 = "a".repeat(128);

describe("parseRoute", () => {
  it.each<[string, Route]>([
    // health, list; the old index socket's path is not found
    ["/v1/health", { kind: "health" }],
    ["/v1/health/", { kind: "health" }],
    ["/v1/episodes", { kind: "list" }],
    ["/v1/episodes/", { kind: "list" }],
    ["/v1/episodes/watch", { kind: "not_found" }],
    ["/v1/episodes/watch/", { kind: "not_found" }],
    // runs, a run, its episodes and its finished episodes (a run name is percent-decoded)
    ["/v1/runs", { kind: "runs" }],
    ["/v1/runs/", { kind: "runs" }],
    ["/v1/runs/exp-7", { kind: "run", run: "exp-7", action: "run" }],
    ["/v1/runs/exp-7/", { kind: "run", run: "exp-7", action: "run" }],
    ["/v1/runs/exp-7/episodes", { kind: "run", run: "exp-7", action: "episodes" }],
    ["/v1/runs/exp-7/finished/", { kind: "run", run: "exp-7", action: "finished" }],
    ["/v1/runs/exp%3A7", { kind: "run", run: "exp:7", action: "run" }],
    ["/v1/runs/~", { kind: "run", run: "~", action: "run" }],
    ["/v1/runs/a%2Fb", { kind: "bad_run", run: "a/b" }],
    ["/v1/runs/%E0%A4%A", { kind: "bad_run", run: "%E0%A4%A" }],
    ["/v1/runs/exp-7/status", { kind: "not_found" }],
    ["/v1/runs/exp-7/episodes/x", { kind: "not_found" }],
    // an episode and each action, with and without a trailing slash
    ["/v1/episodes/run-1", ep("run-1")],
    ["/v1/episodes/run-1/", ep("run-1")],
    ["/v1/episodes/run-1/deltas", ep("run-1", "deltas")],
    ["/v1/episodes/run-1/deltas/", ep("run-1", "deltas")],
    ["/v1/episodes/run-1/ingest", ep("run-1", "ingest")],
    ["/v1/episodes/run-1/reply", ep("run-1", "reply")],
    ["/v1/episodes/run-1/status", ep("run-1", "status")],
    ["/v1/episodes/run-1/status/", ep("run-1", "status")],
    ["/v1/episodes/run-1/watch", ep("run-1", "watch")],
    // every id character class, and the length bounds
    ["/v1/episodes/A.b_c:d-9", ep("A.b_c:d-9")],
    ["/v1/episodes/x", ep("x")],
    [`/v1/episodes/${ID128}/status`, ep(ID128, "status")],
    [`/v1/episodes/${ID128}0`, { kind: "bad_id", id: `${ID128}0` }],
    // ids that merely contain or extend the reserved word are fine
    ["/v1/episodes/watcher", ep("watcher")],
    ["/v1/episodes/Watch", ep("Watch")],
    ["/v1/episodes/watch.1/watch", ep("watch.1", "watch")],
    // percent-encoding is decoded before the id is checked
    ["/v1/episodes/run%3A1", ep("run:1")],
    ["/v1/episodes/%72%75%6E/reply", ep("run", "reply")],
    ["/v1/episodes/a%20b", { kind: "bad_id", id: "a b" }],
    ["/v1/episodes/a%2Fb/status", { kind: "bad_id", id: "a/b" }],
    ["/v1/episodes/%C3%A9", { kind: "bad_id", id: "é" }],
    ["/v1/episodes/%E0%A4%A", { kind: "bad_id", id: "%E0%A4%A" }],
    ["/v1/episodes/%zz/status", { kind: "bad_id", id: "%zz" }],
    ["/v1/episodes/%FF", { kind: "bad_id", id: "%FF" }],
    // reserved ids, however spelled, are not episodes
    ["/v1/episodes/watch/status", { kind: "bad_id", id: "watch" }],
    ["/v1/episodes/watch/deltas/", { kind: "bad_id", id: "watch" }],
    ["/v1/episodes/%77atch", { kind: "bad_id", id: "watch" }],
    ["/v1/episodes/%77atch/", { kind: "bad_id", id: "watch" }],
    // ids outside the grammar
    ["/v1/episodes/a*", { kind: "bad_id", id: "a*" }],
    ["/v1/episodes/a+b", { kind: "bad_id", id: "a+b" }],
    ["/v1/episodes/a~b/watch", { kind: "bad_id", id: "a~b" }],
    // unknown paths
    ["/", { kind: "not_found" }],
    ["", { kind: "not_found" }],
    ["/v1", { kind: "not_found" }],
    ["/v1/", { kind: "not_found" }],
    ["/v2/health", { kind: "not_found" }],
    ["/V1/health", { kind: "not_found" }],
    ["/v1/healthz", { kind: "not_found" }],
    ["/v1/episodesx", { kind: "not_found" }],
    ["/v1/episodes//", { kind: "not_found" }],
    ["/v1/episodes//status", { kind: "not_found" }],
    ["/v1/episodes/run-1//", { kind: "not_found" }],
    ["/v1/episodes/run-1/unknown", { kind: "not_found" }],
    ["/v1/episodes/run-1/Status", { kind: "not_found" }],
    ["/v1/episodes/run-1/deltas/more", { kind: "not_found" }],
    ["/v1/episodes/run-1/status?x=1", { kind: "not_found" }],
    ["/v1/episodes/watch/unknown", { kind: "not_found" }],
    // an unknown action is not_found even when the id is bad too
    ["/v1/episodes/a%20b/unknown", { kind: "not_found" }],
    ["v1/episodes/run-1", { kind: "not_found" }],
  ])("%j", (path, expected) => {
    expect(parseRoute(path)).toStrictEqual(expected);
  });

  it("an id and action as a URL's pathname gives (percent-encoded spaces and all)", () => {
    expect(parseRoute(new URL("https://relay.example.com/v1/episodes/a b/status?routing=0").pathname)).toStrictEqual({
      kind: "bad_id",
      id: "a b",
    });
    expect(parseRoute(new URL("https://relay.example.com/v1/episodes/run:1/watch?after=3").pathname)).toStrictEqual(
      ep("run:1", "watch"),
    );
  });

  it("`/v1/episodes/{id}/episode` is not a path (the episode is `/v1/episodes/{id}`)", () => {
    expect(parseRoute("/v1/episodes/run-1/episode")).toStrictEqual({ kind: "not_found" });
  });
});

describe("EPISODE_ID and RESERVED_IDS", () => {
  it.each<[string, boolean]>([
    ["a", true],
    ["A.b_c:d-9", true],
    [ID128, true],
    ["", false],
    [`${ID128}a`, false],
    ["a b", false],
    ["a/b", false],
    ["é", false],
    ["a\n", false],
  ])("%j → %s", (id, ok) => {
    expect(EPISODE_ID.test(id)).toBe(ok);
  });

  it("every reserved id is refused as an episode id, with every action", () => {
    expect([...RESERVED_IDS]).toStrictEqual(["watch"]);
    for (const id of RESERVED_IDS) {
      for (const action of ["deltas", "ingest", "reply", "status", "watch"]) {
        expect(parseRoute(`/v1/episodes/${id}/${action}`)).toStrictEqual({ kind: "bad_id", id });
      }
    }
  });
});

describe("method tables", () => {
  it("a run's groups and one group (its id URL-encoded)", () => {
    expect(parseRoute("/v1/runs/r1/groups")).toEqual({ kind: "run", run: "r1", action: "groups" });
    expect(parseRoute("/v1/runs/r1/groups/g%2F1%20x")).toEqual({
      kind: "run",
      run: "r1",
      action: "group",
      group: "g/1 x",
    });
    expect(parseRoute("/v1/runs/r%ZZ/groups/g")).toEqual({ kind: "bad_run", run: "r%ZZ" });
    expect(parseRoute("/v1/runs/r1/groups/%ZZ")).toEqual({ kind: "not_found" });
    expect(parseRoute("/v1/runs/r1/nope")).toEqual({ kind: "not_found" });
  });

  it("METHODS is the documented table", () => {
    expect(METHODS).toStrictEqual({
      episode: ["GET", "HEAD", "DELETE"],
      deltas: ["POST"],
      ingest: ["GET"],
      reply: ["POST"],
      status: ["GET"],
      watch: ["GET"],
      usage: ["GET"],
      dispatch: ["POST"],
      annotations: ["GET", "HEAD", "POST"],
    });
    expect(INDEX_METHODS).toStrictEqual({ list: ["GET", "HEAD"], runs: ["GET", "HEAD"] });
    expect(RUN_METHODS).toStrictEqual({
      groups: ["GET", "HEAD"],
      group: ["GET", "HEAD"],
      tasks: ["GET", "HEAD"],
      steps: ["GET", "HEAD"],
      search: ["GET", "HEAD"],
      rules: ["GET", "PUT"],
      alerts: ["GET", "PUT"],
      run: ["GET", "HEAD"],
      episodes: ["GET", "HEAD"],
      finished: ["GET", "HEAD"],
      usage: ["GET"],
      share: ["POST"],
      tokenizer: ["GET", "HEAD", "PUT"],
    });
  });

  it("every action of METHODS is routable, and routes to itself", () => {
    for (const action of Object.keys(METHODS) as EpisodeAction[]) {
      const path = action === "episode" ? "/v1/episodes/e1" : `/v1/episodes/e1/${action}`;
      expect(parseRoute(path)).toStrictEqual(ep("e1", action));
    }
  });

  it.each<[string, string[]]>([
    ["/v1/episodes", ["GET", "HEAD"]],
    ["/v1/episodes/e1", ["GET", "HEAD", "DELETE"]],
    ["/v1/episodes/e1/deltas", ["POST"]],
    ["/v1/episodes/e1/reply", ["POST"]],
    ["/v1/episodes/e1/ingest", ["GET"]],
    ["/v1/episodes/e1/status", ["GET"]],
    ["/v1/episodes/e1/watch", ["GET"]],
    ["/v1/episodes/e1/usage", ["GET"]],
    ["/v1/runs", ["GET", "HEAD"]],
    ["/v1/runs/r1", ["GET", "HEAD"]],
    ["/v1/runs/r1/episodes", ["GET", "HEAD"]],
    ["/v1/runs/r1/finished", ["GET", "HEAD"]],
    ["/v1/runs/r1/usage", ["GET"]],
    ["/v1/runs/r1/share", ["POST"]],
  ])("allowedMethods(%s) → %j", (path, methods) => {
    const route = parseRoute(path);
    if (route.kind !== "episode" && route.kind !== "list" && route.kind !== "runs" && route.kind !== "run")
      throw new Error(`${path} did not route: ${route.kind}`);
    expect(allowedMethods(route)).toStrictEqual(methods);
  });
});
