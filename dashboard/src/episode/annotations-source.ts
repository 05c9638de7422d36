// The trainer's annotations of the episode the page shows: what the watch read (the relay notes a
// change to the watchers that ask, clients/typescript/watch.ts), and, since trainers annotate
// after the rollout ended (when the watch has ended too), a re-check every RECHECK_MS while the
// ended episode's tab is visible (`GET .../annotations` with If-None-Match: a 304 costs nothing).
// The newest version wins, whichever way it came.
import type { AnnotationsJson } from "../../../clients/typescript/watch.js";
import { authHeaders, relayUrl } from "../api.js";

/** How often an ended episode's annotations are checked again while its tab is visible. */
export const RECHECK_MS = 15_000;

export class AnnotationsSource {
  current: AnnotationsJson | null = null;
  private etag: string | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private checking = false;
  private stopped = false;
  private readonly onVisible = () => {
    if (document.visibilityState === "visible") void this.check();
  };

  constructor(
    private readonly id: string,
    /** The episode ended (only then is it re-checked). */
    private readonly ended: () => boolean,
    private readonly changed: () => void,
  ) {
    this.timer = setInterval(() => {
      if (document.visibilityState === "visible") void this.check();
    }, RECHECK_MS);
    document.addEventListener("visibilitychange", this.onVisible);
  }

  /** Annotations the watch read (or a check found). */
  offer(a: AnnotationsJson): void {
    if (this.current !== null && a.version <= this.current.version) return;
    this.current = a;
    this.changed();
  }

  /** Ask the relay now (when the episode has ended): the page calls this as soon as it knows. */
  async check(): Promise<void> {
    if (this.checking || this.stopped || !this.ended()) return;
    this.checking = true;
    try {
      const headers: Record<string, string> = { accept: "application/json", ...authHeaders() };
      if (this.etag) headers["if-none-match"] = this.etag;
      const res = await fetch(new URL(`/v1/episodes/${encodeURIComponent(this.id)}/annotations`, relayUrl), {
        headers,
      });
      if (res.status !== 200) return; // 304: unchanged; a refusal or an error: the next check tries again
      this.etag = res.headers.get("etag");
      const a = (await res.json()) as AnnotationsJson;
      if (!this.stopped) this.offer(a);
    } catch {
      // offline for a moment: the next check tries again
    } finally {
      this.checking = false;
    }
  }

  close(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    document.removeEventListener("visibilitychange", this.onVisible);
  }
}
