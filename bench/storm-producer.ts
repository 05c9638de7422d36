// The storm's producer and health probe (bench/memory.ts), in a process of their own: as a real
// worker on another machine would, it times its acks without sharing an event loop with the
// storm's 150 watcher clients. It writes large_routing's turns to the episode the parent names,
// one every 250 ms over the producer socket, and GETs /v1/health every 250 ms; on "take" it hands
// over the ack and health times since the last take; on "stop" it closes and exits.
import { WebSocket } from "ws";
import { encodeEnvelope, ProducerCursor } from "../src/protocol/index.js";
import { fixturePath, loadCase } from "../tools/conformance/cases.js";

interface Start {
  url: string;
  id: string;
  turnMs: number;
}

const send = (m: unknown) => process.send?.(m);

process.once("message", (start: Start) => {
  void run(start).catch((e: unknown) => {
    send({ error: String(e instanceof Error ? e.stack : e) });
    process.exit(1);
  });
});
process.on("disconnect", () => process.exit(0));

async function run({ url, id, turnMs }: Start): Promise<void> {
  const c = loadCase(fixturePath("large_routing"));
  const producer = new ProducerCursor("storm-live");
  const ws = new WebSocket(`${url.replace(/^http/, "ws")}/v1/episodes/${id}/ingest`);
  await new Promise((resolve, reject) => ws.once("open", resolve).once("error", reject));
  let acks: number[] = [];
  let health: number[] = [];
  let stop = false;
  process.on("message", (m) => {
    if (m === "take") {
      send({ acks, health });
      acks = [];
      health = [];
    } else if (m === "stop") stop = true;
  });
  const probe = (async () => {
    while (!stop) {
      const t0 = performance.now();
      await (await fetch(`${url}/v1/health`)).text();
      health.push(performance.now() - t0);
      await sleep(250);
    }
  })();
  send({ ready: true });
  let turn = 1;
  while (!stop) {
    const f = c.frames[turn]!;
    turn = turn === c.frames.length - 1 ? 1 : turn + 1;
    const t0 = performance.now();
    const ack = new Promise<string>((resolve) => ws.once("message", (d) => resolve(String(d))));
    ws.send(encodeEnvelope(producer.envelope(f)));
    const a = JSON.parse(await ack) as { ok: boolean };
    acks.push(performance.now() - t0);
    if (!a.ok) throw new Error(`storm producer refused: ${JSON.stringify(a)}`);
    producer.acknowledge();
    await sleep(Math.max(0, turnMs - (performance.now() - t0)));
  }
  await probe;
  ws.close();
  send({ stopped: true });
  process.exit(0);
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
