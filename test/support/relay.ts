// Node-side tests that need a running relay: started before a file's tests.
import { afterAll, beforeAll } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";

/**
 * The suite's relay with wrangler.toml's vars: started by the first file that asks for it and kept
 * for the files after it, which run one after another in the same process (one relay per worker
 * process: vitest.node.config.ts, isolate: false); a relay start costs a second or two of CPU
 * (Miniflare, workerd, the bundle's load), once per file before. Its runtime goes when the process
 * exits, however it ends: its watchdog (scripts/relay.mjs) kills it. Miniflare's own exit hook was
 * not enough: with the suite's two relays alive at the end, one workerd outlived the process.
 */
let suiteRelay: Promise<LocalRelay> | undefined;

/**
 * A relay for this file; read `.url` inside tests. Without vars, the suite's relay (above): its
 * state outlives the file, so a file using it names its runs and episodes as no other file does
 * (afresh, or a name its docs snippet fixes) and counts only what it wrote. With vars (a secret, a
 * limit), a relay of the file's own, stopped after its tests.
 */
export function useRelay(vars: Record<string, string> = {}): { readonly url: string } {
  const own = Object.keys(vars).length > 0;
  let relay: LocalRelay | undefined;
  beforeAll(async () => {
    if (own) {
      relay = await startRelay({ vars });
      return;
    }
    suiteRelay ??= startRelay({ watchdog: true });
    relay = await suiteRelay.catch((e: unknown) => {
      suiteRelay = undefined; // the next file tries again
      throw e;
    });
  }, 120_000);
  afterAll(() => (own ? relay?.stop() : undefined));
  return {
    get url() {
      if (!relay) throw new Error("relay not started");
      return relay.url;
    },
  };
}

/** The secret of the suite's relay with auth on (useAuthedRelay): files mint their tokens with it. */
export const AUTHED_SECRET = "suite-authed-secret-00112233445566778899aabbccddeeff";
let authedRelay: Promise<LocalRelay> | undefined;

/**
 * The suite's relay with auth on (RELAY_SECRET = AUTHED_SECRET and wrangler.toml's other vars):
 * like the suite's relay above, started by the first file that asks and kept for the others, its
 * state shared (names afresh, count only what the file wrote). A relay start is seconds of CPU;
 * eight files each started one of their own to have a relay that wants a token.
 */
export function useAuthedRelay(): { readonly url: string; readonly secret: string } {
  let relay: LocalRelay | undefined;
  beforeAll(async () => {
    authedRelay ??= startRelay({ vars: { RELAY_SECRET: AUTHED_SECRET }, watchdog: true });
    relay = await authedRelay.catch((e: unknown) => {
      authedRelay = undefined; // the next file tries again
      throw e;
    });
  }, 120_000);
  return {
    get url() {
      if (!relay) throw new Error("relay not started");
      return relay.url;
    },
    secret: AUTHED_SECRET,
  };
}

/**
 * Wait until `cond()` holds, polling every `everyMs`; throws after `ms`. A `cond` that costs CPU
 * (a scan of /proc: ~10 ms) takes a longer `everyMs`, or the wait takes a core from what it waits on.
 */
export async function until(cond: () => boolean, ms = 20_000, what = "condition", everyMs = 10): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
