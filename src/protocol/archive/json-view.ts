// The JSON view of an archived episode, rendered from its msgpack (the only copy R2 keeps) as the
// bytes stream in: the same text the episode's object writes from SQLite (render.ts writeFinished
// into a JsonOut), byte for byte, so an archived episode answers the same JSON, and the same ETag.
//
// The object writes the containers it builds (the episode map, `traces`, each trace map and each
// of its lists) as JSON containers and every other value whole (JsonOut.value, the json-view
// mapping); this walks the archived bytes along the same layout, so each leaf is one item or
// scalar: memory is about one item (never split), one input chunk and one output step.

import { isListField } from "../assembly/fields.js";
import { JsonOut } from "../assembly/render.js";
import { ArchiveError, Input } from "./stream-input.js";

/** Output between two yields (bytes, about): small enough to stream, large enough to batch. */
const OUT_STEP = 64 * 1024;

/** The archived episode's JSON view, from its msgpack bytes as they stream in. */
export async function* archivedJson(chunks: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  const input = new Input(chunks[Symbol.asyncIterator](), { peakHeld: 0, pulls: 0 });
  const out = new JsonOut();
  try {
    yield* episode(input, out);
    while (input.end === input.pos && (await input.more()));
    if (input.end > input.pos) throw new ArchiveError(`trailing bytes after the episode (at byte ${input.pos})`);
    yield* out.take();
  } finally {
    // a body left half read (the client went) is cancelled, not leaked; its own failure must not hide ours
    if (!input.done) await Promise.resolve(input.it.return?.()).catch(() => undefined);
  }
}

async function* episode(input: Input, out: JsonOut): AsyncGenerator<Uint8Array> {
  const n = await input.header("map", "the episode");
  out.map();
  for (let i = 0; i < n; i++) {
    const key = await keyOf(input, out, "episode");
    if (key === "traces" && (await isArray(input))) yield* traces(input, out);
    else leaf(input, out, await input.value());
    if (out.pending >= OUT_STEP) yield* out.take();
  }
  out.end();
}

async function* traces(input: Input, out: JsonOut): AsyncGenerator<Uint8Array> {
  const n = await input.header("array", "traces");
  out.array();
  for (let i = 0; i < n; i++) {
    const where = `traces[${i}]`;
    const fields = await input.header("map", where);
    out.map();
    for (let f = 0; f < fields; f++) {
      const key = await keyOf(input, out, where);
      if (isListField(key) && (await isArray(input))) {
        const count = await input.header("array", `${where}.${key}`);
        out.array();
        for (let j = 0; j < count; j++) {
          leaf(input, out, await input.value());
          if (out.pending >= OUT_STEP) yield* out.take();
        }
        out.end();
      } else leaf(input, out, await input.value());
      if (out.pending >= OUT_STEP) yield* out.take();
    }
    out.end();
  }
  out.end();
}

/** A str map key, written; its text. */
async function keyOf(input: Input, out: JsonOut, where: string): Promise<string> {
  const span = await input.value();
  const text = input.reader(span.start, span.end).str();
  if (text === undefined) throw new ArchiveError(`${where} keys must be str (at byte ${span.start})`);
  out.key(input.view(span.start, span.end));
  return text;
}

function leaf(input: Input, out: JsonOut, span: { start: number; end: number }): void {
  out.value(input.view(span.start, span.end));
}

async function isArray(input: Input): Promise<boolean> {
  await input.ensure(1);
  const t = input.byte(input.pos);
  return (t & 0xf0) === 0x90 || t === 0xdc || t === 0xdd;
}

/** The JSON view as a byte stream (an R2 body in, an HTTP body out), pulled as the client reads. */
export function archivedJsonStream(body: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  const it = archivedJson(body as unknown as AsyncIterable<Uint8Array>);
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const r = await it.next();
          if (r.done) controller.close();
          else controller.enqueue(r.value);
        } catch (e) {
          controller.error(e);
        }
      },
      async cancel() {
        await it.return(undefined);
      },
    },
    { highWaterMark: 0 },
  );
}
