// The golden case chat_basic as the tests push it for rollouts of a run: its open frame with a
// task key of the test's, one more delta setting its rewards (and what else the test sets), then
// its reply with the rollout's group in the head, or a failed reply.
import { decodeLossless, type LMap, type LValue } from "../../src/protocol/wire/lossless.js";
import { fixturePath, loadCase } from "../../tools/conformance/cases.js";
import { enc, f, m } from "./deltas.js";

export const chat = loadCase(fixturePath("chat_basic"));
const chatOpen = decodeLossless(chat.frames[0]!) as LMap;
/** chat_basic's (one) trace. */
export const CHAT_TRACE = chatOpen.get("trace") as string;
/** chat_basic's task key (`open.task.key`). */
export const CHAT_TASK = ((chatOpen.get("open") as LMap).get("task") as LMap).get("key") as string;

/** `map[key] = value` on a lossless map (kept in place when present). */
export function put(map: LMap, key: string, value: LValue): void {
  const at = map.entries.findIndex(([k]) => k === key);
  if (at >= 0) map.entries[at] = [key, value];
  else map.entries.push([key, value]);
}

/** chat_basic's rewards with these (correct, format) scores, at its weights 1.0 and 0.25. */
export const rewardsOf = ([c, fm]: [number, number]) =>
  m({ correct: m({ score: f(c), weight: f(1) }), format: m({ score: f(fm), weight: f(0.25) }) });

/** chat_basic's open frame with task key `task` (its own bytes when that is its key). */
export function openFrame(task: string): Uint8Array {
  if (task === CHAT_TASK) return chat.frames[0]!;
  const first = decodeLossless(chat.frames[0]!) as LMap;
  put((first.get("open") as LMap).get("task") as LMap, "key", task);
  return enc(first);
}

/** One more delta on chat_basic's trace setting these fields. */
export const setDelta = (set: LMap): Uint8Array => enc(m({ trace: CHAT_TRACE, set }));

/** chat_basic's reply with `group` as the head's `group.id` (and, given one, `task` as its task key). */
export function groupReply(group: string, task?: string): Uint8Array {
  const body = decodeLossless(chat.reply) as LMap;
  const head = body.get("head") as LMap;
  put(head, "group", m({ id: group }));
  if (task !== undefined) put(head.get("task") as LMap, "key", task);
  return enc(body);
}

/** A failed reply for rollout `id` of `group`: "sandbox crashed (id)", the group in its head. */
export const failedReply = (id: string, group: string): Uint8Array =>
  enc(m({ success: false, error: `sandbox crashed (${id})`, head: m({ group: m({ id: group }) }), traces: [] }));
