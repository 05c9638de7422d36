// Two episodes side by side (`/compare/{idA}/{idB}`): each one read once as JSON
// (`GET /v1/episodes/{id}`, the live form `{status, seq, error, traces}` or the finished
// `{...head, traces}`), their first traces' conversations turn by turn (node by node), with the
// first turn where the two differ marked (a node's message compared: role, content, reasoning,
// tool calls) and every turn before it folded away as "same".
import { getJson, tokenFragment } from "./api.js";
import { clear, h, plural } from "./dom.js";
import { messageBody } from "./episode.js";
import { episodeHref, homeHref, idInRun, runOf } from "./links.js";
import { isObject, messageOf, type Message } from "./model.js";
import { rewardChips } from "./reward-chip.js";
import { refusal, type Shell } from "./shell.js";
import type { Json } from "../../src/protocol/index.js";

export function compareHref(a: string, b: string): string {
  return `/compare/${encodeURIComponent(a)}/${encodeURIComponent(b)}${tokenFragment()}`;
}

interface Side {
  id: string;
  status: string;
  messages: Message[];
  /** Each node's message as JSON text (what "differs" compares). */
  keys: string[];
  /** The first trace's `rewards` (null: none). */
  rewards: Json;
}

function sideOf(id: string, body: Json): Side {
  const o = isObject(body) ? body : {};
  const traces = Array.isArray(o.traces) ? o.traces : [];
  const first = traces.find(isObject);
  const nodes = first && Array.isArray(first.nodes) ? first.nodes : [];
  const msgs = nodes.map((n) => (isObject(n) ? n.message : undefined));
  const status = typeof o.status === "string" ? o.status : "finished";
  return {
    id,
    status,
    messages: msgs.map(messageOf),
    keys: msgs.map((m) => JSON.stringify(m ?? null)),
    rewards: first?.rewards ?? null,
  };
}

/** The first node index where the two message lists differ (content or length), or null when they are the same. */
export function firstDifference(a: string[], b: string[]): number | null {
  const n = Math.max(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return null;
}

export function mountCompare(shell: Shell, a: string, b: string): () => void {
  let stopped = false;
  const ctl = new AbortController();
  shell.setTitle([h("a", { href: homeHref(), "data-nav": true }, "Runs"), h("span.crumb", null, "compare")]);
  const banner = h("div.banner", { id: "compare-error", hidden: true, role: "alert" });
  const summary = h("p.compare-summary", { id: "compare-summary" }, "Loading both episodes…");
  const grid = h("ol.compare-grid", { id: "compare", "aria-label": "the two conversations, turn by turn" });
  const head = (id: string, which: string) =>
    h(
      "div.compare-col-head",
      { "data-side": which },
      h("span.compare-side", null, which),
      h("a.ep-id", { href: episodeHref(id), "data-nav": true, title: id }, idInRun(id, runOf(id))),
      h("span.compare-status"),
      h("span.compare-rewards"),
    );
  const heads = h("div.compare-heads", null, head(a, "A"), head(b, "B"));
  shell.main.append(
    h("section.compare-page", { "data-a": a, "data-b": b }, h("div.page-head", null, h("h1", null, "Compare episodes")), banner, summary, heads, grid),
  );

  function fillHead(el: Element, s: Side): void {
    const st = el.querySelector(".compare-status")!;
    st.replaceChildren(h(`span.pill.s-${s.status}` as "span", null, s.status));
    const rw = el.querySelector(".compare-rewards")!;
    rw.replaceChildren(...rewardChips(s.rewards));
  }

  function cell(s: Side, i: number): HTMLElement {
    const m = s.messages[i];
    if (!m) return h("div.compare-cell.absent", null, h("span.muted", null, "no turn"));
    return h(
      `div.compare-cell.role-${m.role.replace(/[^a-z0-9_-]/gi, "_")}` as "div",
      { "data-role": m.role },
      h("div.turn-head", null, h("span.role", null, m.role), m.name ? h("span.tool-name", null, m.name) : null),
      messageBody(m, false),
    );
  }

  function draw(x: Side, y: Side): void {
    fillHead(heads.children[0]!, x);
    fillHead(heads.children[1]!, y);
    const diff = firstDifference(x.keys, y.keys);
    const page = grid.parentElement!;
    page.dataset.firstDifference = diff === null ? "" : String(diff);
    summary.textContent =
      diff === null
        ? `Same conversation: ${x.messages.length} turns, every message equal.`
        : `Same for the first ${plural(diff, "turn")}; they differ from turn #${diff} (A has ${x.messages.length} turns, B ${y.messages.length}).`;
    clear(grid);
    const n = Math.max(x.messages.length, y.messages.length);
    for (let i = 0; i < n; i++) {
      const same = x.keys[i] === y.keys[i];
      const first = i === diff;
      grid.append(
        h(
          `li.compare-row${same ? ".same" : ".differs"}${first ? ".first-diff" : ""}` as "li",
          { "data-node": i, "data-same": String(same), ...(first ? { id: "first-difference", "aria-current": "true" } : {}) },
          h(
            "div.compare-idx",
            null,
            h("span.node-idx", null, `#${i}`),
            first ? h("span.chip.bad", null, "first difference") : same ? h("span.chip", null, "same") : h("span.chip.incomplete", null, "differs"),
          ),
          h("div.compare-pair", null, cell(x, i), cell(y, i)),
        ),
      );
    }
    if (n === 0) grid.append(h("li.empty", null, "Neither episode has a turn."));
    if (diff !== null && diff > 0) document.getElementById("first-difference")?.scrollIntoView({ block: "center" });
  }

  async function load(): Promise<void> {
    shell.setConnection("connecting");
    try {
      const [ja, jb] = await Promise.all([
        getJson<Json>(`/v1/episodes/${encodeURIComponent(a)}`, ctl.signal),
        getJson<Json>(`/v1/episodes/${encodeURIComponent(b)}`, ctl.signal),
      ]);
      if (stopped) return;
      shell.setConnection("finished", "both episodes read once");
      draw(sideOf(a, ja), sideOf(b, jb));
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
