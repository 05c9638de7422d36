// Why an isolate's raw heap peak (JS heap + ArrayBuffer backing stores, `Runtime.getHeapUsage`,
// what the memory bench samples) stays near 64 MiB above what it holds on any path that reads
// many bytes (issue 28 item 5): garbage ArrayBuffers are collected only once ~64 MiB of them have
// piled up. V8 starts a full collection when external memory (backing stores) has grown by its
// soft limit since the last one; young-generation collections, which would sweep them sooner,
// are paced by JS-heap allocation, and a 1 MiB blob comes with a few dozen bytes of JS object.
// Every SQLite blob read (a frame, a body row), every RPC argument and socket message is such a
// buffer, so the episode tier reading 200 MiB for a catch-up peaks at ~75 MiB while it holds ~11.
//
// Here a Worker holds nothing and makes MIB MiB of 1 MiB Uint8Arrays, yielding every 4 (so the
// inspector is answered in between, as between the relay's turns), for MIB = 100, 400 and 1600;
// its isolate is sampled every 20 ms. Seen on workerd 1.20260426.1 (2026-12-04, three runs):
// peaks of 44–60, 62–66 and 64–65 MiB: past ~64 MiB the peak no longer grows with the bytes read,
// nor falls below it.
// Exit 1 when it reproduces (1600 MiB of garbage peaks above 32 MiB, with nothing held), 0 when
// not, 2 when the isolate could not be read.
//
//   node bench/repro/arraybuffer-garbage.mjs
import { Miniflare } from "miniflare";
import { WebSocket } from "ws";

const script = `export default {
  async fetch(request) {
    const mib = Number(new URL(request.url).searchParams.get("mib"));
    let sum = 0;
    for (let i = 0; i < mib; i++) {
      const b = new Uint8Array(1 << 20);
      b[7] = i;
      sum += b[7];
      if (i % 4 === 3) await scheduler.wait(1);
    }
    return new Response(String(sum));
  },
};`;

const inspectorPort = 9000 + Math.floor(Math.random() * 1000);
const mf = new Miniflare({ modules: true, script, compatibilityDate: "2026-05-01", inspectorPort, cf: false });
const url = await mf.ready;
const targets = await (await fetch(`http://127.0.0.1:${inspectorPort}/json`)).json();
const target = targets.find((t) => /core:user/.test(t.id)) ?? targets[0];
const ws = new WebSocket(target.webSocketDebuggerUrl);
await new Promise((resolve, reject) => ws.once("open", resolve).once("error", reject));
let id = 0;
const answers = new Map();
ws.on("message", (d) => {
  const m = JSON.parse(String(d));
  if (m.id) answers.get(m.id)?.(m.result);
});
/** The isolate's heap usage, or null when it does not answer within a second. */
const usage = () =>
  new Promise((resolve) => {
    const i = ++id;
    const t = setTimeout(() => resolve(null), 1000);
    answers.set(i, (v) => {
      clearTimeout(t);
      resolve(v);
    });
    ws.send(JSON.stringify({ id: i, method: "Runtime.getHeapUsage" }));
  });

const peaks = [];
for (const mib of [100, 400, 1600]) {
  let peak = 0;
  let on = true;
  const sampler = (async () => {
    while (on) {
      const u = await usage();
      if (u) peak = Math.max(peak, (u.usedSize + u.backingStorageSize) / 2 ** 20);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  await (await fetch(`${url}?mib=${mib}`)).text();
  on = false;
  await sampler;
  peaks.push(peak);
  console.log(`${mib} MiB of 1 MiB ArrayBuffers made and dropped: raw heap peak ${peak.toFixed(1)} MiB`);
}
ws.close();
await mf.dispose();
if (peaks.some((p) => p === 0)) {
  console.error("the isolate's heap usage was not read");
  process.exit(2);
}
process.exit(peaks[2] > 32 ? 1 : 0);
