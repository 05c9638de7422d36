// One episode, live: the TypeScript watcher client (clients/typescript/watch.ts) keeps the
// assembly; this page draws it. Traces side by side (orchestrator first, sub-agents after, with
// their semantic links), each turn's message and tool calls, the pending preview as it streams,
// rewards, metrics, timing, errors, and the connection state. The page watches with
// `routing: false` until the routing heatmap is opened; then it re-watches with routing from the
// start of the log (`after: 0`), so repairs are seen, and swaps over once caught up.
import { watchEpisode, type EpisodeWatch, type WatchEvent } from "../../clients/typescript/watch.js";
import type { TraceState } from "../../src/assembly/trace.js";
import { authHeaders, getToken, probe, relayUrl } from "./api.js";
import { append, clear, dateTime, duration, h } from "./dom.js";
import { heatmap } from "./heatmap.js";
import { idInRun, runHref, runLabel, runOf } from "./links.js";
import { refusal, type ConnState, type Shell } from "./shell.js";
import {
  callView,
  field,
  fmt,
  isObject,
  nodeView,
  pendingMessages,
  repairsOf,
  rewardPairs,
  json,
  type CallView,
  type Message,
  type NodeView,
} from "./model.js";
import type { Json } from "../../src/wire/json-view.js";

interface TraceDom {
  trace: TraceState;
  el: HTMLElement;
  head: HTMLElement;
  turns: HTMLOListElement;
  nodes: Array<{ el: HTMLElement; key: string }>;
  pending: HTMLElement;
  pendingSpan: Uint8Array | null;
  pendingEnded: boolean;
  errors: HTMLElement;
  errorCount: number;
}

/** Badge words for the states that are not a run status. */
const STATUS_LABELS: Record<string, string> = { missing: "not found", denied: "not allowed", finish_refused: "finish refused" };

const ids = new WeakMap<object, number>();
let nextId = 1;
function idOf(o: object | null): number {
  if (o === null) return 0;
  let i = ids.get(o);
  if (i === undefined) ids.set(o, (i = nextId++));
  return i;
}

