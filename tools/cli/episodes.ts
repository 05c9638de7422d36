// `episode-relay episodes --run R URL [--status S] [--task T] [--stop S] [--truncated|--not-truncated]
// [--timed-out|--not-timed-out] [--errored|--no-error] [--reward KEY:MIN..MAX]... [--min-turns N] [--min-tokens N]
// [--kind train|eval] [--env E] [--step N|MIN..MAX] [--policy-version N] [--flag RULE] [--flagged|--not-flagged]
// [--sort updated|reward|step] [--limit N] [--json] [--token T]`: run R's episodes that pass the
// filters (`GET /v1/runs/{run}/episodes`), one line each: id, status, kind and step, reward, turns,
// tokens, task, stop condition (truncated as the trainer counts it, timed out) (and error), or with --json one JSON line each as the relay lists it. Every page is
// followed to the end (a short page with a cursor is not the end), or until --limit episodes.
// The filters are read as `export` reads them (filter-flags.ts).
import {
  type EpisodeSort,
  type IndexEntry,
  type IndexStatus,
  listEpisodes,
  type RowFilter,
} from "../../clients/typescript/episodes.js";
import { INDEX_STATUSES } from "../../src/protocol/index.js";
import { parseOptions, UsageError } from "../parse-options.js";
import { FILTER_OPTIONS, filterFromFlags } from "./filter-flags.js";
import { clip, num, stopText, table } from "./groups.js";
import { CLI_HINTS } from "./hints.js";

const SORTS = { updated: true, reward: true, step: true } as const satisfies Record<EpisodeSort, true>;
export const EPISODE_SORTS = Object.keys(SORTS) as EpisodeSort[];

/** Episodes per request (the relay's maximum). */
const PAGE = 500;

export interface EpisodesArgs {
  /** The relay's base URL as given (parseBase checks it). */
  url: string;
  run: string;
  token?: string;
  status?: IndexStatus;
  filter: RowFilter;
  sort?: EpisodeSort;
  /** At most this many episodes (all when absent). */
  limit?: number;
  json: boolean;
}

/** `episodes`' command line (after the command); throws UsageError. */
export function parseEpisodesArgs(argv: string[]): EpisodesArgs {
  const { values: o, positionals } = parseOptions({
    args: argv,
    options: {
      run: { type: "string" },
      token: { type: "string" },
      status: { type: "string" },
      ...FILTER_OPTIONS,
      sort: { type: "string" },
      limit: { type: "string" },
      json: { type: "boolean", default: false },
    },
    allowPositionals: true,
  });
  if (positionals.length !== 1)
    throw new UsageError(
      positionals.length === 0 ? "the relay's URL is required" : `one URL, got ${positionals.join(" ")}`,
    );
  if (o.run === undefined) throw new UsageError("--run R is required");
  const status = o.status as IndexStatus | undefined;
  if (status !== undefined && !INDEX_STATUSES.includes(status))
    throw new UsageError(`--status: expected one of ${INDEX_STATUSES.join(", ")}, got ${JSON.stringify(o.status)}`);
  const sort = o.sort as EpisodeSort | undefined;
  if (sort !== undefined && !EPISODE_SORTS.includes(sort))
    throw new UsageError(`--sort: expected one of ${EPISODE_SORTS.join(", ")}, got ${JSON.stringify(o.sort)}`);
  let limit: number | undefined;
  if (o.limit !== undefined) {
    limit = /^\d{1,9}$/.test(o.limit) ? Number(o.limit) : 0;
    if (limit < 1) throw new UsageError(`--limit: expected a whole number from 1, got ${JSON.stringify(o.limit)}`);
  }
  const filter = filterFromFlags(o);
  return { url: positionals[0]!, run: o.run, token: o.token, status, filter, sort, limit, json: o.json };
}

/** Lists the episodes (text or JSON lines); 0 when done. Refusals and failures throw. */
export async function episodes(base: string, a: EpisodesArgs): Promise<number> {
  const pageSize = Math.min(a.limit ?? PAGE, PAGE);
  const found: IndexEntry[] = [];
  let count = 0;
  let stopped = false;
  for await (const e of listEpisodes(base, a.run, {
    token: a.token,
    status: a.status,
    filter: a.filter,
    sort: a.sort,
    limit: pageSize,
    hints: CLI_HINTS,
  })) {
    if (a.json) process.stdout.write(`${JSON.stringify(e)}\n`);
    else found.push(e);
    if (a.limit !== undefined && ++count >= a.limit) {
      stopped = true;
      break;
    }
  }
  if (a.json) return 0;
  const more = stopped ? ` (stopped at --limit ${a.limit})` : "";
  console.log(`run ${a.run}: ${found.length} episode(s)${more}`);
  if (found.length === 0) return 0;
  const head = ["id", "status", "kind", "step", "reward", "turns", "tokens", "task", "stop", "error"];
  const rows = found.map((e) => [
    e.id,
    e.status,
    e.kind ?? "-",
    e.step === null ? "-" : String(e.step),
    e.reward === null ? "-" : num(e.reward),
    e.turns === null || e.turns === undefined ? "-" : String(e.turns),
    String(e.tokens),
    clip(e.task ?? "-", 32),
    stopText(e),
    e.error === null ? "" : clip(e.error, 40),
  ]);
  console.log("");
  for (const line of table(head, rows, new Set([3, 4, 5, 6]))) console.log(line);
  return 0;
}
