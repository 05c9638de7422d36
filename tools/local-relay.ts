// Start the relay locally for tools, Node-side tests and benchmarks: the Worker bundled by
// wrangler (the same build `wrangler deploy` ships), run by Miniflare's API on a free loopback
// port, with in-memory Durable Object storage (nothing leaks between runs), and the dashboard's
// static assets (dashboard/dist, routed as wrangler.toml `[assets]` says).
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Log, LogLevel, Miniflare, type WorkerOptions } from "miniflare";
import { unstable_getMiniflareWorkerOptions } from "wrangler";
import { buildDashboard } from "../scripts/build-dashboard.mjs";
import { QUIET_ENV } from "../scripts/quiet-env.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

export interface LocalRelay {
  /** Base URL, e.g. http://127.0.0.1:40123 */
  url: string;
  mf: Miniflare;
  stop(): Promise<void>;
}

let bundleDir: string | null = null;

/** Bundle src/index.ts once per process with `wrangler deploy --dry-run` (it needs dashboard/dist). */
export function bundle(): string {
  if (bundleDir) return join(bundleDir, "index.js");
  if (!existsSync(join(root, "dashboard", "dist", "index.html"))) {
    throw new Error("dashboard/dist is missing: run `npm run build:dashboard` (startRelay builds it)");
  }
  bundleDir = mkdtempSync(join(tmpdir(), "episode-relay-bundle-"));
  execFileSync(join(root, "node_modules", ".bin", "wrangler"), ["deploy", "--dry-run", "--outdir", bundleDir, "--config", join(root, "wrangler.toml")], {
    cwd: root,
    env: { ...process.env, ...QUIET_ENV },
    stdio: ["ignore", "ignore", "pipe"],
  });
  process.once("exit", () => rmSync(bundleDir!, { recursive: true, force: true }));
  return join(bundleDir, "index.js");
}

/** `[vars]` of wrangler.toml (flat key = "string" lines). */
function wranglerVars(): Record<string, string> {
  const toml = readFileSync(join(root, "wrangler.toml"), "utf8");
  const section = toml.split(/^\[vars\]\s*$/m)[1]?.split(/^\[/m)[0] ?? "";
  const vars: Record<string, string> = {};
  for (const m of section.matchAll(/^([A-Z0-9_]+)\s*=\s*"([^"]*)"/gm)) vars[m[1]!] = m[2]!;
  return vars;
}

/** The dashboard's asset options, as wrangler derives them from wrangler.toml `[assets]`. */
function assetOptions(): WorkerOptions["assets"] {
  return unstable_getMiniflareWorkerOptions(join(root, "wrangler.toml")).workerOptions.assets as WorkerOptions["assets"];
}

export interface RelayOptions {
  /** A fixed port (e.g. to restart a relay where clients expect it); default: a free one. */
  port?: number;
  /** Keep Durable Object storage in this directory (survives a restart); default: in memory. */
  persist?: string;
}

export async function startRelay(vars: Record<string, string> = {}, options: RelayOptions = {}): Promise<LocalRelay> {
  await buildDashboard({ ifMissing: true });
  const compatibilityDate = /compatibility_date\s*=\s*"([^"]+)"/.exec(readFileSync(join(root, "wrangler.toml"), "utf8"))![1]!;
  const mf = new Miniflare({
    modules: true,
    scriptPath: bundle(),
    modulesRoot: dirname(bundle()),
    compatibilityDate,
    durableObjects: {
      EPISODES: { className: "Episode", useSQLite: true },
      EPISODE_INDEX: { className: "EpisodeIndex", useSQLite: true },
      RUN_DIRECTORY: { className: "RunDirectory", useSQLite: true },
    },
    assets: assetOptions(),
    durableObjectsPersist: options.persist ?? false,
    bindings: { ...wranglerVars(), AUTH_OFF_ON_LOOPBACK: "true", ...vars },
    host: "127.0.0.1",
    port: options.port ?? 0,
    cf: false,
    log: new Log(LogLevel.WARN),
  });
  const url = (await mf.ready).toString().replace(/\/$/, "");
  return { url, mf, stop: () => mf.dispose() };
}