export function mountEpisode(shell: Shell, id: string): () => void {
  // back to the run that counts this episode (its id up to the last ':')
  const run = runOf(id);
  shell.setTitle([
    h("a", { href: "/", "data-nav": true }, "Runs"),
    h("a.crumb-run", { href: runHref(run), "data-nav": true, id: "crumb-run", title: run }, runLabel(run)),
    h("span.crumb.crumb-id", { title: id }, idInRun(id, run)),
  ]);
  let watch: EpisodeWatch | null = null;
  let routingWatch: EpisodeWatch | null = null;
  let routing = false;
  /**
   * The run's status as the badge shows it: live, finished, failed, or, before the relay has
   * the episode, "missing" (no such episode yet: the page keeps watching for it) or "denied"
   * (the token may not read it).
   */
  let status = "missing";
  let error: string | null = null;
  let stopped = false;
  /** `${trace}\n${node}` → token rows repaired (the node's last row when the repair came). */
  const repaired = new Map<string, number[]>();
  const traceDoms = new Map<string, TraceDom>();

  const statusPill = h("span.pill.s-missing", { id: "ep-status", "data-status": "missing" }, STATUS_LABELS.missing);
  const stats = h("span.ep-stats.muted");
  const routingButton = h(
    "button.btn",
    { type: "button", id: "routing-toggle", "aria-pressed": "false", title: "show the MoE routing of each node (loads routing data)" },
    "Routing heatmap",
  );
  const downloadNote = h("span.download-note.muted.small", { id: "download-note", role: "status" });
  const downloads = h(
    "div.downloads",
    { role: "group", "aria-label": "download the episode" },
    h("span.muted.small", null, "Download"),
    h("button.btn", { type: "button", id: "download-msgpack", "data-format": "msgpack", title: "GET /v1/episodes/{id} as msgpack (the wire form)" }, "msgpack"),
    h("button.btn", { type: "button", id: "download-json", "data-format": "json", title: "GET /v1/episodes/{id} as its JSON view" }, "JSON"),
    downloadNote,
  );
  for (const b of downloads.querySelectorAll<HTMLButtonElement>("button[data-format]")) {
    b.addEventListener("click", () => void download(b, b.dataset.format === "json" ? "json" : "msgpack"));
  }
  const banner = h("div.banner", { hidden: true, id: "ep-banner", role: "alert" });
  const summary = h("div.summary", { id: "summary" });
  const tracesEl = h("div.traces", { id: "traces" });
  const routingNote = h("p.note", { id: "routing-note", hidden: true });
  const waiting = h("p.empty", { id: "waiting" }, "Connecting…");
  shell.main.append(
    h(
      "section.episode-page",
      null,
      h("div.page-head", null, h("h1.ep-title", { title: id }, id), statusPill, stats, h("div.spacer"), downloads, routingButton),
      banner,
      summary,
      routingNote,
      waiting,
      tracesEl,
    ),
  );

  routingButton.addEventListener("click", () => {
    routing = !routing;
    routingButton.setAttribute("aria-pressed", String(routing));
    document.body.classList.toggle("show-routing", routing);
    if (routing && !routingWatch && watch) startRoutingWatch();
    scheduleRender();
  });

  /** The episode as the relay serves it (with the token: a plain link cannot send one, nor an Accept), saved through a Blob URL. */
  async function download(button: HTMLButtonElement, format: "json" | "msgpack"): Promise<void> {
    button.disabled = true;
    downloadNote.textContent = "";
    try {
      const res = await fetch(new URL(`/v1/episodes/${encodeURIComponent(id)}`, relayUrl), {
        headers: { accept: format === "json" ? "application/json" : "application/msgpack", ...authHeaders() },
      });
      if (!res.ok) {
        const body = (await res.json().catch(() => null)) as { message?: string } | null;
        throw new Error(body?.message ?? `${res.status} ${res.statusText}`);
      }
      const blob = await res.blob();
      const url = URL.createObjectURL(blob);
      const a = h("a", { href: url, download: `${id.replace(/[^\w.-]+/g, "_")}.${format}`, hidden: true });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10_000);
    } catch (e) {
      downloadNote.textContent = `Download failed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      button.disabled = false;
    }
  }

  // ---- watching ----

  function onEvent(w: EpisodeWatch, e: WatchEvent): void {
    if (e.type === "delta") {
      const r = repairsOf(e.delta);
      if (r) {
        const t = w.assembly.traces.get(r.trace);
        for (const n of r.nodes) {
          const node = t?.nodes[n];
          const rows = node?.routed?.shape[0];
          if (rows === undefined) continue;
          const key = `${r.trace}\n${n}`;
          const list = repaired.get(key) ?? [];
          if (!list.includes(rows - 1)) list.push(rows - 1);
          repaired.set(key, list);
        }
      }
    }
    if (w !== watch) return; // a routing watch still catching up: drawn once it takes over
    if (e.type === "state") shell.setConnection(e.state === "unreachable" ? "offline" : (e.state as ConnState));
    if (e.type === "hello") status = e.status === "new" ? "missing" : e.status;
    if (e.type === "status") {
      status = e.status;
      error = e.error;
    }
    if (e.type === "refused") {
      status = "denied";
      waiting.textContent = e.error.message;
      if (e.error.status === 401 || e.error.status === 403) {
        shell.setConnection(refusal(e.error.status), e.error.message);
        shell.askToken(e.error.message);
      }
    }
    if (e.type === "finish") {
      status = e.status;
      error = e.error;
    }
    scheduleRender();
  }

  function start(options: { routing: boolean; after?: number }): EpisodeWatch {
    const w = watchEpisode(relayUrl, id, {
      token: getToken(),
      routing: options.routing,
      ...(options.after !== undefined ? { after: options.after } : {}),
      backoffMs: [250, 5000],
    });
    w.on((e) => onEvent(w, e));
    return w;
  }

  function startRoutingWatch(): void {
    routingNote.hidden = false;
    routingNote.textContent = "Loading routing data…";
    const w = start({ routing: true, after: 0 });
    routingWatch = w;
    const takeOver = () => {
      if (stopped || watch === w) return;
      const old = watch;
      watch = w;
      old?.close();
      shell.setConnection(w.state as ConnState);
      if (w.state === "finished" || w.state === "failed") {
        status = w.state;
        error = w.error;
      } else if (status === "missing" && w.seq > 0) status = "live";
      routingNote.hidden = true;
      // every trace is redrawn from the new assembly
      for (const d of traceDoms.values()) d.el.remove();
      traceDoms.clear();
      scheduleRender();
    };
    w.on((e) => {
      if ((e.type === "caught_up" || e.type === "finish") && watch !== w) takeOver();
    });
  }

  async function begin(): Promise<void> {
    try {
      const p = await probe(`/v1/episodes/${encodeURIComponent(id)}/status`);
      if (!p.ok) {
        shell.setConnection(refusal(p.status), p.message);
        shell.askToken(p.status === 401 ? `This relay needs a token: ${p.message}` : p.message);
        status = "denied";
        waiting.textContent = p.status === 403 ? "This token does not cover this episode." : "A token is needed to watch this episode.";
        drawStatus();
        return;
      }
      if (p.status === 200 && isObject(p.body as Json)) status = String((p.body as { status?: string }).status ?? status);
    } catch {
      // the watcher reconnects by itself
    }
    if (stopped) return;
    watch = start({ routing: false });
    scheduleRender();
  }

  // ---- drawing ----

  let frame = 0;
  function scheduleRender(): void {
    if (frame || stopped) return;
    frame = requestAnimationFrame(() => {
      frame = 0;
      render();
    });
  }

  function drawStatus(): void {
    statusPill.className = `pill s-${status}`;
    statusPill.dataset.status = status;
    statusPill.textContent = STATUS_LABELS[status] ?? status;
  }

  function render(): void {
    const w = watch;
    if (!w) return;
    const asm = w.assembly;
    const traces = [...asm.traces.values()];
    if (status === "missing" && (w.seq > 0 || traces.length > 0)) status = "live";
    drawStatus();
    let nodes = 0;
    let calls = 0;
    for (const t of traces) {
      nodes += t.nodes.length;
      calls += t.items.calls.count;
    }
    stats.textContent = `seq ${w.seq} · ${plural(traces.length, "trace")} · ${plural(nodes, "node")} · ${plural(calls, "call")}`;
    banner.hidden = !(status === "failed" || status === "finish_refused" || error);
    banner.textContent =
      status === "failed"
        ? `The run failed${error ? `: ${error}` : ""}`
        : status === "finish_refused"
          ? `Finish refused: the reply's counts disagree with the assembled episode (${error ?? ""}). The run stays open for a corrected reply.`
          : error
            ? `Finish error: ${error}`
            : "";
    waiting.hidden = traces.length > 0;
    if (status !== "denied") {
      waiting.textContent =
        w.state === "connecting"
          ? "Connecting…"
          : status === "missing"
            ? "No episode with this id on the relay yet: it shows here as soon as a producer writes it."
            : "No traces.";
    }
    renderSummary(traces);
    if (routing && watch === routingWatch) {
      const any = traces.some((t) => t.nodes.some((n) => n.routed));
      routingNote.hidden = any;
      routingNote.textContent = any ? "" : "No MoE routing in this episode.";
    }

    const seen = new Set<string>();
    traces.forEach((t, i) => {
      seen.add(t.id);
      let d = traceDoms.get(t.id);
      if (!d || d.trace !== t) {
        d?.el.remove();
        d = newTraceDom(t);
        traceDoms.set(t.id, d);
      }
      if (tracesEl.children[i] !== d.el) tracesEl.insertBefore(d.el, tracesEl.children[i] ?? null);
      renderTrace(d, i, traces[0]!);
    });
    for (const [tid, d] of traceDoms) {
      if (!seen.has(tid)) {
        d.el.remove();
        traceDoms.delete(tid);
      }
    }
  }

  function renderSummary(traces: TraceState[]): void {
    clear(summary);
    const first = traces[0];
    if (!first) return;
    // tokens over every trace (as the run's episode list counts them); "–" when no trace says
    const tokenSum = (name: string): string => {
      let sum: number | null = null;
      for (const t of traces) {
        const v = field(t, name);
        if (typeof v === "number") sum = (sum ?? 0) + v;
      }
      return sum === null ? "–" : fmt(sum);
    };
    const rewards = rewardPairs(field(first, "rewards"));
    const metrics = field(first, "metrics");
    const timing = field(first, "timing");
    summary.append(
      card(
        "Rewards",
        "rewards",
        rewards.length
          ? h(
              "div.rewards",
              null,
              rewards.map(([k, v]) => h("span.reward.big", null, h("span.reward-k", null, k), h("span.reward-v", null, v))),
            )
          : h("span.muted", null, status === "finished" || status === "failed" ? "not scored" : "not scored yet"),
      ),
      card(
        "Metrics",
        "metrics",
        isObject(metrics) && Object.keys(metrics).length ? kv(Object.entries(metrics).map(([k, v]) => [k, fmt(v)])) : h("span.muted", null, "–"),
      ),
      card("Timing", "timing", timingView(timing)),
      card(
        traces.length > 1 ? `Tokens (all ${traces.length} traces)` : "Tokens",
        "tokens",
        kv([
          ["input", tokenSum("num_input_tokens")],
          ["output", tokenSum("num_output_tokens")],
          ["total", tokenSum("num_total_tokens")],
        ]),
      ),
    );
  }

  function newTraceDom(t: TraceState): TraceDom {
    const head = h("header.trace-head");
    const turns = h("ol.turns");
    const pending = h("div.pending", { hidden: true });
    const errors = h("div.trace-errors", { hidden: true });
    const el = h("section.trace", { "data-trace": t.id }, head, errors, turns, pending);
    return { trace: t, el, head, turns, nodes: [], pending, pendingSpan: null, pendingEnded: false, errors, errorCount: -1 };
  }

  function renderTrace(d: TraceDom, index: number, first: TraceState): void {
    const t = d.trace;
    const orchestrator = index === 0;
    // header
    const agent = field(t, "agent");
    const name = isObject(agent) && typeof agent.name === "string" ? agent.name : orchestrator ? "orchestrator" : "agent";
    const task = field(t, "task");
    const taskType = isObject(task) && typeof task.type === "string" ? task.type : null;
    const spawnedBy = orchestrator ? null : spawnLink(t);
    const ended = status === "finished" || status === "failed";
    const chips: Array<HTMLElement | null> = [
      flag(field(t, "is_completed") === true, "completed", ended ? "incomplete" : "running"),
      field(t, "ok") === true ? h("span.chip.ok", null, "ok") : null,
      typeof field(t, "stop_condition") === "string" ? h("span.chip", null, String(field(t, "stop_condition"))) : null,
      field(t, "is_timeout") === true ? h("span.chip.bad", null, "timeout") : null,
    ];
    const rewards = rewardPairs(field(t, "rewards"));
    clear(d.head);
    append(d.head, [
      h(
        "div.trace-title",
        null,
        h("span.trace-kind", null, orchestrator ? "orchestrator" : "sub-agent"),
        h("h2", null, name),
        h("code.trace-id", { title: t.id }, t.id.slice(0, 8)),
      ),
      h(
        "div.trace-meta",
        null,
        taskType ? h("span.chip.task", null, taskType) : null,
        chips,
        spawnedBy !== null
          ? h(
              "button.chip.link",
              { type: "button", "data-target-trace": first.id, "data-target-node": spawnedBy, onclick: jump },
              `spawned by ${traceName(first)} #${spawnedBy}`,
            )
          : null,
      ),
      rewards.length
        ? h(
            "div.rewards",
            null,
            rewards.map(([k, v]) => h("span.reward", null, h("span.reward-k", null, k), h("span.reward-v", null, v))),
          )
        : null,
      h(
        "div.trace-counts.muted",
        null,
        [plural(t.nodes.length, "node"), plural(t.items.calls.count, "call"), t.items.errors.count ? plural(t.items.errors.count, "error") : ""]
          .filter(Boolean)
          .join(" · "),
      ),
    ]);
    const asm = watch!.assembly;
    // errors
    if (d.errorCount !== t.items.errors.count) {
      d.errorCount = t.items.errors.count;
      clear(d.errors);
      d.errors.hidden = d.errorCount === 0;
      for (const span of asm.items(t, "errors")) {
        const v = json(span);
        const o = isObject(v) ? v : {};
        d.errors.append(
          h(
            "div.error-item",
            null,
            h("strong", null, typeof o.type === "string" ? o.type : "error"),
            " ",
            typeof o.message === "string" ? o.message : JSON.stringify(v),
          ),
        );
      }
    }
    // turns (only changed ones are rebuilt)
    const callsByNode = new Map<number, Uint8Array>();
    for (const span of asm.items(t, "calls")) callsByNode.set(callView(span).node, span);
    for (let i = 0; i < t.nodes.length; i++) {
      const node = asm.node(t, i);
      const view = nodeView(node, i);
      const call = callsByNode.get(i) ?? null;
      const rep = repaired.get(`${t.id}\n${i}`) ?? [];
      const showMap = routing && view.routed !== null;
      const key = `${idOf(view)}:${idOf(call)}:${showMap ? `${idOf(view.routed)}:${rep.join(",")}:${heatmapWidth(t)}` : "-"}:${orchestrator}`;
      const have = d.nodes[i];
      if (have && have.key === key) continue;
      const el = turn(t, view, call ? callView(call) : null, orchestrator, first, showMap ? rep : null);
      if (have) {
        have.el.replaceWith(el);
        d.nodes[i] = { el, key };
      } else {
        d.turns.append(el);
        d.nodes.push({ el, key });
      }
    }
    while (d.nodes.length > t.nodes.length) d.nodes.pop()!.el.remove();
    // pending preview
    if (d.pendingSpan !== t.pending || d.pendingEnded !== ended) {
      d.pendingSpan = t.pending;
      d.pendingEnded = ended;
      const msgs = pendingMessages(t);
      clear(d.pending);
      d.pending.hidden = msgs.length === 0;
      d.pending.dataset.count = String(msgs.length);
      if (msgs.length) {
        d.pending.classList.toggle("ended", ended);
        d.pending.append(
          h(
            "div.pending-head",
            null,
            ended ? null : h("span.pulse", { "aria-hidden": "true" }),
            ended ? "last preview · never committed" : "in flight · not committed yet",
          ),
        );
        for (const m of msgs) d.pending.append(messageBody(m, true));
      }
    }
  }

  function turn(t: TraceState, v: NodeView, call: CallView | null, orchestrator: boolean, first: TraceState, rep: number[] | null): HTMLElement {
    const m = v.message;
    const head = h(
      "div.turn-head",
      null,
      h("span.role", null, m.role),
      m.name ? h("span.tool-name", null, m.name) : null,
      h("span.node-idx", { title: "node index" }, `#${v.index}`),
      v.sampled ? h("span.chip.sampled", { title: "sampled by the policy" }, "sampled") : null,
      h("span.spacer"),
      call
        ? h(
            "span.call-info",
            { title: "model call" },
            [
              call.model,
              call.finishReason,
              call.promptTokens !== null ? `${call.promptTokens}→${call.completionTokens ?? "?"} tok` : null,
              call.seconds !== null ? duration(call.seconds) : null,
            ]
              .filter(Boolean)
              .join(" · "),
          )
        : v.tokens
          ? h("span.call-info", null, `${v.tokens} tok`)
          : null,
    );
    const links = v.links.length
      ? h(
          "div.turn-links",
          null,
          v.links.map((l) => {
            const cross = !orchestrator && l.type.startsWith("subagent");
            const target = cross ? first : t;
            return h(
              "button.chip.link",
              { type: "button", "data-target-trace": target.id, "data-target-node": l.node, onclick: jump, title: `semantic link: ${l.type}` },
              `${l.type} ← ${cross ? `${traceName(first)} ` : ""}#${l.node}`,
            );
          }),
        )
      : null;
    return h(
      `li.turn.role-${cssSafe(m.role)}` as "li",
      { "data-node": v.index, "data-role": m.role },
      head,
      links,
      messageBody(m, false),
      rep !== null && v.routed ? heatmap(v.routed, rep, heatmapWidth(t)) : null,
    );
  }

  /** Room for a heatmap in the trace's column (the column's width less the turn's padding). */
  function heatmapWidth(t: TraceState): number {
    const col = traceDoms.get(t.id)?.turns.clientWidth || tracesEl.clientWidth || 640;
    return Math.floor((col - 50) / 20) * 20; // in steps, so a small resize redraws nothing
  }

  function traceName(t: TraceState): string {
    const agent = field(t, "agent");
    return isObject(agent) && typeof agent.name === "string" ? agent.name : "orchestrator";
  }

  /** The orchestrator node a sub-agent was spawned from (its first subagent_call link). */
  function spawnLink(t: TraceState): number | null {
    const asm = watch!.assembly;
    for (let i = 0; i < t.nodes.length; i++) {
      for (const l of nodeView(asm.node(t, i), i).links) if (l.type === "subagent_call") return l.node;
    }
    return null;
  }

  function jump(e: Event): void {
    const b = e.currentTarget as HTMLElement;
    const el = tracesEl.querySelector<HTMLElement>(
      `section.trace[data-trace="${CSS.escape(b.dataset.targetTrace ?? "")}"] li.turn[data-node="${CSS.escape(b.dataset.targetNode ?? "")}"]`,
    );
    if (!el) return;
    el.scrollIntoView({ behavior: "smooth", block: "center" });
    el.classList.remove("flash");
    void el.offsetWidth;
    el.classList.add("flash");
  }

  // heatmaps are drawn to fit their column: redraw them when the width changes
  const onResize = () => {
    if (routing) scheduleRender();
  };
  window.addEventListener("resize", onResize);

  void begin();
  return () => {
    stopped = true;
    window.removeEventListener("resize", onResize);
    if (frame) cancelAnimationFrame(frame);
    watch?.close();
    if (routingWatch !== watch) routingWatch?.close();
    document.body.classList.remove("show-routing");
  };
}

