// `episode-relay groups --run R URL [--sort spread|size|task] [--json] [--token T]`: the run's
// groups (the rollouts sharing the reply head's `group.id`), the share of finished groups whose
// rewards do not vary (no learning signal), and a table: id, task, size, finished, the reward's
// mean±std, its spread (max − min over the finished rollouts: what `--sort spread` orders by), per reward key
// mean±std. `episode-relay groups --run R --group G URL [--json] [--token T]`:
// the group's rollouts, best reward first, with their advantage on the reward and per reward key. The
// reward is the trainer's (src/protocol/registry/rewards.ts: per rewarded trace Σ score × weight, the
// mean over those traces; per key the mean over the traces).
import {
  fetchGroup,
  fetchGroupsPage,
  type GroupDetail,
  type GroupSort,
  type GroupsPage,
  type RewardStats,
} from "../../clients/typescript/groups.js";
import { episodeReward, traceRewardsOf } from "../../src/protocol/index.js";
import { CLI_HINTS } from "./hints.js";

export const GROUP_SORTS: readonly GroupSort[] = ["spread", "size", "task"];

/** Every group of the run with the first page's numbers (the pages followed to the end). */
async function allGroups(
  base: string,
  run: string,
  opts: { token?: string; sort?: GroupSort },
): Promise<Omit<GroupsPage, "cursor">> {
  const first = await fetchGroupsPage(base, run, { token: opts.token, sort: opts.sort, hints: CLI_HINTS });
  const groups = [...first.groups];
  let cursor = first.cursor;
  while (cursor !== null) {
    const page = await fetchGroupsPage(base, run, { token: opts.token, sort: opts.sort, cursor, hints: CLI_HINTS });
    groups.push(...page.groups);
    if (page.cursor === cursor) throw new Error(`run ${run}: the relay answered the same cursor again`);
    cursor = page.cursor;
  }
  const { cursor: _last, ...numbers } = first;
  return { ...numbers, groups };
}

export async function groups(
  base: string,
  run: string,
  opts: { token?: string; sort?: GroupSort; json?: boolean },
): Promise<number> {
  const page = await allGroups(base, run, opts);
  if (opts.json) {
    process.stdout.write(`${JSON.stringify(page, null, 2)}\n`);
    return 0;
  }
  console.log(`run ${run}: ${page.groups_total} group(s), ${page.finished_groups} finished`);
  console.log(`zero-variance share: ${zeroVariance(page)}`);
  if (page.groups.length === 0) return 0;
  const keys = rewardKeys(page.groups.map((g) => g.rewards));
  const head = ["id", "task", "size", "finished", "reward mean±std", "spread", ...keys.map((k) => `${k} mean±std`)];
  const rows = page.groups.map((g) => [
    g.id,
    clip(g.task ?? "-", 24),
    String(g.size),
    String(g.finished),
    g.mean_reward === null || g.std_reward === null ? "-" : `${num(g.mean_reward)}±${num(g.std_reward)}`,
    g.spread === null ? "-" : num(g.spread),
    ...keys.map((k) => meanStd(g.rewards[k])),
  ]);
  console.log("");
  for (const line of table(head, rows, new Set([2, 3, 5]))) console.log(line);
  return 0;
}

export async function group(
  base: string,
  run: string,
  id: string,
  opts: { token?: string; json?: boolean },
): Promise<number> {
  const g = await fetchGroup(base, run, id, { token: opts.token, hints: CLI_HINTS });
  if (opts.json) {
    process.stdout.write(`${JSON.stringify(g, null, 2)}\n`);
    return 0;
  }
  for (const line of groupLines(run, g)) console.log(line);
  return 0;
}

