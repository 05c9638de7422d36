// The watches behind the episode page (the TypeScript watcher client keeps the assembly). The
// page watches with `routing: false` until the routing heatmap is opened; then it re-watches
// with routing from the start of the log (`after: 0`), so repairs are seen, and swaps over once
// caught up. The feed also keeps the run's status as the badge shows it, the trainer's dispatch
// identity (`GET .../status` says it; asked again when the episode appears or ends, if it had
// none), the token rows each routing repair rewrote (the assembly keeps only the repaired
// values): those it saw in the deltas, and those the relay recorded (`status.repaired_nodes`),
// which stay once the log that carried them is trimmed or the episode archived; the delta keys the
// relay does not know (`status.unknown`, and those the watch applied); and it hands on the
// annotations the watch read.
import {
  type AnnotationsJson,
  type EpisodeWatch,
  type WatchEvent,
  watchEpisode,
} from "../../../clients/typescript/watch.js";
import type { Json, JsonObject } from "../../../src/protocol/index.js";
import { getJson, getToken, probe, relayUrl } from "../api.js";
import { isObject, repairsOf } from "../model.js";
import { type ConnState, refusal, type Shell } from "../shell.js";

export interface FeedHooks {
  /** Something changed: draw on the next frame. */
  changed(): void;
  /** The relay turned the watch or the token down: say why where the traces would be. */
  refused(message: string): void;
  /** The routing watch took over: every trace is drawn again from its assembly. */
  replaced(): void;
  /** The watch read the trainer's annotations. */
  annotations(a: AnnotationsJson): void;
}

export class EpisodeFeed {
  /** The watch the page draws. */
  watch: EpisodeWatch | null = null;
  private routingWatch: EpisodeWatch | null = null;
  /**
   * The run's status as the badge shows it: live, finished, failed, or, before the relay has
   * the episode, "missing" (no such episode yet: the page keeps watching for it) or "denied"
   * (the token may not read it).
   */
  status = "missing";
  error: string | null = null;
  /** The trainer's dispatch identity (null: none, or not known yet). */
  dispatch: JsonObject | null = null;
  /** The delta keys the relay named as unknown in the status (the watch adds those it applies). */
  private unknownRecorded: string[] = [];
  /** `${trace}\n${node}` → token rows repaired (the node's last row when the repair came). */
  readonly repaired = new Map<string, number[]>();
  /** trace → the nodes the relay recorded as repaired (each one's last row). */
  private recorded = new Map<string, Set<number>>();
  private stopped = false;

  constructor(
    private readonly shell: Shell,
    private readonly id: string,
    private readonly hooks: FeedHooks,
  ) {}

  /** The delta keys the relay does not know: as its status named them, then those the watch applied. */
  get unknown(): string[] {
    const seen = this.watch?.unknown ?? [];
    return [...this.unknownRecorded, ...seen.filter((k) => !this.unknownRecorded.includes(k))];
  }

  /** The page draws the watch that carries routing. */
  get hasRouting(): boolean {
    return this.watch !== null && this.watch === this.routingWatch;
  }

  /** Probe the episode (a refusal is told at once), then watch it without routing. */
  async begin(): Promise<void> {
    try {
      const p = await probe(`/v1/episodes/${encodeURIComponent(this.id)}/status`);
      if (!p.ok) {
        this.shell.setConnection(refusal(p.status), p.message);
        this.shell.askToken(p.status === 401 ? `This relay needs a token: ${p.message}` : p.message);
        this.status = "denied";
        this.hooks.refused(
          p.status === 403 ? "This token does not cover this episode." : "A token is needed to watch this episode.",
        );
        return;
      }
      if (p.status === 200 && isObject(p.body as Json)) {
        this.noteStatus(p.body as { status?: string; dispatch?: JsonObject | null });
        this.record(p.body);
      }
    } catch {
      // the watcher reconnects by itself
    }
    if (this.stopped) return;
    this.watch = this.start({ routing: false });
    this.hooks.changed();
  }

  /** Start the routing watch unless there is one (or nothing is watched yet); true when started. */
  loadRouting(): boolean {
    if (this.routingWatch || !this.watch) return false;
    const w = this.start({ routing: true, after: 0 });
    this.routingWatch = w;
    // the relay's record as the routing watch starts (repairs since the page opened included)
    void getJson(`/v1/episodes/${encodeURIComponent(this.id)}/status`).then(
      (s) => {
        this.record(s);
        this.hooks.changed();
      },
      () => {}, // the record from the page's first probe stays
    );
    w.on((e) => {
      if ((e.type === "caught_up" || e.type === "finish") && this.watch !== w) this.takeOver(w);
    });
    return true;
  }