/** One message (a turn's or a pending one): reasoning, text, tool calls. */
export function messageBody(m: Message, pending: boolean): HTMLElement {
  return h(
    "div.msg",
    { "data-role": m.role },
    pending ? h("div.pending-role", null, h("span.role.small", null, m.role), m.name ? h("span.tool-name", null, m.name) : null) : null,
    m.reasoning ? h("details.reasoning", null, h("summary", null, "reasoning"), h("div.text", null, m.reasoning)) : null,
    m.text !== null && m.text !== "" ? h("div.text", null, m.text) : null,
    m.toolCalls.map((c) =>
      h(
        "div.tool-call",
        null,
        h("span.tool-arrow", { "aria-hidden": "true" }, "→"),
        h("code.tool-fn", null, c.name),
        h("code.tool-args", null, prettyArgs(c.arguments)),
        c.id ? h("span.muted.tool-id", null, c.id) : null,
      ),
    ),
    m.toolCallId && !pending ? h("div.muted.small", null, `result of ${m.toolCallId}`) : null,
  );
}

function card(title: string, key: string, body: Node): HTMLElement {
  return h("div.card", { "data-card": key }, h("div.card-title", null, title), body);
}

function kv(pairs: Array<[string, string]>): HTMLElement {
  return h(
    "dl.kv",
    null,
    pairs.map(([k, v]) => [h("dt", null, k), h("dd", null, v)]),
  );
}

