// Minimal reproduction of the workerd crash of issue 28 item 3 (workerd 1.20260426.1, the one
// miniflare 4.20260426.0 ships; fixed upstream in 1.20260619.1 by aa1cfd444 "prevent heap
// use-after-free in ActorContainer getActor()/startRequest()", which needs Node 22):
//   alarm-scheduler.c++:202 … server.c++:2508: failed: expected classAndId.tryGet<ClassAndId>() != nullptr
// then SIGSEGV.
//
// What triggers it (server.c++ at that tag): the alarm scheduler starts an alarm through
// `getActorContainer(id)->startRequest({})` and drops its reference to the container at once, so
// while startRequest waits in getActor() only the namespace's actor map holds the container. The
// namespace's eviction sweep (cleanupLoop: every 70 s from the first request, it erases every
// container idle more than 70 s with no client) can run in the same event-loop turn: it frees
// the container under the suspended coroutine, which then reads freed memory. That needs an alarm
// on an object idle > 70 s whose timer expires together with a sweep: likely when the one thread
// is busy (the cost bench's archive storm), so that both timers are found expired in one turn.
//
// Here OBJECTS objects are armed at t0 (the first Durable Object request: the sweeps run at
// t0, t0 + 70 s, t0 + 140 s) for alarms just before t0 + 140 s, and go idle; a request keeps the
// thread busy across t0 + 140 s, so the alarms and the sweep that evicts their objects fire in one
// turn. MALLOC_PERTURB_=165 fills freed memory, so the use-after-free crashes reliably.
// With AVOID=1 the objects arm the way the relay does (src/objects/storage/alarm-window.ts: never
// 60–150 s ahead: sooner, then the rest when it fires): an alarm then always finds its object
// idle < 60 s, never evictable. Exit 0: no crash and every alarm ran; 1: the runtime died.
//
//   MALLOC_PERTURB_=165 node bench/repro/alarm-eviction.mjs          # crashes
//   MALLOC_PERTURB_=165 AVOID=1 node bench/repro/alarm-eviction.mjs  # does not
import { Miniflare } from "miniflare";

const AVOID = process.env.AVOID === "1";
const OBJECTS = Number(process.env.OBJECTS ?? 24);
process.env.MALLOC_PERTURB_ ??= "165"; // inherited by the workerd process Miniflare spawns

const script = `
const AVOID = ${AVOID};
// the relay's rule (src/objects/storage/alarm-window.ts), inlined: the Worker is a plain string here
function alarmTime(at, now) {
  const ahead = at - now;
  return AVOID && ahead >= 60000 && ahead < 150000 ? now + 50000 : at;
}
export class Sleeper {
  constructor(ctx) {
    this.ctx = ctx;
    ctx.storage.sql.exec("CREATE TABLE IF NOT EXISTS t (k TEXT PRIMARY KEY, v INTEGER)");
  }
  get(k) {
    return this.ctx.storage.sql.exec("SELECT v FROM t WHERE k = ?", k).toArray()[0]?.v ?? null;
  }
  put(k, v) {
    this.ctx.storage.sql.exec("INSERT OR REPLACE INTO t VALUES (?, ?)", k, v);
  }
  async fetch(req) {
    const url = new URL(req.url);
    if (url.pathname === "/arm") {
      const due = Date.now() + Number(url.searchParams.get("ms"));
      this.put("due", due);
      await this.ctx.storage.setAlarm(alarmTime(due, Date.now()));
      return new Response("armed");
    }
    return Response.json({ due: this.get("due"), fired: this.get("fired"), wakes: this.get("wakes") ?? 0 });
  }
  async alarm() {
    this.put("wakes", (this.get("wakes") ?? 0) + 1);
    const due = this.get("due");
    if (Date.now() < due) return void (await this.ctx.storage.setAlarm(alarmTime(due, Date.now())));
    this.put("fired", Date.now());
  }
}
export default {
  fetch(req, env) {
    const url = new URL(req.url);
    if (url.pathname === "/spin") {
      // keeps workerd's one thread busy (Date.now() does not move inside a turn: count instead)
      let x = 0;
      for (let i = 0, n = Number(url.searchParams.get("n")); i < n; i++) x = (x * 31 + i) | 0;
      return new Response(String(x));
    }
    const name = url.searchParams.get("name");
    return env.SLEEPER.get(env.SLEEPER.idFromName(name)).fetch(req);
  },
};`;

