#!/usr/bin/env node
// `episode-relay` (npx episode-relay …, or npm run cli -- …): tail, push, get, groups, episodes, export, tokenizer,
// token.
//
// Each command's module is imported when that command runs: loading them all up front cost every
// invocation (a --help too) about 0.4 CPU-s more than bare node.
import { parseOptions, UsageError } from "../parse-options.js";
import { parseBase, parseTarget } from "./target.js";

const USAGE = `usage: episode-relay <command> ...
  tail URL/ID [--token T] [--routing] [--wait S] [--json]
                                                 follow an episode from its start, then live (exits when the run
                                                 ends; gives up after S seconds, default 30, if the relay never
                                                 answers); --json: one JSON object a line
  tail --run R URL [--token T] [--json]          follow every rollout of run R: a line per turn (rollout, step,
                                                 group), then its reward when it ends (until Ctrl-C)
  push FILE URL/ID [--fast] [--dispatch JSON] [--token T]
                                                 replay a golden case or a JSON-lines recording into a relay;
                                                 --dispatch: the rollout's identity in the trainer, e.g.
                                                 '{"kind":"train","step":3,"group":"g1","policy_version":2}'
  get URL/ID [--json] [--token T] [-o FILE]      fetch the episode (msgpack, or --json)
  get --run R --out DIR URL [--json] [--token T] every finished episode of run R into DIR/<id>.msgpack (or .json);
                                                 a second call resumes after the last one written (DIR/.cursor)
  groups --run R URL [--sort spread|size|task] [--json] [--token T]
                                                 run R's groups (rollouts sharing the reply head's group.id): the
                                                 zero-variance share and per group its size, reward mean±std and
                                                 spread (max − min of its finished rollouts' rewards: the learning
                                                 signal, 0 when all are equal); --sort spread: largest first
  groups --run R --group G URL [--json] [--token T]
                                                 the group's rollouts, best reward first, with their advantages
  episodes --run R URL [--status S] [--task T] [--stop S] [--truncated|--not-truncated]
           [--timed-out|--not-timed-out] [--errored|--no-error]
           [--reward KEY:MIN..MAX]... [--min-turns N] [--min-tokens N] [--kind train|eval] [--env E]
           [--step N|MIN..MAX] [--policy-version N] [--flag RULE]
           [--flagged|--not-flagged] [--sort updated|reward|step] [--limit N] [--json] [--token T]
                                                 run R's episodes that pass every filter given (--reward: up to 4
                                                 keys, either bound may be left out, e.g. correct:1.. or format:..0.5):
                                                 --truncated: as the trainer counts it; --timed-out: is_timeout;
                                                 id, status, kind, step, reward, turns, tokens, task, stop; --json:
                                                 JSON lines; --limit N: the first N only
  export --run R --format parquet|jsonl --out PATH URL [--per rollout|branch] [--q QUERY] [--batch N]
         [the filters of episodes] [--flag RULE] [--flagged|--not-flagged] [--token T]
                                                 run R's finished episodes (or those passing the filters, or
                                                 matching --q) into a notebook's files: jsonl, one line per
                                                 episode {id, cursor, row, episode} (the exact JSON view);
                                                 parquet, a directory of part files, one row per rollout (or
                                                 branch). A second call resumes where the last one stopped
  tokenizer --run R FILE URL [--token T]         keep the model's tokenizer.json (FILE, or a folder holding one) for
                                                 run R, so the dashboard shows its token ids as text (a producer
                                                 token covering R:*); the same bytes again change nothing
  token --role R --episode E [--ttl 1h]          mint a token (RELAY_SECRET from the environment or .dev.vars)
URL/ID is the relay's base URL followed by the episode id, e.g. http://127.0.0.1:8787/run-42:ep-7;
URL alone is the base URL. A run is an episode id's part before its last ':' (run-42), ~ for ids without one.
RELAY_TOKEN in the environment is used when --token is not given. A token is sent over plain http:// only to
this machine, unless EPISODE_RELAY_ALLOW_HTTP=1 (e.g. inside a private network); use https:// otherwise.`;

/** The options of tail, push, get, groups and tokenizer: each command takes all of them, and ignores those it has no use for. */
function options(argv: string[]) {
  const { values, positionals, tokens } = parseOptions({
    args: argv,
    options: {
      token: { type: "string" },
      routing: { type: "boolean", default: false },
      wait: { type: "string" },
      fast: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      output: { type: "string", short: "o" },
      run: { type: "string" },
      out: { type: "string" },
      sort: { type: "string" },
      group: { type: "string" },
      dispatch: { type: "string" },
    },
    allowPositionals: true,
    tokens: true,
  });
  // `-o=FILE` means FILE, as `--output=FILE` does (parseArgs reads a short option's `=FILE` as its value)
  let output: string | undefined;
  for (const t of tokens) {
    if (t.kind === "option" && t.name === "output")
      output = t.rawName === "-o" && t.inlineValue && t.value.startsWith("=") ? t.value.slice(1) : t.value;
  }
  return { ...values, output, positional: positionals };
}

function usage(command: string, message: string): number {
  console.error(`episode-relay ${command}: ${message}\n\n${USAGE}`);
  return 2;
}

