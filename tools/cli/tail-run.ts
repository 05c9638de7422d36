// `episode-relay tail --run RUN URL [--token T] [--json]`: follow every rollout of a run. The run's
// socket (`GET /v1/runs/{run}` upgraded, the dashboard's run page's) says which rollouts there are
// and when each ends; each rollout that is live, or arrives while this runs, is watched from its
// start, and each of its turns (an assistant node) is a line naming the rollout, its step and group
// (none while only its task key stands in for the group: groups.ts `settledGroup`, one group per rollout);
// when it ends, a line with its reward (the row's own `reward`, as the relay computes it) or its
// error. Rollouts already ended when it starts get their end line only; a run nobody wrote yet is
// waited for. Runs until Ctrl-C; resumes after drops like `tail`.
import WebSocket from "ws";
import { RelayRefusal } from "../../clients/typescript/refusal.js";
import { bearer, refusalOf, relayFetch } from "../../clients/typescript/relay-fetch.js";
import { type EpisodeWatch, reconnectDelay, watchEpisode } from "../../clients/typescript/watch.js";
import {
  type IndexEntry,
  parseRunMessage,
  settledGroup,
  WS_PROTOCOL,
  WS_TOKEN_PREFIX,
} from "../../src/protocol/index.js";
import { CLI_HINTS } from "./hints.js";
import { deltaLines, formatLine, newContext, type RenderContext, snapshotLines, type TailLine } from "./render.js";

/** Rollouts watched turn by turn at once; past it a new one shows only its end (a note says so). */
export const MAX_FOLLOWED = 64;

interface Rollout {
  row: IndexEntry;
  ctx: RenderContext;
  watch: EpisodeWatch | null;
  /** The watch has ended (or there is none): the end line may be printed once the row ended. */
  watchDone: boolean;
  /** The end line was printed. */
  ended: boolean;
}