let crashLine = null;
let assertions = 0; // the use-after-free seen: the freed container's OneOf read as neither alternative
const mf = new Miniflare({
  modules: true,
  script,
  compatibilityDate: "2026-04-01",
  durableObjects: { SLEEPER: { className: "Sleeper", useSQLite: true } },
  cf: false,
  handleRuntimeStdio(stdout, stderr) {
    for (const s of [stdout, stderr])
      s.on("data", (d) => {
        const t = String(d);
        assertions += t.match(/classAndId\.tryGet/g)?.length ?? 0;
        if (/classAndId|SIGSEGV|Segmentation/.test(t)) crashLine ??= t.trim().split("\n")[0];
        process.stderr.write(t);
      });
  },
});
const url = await mf.ready;
const SWEEP = 70_000; // workerd's cleanupLoop EXPIRATION
const spin = async (n) => {
  const t = Date.now();
  const r = await fetch(`${url}spin?n=${n}`);
  await r.text();
  return Date.now() - t;
};
// the spin's speed here (a Worker request: no Durable Object yet, so the sweeps have not started)
const probe = 2e8;
const perIter = (await spin(probe)) / probe;
const busyN = Math.round(8_000 / perIter); // about 8 s of one thread

const t0 = Date.now(); // the first Durable Object request starts the namespace's sweeps
const offsets = Array.from(
  { length: OBJECTS },
  (_, i) => 2 * SWEEP - 4_000 + Math.round((i * 3_500) / Math.max(1, OBJECTS - 1)),
);
for (const [i, at] of offsets.entries()) {
  const r = await fetch(`${url}arm?name=o${i}&ms=${t0 + at - Date.now()}`);
  if (!r.ok) throw new Error(`arm o${i}: ${r.status}`);
}
console.log(
  `${OBJECTS} objects armed for t0 + ${offsets[0] / 1000}–${offsets.at(-1) / 1000} s (sweeps at t0 + 70, 140 s; AVOID=${AVOID ? 1 : 0}, MALLOC_PERTURB_=${process.env.MALLOC_PERTURB_}); idle`,
);
await new Promise((r) => setTimeout(r, t0 + 2 * SWEEP - 5_000 - Date.now()));
console.log(
  `t0 + ${Math.round((Date.now() - t0) / 1000)} s: the thread is kept busy ~8 s, across the alarms and the sweep`,
);
await spin(busyN).catch(() => undefined);

const until = t0 + 2 * SWEEP + 10_000;
while (Date.now() < until) await new Promise((r) => setTimeout(r, 1000));

let fired = 0;
let wakes = 0;
let dead = null;
for (let i = 0; i < OBJECTS; i++) {
  try {
    const s = await (await fetch(`${url}status?name=o${i}`)).json();
    if (s.fired !== null) fired++;
    wakes += s.wakes;
  } catch (e) {
    dead = e;
    break;
  }
}
const seconds = Math.round((Date.now() - t0) / 1000);
if (dead || crashLine) {
  console.log(
    `CRASH after ${seconds} s: ${crashLine ?? "the runtime stopped answering"}; ${assertions} alarm(s) met a freed container; the runtime ${dead ? `died (fetch: ${dead.cause?.code ?? dead.message})` : "still answers (the freed memory held nothing fatal this time)"}; ${fired}/${OBJECTS} alarms ran (retried)`,
  );
  await mf.dispose().catch(() => undefined);
  process.exit(1);
}
console.log(`no crash in ${seconds} s: ${fired}/${OBJECTS} alarms ran (${wakes} wakes)`);
await mf.dispose();
process.exit(fired === OBJECTS ? 0 : 1);
