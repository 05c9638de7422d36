// How long a paced turn holds the episode and its viewer hub in memory (issue 42, the bill): one
// routing-heavy episode, TURNS turns GAPS ms apart (each posted alone), 3 dashboards watching
// (`?routing=0`, acking as the protocol asks), on the relay in two tiers as the cost bench runs it.
// Per turn, each object's wakes, busy ms, requests, messages in and rows written (by table), from
// the usage the objects count. An object woken at every turn hibernated in every gap: the idle
// time the runtime waits (10 s) plus what held it after the turn fit in the gap, so GAP - 10 s
// bounds that hold (bench/cost.ts bills the same bound per paced turn).
//
//   GAPS=10100,10300 TURNS=4 npx tsx bench/repro/paced-hold.ts
//
// Measured on a loaded 2-core machine (load ~20), 2026-12-06, after the hub stopped writing its row
// per feed: at 10.1 s, 10.3 s and 10.6 s the hub woke 1.00 times per turn (busy 4-6 ms a turn, 0
// rows, 1.75 requests: the feed, and the episode's question of what it holds after each of the
// episode's own wakes), the episode 0.75 times (its alarm woke it for the other turns).
import { Decoder } from "@msgpack/msgpack";
import { ACK_BYTES, ackMessage, encodeEnvelope, ProducerCursor, type Usage } from "../../src/protocol/index.js";
import { HttpClient, openSocket, routingDeltas, sleep, startBenchRelay, wsUrl } from "../helpers.js";

const gaps = (process.env.GAPS ?? "10300").split(",").map(Number);
const TURNS = Number(process.env.TURNS ?? 4);
const relay = await startBenchRelay("tmpfs", {}, { tiers: true });
const http = new HttpClient(relay.url);
try {
  for (const gap of gaps) {
    const id = `probe-${gap}-${Date.now().toString(36)}:0`;
    const make = routingDeltas();
    const cursor = new ProducerCursor("probe");
    const post = async (k: number) => {
      const r = await http.request("POST", `/v1/episodes/${id}/deltas`, encodeEnvelope(cursor.envelope(make(k))));
      if (r.status !== 200) throw new Error(`post ${r.status}`);
      cursor.acknowledge();
    };
    await post(0);
    const sockets = [];
    let caught = 0;
    for (let d = 0; d < 3; d++) {
      let received = 0;
      let acked = 0;
      let live = false;
      const dec = new Decoder();
      sockets.push(
        await openSocket(wsUrl(relay.watchUrl ?? relay.url, `/v1/episodes/${id}/watch?routing=0`), (ws) =>
          ws.on("message", (data: Buffer, bin: boolean) => {
            if (!bin) return;
            received += data.length;
            if (!live || received - acked >= ACK_BYTES) {
              acked = received;
              ws.send(ackMessage(received));
            }
            if ((dec.decode(data) as { type: string }).type === "caught_up") {
              live = true;
              caught++;
            }
          }),
        ),
      );
    }
    while (caught < 3) await sleep(50);
    await sleep(gap);
    const read = async () => {
      const res = await http.request("GET", `/v1/episodes/${id}/usage`);
      return JSON.parse(res.body.toString()) as { episode: Usage; hubs: Usage[] };
    };
    const before = await read();
    for (let k = 1; k <= TURNS; k++) {
      await post(k);
      await sleep(gap);
    }
    const after = await read();
    const per = (a: Usage, b: Usage | undefined) =>
      `wakes/turn ${((a.wakes - (b?.wakes ?? 0)) / TURNS).toFixed(2)}, busy ms/turn ${((a.busyMs - (b?.busyMs ?? 0)) / TURNS).toFixed(1)}, requests/turn ${((a.requests - (b?.requests ?? 0)) / TURNS).toFixed(2)}, wsIn/turn ${((a.wsIn - (b?.wsIn ?? 0)) / TURNS).toFixed(2)}, rows/turn ${((a.rowsWritten - (b?.rowsWritten ?? 0)) / TURNS).toFixed(2)} ${JSON.stringify(
        Object.fromEntries(
          Object.entries(a.written)
            .map(([t, n]) => [t, n - (b?.written[t] ?? 0)])
            .filter(([, n]) => n),
        ),
      )}`;
    console.log(`gap ${gap} ms, ${TURNS} turns: episode ${per(after.episode, before.episode)}`);
    for (const [i, h] of after.hubs.entries()) console.log(`  hub ${i}: ${per(h, before.hubs[i])}`);
    for (const s of sockets) s.close();
  }
} finally {
  http.close();
  await relay.stop();
}
