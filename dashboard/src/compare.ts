// Two or more rollouts side by side (`/compare/{a}/{b}/…`, picked from a run's lists or the group
// page's "compare best and worst"): each episode read once as JSON (`GET /v1/episodes/{id}`, the
// live form `{status, seq, error, traces}` or the finished `{...head, traces}`) and only its
// display form kept; their rewards, advantages (from each one's group), metrics, stop conditions
// (and truncation, as the trainer counts it) and tokens in one table; then every trace, aligned node by node across all of
// them, with the first node where they diverge marked and its text diffed word by word against
// A. Best and worst are named by the stated tie rule (compare-align.ts).

import type { GroupDetailJson, Json, RolloutJson } from "../../src/protocol/index.js";
import {
  episodeReward,
  lastSuccessfulFinish,
  rankRollouts,
  TIE_RULE,
  traceTruncated,
} from "../../src/protocol/index.js";
import { getJson } from "./api.js";
import { alignTurns, traceSlots, wordDiff } from "./compare-align.js";
import { h, plural } from "./dom.js";
import { messageBody } from "./episode.js";
import { num, signed } from "./group/figures.js";
import { episodeHref, homeHref, idInRun, runHref, runLabel, runOf } from "./links.js";
import { isObject, type Message, messageOf } from "./model.js";
import { picksOf } from "./pick-tray.js";
import { episodeRewardChips } from "./reward-chip.js";
import { refusal, type Shell } from "./shell.js";

interface TraceSide {
  messages: Message[];
  /** Each node's message as JSON text (what "the same" compares). */
  keys: string[];
  rewards: Json;
  metrics: Json;
  stop: string | null;
  /** Truncated as the trainer counts it (truncation.ts: its stop condition or its last successful call). */
  truncated: boolean;
  /** `is_timeout` (null: not set). */
  timeout: boolean | null;
  tokens: number;
}

interface Side {
  id: string;
  letter: string;
  status: string;
  group: string | null;
  traces: TraceSide[];
  /** The first trace's weighted reward (as the run's list ranks it). */
  reward: number | null;
  tokens: number;
  rank: "best" | "worst" | null;
  rollout: RolloutJson | null;
}

const LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";

function traceOf(t: Json): TraceSide {
  const o = isObject(t) ? t : {};
  const nodes = Array.isArray(o.nodes) ? o.nodes : [];
  const msgs = nodes.map((n) => (isObject(n) ? n.message : undefined));
  return {
    messages: msgs.map(messageOf),
    keys: msgs.map((m) => JSON.stringify(m ?? null)),
    rewards: o.rewards ?? null,
    metrics: o.metrics ?? null,
    stop: typeof o.stop_condition === "string" ? o.stop_condition : null,
    truncated: traceTruncated({
      stop: o.stop_condition,
      lastFinish: lastSuccessfulFinish(Array.isArray(o.calls) ? o.calls : []),
    }),
    timeout: typeof o.is_timeout === "boolean" ? o.is_timeout : null,
    tokens: typeof o.num_total_tokens === "number" ? o.num_total_tokens : 0,
  };
}

function sideOf(id: string, i: number, body: Json, pickedGroup: string | null): Side {
  const o = isObject(body) ? body : {};
  const traces = (Array.isArray(o.traces) ? o.traces : []).filter(isObject).map(traceOf);
  const group = pickedGroup ?? (isObject(o.group) && typeof o.group.id === "string" ? o.group.id : null);
  return {
    id,
    letter: LETTERS[i] ?? String(i + 1),
    status: typeof o.status === "string" ? o.status : "finished",
    group,
    traces,
    reward: episodeReward(traces.map((t) => t.rewards)).reward,
    tokens: traces.reduce((s, t) => s + t.tokens, 0),
    rank: null,
    rollout: null,
  };
}

/** The text a turn's diff compares: reasoning, content and tool calls, one per line. */
/** An advantage as text: raw and normalised ("–" for none). */
function advantageText(a: RolloutJson["advantage"]): string {
  return a ? `${signed(a.raw)} (${a.normalized === null ? "–" : signed(a.normalized, 2)})` : "–";
}

function turnText(m: Message): string {
  return [
    m.reasoning ? `(reasoning) ${m.reasoning}` : null,
    m.text,
    ...m.toolCalls.map((c) => `${c.name}(${c.arguments})`),
  ]
    .filter((x) => x !== null && x !== "")
    .join("\n");
}

