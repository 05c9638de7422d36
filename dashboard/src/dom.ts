// A tiny DOM helper: h("div.card", {title: "x"}, child, "text", ...).

type Child = Node | string | number | null | undefined | false | Child[];
type Attrs = Record<string, string | number | boolean | null | undefined | EventListener>;

export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K | `${K}.${string}` | `${K}#${string}`,
  attrs?: Attrs | null,
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const [name, ...classes] = tag.split(".");
  let id: string | undefined;
  let tagName = name!;
  if (tagName.includes("#")) [tagName, id] = tagName.split("#") as [string, string];
  const el = document.createElement(tagName as K);
  if (id) el.id = id;
  if (classes.length) el.className = classes.join(" ");
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === null || v === undefined || v === false) continue;
    if (typeof v === "function") el.addEventListener(k.replace(/^on/, ""), v);
    else if (k === "class") el.className = `${el.className} ${v}`.trim();
    // through the CSSOM: the page's Content-Security-Policy refuses style attributes (dashboard/public/_headers)
    else if (k === "style") el.style.cssText = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

export function append(el: Node, children: Child[]): void {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.appendChild(typeof c === "string" || typeof c === "number" ? document.createTextNode(String(c)) : c);
  }
}

export function clear(el: Element): void {
  while (el.firstChild) el.removeChild(el.firstChild);
}

/** "3 s", "4 min", "2 h", "5 d" ago. */
export function ago(ms: number, now = Date.now()): string {
  const s = Math.max(0, Math.round((now - ms) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h`;
  return `${Math.floor(s / 86400)} d`;
}

/** "1 node", "3 nodes": a count with its word, plural by adding "s". */
export function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

/** A share as a percentage: "50%", "12%", "2.4%" (a decimal only below 10%). */
export function percent(share: number): string {
  const p = share * 100;
  return `${p >= 9.95 || p === 0 ? Math.round(p) : p.toFixed(1)}%`;
}

export function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "–";
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  const m = Math.floor(seconds / 60);
  return `${m} min ${Math.round(seconds - m * 60)} s`;
}

export function fmtNumber(v: unknown): string {
  if (typeof v === "number") return Number.isInteger(v) ? String(v) : String(Math.round(v * 1000) / 1000);
  if (typeof v === "string") return v;
  if (v === null || v === undefined) return "–";
  return JSON.stringify(v);
}

/** Date and time with the time zone, in the viewer's zone: "2026-12-01 20:14:05 UTC" (or "… GMT+2", "… PST"). */
export function dateTime(ms: number): string {
  const d = new Date(ms);
  if (Number.isNaN(d.getTime())) return "–";
  const parts = new Intl.DateTimeFormat("en-US", {
    year: "numeric",
    month: "2-digit",
    day: "2-digit",
    hour: "2-digit",
    minute: "2-digit",
    second: "2-digit",
    hourCycle: "h23",
    timeZoneName: "short",
  }).formatToParts(d);
  const p = (t: Intl.DateTimeFormatPartTypes) => parts.find((x) => x.type === t)?.value ?? "";
  return `${p("year")}-${p("month")}-${p("day")} ${p("hour")}:${p("minute")}:${p("second")} ${p("timeZoneName")}`.trim();
}

/** "<n> ago" for an ISO time, kept fresh by `tickAges` (the element carries the time). */
export function agoSpan(iso: string, cls = "age"): HTMLElement {
  return h(
    `span.${cls}` as "span",
    { "data-ago": iso, "data-time": dateTime(Date.parse(iso)), title: dateTime(Date.parse(iso)) },
    `${ago(Date.parse(iso))} ago`,
  );
}

/** Refresh every `agoSpan` under `root` every few seconds; returns the stop function. */
export function tickAges(root: Element, everyMs = 5000): () => void {
  const t = setInterval(() => {
    for (const el of root.querySelectorAll<HTMLElement>("[data-ago]"))
      el.textContent = `${ago(Date.parse(el.dataset.ago!))} ago`;
  }, everyMs);
  return () => clearInterval(t);
}

const SVG_NS = "http://www.w3.org/2000/svg";

/** h() for inline SVG: s("rect", {x: 0, ...}, child...). */
export function s<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs?: Record<string, string | number> | null,
  ...children: Array<Node | string>
): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs ?? {})) el.setAttribute(k, String(v));
  for (const c of children) el.append(c);
  return el;
}
