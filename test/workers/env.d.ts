// Types for tests that run inside workerd (vitest-pool-workers):
// `env` / `exports` from "cloudflare:workers" and helpers from "cloudflare:test".
/// <reference types="@cloudflare/vitest-pool-workers/types" />

declare namespace Cloudflare {
  interface Env extends EpisodeRelayEnv {
    /** Test-only: serves the golden cases (test/fixtures/golden, plus GOLDEN_DIR's; GET / lists them). */
    GOLDEN: Fetcher;
  }
  interface GlobalProps {
    mainModule: typeof import("../../src/index.js");
    durableNamespaces: "Episode" | "EpisodeIndex";
  }
}

type EpisodeRelayEnv = import("../../src/env.js").Env;
