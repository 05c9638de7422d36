// Runs before each test file (setupFiles in vitest.workers.config.ts). The files share one runtime
// and its storage (isolate: false), and tests name what they write afresh; the archive gate is the
// one object every file shares by its fixed name. A file that stopped its objects mid-step (as a
// crash test does) leaves a lease held for LEASE_MS and waiters nobody will wake, which would keep
// the next file's archive steps waiting: each file starts with the gate empty, as on a runtime of its own.
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { archiveGateName } from "../../src/objects/archive/gate.js";

await runInDurableObject(env.ARCHIVE_GATE.getByName(archiveGateName("Episode")), (_i, state) => {
  const sql = state.storage.sql;
  const tables = sql.exec<{ name: string }>("SELECT name FROM sqlite_master WHERE type = 'table'").toArray();
  for (const { name } of tables) if (name === "leases" || name === "waiters") sql.exec(`DELETE FROM ${name}`);
});