function flag(on: boolean, yes: string, no: string): HTMLElement {
  return h(`span.chip.${on ? "done" : no}` as "span", null, on ? yes : no);
}

function timingView(timing: Json | undefined): Node {
  if (!isObject(timing)) return h("span.muted", null, "–");
  const start = typeof timing.start === "number" ? timing.start : null;
  const phase = (k: string): [number, number] | null => {
    const p = timing[k];
    if (!isObject(p) || typeof p.start !== "number" || typeof p.end !== "number" || p.start <= 0) return null;
    return [p.start, p.end];
  };
  const pairs: Array<[string, string]> = [];
  let last = start ?? 0;
  for (const k of ["boot", "setup", "agent", "finalize", "scoring"]) {
    const p = phase(k);
    if (!p) continue;
    last = Math.max(last, p[0], p[1]);
    if (p[1] > p[0]) pairs.push([k, duration(p[1] - p[0])]);
  }
  const agent = timing.agent;
  const model = isObject(agent) && isObject(agent.model) && typeof agent.model.duration === "number" ? agent.model.duration : null;
  if (model) pairs.unshift(["model", duration(model)]);
  // wall time once the run was scored (while it runs, the phases' ends are still 0)
  const scored = phase("scoring");
  if (start !== null && scored && scored[1] > start) pairs.unshift(["wall", duration(last - start)]);
  if (start !== null) pairs.push(["started", dateTime(start * 1000)]);
  return pairs.length ? kv(pairs) : h("span.muted", null, "–");
}

function prettyArgs(s: string): string {
  try {
    const v = JSON.parse(s) as unknown;
    if (v && typeof v === "object" && !Array.isArray(v)) {
      return Object.entries(v as Record<string, unknown>)
        .map(([k, x]) => `${k}: ${JSON.stringify(x)}`)
        .join(", ");
    }
    return JSON.stringify(v);
  } catch {
    return s;
  }
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function cssSafe(s: string): string {
  return s.replace(/[^a-z0-9_-]/gi, "_");
}
