// Node-side tests that need a running relay: one per test file, started before its tests.
import { afterAll, beforeAll } from "vitest";
import { type LocalRelay, startRelay } from "../../scripts/relay.mjs";

/** Start a relay (with extra vars) for this file; read `.url` inside tests. */
export function useRelay(vars: Record<string, string> = {}): { readonly url: string } {
  let relay: LocalRelay | undefined;
  beforeAll(async () => {
    relay = await startRelay({ vars });
  }, 120_000);
  afterAll(() => relay?.stop());
  return {
    get url() {
      if (!relay) throw new Error("relay not started");
      return relay.url;
    },
  };
}

/** Wait until `cond()` holds, polling; throws after `ms`. */
export async function until(cond: () => boolean, ms = 20_000, what = "condition"): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
