// Msgpack format bytes (the first byte of every value): the kind of value each one starts, and
// the integer an int format holds.

export type Kind = "nil" | "bool" | "int" | "float" | "str" | "bin" | "array" | "map" | "ext" | "reserved";

/**
 * The integer whose type byte `t` (fixint or 0xcc..0xd3) is at `at`, its bytes already checked to be
 * there: a number when exact (|v| ≤ 2^53 - 1), else a bigint.
 */
export function intAt(dv: DataView, at: number, t: number): number | bigint {
  if (t < 0x80) return t;
  if (t >= 0xe0) return t - 0x100;
  switch (t) {
    case 0xcc:
      return dv.getUint8(at + 1);
    case 0xcd:
      return dv.getUint16(at + 1);
    case 0xce:
      return dv.getUint32(at + 1);
    case 0xd0:
      return dv.getInt8(at + 1);
    case 0xd1:
      return dv.getInt16(at + 1);
    case 0xd2:
      return dv.getInt32(at + 1);
    default: {
      const big = t === 0xcf ? dv.getBigUint64(at + 1) : dv.getBigInt64(at + 1);
      return big <= BigInt(Number.MAX_SAFE_INTEGER) && big >= -BigInt(Number.MAX_SAFE_INTEGER) ? Number(big) : big;
    }
  }
}

export function kindOf(t: number): Kind {
  if (t < 0x80 || t >= 0xe0) return "int";
  if (t <= 0x8f) return "map";
  if (t <= 0x9f) return "array";
  if (t <= 0xbf) return "str";
  switch (t) {
    case 0xc0:
      return "nil";
    case 0xc2:
    case 0xc3:
      return "bool";
    case 0xc4:
    case 0xc5:
    case 0xc6:
      return "bin";
    case 0xca:
    case 0xcb:
      return "float";
    case 0xd9:
    case 0xda:
    case 0xdb:
      return "str";
    case 0xdc:
    case 0xdd:
      return "array";
    case 0xde:
    case 0xdf:
      return "map";
    case 0xc1:
      return "reserved";
  }
  if (t >= 0xcc && t <= 0xd3) return "int";
  return "ext";
}
