// Which viewer hub a watcher goes to, and how many hubs an episode spreads its watchers over.
//
// An episode's watchers are spread over K hub objects named from the episode id and a shard number
// (`hubName`). K follows the watchers: the episode object sums what its hubs report and answers
// K = ceil(watchers / perHub) (at least 1, at most maxHubs); the Worker keeps K per episode for a
// while (`HubCounts`), sends each new watcher to a shard drawn at random below it, and tells that
// hub the K it used (HUBS_HEADER on the upgrade); a hub whose K differs names its own in the upgrade
// answer (the same header, which the Worker strips). No request asks the episode object where to go:
// a connect costs it nothing once its hubs are warm.

/** Headers the Worker sets on an upgrade it forwards to a hub (objects do not know their names). */
export const HUB_EPISODE_HEADER = "x-episode-id";
export const HUB_SHARD_HEADER = "x-hub-shard";
/** How many hubs the episode has: the Worker's count on an upgrade; a hub's on its 101 when they differ (stripped). */
export const HUBS_HEADER = "x-relay-hubs";

/** The name of shard `shard` of the episode `id`'s hubs (`/` never occurs in an episode id). */
export function hubName(id: string, shard: number): string {
  return `${shard}/${id}`;
}

/** How many hubs `watchers` need: one per `perHub`, at least one, at most `maxHubs`. */
export function hubCount(watchers: number, perHub: number, maxHubs: number): number {
  return Math.max(1, Math.min(maxHubs, Math.ceil(watchers / Math.max(1, perHub))));
}

/** A shard below `hubs`, uniformly. */
export function pickShard(hubs: number, random: () => number = Math.random): number {
  return Math.min(hubs - 1, Math.floor(random() * Math.max(1, hubs)));
}

/** A hub count from a header or a request: a whole number ≥ 1, or null. */
export function parseHubs(v: string | null | undefined, maxHubs: number): number | null {
  if (v === null || v === undefined || !/^[0-9]{1,6}$/.test(v)) return null;
  const n = Number(v);
  return n >= 1 && n <= maxHubs ? n : null;
}

/**
 * The hub counts a Worker isolate has heard, per episode, each for `ttlMs`; at most `max` episodes
 * (the oldest entry goes first). Unknown or expired: 1 (shard 0, which every episode has).
 */
export class HubCounts {
  private readonly counts = new Map<string, { hubs: number; until: number }>();

  constructor(
    private readonly ttlMs = 10_000,
    private readonly max = 4096,
  ) {}

  get(id: string, now = Date.now()): number {
    const e = this.counts.get(id);
    if (!e) return 1;
    if (e.until < now) {
      this.counts.delete(id);
      return 1;
    }
    return e.hubs;
  }

  set(id: string, hubs: number, now = Date.now()): void {
    this.counts.delete(id); // re-inserted last: the Map's order is the eviction order
    this.counts.set(id, { hubs, until: now + this.ttlMs });
    if (this.counts.size > this.max) this.counts.delete(this.counts.keys().next().value!);
  }

  get size(): number {
    return this.counts.size;
  }
}