  /** What a status answer says: the status, and the identity. */
  private noteStatus(body: { status?: string; dispatch?: JsonObject | null; unknown?: unknown }): void {
    this.status = String(body.status ?? this.status);
    if (isObject(body.dispatch as Json)) this.dispatch = body.dispatch!;
    if (Array.isArray(body.unknown)) this.unknownRecorded = body.unknown.filter((k) => typeof k === "string");
  }

  /** Ask the status again for the identity (the episode appeared, or ended, after the first probe). */
  private async reprobe(): Promise<void> {
    if (this.dispatch !== null || this.stopped) return;
    try {
      const p = await probe(`/v1/episodes/${encodeURIComponent(this.id)}/status`);
      if (p.ok && p.status === 200 && isObject(p.body as Json)) {
        const d = (p.body as { dispatch?: JsonObject | null }).dispatch;
        if (isObject(d as Json)) {
          this.dispatch = d!;
          this.hooks.changed();
        }
      }
    } catch {
      // shown when known
    }
  }

  close(): void {
    this.stopped = true;
    this.watch?.close();
    if (this.routingWatch !== this.watch) this.routingWatch?.close();
  }

  private start(options: { routing: boolean; after?: number }): EpisodeWatch {
    const w = watchEpisode(relayUrl, this.id, {
      // offered as a subprotocol entry, never in the URL; the page and its token came over this
      // very connection (same origin), so plain http:// adds nothing the page has not already sent
      token: getToken(),
      allowHttp: true,
      routing: options.routing,
      ...(options.after !== undefined ? { after: options.after } : {}),
      backoffMs: [250, 5000],
      // an open page waits for its relay however long it restarts (only a refusal ends the watch)
      giveUpMs: Number.POSITIVE_INFINITY,
    });
    w.on((e) => this.onEvent(w, e));
    return w;
  }

  /** The caught-up routing watch replaces the plain one; the plain one is closed. */
  private takeOver(w: EpisodeWatch): void {
    if (this.stopped || this.watch === w) return;
    const old = this.watch;
    this.watch = w;
    old?.close();
    this.shell.setConnection(w.state as ConnState);
    if (w.state === "finished" || w.state === "failed") {
      this.status = w.state;
      this.error = w.error;
    } else if (this.status === "missing" && w.seq > 0) this.status = "live";
    this.hooks.replaced();
  }

  private onEvent(w: EpisodeWatch, e: WatchEvent): void {
    if (e.type === "delta") this.noteRepairs(w, e.delta);
    // either watch's read is as good (the newest version wins)
    if (e.type === "annotations") this.hooks.annotations(e.annotations);
    if (w !== this.watch) return; // a routing watch still catching up: drawn once it takes over
    if (e.type === "state") this.shell.setConnection(e.state === "unreachable" ? "offline" : (e.state as ConnState));
    if (e.type === "hello") this.status = e.status === "new" ? "missing" : e.status;
    if ((e.type === "hello" && e.status !== "new") || e.type === "finish") void this.reprobe();

    if (e.type === "status" || e.type === "finish") {
      this.status = e.status;
      this.error = e.error;
    }
    if (e.type === "refused") {
      this.status = "denied";
      this.hooks.refused(e.error.message);
      if (e.error.status === 401 || e.error.status === 403) {
        this.shell.setConnection(refusal(e.error.status), e.error.message);
        this.shell.askToken(e.error.message);
      }
    }
    this.hooks.changed();
  }

  /**
   * The token rows of `trace`'s node `node` a repair rewrote: seen in deltas, or recorded by the relay (its last row).
   */
  repairedRows(trace: string, node: number): number[] {
    const seen = this.repaired.get(`${trace}\n${node}`) ?? [];
    if (!this.recorded.get(trace)?.has(node)) return seen;
    const rows = this.watch?.assembly.traces.get(trace)?.nodes[node]?.routed?.shape[0];
    return rows === undefined || seen.includes(rows - 1) ? seen : [...seen, rows - 1].sort((a, b) => a - b);
  }

  /** `status.repaired_nodes` (per trace, the nodes the relay recorded as repaired). */
  private record(status: unknown): void {
    const r = (status as { repaired_nodes?: unknown } | null)?.repaired_nodes;
    if (typeof r !== "object" || r === null) return;
    this.recorded = new Map(
      Object.entries(r).map(([trace, nodes]) => [trace, new Set(Array.isArray(nodes) ? (nodes as number[]) : [])]),
    );
  }

  /** A delta's routing repairs rewrote each named node's last row: remember which row that was. */
  private noteRepairs(w: EpisodeWatch, delta: Uint8Array): void {
    const r = repairsOf(delta);
    if (!r) return;
    const t = w.assembly.traces.get(r.trace);
    for (const n of r.nodes) {
      const rows = t?.nodes[n]?.routed?.shape[0];
      if (rows === undefined) continue;
      const key = `${r.trace}\n${n}`;
      const list = this.repaired.get(key) ?? [];
      if (!list.includes(rows - 1)) list.push(rows - 1);
      this.repaired.set(key, list);
    }
  }
}
