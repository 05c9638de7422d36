// The watches behind the episode page (the TypeScript watcher client keeps the assembly). The
// page watches with `routing: false` until the routing heatmap is opened; then it re-watches
// with routing from the start of the log (`after: 0`), so repairs are seen, and swaps over once
// caught up. The feed also keeps the run's status as the badge shows it, and the token rows
// each routing repair rewrote (the assembly keeps only the repaired values).
import { watchEpisode, type EpisodeWatch, type WatchEvent } from "../../../clients/typescript/watch.js";
import type { Json } from "../../../src/wire/json-view.js";
import { getToken, probe, relayUrl } from "../api.js";
import { isObject, repairsOf } from "../model.js";
import { refusal, type ConnState, type Shell } from "../shell.js";

export interface FeedHooks {
  /** Something changed: draw on the next frame. */
  changed(): void;
  /** The relay turned the watch or the token down: say why where the traces would be. */
  refused(message: string): void;
  /** The routing watch took over: every trace is drawn again from its assembly. */
  replaced(): void;
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
  /** `${trace}\n${node}` → token rows repaired (the node's last row when the repair came). */
  readonly repaired = new Map<string, number[]>();
  private stopped = false;

  constructor(
    private readonly shell: Shell,
    private readonly id: string,
    private readonly hooks: FeedHooks,
  ) {}

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
        this.hooks.refused(p.status === 403 ? "This token does not cover this episode." : "A token is needed to watch this episode.");
        return;
      }
      if (p.status === 200 && isObject(p.body as Json)) this.status = String((p.body as { status?: string }).status ?? this.status);
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
    w.on((e) => {
      if ((e.type === "caught_up" || e.type === "finish") && this.watch !== w) this.takeOver(w);
    });
    return true;
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
    if (w !== this.watch) return; // a routing watch still catching up: drawn once it takes over
    if (e.type === "state") this.shell.setConnection(e.state === "unreachable" ? "offline" : (e.state as ConnState));
    if (e.type === "hello") this.status = e.status === "new" ? "missing" : e.status;
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
