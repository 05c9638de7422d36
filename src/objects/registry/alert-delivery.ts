// Sends a run's queued alerts (alert-store.ts) from the index's alarm: at most ALERT_BUDGETS.perAlarm
// per alarm, each a signed POST bounded by ALERT_BUDGETS.fetchTimeoutMs, all at once (the object
// keeps answering upserts while they wait: an outbound fetch does not hold its input gate). Each
// outcome is written when its answer comes; the alarm is armed again for the next one due. A
// delivery whose outcome could not be written is sent again (at least once: receivers dedup by id).

import { ALERT_BUDGETS } from "../../protocol/alerts/config.js";
import { ALERT_ID_HEADER, delivered, SIGNATURE_HEADER, signBody } from "../../protocol/alerts/payload.js";
import { armAlarm } from "../storage/alarm-window.js";
import type { AlertStore, Delivery } from "./alert-store.js";

/**
 * The alarm's part for alerts: what is due sent, then the alarm armed for the next one due. A failure leaves the
 * queue as it is (the index's own work is done) and tries again `retryMs` later.
 */
export async function sendDue(
  store: AlertStore,
  write: (body: () => void) => void,
  storage: DurableObjectStorage,
  run: string | null,
  retryMs: number,
): Promise<void> {
  try {
    await deliverDue(store, write);
    await armAlertAlarm(storage, store.nextDue());
  } catch (e) {
    console.warn(`run ${run}: alerts not sent: ${e instanceof Error ? e.message : String(e)}`);
    await armAlarm(storage, Date.now() + retryMs);
  }
}

/** The alarm at `at` (epoch ms) unless one is set sooner (one set in the past is the alarm running now). */
export async function armAlertAlarm(storage: DurableObjectStorage, at: number | null): Promise<void> {
  if (at === null) return;
  const set = await storage.getAlarm();
  if (set === null || set > at || set < Date.now()) await armAlarm(storage, at);
}

/** Send what is due now; answers how many were sent (delivered or not). */
export async function deliverDue(store: AlertStore, write: (body: () => void) => void): Promise<number> {
  const due = store.due(Date.now(), ALERT_BUDGETS.perAlarm);
  await Promise.all(
    due.map(async (d) => {
      const { status, error } = await send(store, d);
      const ok = status !== null && delivered(status);
      write(() => store.attempted(d, status, error, ok, Date.now()));
    }),
  );
  return due.length;
}

async function send(store: AlertStore, d: Delivery): Promise<{ status: number | null; error: string | null }> {
  const secret = store.secretOf(d.url);
  if (secret === null) return { status: null, error: "the webhook is no longer set" };
  try {
    const res = await fetch(d.url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "user-agent": "episode-relay-alerts",
        [SIGNATURE_HEADER]: await signBody(secret, d.body),
        [ALERT_ID_HEADER]: d.alert,
      },
      body: d.body,
      // a redirect is an answer, not a delivery: it is not followed (the body's signature is for this URL's owner)
      redirect: "manual",
      signal: AbortSignal.timeout(ALERT_BUDGETS.fetchTimeoutMs),
    });
    await res.body?.cancel();
    return { status: res.status, error: null };
  } catch (e) {
    const timedOut = e instanceof Error && (e.name === "TimeoutError" || e.name === "AbortError");
    return {
      status: null,
      error: timedOut
        ? `no answer within ${ALERT_BUDGETS.fetchTimeoutMs} ms`
        : (e instanceof Error ? e.message : String(e)).slice(0, 200),
    };
  }
}