export async function tailRun(
  base: string,
  run: string,
  opts: { token?: string; json?: boolean; giveUpMs?: number; out?: NodeJS.WriteStream },
): Promise<number> {
  const out = opts.out ?? process.stdout;
  const json = opts.json ?? false;
  const width = out.isTTY && !json ? out.columns || 100 : 160;
  const write = (s: string) => out.write(`${s}\n`);
  const note = (s: string) => {
    if (!json) write(s);
  };
  const rollouts = new Map<string, Rollout>();
  let followed = 0;
  /** Until the first snapshot: rows in it that already ended get their end line only. */
  let first = true;

  const label = (r: IndexEntry) => `${r.id} · step ${r.step ?? "-"} · group ${settledGroup(r) ?? "-"}`;
  const turns = (ro: Rollout, lines: TailLine[]) => {
    for (const l of lines) {
      if (l.type !== "node" || l.role !== "assistant") continue; // a turn: the model's node
      if (json)
        write(
          JSON.stringify({ ...l, type: "turn", rollout: ro.row.id, step: ro.row.step, group: settledGroup(ro.row) }),
        );
      else for (const s of formatLine(l, width, `${label(ro.row)} `)) write(s);
    }
  };
  const maybeEnd = (ro: Rollout) => {
    const r = ro.row;
    if (ro.ended || !ro.watchDone || (r.status !== "finished" && r.status !== "failed")) return;
    ro.ended = true;
    if (json)
      write(
        JSON.stringify({
          type: r.status,
          rollout: r.id,
          step: r.step,
          group: settledGroup(r),
          reward: r.reward,
          rewards: r.rewards,
          error: r.error,
        }),
      );
    else if (r.status === "finished") write(`${label(r)} ■ finished · reward ${r.reward ?? "-"}`);
    else write(`${label(r)} ■ failed: ${r.error ?? "(no error given)"}`);
  };
  const follow = (ro: Rollout) => {
    if (followed >= MAX_FOLLOWED) {
      note(`… ${MAX_FOLLOWED} rollouts followed at once: ${ro.row.id} shows only its end`);
      ro.watchDone = true;
      return;
    }
    followed++;
    const w = watchEpisode(base, ro.row.id, { token: opts.token, routing: false, WebSocket, hints: CLI_HINTS });
    ro.watch = w;
    w.on((e) => {
      if (e.type === "snapshot") turns(ro, snapshotLines(ro.ctx, w.assembly.tracesBytes()));
      else if (e.type === "delta")
        turns(ro, deltaLines(ro.ctx, e.delta, w.assembly.traces.get(e.trace)?.nodes.length ?? 0));
    });
    void w
      .finished()
      .catch((e: Error) => note(`… ${ro.row.id}: ${e.message}`))
      .finally(() => {
        followed--;
        ro.watchDone = true;
        maybeEnd(ro);
      });
  };
  const seen = (row: IndexEntry, atStart: boolean) => {
    let ro = rollouts.get(row.id);
    if (!ro) {
      ro = { row, ctx: newContext(width), watch: null, watchDone: false, ended: false };
      rollouts.set(row.id, ro);
      // ended before this tail started: its end line only; else from its start
      if (atStart && (row.status === "finished" || row.status === "failed")) ro.watchDone = true;
      else follow(ro);
    } else ro.row = row;
    maybeEnd(ro);
  };

  const what = `run ${JSON.stringify(run)}`;
  const started = Date.now();
  let connected = false;
  let attempt = 0;
  const refused = (message: string, status?: number) => {
    write(json ? JSON.stringify({ type: "refused", run, status: status ?? null, message }) : `■ refused: ${message}`);
    return 1;
  };
  for (;;) {
    const closed = await runSocket(base, run, opts.token, (m) => {
      if (!connected) {
        connected = true;
        if (json) write(JSON.stringify({ type: "run", run, url: base }));
        else write(`run ${run} at ${base} · every rollout, live (Ctrl-C stops)`);
      }
      attempt = 0;
      if (m.type === "snapshot") {
        if (first && m.episodes.length === 0) note(`… no rollout of run ${run} yet: waiting for the first`);
        for (const r of m.episodes) seen(r, first);
        first = false;
      } else for (const r of m.upserts) seen(r, false);
    });
    if (!closed.opened) {
      // a failed upgrade says nothing: the same path over plain HTTP gives the relay's reason
      // (a run nobody wrote answers 404 there, but its socket opens: a 404 here is the token's)
      const runPath = `${base}/v1/runs/${encodeURIComponent(run)}`;
      try {
        const res = await relayFetch(
          runPath,
          { headers: { accept: "application/json", ...bearer(base, opts) } },
          10_000,
          0,
        );
        if (res.status >= 400 && res.status < 500)
          return refused((await refusalOf(res, what, base, CLI_HINTS)).message, res.status);
        await res.body?.cancel();
      } catch (e) {
        if (e instanceof RelayRefusal) return refused(e.message);
        if (!connected && Date.now() - started >= (opts.giveUpMs ?? 30_000)) {
          write(`■ unreachable: ${(e as Error).message}`);
          return 1;
        }
      }
    } else if (connected && !json)
      note(`… run socket closed (${closed.code}${closed.reason ? ` ${closed.reason}` : ""}); resuming`);
    await sleep(reconnectDelay(closed.code, closed.reason, attempt++, [250, 10_000]));
  }
}

/** One run socket until it closes: each message to `onMessage`; resolves with the close's code and reason. */
function runSocket(
  base: string,
  run: string,
  token: string | undefined,
  onMessage: (m: ReturnType<typeof parseRunMessage>) => void,
): Promise<{ opened: boolean; code: number; reason: string }> {
  const url = new URL(`${base}/v1/runs/${encodeURIComponent(run)}`);
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return new Promise((resolve) => {
    const ws = new WebSocket(url, token ? [WS_PROTOCOL, `${WS_TOKEN_PREFIX}${token}`] : undefined);
    const ping = setInterval(() => ws.readyState === WebSocket.OPEN && ws.send("ping"), 30_000);
    ws.on("message", (data, binary) => {
      if (binary) return;
      const text = data.toString();
      if (text === "pong") return;
      try {
        onMessage(parseRunMessage(text));
      } catch {
        // a message of a later relay: nothing this tail needs
      }
    });
    let opened = false;
    ws.on("open", () => {
      opened = true;
    });
    ws.on("error", () => {}); // the close follows
    ws.on("close", (code, reason) => {
      clearInterval(ping);
      resolve({ opened, code, reason: reason.toString() });
    });
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