export function mountCompare(shell: Shell, ids: string[]): () => void {
  let stopped = false;
  const ctl = new AbortController();
  const run = runOf(ids[0]!);
  shell.setTitle([
    h("a", { href: homeHref(), "data-nav": true }, "Runs"),
    h("a.crumb-run", { href: runHref(run), "data-nav": true, id: "crumb-run", title: run }, runLabel(run)),
    h("span.crumb", null, "compare"),
  ]);
  const cols = { style: `--n: ${ids.length}` };
  const banner = h("div.banner", { id: "compare-error", hidden: true, role: "alert" });
  const summary = h("p.compare-summary", { id: "compare-summary" }, `Loading ${plural(ids.length, "episode")}…`);
  const rule = h("p.muted.small.tie-rule", { id: "compare-rule" }, `Best and worst: ${TIE_RULE}.`);
  const facts = h("div.compare-facts", {
    id: "compare-facts",
    role: "table",
    "aria-label": "rewards, advantages, metrics and stop conditions side by side",
  });
  const heads = h("div.compare-heads", cols);
  const traces = h("div.compare-traces");
  const page = h(
    "section.compare-page",
    { "data-a": ids[0], "data-b": ids[1], "data-n": ids.length },
    h("div.page-head", null, h("h1", null, ids.length === 2 ? "Compare episodes" : `Compare ${ids.length} rollouts`)),
    banner,
    summary,
    rule,
    heads,
    facts,
    traces,
  );
  shell.main.append(page);

  function head(s: Side): HTMLElement {
    return h(
      "div.compare-col-head",
      { "data-side": s.letter, "data-id": s.id },
      h("span.compare-side", null, s.letter),
      h("a.ep-id", { href: episodeHref(s.id), "data-nav": true, title: s.id }, idInRun(s.id, run)),
      h("span.compare-status", null, h(`span.pill.s-${s.status}` as "span", null, s.status)),
      s.rank === "best"
        ? h("span.chip.ok.rank", null, "best")
        : s.rank === "worst"
          ? h("span.chip.bad.rank", null, "worst")
          : null,
      h("span.compare-rewards", null, ...episodeRewardChips(s.traces.map((t) => t.rewards))),
    );
  }

  /** One line of the facts table: a label and each side's text; marked when they are not all equal. */
  function fact(label: string, texts: string[]): HTMLElement {
    const differs = new Set(texts).size > 1;
    return h(
      `div.compare-fact${differs ? ".differs" : ""}` as "div",
      { role: "row", "data-fact": label, "data-differs": String(differs) },
      h("span.fact-k", { role: "rowheader" }, label),
      h(
        "div.compare-pair",
        cols,
        ...texts.map((t, i) => h("span.fact-v", { role: "cell", "data-side": LETTERS[i] ?? String(i + 1) }, t)),
      ),
    );
  }

  function drawFacts(sides: Side[]): void {
    const rows = [
      fact(
        "status",
        sides.map((s) => s.status),
      ),
      fact(
        "rank",
        sides.map((s) => s.rank ?? "–"),
      ),
      fact(
        "reward",
        sides.map((s) => num(s.reward)),
      ),
      fact(
        "reward advantage",
        sides.map((s) => advantageText(s.rollout?.advantage ?? null)),
      ),
    ];
    const slots = Math.max(...sides.map((s) => s.traces.length));
    const union = (pick: (t: TraceSide) => Json) => [
      ...new Set(
        sides.flatMap((s) => s.traces.flatMap((t) => (isObject(pick(t)) ? Object.keys(pick(t) as object) : []))),
      ),
    ];
    for (const k of union((t) => t.rewards)) {
      rows.push(
        fact(
          `${k} score`,
          sides.map((s) => {
            const v = episodeReward(s.traces.map((t) => t.rewards)).scores.find(([key]) => key === k);
            return v ? num(v[1]) : "–";
          }),
        ),
      );
      rows.push(
        fact(
          `${k} advantage`,
          sides.map((s) => advantageText(s.rollout?.key_advantages[k] ?? null)),
        ),
      );
    }
    for (let t = 0; t < slots; t++) {
      const of = slots > 1 ? ` (trace ${t + 1})` : "";
      for (const k of union((x) => x.metrics)) {
        rows.push(
          fact(
            `${k}${of}`,
            sides.map((s) => {
              const m = s.traces[t]?.metrics;
              const v = isObject(m) ? m[k] : undefined;
              return v === undefined ? "–" : typeof v === "number" ? num(v) : JSON.stringify(v);
            }),
          ),
        );
      }
      rows.push(
        fact(
          `stop condition${of}`,
          sides.map((s) => s.traces[t]?.stop ?? "–"),
        ),
      );
      rows.push(
        fact(
          `truncated (is_truncated)${of}`,
          sides.map((s) => (s.traces[t] === undefined ? "–" : s.traces[t]!.truncated ? "yes" : "no")),
        ),
      );
      rows.push(
        fact(
          `timed out (is_timeout)${of}`,
          sides.map((s) => (s.traces[t]?.timeout ? "yes" : "no")),
        ),
      );
    }
    rows.push(
      fact(
        "group",
        sides.map((s) => s.group ?? "–"),
      ),
    );
    // turns as prime-rl counts them (assistant nodes); the rows below align nodes, so both are named
    rows.push(
      fact(
        "turns",
        sides.map((s) =>
          String(s.traces.reduce((n, t) => n + t.messages.filter((m) => m.role === "assistant").length, 0)),
        ),
      ),
    );
    rows.push(
      fact(
        "nodes",
        sides.map((s) => String(s.traces.reduce((n, t) => n + t.messages.length, 0))),
      ),
    );
    rows.push(
      fact(
        "tokens",
        sides.map((s) => s.tokens.toLocaleString("en-US")),
      ),
    );
    facts.replaceChildren(...rows);
  }

  function cell(s: Side, m: Message | undefined, agrees: boolean, differs: boolean): HTMLElement {
    if (!m) return h("div.compare-cell.absent", { "data-side": s.letter }, h("span.muted", null, "no node"));
    return h(
      `div.compare-cell.role-${m.role.replace(/[^a-z0-9_-]/gi, "_")}${differs && !agrees ? ".departs" : ""}` as "div",
      { "data-role": m.role, "data-side": s.letter },
      h(
        "div.turn-head",
        null,
        h("span.compare-side", null, s.letter),
        h("span.role", null, m.role),
        m.name ? h("span.tool-name", null, m.name) : null,
        differs && s.letter !== "A"
          ? h(`span.chip${agrees ? "" : ".incomplete"}` as "span", null, agrees ? "as A" : "differs from A")
          : null,
      ),
      messageBody(m, false),
    );
  }

  /** The word diff of each side's turn against A's, for the sides that differ there. */
  function diffs(sides: Side[], slot: number, i: number, classes: number[]): HTMLElement | null {
    const a = sides[0]!.traces[slot]?.messages[i];
    if (!a) return null;
    const parts = sides.slice(1).flatMap((s, j) => {
      const m = s.traces[slot]?.messages[i];
      if (!m || classes[j + 1] === classes[0]) return [];
      const pieces = wordDiff(turnText(a), turnText(m));
      return [
        h(
          "div.word-diff",
          { "data-from": "A", "data-to": s.letter },
          h(
            "div.word-diff-head",
            null,
            `A → ${s.letter}`,
            h("span.muted.small", null, " · words only in A struck out, only in ", s.letter, " underlined"),
          ),
          h(
            "div.word-diff-text",
            null,
            ...pieces.map((p) => (p.kind === "same" ? p.text : h(p.kind === "added" ? "ins" : "del", null, p.text))),
          ),
        ),
      ];
    });
    return parts.length ? h("div.compare-diffs", null, ...parts) : null;
  }

  function drawTrace(
    sides: Side[],
    slot: number,
    slots: number,
  ): { el: HTMLElement; divergence: number | null; turns: number } {
    const alignment = alignTurns(sides.map((s) => s.traces[slot]?.keys ?? []));
    const { divergence } = alignment;
    const grid = h("ol.compare-grid", {
      ...(slot === 0 ? { id: "compare" } : {}),
      "aria-label": `trace ${slot + 1}: the conversations, node by node`,
    });
    for (const t of alignment.turns) {
      const first = t.index === divergence;
      grid.append(
        h(
          `li.compare-row${t.same ? ".same" : ".differs"}${first ? ".first-diff" : ""}` as "li",
          {
            "data-node": t.index,
            "data-same": String(t.same),
            "data-classes": t.classes.join(","),
            ...(first && slot === 0 ? { id: "first-difference", "aria-current": "true" } : {}),
          },
          h(
            "div.compare-idx",
            null,
            h("span.node-idx", null, `#${t.index}`),
            first
              ? h("span.chip.bad", null, "diverge here")
              : t.same
                ? h("span.chip", null, "same")
                : h("span.chip.incomplete", null, "differs"),
          ),
          h(
            "div.compare-pair",
            cols,
            ...sides.map((s, j) => cell(s, s.traces[slot]?.messages[t.index], t.classes[j] === t.classes[0], !t.same)),
          ),
          first ? diffs(sides, slot, t.index, t.classes) : null,
        ),
      );
    }
    if (alignment.turns.length === 0) grid.append(h("li.empty", null, "No rollout has a node in this trace."));
    const said =
      divergence === null
        ? `Same in every rollout: ${plural(alignment.turns.length, "node")}.`
        : `Same for the first ${plural(divergence, "node")}; they diverge at node #${divergence}.`;
    const el = h(
      "section.compare-trace",
      { "data-trace": slot, "data-divergence": divergence === null ? "" : divergence },
      h(
        "h2",
        null,
        slots > 1 ? `Trace ${slot + 1} of ${slots}` : "Conversation",
        h("span.muted.small", null, ` · ${said}`),
      ),
      grid,
    );
    return { el, divergence, turns: alignment.turns.length };
  }

  function draw(sides: Side[]): void {
    const ranked = rankRollouts(sides).filter((s) => s.reward !== null);
    if (ranked.length > 1) {
      ranked[0]!.rank = "best";
      ranked.at(-1)!.rank = "worst";
    }
    heads.replaceChildren(...sides.map(head));
    drawFacts(sides);
    const slots = traceSlots(sides.map((s) => s.traces)).length;
    const drawn = Array.from({ length: Math.max(slots, 1) }, (_, t) => drawTrace(sides, t, slots));
    traces.replaceChildren(...drawn.map((d) => d.el));
    const first = drawn[0]!;
    page.dataset.firstDifference = first.divergence === null ? "" : String(first.divergence);
    const counts = sides.map((s) => `${s.letter} ${s.traces[0]?.messages.length ?? 0}`).join(", ");
    const others = drawn.slice(1).filter((d) => d.divergence !== null).length;
    summary.textContent =
      (first.divergence === null
        ? `Same conversation: ${plural(first.turns, "node")}, every message equal.`
        : `Same for the first ${plural(first.divergence, "node")}; they differ from node #${first.divergence} (nodes: ${counts}).`) +
      (slots > 1 ? ` ${plural(slots, "trace")} compared; ${others} more diverge.` : "");
    if (first.divergence !== null && first.divergence > 0)
      document.getElementById("first-difference")?.scrollIntoView({ block: "center" });
  }

  /** Each side's rollout row of its group (advantages are the group's); a group that cannot be read leaves "–". */
  async function rollouts(sides: Side[]): Promise<void> {
    const groups = [...new Set(sides.map((s) => s.group).filter((g): g is string => g !== null))];
    const details = await Promise.all(
      groups.map((g) =>
        getJson<GroupDetailJson>(
          `/v1/runs/${encodeURIComponent(run)}/groups/${encodeURIComponent(g)}`,
          ctl.signal,
        ).catch(() => null),
      ),
    );
    for (const s of sides) {
      const d = details[groups.indexOf(s.group ?? "")];
      s.rollout = d?.rollouts.find((r) => r.id === s.id) ?? null;
    }
  }

  async function load(): Promise<void> {
    shell.setConnection("connecting");
    const picked = new Map(picksOf(run).map((p) => [p.id, p.group]));
    try {
      // each body turned into its display form as it arrives (and then dropped): the page holds
      // the picked episodes (at most MAX_PICKS from the tray) and nothing else
      const sides = await Promise.all(
        ids.map(async (id, i) =>
          sideOf(
            id,
            i,
            await getJson<Json>(`/v1/episodes/${encodeURIComponent(id)}`, ctl.signal),
            picked.get(id) ?? null,
          ),
        ),
      );
      await rollouts(sides);
      if (stopped) return;
      shell.setConnection("finished", `${plural(ids.length, "episode")} read once`);
      draw(sides);
    } catch (e) {
      if (stopped) return;
      const message = e instanceof Error ? e.message : String(e);
      const code = (e as { status?: number }).status;
      banner.textContent = `Could not read the episodes: ${message}`;
      banner.hidden = false;
      summary.textContent = "";
      shell.setConnection(refusal(code), message);
      if (code === 401 || code === 403) shell.askToken(code === 401 ? `This relay needs a token: ${message}` : message);
    }
  }

  void load();
  return () => {
    stopped = true;
    ctl.abort();
  };
}
