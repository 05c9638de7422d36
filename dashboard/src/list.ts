// The episode list: live from the episode index's socket (`/v1/episodes/watch`): a snapshot of the
// newest episodes, then upserts and deletes. Filter by text (id, status, rewards, error) and status.
import { probe, socketProtocols, socketUrl } from "./api.js";
import { ago, clear, h } from "./dom.js";
import type { Shell } from "./shell.js";
import { rewardPairs } from "./model.js";
import type { IndexEntry } from "../../src/registry/entry.js";
import { type IndexMessage, parseIndexMessage } from "../../src/registry/index-protocol.js";

/** A row as the API shows it (the server's own type). */
type Entry = IndexEntry;

const STATUSES = ["all", "live", "finish_refused", "finished", "failed"] as const;

const n = (count: number, word: string) => `${count} ${word}${count === 1 ? "" : "s"}`;

export function mountList(shell: Shell): () => void {
  shell.setTitle(["Episodes"]);
  const episodes = new Map<string, Entry>();
  let truncated = false;
  let status: (typeof STATUSES)[number] = "all";
  let text = "";
  let stopped = false;
  let ws: WebSocket | null = null;
  let attempt = 0;
  let retry: ReturnType<typeof setTimeout> | null = null;
  let ping: ReturnType<typeof setInterval> | null = null;
  let loaded = false;
  /** Why the relay refused to list (401/403), shown instead of the list. */
  let refused: string | null = null;

  const filter = h("input.filter", { type: "search", placeholder: "Filter by id, status, reward…", "aria-label": "filter episodes", id: "filter" });
  filter.addEventListener("input", () => {
    text = filter.value.trim().toLowerCase();
    render();
  });
  const seg = h("div.segmented", { role: "group", "aria-label": "status" });
  for (const s of STATUSES) {
    const b = h("button", { type: "button", "data-status": s, "aria-pressed": s === status ? "true" : "false" }, s.replace("_", " "));
    b.addEventListener("click", () => {
      status = s;
      for (const x of seg.querySelectorAll("button")) x.setAttribute("aria-pressed", x === b ? "true" : "false");
      render();
    });
    seg.append(b);
  }
  const counts = h("span.counts");
  const rows = h("div.ep-list", { id: "episodes", role: "table", "aria-label": "episodes" });
  const note = h("p.note");
  shell.main.append(h("section.list-page", null, h("div.page-head", null, h("h1", null, "Episodes"), counts), h("div.toolbar", null, filter, seg), rows, note));

  function matches(e: Entry): boolean {
    if (status !== "all" && e.status !== status) return false;
    if (!text) return true;
    const hay = `${e.id} ${e.status} ${rewardPairs(e.rewards)
      .map(([k, v]) => `${k} ${v}`)
      .join(" ")} ${e.error ?? ""}`.toLowerCase();
    return text.split(/\s+/).every((w) => hay.includes(w));
  }

  function render(): void {
    const all = [...episodes.values()].sort((a, b) => (a.updated < b.updated ? 1 : a.updated > b.updated ? -1 : a.id < b.id ? 1 : -1));
    const shown = all.filter(matches);
    const live = all.filter((e) => e.status === "live").length;
    counts.textContent = refused ? "" : `${n(all.length, "episode")} · ${live} live`;
    clear(rows);
    rows.append(
      h(
        "div.ep-row.ep-head",
        { role: "row" },
        h("span", { role: "columnheader" }, "Status"),
        h("span", { role: "columnheader" }, "Episode"),
        h("span", { role: "columnheader" }, "Rewards"),
        h("span", { role: "columnheader" }, "Size"),
        h("span", { role: "columnheader" }, "Updated"),
      ),
    );
    for (const e of shown) rows.append(row(e));
    if (shown.length === 0) {
      rows.append(
        h(
          "div.empty",
          null,
          refused ??
            (!loaded
              ? "Loading…"
              : all.length === 0
                ? "No episodes yet. They appear here as soon as a producer sends the first delta."
                : "No episode matches the filter."),
        ),
      );
    }
    note.textContent = truncated ? "Showing the newest episodes only; older ones are not loaded." : "";
  }

  function row(e: Entry): HTMLElement {
    const rewards = rewardPairs(e.rewards);
    const href = `/episodes/${encodeURIComponent(e.id)}`;
    return h(
      "a.ep-row",
      { href, "data-nav": true, role: "row", "data-id": e.id, "data-status": e.status },
      h("span.cell-status", { role: "cell" }, h(`span.pill.s-${e.status}` as "span", null, e.status.replace("_", " "))),
      h("span.cell-id", { role: "cell" }, h("span.ep-id", { title: e.id }, e.id), e.error ? h("span.ep-error", { title: e.error }, e.error) : null),
      h(
        "span.cell-rewards",
        { role: "cell" },
        rewards.length ? rewards.map(([k, v]) => h("span.reward", null, h("span.reward-k", null, k), h("span.reward-v", null, v))) : h("span.muted", null, "–"),
      ),
      h("span.cell-size.muted", { role: "cell" }, `${n(e.traces, "trace")} · ${n(e.nodes, "node")} · ${n(e.calls, "call")}`),
      h(
        "span.cell-age",
        { role: "cell", title: `created ${e.created}\nupdated ${e.updated}`, "data-updated": e.updated, "data-created": e.created },
        h("span.age", null, `${ago(Date.parse(e.updated))} ago`),
        h("span.age-sub.muted", null, `started ${ago(Date.parse(e.created))} ago`),
      ),
    );
  }

  function onMessage(m: IndexMessage): void {
    if (m.type === "snapshot") {
      episodes.clear();
      for (const e of m.episodes) episodes.set(e.id, e);
      truncated = m.truncated;
      loaded = true;
    } else if (m.type === "upsert") episodes.set(m.episode.id, m.episode);
    else if (m.type === "delete") episodes.delete(m.id);
    render();
  }

  async function connect(): Promise<void> {
    if (stopped) return;
    shell.setConnection(attempt === 0 ? "connecting" : "resuming");
    // a plain GET first: a refusal (401/403) is readable there, not on a failed socket
    try {
      const p = await probe("/v1/episodes?limit=1");
      if (!p.ok) {
        shell.setConnection("offline", p.message);
        shell.askToken(p.status === 401 ? `This relay needs a token: ${p.message}` : p.message);
        refused = p.status === 401 ? "Sign in with a token (above) to see the episodes." : `The relay refused to list episodes: ${p.message}`;
        loaded = true;
        render();
        return;
      }
      refused = null;
    } catch {
      return schedule();
    }
    if (stopped) return;
    const sock = new WebSocket(socketUrl("/v1/episodes/watch"), socketProtocols());
    ws = sock;
    sock.onopen = () => {
      attempt = 0;
      shell.setConnection("live");
      ping = setInterval(() => sock.readyState === 1 && sock.send("ping"), 10_000);
    };
    sock.onmessage = (ev) => {
      if (typeof ev.data !== "string" || ev.data === "pong") return;
      try {
        onMessage(parseIndexMessage(ev.data));
      } catch {
        // ignore a message we cannot read
      }
    };
    sock.onclose = () => {
      if (ping) clearInterval(ping);
      ping = null;
      if (ws === sock) ws = null;
      if (!stopped) schedule();
    };
  }

  function schedule(): void {
    if (stopped) return;
    shell.setConnection("resuming");
    const delay = Math.min(10_000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2);
    attempt++;
    retry = setTimeout(() => void connect(), delay);
  }

  const ticker = setInterval(() => {
    for (const el of rows.querySelectorAll<HTMLElement>(".cell-age")) {
      el.querySelector(".age")!.textContent = `${ago(Date.parse(el.dataset.updated!))} ago`;
      el.querySelector(".age-sub")!.textContent = `started ${ago(Date.parse(el.dataset.created!))} ago`;
    }
  }, 5000);

  render();
  void connect();
  return () => {
    stopped = true;
    clearInterval(ticker);
    if (retry) clearTimeout(retry);
    if (ping) clearInterval(ping);
    ws?.close(1000, "page closed");
  };
}
