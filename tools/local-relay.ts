// Start the relay locally for tools, Node-side tests and benchmarks: the Worker bundled by
// wrangler (the same build `wrangler deploy` ships), run by Miniflare's API on a free loopback
// port, with in-memory Durable Object storage (nothing leaks between runs), and the dashboard's
// static assets (dashboard/dist, routed as wrangler.toml `[assets]` says). With `tiers`, the hub
// tier runs in a process of its own, as under `npm run start:tiers`.
import { fork } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare, type WorkerOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { buildDashboard } from "../scripts/build-dashboard.mjs";
import { HUB_CLASSES, tierConfigs } from "../scripts/tiers.mjs";
import { bundleWorker, sharedBundle } from "../scripts/worker-bundle.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

export interface LocalRelay {
  /** Base URL, e.g. http://127.0.0.1:40123 */
  url: string;
  /** The Miniflare running the episode tier (all of it, unless `tiers`). */
  mf: Miniflare;
  /** Every Miniflare (each a workerd process): one, or the episode tier and the hub tier. */
  runtimes: Miniflare[];
  /**
   * The hub tier's own address (tiers only), for watch upgrades that skip the router: a bench with
   * more sockets than the router's file descriptors allow (two per watcher) connects there.
   */
  watchUrl?: string;
  /** Restart the hub tier's runtime (tiers only): every hub restarts, every watcher socket drops. */
  restartHubs?(): Promise<void>;
  stop(): Promise<void>;
}

let bundleDir: string | null = null;

/**
 * The Worker's bundle (src/worker/index.ts by `wrangler deploy --dry-run`, which needs
 * dashboard/dist), made once per process: the one a test run shares (RELAY_BUNDLE_DIR,
 * scripts/worker-bundle.mjs) once `startRelay` has found it, else one of this process's own.
 */
export function bundle(): string {
  if (bundleDir) return join(bundleDir, "index.js");
  const dir = bundleWorker();
  bundleDir = dir;
  process.once("exit", () => rmSync(dir, { recursive: true, force: true }));
  return join(dir, "index.js");
}

/** `bundle()`, from the run's shared bundle when there is one (the first relay of the run makes it). */
async function relayBundle(): Promise<string> {
  if (!bundleDir) bundleDir = await sharedBundle();
  return bundle();
}

/** The bundle's Worker options for Miniflare, as wrangler derives them from wrangler.toml. */
function workerOptions(): ReturnType<typeof unstable_getMiniflareWorkerOptions>["workerOptions"] {
  return unstable_getMiniflareWorkerOptions(join(root, "wrangler.toml")).workerOptions;
}

/** The relay's compatibility date and flags (wrangler.toml), for other Workers measured beside it. */
export function relayCompat(): { date: string; flags: string[] } {
  const w = workerOptions();
  return { date: w.compatibilityDate ?? "", flags: [...(w.compatibilityFlags ?? [])] };
}

export interface RelayOptions {
  /** A fixed port (e.g. to restart a relay where clients expect it); default: a free one. */
  port?: number;
  /** Keep Durable Object storage in this directory (survives a restart); default: in memory. */
  persist?: string;
  /**
   * Run the hub tier in a runtime process of its own, as `npm run start:tiers` does (scripts/tiers.mjs):
   * the episode tier and the hub tier, each a Miniflare (a workerd process), bound through a dev
   * registry, behind scripts/router.mjs in a process of its own. Watchers reach the hub tier's
   * Worker through a direct socket (no Miniflare entry Worker in between), so its
   * `no_web_socket_compression` flag holds as on Cloudflare. Default: one process.
   */
  tiers?: boolean;
  /**
   * The bundled Worker to run (an index.js beside its modules) instead of this tree's `bundle()`: another
   * build of the relay on the same persisted state, as a deploy hands over (test/node/deploy-handover.test.ts).
   */
  script?: string;
}

