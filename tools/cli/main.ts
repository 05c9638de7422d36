#!/usr/bin/env node
// `episode-relay` (npx episode-relay …, or npm run cli -- …): tail, push, get, token.
import { get } from "./get.js";
import { push } from "./push.js";
import { tail } from "./tail.js";
import { parseTarget } from "./target.js";

const USAGE = `usage: episode-relay <command> ...
  tail URL/ID [--token T] [--routing]            follow an episode live (exits when the run ends)
  push FILE URL/ID [--fast] [--token T]          replay a golden case or a JSON-lines recording into a relay
  get URL/ID [--json] [--token T] [-o FILE]      fetch the episode (msgpack, or --json)
  token --role R --episode E [--ttl 1h]          mint a token (RELAY_SECRET from the environment or .dev.vars)
URL/ID is the relay's base URL followed by the episode id, e.g. http://127.0.0.1:8787/run-42:ep-7.
RELAY_TOKEN in the environment is used when --token is not given.`;

function options(argv: string[]): { positional: string[]; flags: Map<string, string | true> } {
  const positional: string[] = [];
  const flags = new Map<string, string | true>();
  const valued = new Set(["--token", "-o", "--output"]);
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a.startsWith("-")) {
      const eq = a.indexOf("=");
      if (eq > 0) flags.set(a.slice(0, eq), a.slice(eq + 1));
      else if (valued.has(a)) flags.set(a, argv[++i] ?? "");
      else flags.set(a, true);
    } else positional.push(a);
  }
  return { positional, flags };
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "token") {
    process.argv = [process.argv[0]!, "token", ...rest];
    await import("../token.js");
    return 0;
  }
  const { positional, flags } = options(rest);
  const str = (k: string) => (typeof flags.get(k) === "string" ? (flags.get(k) as string) : undefined);
  const token = str("--token") ?? process.env.RELAY_TOKEN;
  try {
    switch (command) {
      case "tail":
        if (positional.length !== 1) break;
        return await tail(parseTarget(positional[0]!), { token, routing: flags.has("--routing") });
      case "push":
        if (positional.length !== 2) break;
        return await push(positional[0]!, parseTarget(positional[1]!), { token, fast: flags.has("--fast") });
      case "get":
        if (positional.length !== 1) break;
        return await get(parseTarget(positional[0]!), { token, json: flags.has("--json"), output: str("-o") ?? str("--output") });
      case "-h":
      case "--help":
      case "help":
        console.log(USAGE);
        return 0;
    }
  } catch (e) {
    console.error(`episode-relay ${command}: ${(e as Error).message}`);
    return 1;
  }
  console.error(USAGE);
  return 2;
}

process.exitCode = await main(process.argv.slice(2));
