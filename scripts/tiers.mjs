// The relay as two runtime processes, the way `npm run start:tiers`, the benches and some tests run it
// locally. On Cloudflare every Durable Object has a thread of its own; a local workerd process
// runs all of its objects on one, so a watcher storm on a hub there would land on the episodes'
// thread. Here the episode tier (the Episode, EpisodeIndex and RunDirectory objects, and the
// dashboard) and the hub tier (ViewerHub objects) are two Workers in two processes, built from the
// same code and config (wrangler.toml), each binding the other's objects by script name through
// the local dev registry; scripts/router.mjs gives them one address. Deployed, it is one Worker.
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { experimental_readRawConfig } from "wrangler";

/** Durable Object classes that live on the hub tier; every other class is on the episode tier. */
export const HUB_CLASSES = Object.freeze(["ViewerHub"]);
/** The hub tier's Worker name: the episode tier keeps wrangler.toml's (its local storage stays where it was). */
export const HUB_SUFFIX = "-hubs";

/**
 * wrangler.toml as two Worker configs (JSON, absolute paths): each binds its own classes locally
 * and the other tier's by `script_name`; only the episode tier serves the dashboard.
 * @param {string} root
 */
export function tierConfigs(root) {
  const { rawConfig } = experimental_readRawConfig({ config: join(root, "wrangler.toml") });
  /** @type {any} */
  const base = JSON.parse(JSON.stringify(rawConfig));
  const episodes = String(base.name);
  const hubs = `${episodes}${HUB_SUFFIX}`;
  /** @param {boolean} hubTier */
  const make = (hubTier) => {
    const bindings = (base.durable_objects?.bindings ?? []).map((/** @type {any} */ b) => {
      const onHubTier = HUB_CLASSES.includes(b.class_name);
      return onHubTier === hubTier ? b : { ...b, script_name: onHubTier ? hubs : episodes };
    });
    const migrations = (base.migrations ?? []).map((/** @type {any} */ m) => ({
      ...m,
      new_sqlite_classes: (m.new_sqlite_classes ?? []).filter(
        (/** @type {string} */ c) => HUB_CLASSES.includes(c) === hubTier,
      ),
    }));
    /** @type {any} */
    const c = {
      ...base,
      name: hubTier ? hubs : episodes,
      main: resolve(root, base.main),
      durable_objects: { bindings },
      migrations,
    };
    if (hubTier) delete c.assets;
    else if (c.assets) c.assets = { ...c.assets, directory: resolve(root, c.assets.directory) };
    return c;
  };
  return { names: { episodes, hubs }, episodes: make(false), hubs: make(true) };
}

/**
 * Write both configs to `dir` (for `wrangler dev -c`).
 * @param {string} root
 * @param {string} dir
 */
export function writeTierConfigs(root, dir) {
  const t = tierConfigs(root);
  mkdirSync(dir, { recursive: true });
  const episodes = join(dir, "episodes.json");
  const hubs = join(dir, "hubs.json");
  writeFileSync(episodes, JSON.stringify(t.episodes, null, 2));
  writeFileSync(hubs, JSON.stringify(t.hubs, null, 2));
  return { names: t.names, episodes, hubs };
}