export async function startRelay(vars: Record<string, string> = {}, options: RelayOptions = {}): Promise<LocalRelay> {
  await buildDashboard({ ifMissing: true });
  const w = workerOptions();
  const script = options.script ?? (await relayBundle());
  const shared = {
    modules: true as const,
    scriptPath: script,
    modulesRoot: dirname(script),
    compatibilityDate: w.compatibilityDate,
    compatibilityFlags: w.compatibilityFlags,
    // one archive step at a time per object class: a local runtime runs every object on one thread
    // (src/objects/archive/gate.ts)
    bindings: { ...(w.bindings as Record<string, string>), AUTH_OFF_ON_LOOPBACK: "true", ARCHIVE_SLOTS: "1", ...vars },
    durableObjectsPersist: options.persist ?? false,
    // the archive of finished episodes (wrangler.toml [[r2_buckets]]), kept beside the objects when persisted
    r2Buckets: w.r2Buckets as WorkerOptions["r2Buckets"],
    r2Persist: options.persist ? join(options.persist, "r2") : false,
    host: "127.0.0.1",
    cf: false,
    inspectorPort: 0,
    log: new Log(LogLevel.WARN),
  };
  const durableObjects = w.durableObjects as Record<string, { className: string; useSQLite?: boolean }>;
  if (!options.tiers) {
    const mf = new Miniflare({
      ...shared,
      durableObjects,
      assets: w.assets as WorkerOptions["assets"],
      port: options.port ?? 0,
    });
    const url = (await mf.ready).toString().replace(/\/$/, "");
    return { url, mf, runtimes: [mf], stop: () => mf.dispose() };
  }
  const t = tierConfigs(root);
  const registry = mkdtempSync(join(tmpdir(), "episode-relay-registry-"));
  const tier = (hubTier: boolean) =>
    Object.fromEntries(
      Object.entries(durableObjects).map(([name, d]) => [
        name,
        HUB_CLASSES.includes(d.className) === hubTier
          ? d
          : { ...d, scriptName: hubTier ? t.names.episodes : t.names.hubs },
      ]),
    );
  const episodes = new Miniflare({
    ...shared,
    name: t.names.episodes,
    durableObjects: tier(false),
    assets: w.assets as WorkerOptions["assets"],
    port: 0,
    unsafeDevRegistryPath: registry,
  });
  const hubOptions = {
    ...shared,
    // two runtimes must not share one directory's files
    durableObjectsPersist: options.persist ? join(options.persist, "hub-tier") : false,
    name: t.names.hubs,
    durableObjects: tier(true),
    port: 0,
    unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
    unsafeDevRegistryPath: registry,
  };
  const hubs = new Miniflare(hubOptions);
  const rest = await episodes.ready;
  await hubs.ready;
  const direct = await hubs.unsafeGetDirectURL(t.names.hubs);
  // a restart keeps the hub tier where the router sends watchers
  hubOptions.unsafeDirectSockets = [{ host: "127.0.0.1", port: Number(direct.port) }];
  const router = await startRouterProcess({
    port: options.port ?? 0,
    rest: { host: rest.hostname, port: Number(rest.port) },
    watch: { host: direct.hostname, port: Number(direct.port) },
  });
  return {
    url: `http://127.0.0.1:${router.port}`,
    mf: episodes,
    runtimes: [episodes, hubs],
    watchUrl: direct.toString().replace(/\/$/, ""),
    restartHubs: async () => {
      await hubs.setOptions(hubOptions);
      await hubs.ready;
    },
    stop: async () => {
      await router.stop();
      await Promise.all([episodes.dispose(), hubs.dispose()]);
      rmSync(registry, { recursive: true, force: true });
    },
  };
}

/** scripts/router.mjs in a child process (its own thread and file descriptors, not this process's). */
async function startRouterProcess(options: {
  port: number;
  rest: { host: string; port: number };
  watch: { host: string; port: number };
}): Promise<{ port: number; stop(): Promise<void> }> {
  const child = fork(fileURLToPath(new URL("../scripts/router.mjs", import.meta.url)), [], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const port = await new Promise<number>((resolve, reject) => {
    child.once("message", (m) => resolve((m as { port: number }).port));
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`the router exited (${code})`)));
    child.send(options);
  });
  return {
    port,
    stop: async () => {
      if (child.exitCode !== null) return;
      const exited = new Promise<void>((r) => child.once("exit", () => r()));
      child.send("stop");
      const t = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(t);
    },
  };
}