/** The group's header lines, then one row per rollout. */
function groupLines(run: string, g: GroupDetail): string[] {
  const out = [`group ${g.id} of run ${run}: task ${g.task ?? "-"}`];
  out.push(
    `${g.size} rollout(s): ${g.finished} finished, ${g.failed} failed, ${g.live} live; spread ${g.spread === null ? "-" : num(g.spread)}`,
  );
  const keys = rewardKeys([g.rewards, ...g.rollouts.map((r) => r.key_advantages)]);
  out.push(
    `  reward: ${g.mean_reward === null || g.std_reward === null ? "-" : `mean ${num(g.mean_reward)} ± ${num(g.std_reward)}`} (per rewarded trace Σ score × weight, the mean over those traces)`,
  );
  for (const k of keys) {
    const s = g.rewards[k];
    out.push(`  ${k}: ${s ? `mean ${num(s.mean)} ± ${num(s.std)}, min ${num(s.min)}, max ${num(s.max)}` : "-"}`);
  }
  if (g.rollouts.length === 0) return out;
  const head = [
    "id",
    "status",
    "reward",
    "adv (norm)",
    ...keys.flatMap((k) => [k, `${k} adv (norm)`]),
    "turns",
    "calls",
    "tokens",
    "stop",
    "error",
  ];
  const rows = g.rollouts.map((r) => {
    const scores = new Map(episodeReward(traceRewardsOf(r)).scores);
    return [
      r.id,
      r.status,
      r.reward === null ? "-" : num(r.reward),
      advantage(r.advantage),
      ...keys.flatMap((k) => {
        const s = scores.get(k);
        return [s === undefined ? "-" : num(s), advantage(r.key_advantages[k])];
      }),
      r.turns === null ? "-" : String(r.turns),
      String(r.calls),
      String(r.tokens),
      stopText(r),
      r.error === null ? "" : clip(r.error, 40),
    ];
  });
  const right = new Set<number>([
    2,
    3,
    ...keys.flatMap((_, i) => [4 + 2 * i, 5 + 2 * i]),
    4 + 2 * keys.length,
    5 + 2 * keys.length,
  ]);
  out.push("");
  out.push(...table(head, rows, right));
  return out;
}

/** The zero-variance share in words: a percentage of the finished groups, or why there is none. */
function zeroVariance(p: Pick<GroupsPage, "zero_variance_groups" | "zero_variance_share" | "finished_groups">): string {
  if (p.zero_variance_share === null) return "- (no finished group yet)";
  return `${(p.zero_variance_share * 100).toFixed(1)}% (${p.zero_variance_groups} of ${p.finished_groups} finished group(s) have the same rewards in every rollout)`;
}

/** The reward keys of these maps, in order of first appearance. */
function rewardKeys(maps: Array<Record<string, unknown>>): string[] {
  const keys: string[] = [];
  for (const m of maps) for (const k of Object.keys(m ?? {})) if (!keys.includes(k)) keys.push(k);
  return keys;
}

/** An advantage and its normalised value ("-" for none). */
function advantage(a: { raw: number; normalized: number | null } | null | undefined): string {
  return a ? `${signed(a.raw)} (${a.normalized === null ? "-" : signed(a.normalized, 2)})` : "-";
}

function meanStd(s: RewardStats | undefined): string {
  return s ? `${num(s.mean)}±${num(s.std)}` : "-";
}

export function num(x: number, digits = 3): string {
  return Number.isFinite(x) ? x.toFixed(digits) : String(x);
}

/** With its sign; a value that rounds to zero is +0 (never -0.000). */
function signed(x: number, digits = 3): string {
  const s = num(x, digits);
  if (s.startsWith("-")) return Number(s) === 0 ? `+${s.slice(1)}` : s;
  return `+${s}`;
}

export function clip(s: string, width: number): string {
  const one = s.replace(/\s+/g, " ").trim();
  return one.length > width ? `${one.slice(0, width - 1)}…` : one;
}

/** Columns padded to their widest cell (those in `right` aligned right), two spaces apart. */
export function table(head: string[], rows: string[][], right: Set<number>): string[] {
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((c, i) => (right.has(i) ? c.padStart(widths[i]!) : c.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  return [line(head), ...rows.map(line)];
}

/** The stop condition, and whether the rollout was truncated (the trainer's is_truncated) or timed out (is_timeout). */
export function stopText(r: {
  stop_condition?: string | null;
  is_truncated?: boolean | null;
  is_timeout?: boolean;
}): string {
  const marks = [r.is_truncated ? "truncated" : null, r.is_timeout ? "timed out" : null].filter((x) => x !== null);
  return `${r.stop_condition ?? "-"}${marks.length ? ` (${marks.join(", ")})` : ""}`;
}
