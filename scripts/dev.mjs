#!/usr/bin/env node
// `npm start`: the relay on http://127.0.0.1:${PORT:-8787} as one plain `wrangler dev` session
// (wrangler.toml as it is: the Worker and every Durable Object in one workerd runtime), Durable
// Object state in .wrangler/state. wrangler's output is passed through as it is. Extra arguments
// go to wrangler (`--ip`, `--persist-to` are read here too).
//
// The session runs under scripts/supervisor.mjs: SIGINT or SIGTERM (to this process, or to `npm
// start`, which runs it with `exec`) stops it with nothing left behind; so does the `npm` above it
// being killed, or this process being killed (its watchdog); a runtime that dies is restarted, and
// that is said. A busy port is said before anything starts. The relay as two runtime processes, as
// production threads it, is `npm run start:tiers` (scripts/tiers-dev.mjs).
import { address, authArgs, ensurePortFree, localVarArgs, root, wrangler, wranglerVersion } from "./dev-args.mjs";
import { Supervisor } from "./supervisor.mjs";

const extra = process.argv.slice(2);
const a = address(extra);
await ensurePortFree(a.bare, a.port, "npm start");
const auth = authArgs(a.ip, a.where, "npm start");
console.error(
  `[dev] wrangler ${wranglerVersion} dev on ${a.where} (Durable Objects in ${a.persist}; offline: no metrics, no update check)`,
);
const supervisor = new Supervisor({
  label: "[dev]",
  sessions: [
    {
      name: "relay",
      title: "relay",
      command: wrangler,
      cwd: root,
      args: [
        "dev",
        "--port",
        String(a.port),
        "--ip",
        a.ip,
        "--persist-to",
        a.persist,
        "--show-interactive-dev-session=false",
        ...auth,
        ...localVarArgs(),
        ...extra,
      ],
      health: a.health,
    },
  ],
});
await supervisor.start();
