// Minimal reproduction of the workerd crash of issue 28 item 3 (workerd 1.20260426.1, the one
// miniflare 4.20260426.0 ships; fixed upstream in 1.20260619.1, which needs Node 22): an alarm
// that fires on a Durable Object idle for more than ~70 s, in the same turn as workerd's actor
// eviction sweep, meets an actor the sweep freed —
//   alarm-scheduler.c++:202 … server.c++:2508: failed: expected classAndId.tryGet<ClassAndId>() != nullptr
// then SIGSEGV (a use-after-free: MALLOC_PERTURB_=165 fills freed memory, so it crashes reliably).
//
// OBJECTS objects each arm one alarm 60–150 s ahead (spread over the window) and go idle. With
// AVOID=1 they arm it the way the relay does (src/episode/alarm-window.ts: never 60–150 s ahead,
// sooner instead, then the rest when it fires). The script waits until every alarm is due, asks
// every object whether its alarm ran, and exits 0 (no crash, all alarms ran) or 1 (the runtime died).
//
//   MALLOC_PERTURB_=165 node bench/repro/alarm-eviction.mjs          # crashes
//   MALLOC_PERTURB_=165 AVOID=1 node bench/repro/alarm-eviction.mjs  # does not
import { Miniflare } from "miniflare";

const AVOID = process.env.AVOID === "1";
const OBJECTS = Number(process.env.OBJECTS ?? 24);
process.env.MALLOC_PERTURB_ ??= "165"; // inherited by the workerd process Miniflare spawns

const script = `
const AVOID = ${AVOID};
// the relay's rule (src/episode/alarm-window.ts), inlined: the Worker is a plain string here
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
    const name = new URL(req.url).searchParams.get("name");
    return env.SLEEPER.get(env.SLEEPER.idFromName(name)).fetch(req);
  },
};`;

let crashLine = null;
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
        if (/classAndId|SIGSEGV|Segmentation/.test(t)) crashLine ??= t.trim().split("\n")[0];
        process.stderr.write(t);
      });
  },
});
const url = await mf.ready;
const t0 = Date.now();
const offsets = Array.from({ length: OBJECTS }, (_, i) => 61_000 + Math.round((i * 88_000) / Math.max(1, OBJECTS - 1)));
for (const [i, ms] of offsets.entries()) {
  const r = await fetch(`${url}arm?name=o${i}&ms=${ms}`);
  if (!r.ok) throw new Error(`arm o${i}: ${r.status}`);
}
console.log(`${OBJECTS} objects armed ${offsets[0] / 1000}–${offsets.at(-1) / 1000} s ahead (AVOID=${AVOID ? 1 : 0}, MALLOC_PERTURB_=${process.env.MALLOC_PERTURB_}); idle until due`);

const until = t0 + offsets.at(-1) + 15_000;
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
  console.log(`CRASH after ${seconds} s: ${crashLine ?? "the runtime stopped answering"} (${dead ? `fetch: ${dead.cause?.code ?? dead.message}` : "it still answers"}); ${fired}/${OBJECTS} alarms ran before`);
  await mf.dispose().catch(() => undefined);
  process.exit(1);
}
console.log(`no crash in ${seconds} s: ${fired}/${OBJECTS} alarms ran (${wakes} wakes)`);
await mf.dispose();
process.exit(fired === OBJECTS ? 0 : 1);