async function main(argv: string[]): Promise<number> {
  const [command, ...rest] = argv;
  if (command === "token") {
    process.argv = [process.argv[0]!, "token", ...rest];
    await import("../token.js");
    return 0;
  }
  // `help`, `--help`, and `COMMAND --help` (a user asking about one command gets the usage, not an error)
  if (
    command === "-h" ||
    command === "--help" ||
    command === "help" ||
    rest.includes("--help") ||
    rest.includes("-h")
  ) {
    console.log(USAGE);
    return 0;
  }
  if (command === "episodes") return await episodesMain(rest);
  if (command === "export") return await exportMain(rest);
  if (
    command !== "tail" &&
    command !== "push" &&
    command !== "get" &&
    command !== "groups" &&
    command !== "tokenizer"
  ) {
    console.error(
      `${command === undefined ? "episode-relay: no command given" : `episode-relay: unknown command ${JSON.stringify(command)}`}\n\n${USAGE}`,
    );
    return 2;
  }
  let o: ReturnType<typeof options>;
  try {
    o = options(rest);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    return usage(command, e.message);
  }
  const { positional } = o;
  const token = o.token ?? process.env.RELAY_TOKEN;
  try {
    switch (command) {
      case "tail": {
        if (positional.length !== 1) break;
        if (o.wait !== undefined && !/^[0-9]+(\.[0-9]+)?$/.test(o.wait))
          return usage(command, `--wait: expected seconds, got ${JSON.stringify(o.wait)}`);
        if (o.run !== undefined) {
          if (o.routing) return usage(command, "--run follows turns and rewards: it has no use for --routing");
          const { tailRun } = await import("./tail-run.js");
          return await tailRun(parseBase(positional[0]!), o.run, {
            token,
            json: o.json,
            ...(o.wait === undefined ? {} : { giveUpMs: Number(o.wait) * 1000 }),
          });
        }
        const { tail } = await import("./tail.js");
        return await tail(parseTarget(positional[0]!), {
          token,
          routing: o.routing,
          json: o.json,
          ...(o.wait === undefined ? {} : { giveUpMs: Number(o.wait) * 1000 }),
        });
      }
      case "push": {
        if (positional.length !== 2) break;
        const { push } = await import("./push.js");
        return await push(positional[0]!, parseTarget(positional[1]!), { token, fast: o.fast, dispatch: o.dispatch });
      }
      case "get": {
        if (positional.length !== 1) break;
        const { get, getRun } = await import("./get.js");
        if (o.run !== undefined) {
          if (o.out === undefined || o.output !== undefined) return usage(command, "--run needs --out DIR (and no -o)");
          return await getRun(parseBase(positional[0]!), o.run, { out: o.out, token, json: o.json });
        }
        if (o.out !== undefined) return usage(command, "--out DIR goes with --run R (one episode: -o FILE)");
        return await get(parseTarget(positional[0]!), { token, json: o.json, output: o.output });
      }
      case "groups": {
        if (positional.length !== 1) break;
        if (o.run === undefined) return usage(command, "--run R is required");
        const { GROUP_SORTS, group, groups } = await import("./groups.js");
        if (o.group !== undefined) {
          if (o.sort !== undefined)
            return usage(command, "--sort lists the run's groups; with --group G the rollouts come best reward first");
          return await group(parseBase(positional[0]!), o.run, o.group, { token, json: o.json });
        }
        const sort = o.sort as (typeof GROUP_SORTS)[number] | undefined;
        if (sort !== undefined && !GROUP_SORTS.includes(sort))
          return usage(command, `--sort: expected one of ${GROUP_SORTS.join(", ")}, got ${JSON.stringify(o.sort)}`);
        return await groups(parseBase(positional[0]!), o.run, { token, sort, json: o.json });
      }
      case "tokenizer": {
        if (positional.length !== 2) break;
        if (o.run === undefined) return usage(command, "--run R is required");
        const { putTokenizer } = await import("./tokenizer.js");
        return await putTokenizer(parseBase(positional[1]!), o.run, positional[0]!, { token });
      }
    }
  } catch (e) {
    console.error(`episode-relay ${command}: ${(e as Error).message}`);
    return 1;
  }
  console.error(USAGE);
  return 2;
}

/** `episodes` reads its own options (its filters mean nothing to the other commands). */
async function episodesMain(argv: string[]): Promise<number> {
  const { episodes, parseEpisodesArgs } = await import("./episodes.js");
  let a: ReturnType<typeof parseEpisodesArgs>;
  try {
    a = parseEpisodesArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    return usage("episodes", e.message);
  }
  try {
    return await episodes(parseBase(a.url), { ...a, token: a.token ?? process.env.RELAY_TOKEN });
  } catch (e) {
    console.error(`episode-relay episodes: ${(e as Error).message}`);
    return 1;
  }
}

/** `export` reads its own options (the filters, the format and the search). */
async function exportMain(argv: string[]): Promise<number> {
  const { parseExportArgs, runExport } = await import("./export.js");
  let a: ReturnType<typeof parseExportArgs>;
  try {
    a = parseExportArgs(argv);
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    return usage("export", e.message);
  }
  try {
    return await runExport({ ...a, url: parseBase(a.url), token: a.token ?? process.env.RELAY_TOKEN });
  } catch (e) {
    console.error(`episode-relay export: ${(e as Error).message}`);
    return 1;
  }
}

process.exitCode = await main(process.argv.slice(2));
