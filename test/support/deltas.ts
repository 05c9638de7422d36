// Builders for hand-made upstream deltas in tests (type-preserving: F64 for floats, LMap for maps).
import { encodeLossless, F64, LMap, type LValue } from "../../src/protocol/wire/lossless.js";

export const m = (obj: Record<string, LValue>): LMap => new LMap(Object.entries(obj));
export const f = (v: number): F64 => new F64(v);
export const enc = encodeLossless;

export function nd(dtype: string, shape: number[], values: number[]): LMap {
  const size = dtype.endsWith("16") ? 2 : dtype.endsWith("32") ? 4 : dtype.endsWith("64") ? 8 : 1;
  const data = new Uint8Array(values.length * size);
  const dv = new DataView(data.buffer);
  values.forEach((v, i) => {
    if (size === 1) dv.setUint8(i, v & 0xff);
    else if (size === 2) dv.setUint16(i * 2, v, true);
    else if (size === 4) dv.setUint32(i * 4, v, true);
    else dv.setBigUint64(i * 8, BigInt(v), true);
  });
  return m({ __nd__: true, dtype, shape, data });
}

export function node(i: number, extra: Record<string, LValue> = {}): LMap {
  return m({
    parent: i === 0 ? null : i - 1,
    semantic_parents: [],
    message: m({ role: i % 2 ? "assistant" : "user", content: `message ${i}` }),
    sampled: i % 2 === 1,
    timestamp: f(1754101000.5 + i),
    token_ids: [1, 2, 3],
    mask: [false, true, true],
    logprobs: [f(-0.5), f(-1.0)],
    routed_experts: null,
    ...extra,
  });
}

export const TRACE = "t-1";

export function openDelta(trace = TRACE, extra: Record<string, LValue> = {}): Uint8Array {
  return enc(
    m({
      trace,
      open: m({ version: 1, id: trace, verifiers: m({ version: "0.1.15" }), task: m({ type: "MathTask" }) }),
      set: m({ agent: m({ name: "solver" }), rewards: m({}), root_reply: null, is_completed: false }),
      ...extra,
    }),
  );
}

export function delta(fields: Record<string, LValue>, trace = TRACE): Uint8Array {
  return enc(m({ trace, ...fields }));
}

export function intKeyed(entries: Array<[number, LValue]>): LMap {
  return new LMap(entries);
}
