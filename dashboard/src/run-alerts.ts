// The run page's alerts (docs/alerts.md): the run's last alerts, from `GET /v1/runs/{run}/alerts`,
// read when the page opens and again (at most every READ_MS) after the run socket brings changes:
// an alert fires when a rollout's row lands in the run's index, which the socket then pushes.
// "Notify me" asks the browser for permission (Notification API); once given, each alert the page
// first sees after that shows a notification. Hidden while the run has no alert rule and no alert,
// and for a token the relay refuses them to.
import { getJson } from "./api.js";
import { agoSpan, clear, h, plural } from "./dom.js";
import { episodeHref, idInRun } from "./links.js";

/** The least time between two reads of the run's alerts (ms). */
const READ_MS = 3000;
/** Alerts listed, newest first. */
const SHOWN = 20;

interface AlertsAnswer {
  rules: Array<{ id: string }>;
  pending: number;
  gave_up: number;
  recent: Array<{ id: string; at: string; rule: string; kind: string; what: string; episodes: string[] }>;
}

export interface RunAlerts {
  el: HTMLElement;
  /** The run is there (its probe answered) or changed: read the alerts (soon, at most every READ_MS). */
  poke(): void;
  stop(): void;
}

export function runAlerts(run: string): RunAlerts {
  const list = h("ol.alert-list", { id: "alert-list" });
  const note = h("span.alerts-note.muted", { id: "alerts-note", role: "status" });
  const button = h("button.btn", { type: "button", id: "alerts-notify" }, "Notify me");
  const el = h(
    "section.card.run-alerts",
    { id: "run-alerts", hidden: true, "aria-label": "alerts" },
    h("div.alerts-head", null, h("div.card-title", null, "Alerts"), button, note),
    list,
  );
  const seen = new Set<string>();
  let first = true;
  let timer: ReturnType<typeof setTimeout> | 0 = 0;
  let last = 0;
  let reading = false;
  let again = false;
  let stopped = false;
  let counts = "";

  const canNotify = typeof Notification !== "undefined";
  function drawButton(): void {
    button.hidden = !canNotify || Notification.permission === "denied";
    if (canNotify && Notification.permission === "granted") {
      button.textContent = "Notifications on";
      button.disabled = true;
    }
  }
  button.addEventListener("click", async () => {
    if (!canNotify) return;
    await Notification.requestPermission().catch(() => "denied");
    drawButton();
  });
  drawButton();

  async function read(): Promise<void> {
    reading = true;
    try {
      const a = await getJson<AlertsAnswer>(`/v1/runs/${encodeURIComponent(run)}/alerts`);
      if (!stopped) draw(a);
    } catch {
      // no run yet, none set, or a token the relay refuses them to: nothing to show
      el.hidden = true;
    } finally {
      reading = false;
      last = Date.now();
      if (again) {
        again = false;
        poke();
      }
    }
  }

  function poke(): void {
    if (stopped || timer) return;
    if (reading) {
      again = true;
      return;
    }
    timer = setTimeout(
      () => {
        timer = 0;
        void read();
      },
      Math.max(0, last + READ_MS - Date.now()),
    );
  }

  function draw(a: AlertsAnswer): void {
    el.hidden = a.rules.length === 0 && a.recent.length === 0;
    clear(list);
    for (const r of a.recent.slice(0, SHOWN)) {
      const episodes = r.episodes.map((id) =>
        h("a.alert-episode", { href: episodeHref(id), "data-nav": true }, idInRun(id, run)),
      );
      list.append(
        h(
          "li.alert",
          { "data-alert": r.id, "data-rule": r.rule },
          agoSpan(r.at, "age-inline"),
          h("span.chip.alert-rule", { title: r.kind }, r.rule),
          h("span.alert-what", null, r.what),
          ...episodes,
        ),
      );
    }
    counts = `${plural(a.rules.length, "rule")}${a.pending ? `, ${a.pending} delivery pending` : ""}${a.gave_up ? `, ${a.gave_up} given up` : ""}`;
    note.textContent = a.recent.length ? counts : `${counts}; none fired yet`;
    // the first read only marks what was there; later ones notify what is new
    const fresh = a.recent.filter((r) => !seen.has(r.id));
    for (const r of a.recent) seen.add(r.id);
    if (!first && canNotify && Notification.permission === "granted")
      for (const r of fresh.slice(0, 3)) new Notification(`Run ${run}: ${r.rule}`, { body: r.what, tag: r.id });
    first = false;
  }

  // read first once the run page knows the run is there (poke): a run the relay has not got would answer a 404
  return {
    el,
    poke,
    stop() {
      stopped = true;
      if (timer) clearTimeout(timer);
    },
  };
}
