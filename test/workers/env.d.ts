// Types for tests that run inside workerd (vitest-pool-workers): the Worker's Env
// (src/worker-env.d.ts, src/secrets.d.ts) plus the test-only binding, and the helpers of
// "cloudflare:test".
/// <reference types="@cloudflare/vitest-pool-workers/types" />
/// <reference path="../../src/worker-env.d.ts" />
/// <reference path="../../src/secrets.d.ts" />

declare namespace Cloudflare {
  interface Env {
    /** Test-only: serves the golden cases (test/fixtures/golden, plus GOLDEN_DIR's; GET / lists them). */
    GOLDEN: Fetcher;
    /** Test-only: serves test/fixtures/storage/<release>/<file>.json (storage an earlier release wrote). */
    STORAGE_FIXTURES: Fetcher;
  }
}

/** A file's text, as vite's `?raw` import gives it (test/workers/tokenizer.test.ts reads a fixture so). */
declare module "*?raw" {
  const text: string;
  export default text;
}
