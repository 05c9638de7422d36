// The wire protocols' modules, each direction against the other: what the relay encodes, the
// clients decode to the same values; what is not a message is refused. The bytes of the watch
// messages are also checked against @msgpack/msgpack's encoding of the same map (an independent
// encoder: key order and kinds must match).
import { encode } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import { encodeReply, parseReply } from "../../src/protocol/assembly/reply.js";
import { encodeAnswer, type IngestAnswer, parseAnswer } from "../../src/protocol/envelope/answer.js";
import {
  encodeRunMessage,
  encodeRunsMessage,
  parseRunMessage,
  parseRunsMessage,
  type RunMessage,
  type RunsMessage,
} from "../../src/protocol/registry/index-protocol.js";
import {
  ackMessage,
  annotationsMessage,
  caughtUpMessage,
  decodeWatchMessage,
  finishMessage,
  framesMessage,
  helloMessage,
  parseWatcherText,
  snapshotMessage,
  statusMessage,
} from "../../src/protocol/watch/protocol.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const bin = (...b: number[]) => Uint8Array.from(b);

describe("watch protocol: server → watcher", () => {
  const cases: Array<[string, Uint8Array, Record<string, unknown>]> = [
    [
      "hello",
      helloMessage("run:1", "live", 7, 4096),
      { type: "hello", protocol: 2, episode: "run:1", status: "live", seq: 7, ack_bytes: 4096 },
    ],
    [
      "snapshot",
      snapshotMessage(9, "rewind", [bin(0x80), bin(0x81, 0xa1, 0x61, 0x01)], true),
      { type: "snapshot", seq: 9, reason: "rewind", deltas: [bin(0x80), bin(0x81, 0xa1, 0x61, 0x01)], more: true },
    ],
    [
      "frames",
      framesMessage([
        { seq: 3, delta: bin(1, 2) },
        { seq: 4, delta: bin() },
      ]),
      {
        type: "frames",
        frames: [
          [3, bin(1, 2)],
          [4, bin()],
        ],
      },
    ],
    ["caught_up", caughtUpMessage(12), { type: "caught_up", seq: 12 }],
    [
      "finish (failed, error)",
      finishMessage("failed", 5, bin(0xc0), "boom"),
      { type: "finish", status: "failed", seq: 5, reply: bin(0xc0), error: "boom" },
    ],
    [
      "finish (no error)",
      finishMessage("finished", 5, bin(0x80), null),
      { type: "finish", status: "finished", seq: 5, reply: bin(0x80), error: null },
    ],
    [
      "status",
      statusMessage("finish_refused", 8, "count mismatch"),
      { type: "status", status: "finish_refused", seq: 8, error: "count mismatch" },
    ],
    ["annotations", annotationsMessage(3), { type: "annotations", version: 3 }],
  ];
  for (const [name, bytes, value] of cases) {
    it(`${name}: bytes equal an independent encoding, and decode back`, () => {
      expect(hex(bytes)).toBe(hex(encode(value)));
      expect(decodeWatchMessage(bytes)).toEqual(value);
    });
  }

  it.each<[string, unknown]>([
    ["not a map", [1, 2]],
    ["no type", { seq: 1 }],
    ["annotations without a version", { type: "annotations" }],
    ["hello without seq", { type: "hello", protocol: 2, episode: "e", status: "live", ack_bytes: 1 }],
    ["negative seq", { type: "caught_up", seq: -1 }],
    ["snapshot with a str delta", { type: "snapshot", seq: 1, reason: "join", deltas: ["x"], more: false }],
    ["snapshot with an unknown reason", { type: "snapshot", seq: 1, reason: "why", deltas: [], more: false }],
    ["frames with a 3-tuple", { type: "frames", frames: [[1, bin(), 3]] }],
    ["finish with status live", { type: "finish", status: "live", seq: 1, reply: bin(), error: null }],
    ["status with a numeric error", { type: "status", status: "live", seq: 1, error: 3 }],
  ])("refuses %s", (_name, value) => {
    expect(() => decodeWatchMessage(encode(value))).toThrow(/watch message/);
  });

  it("a type it does not know (a later relay's) decodes as unknown, for the client to skip", () => {
    expect(decodeWatchMessage(encode({ type: "from_the_future", x: 1 }))).toEqual({
      type: "unknown",
      name: "from_the_future",
    });
  });
});

describe("watch protocol: watcher → server", () => {
  it("an ack round-trips", () => {
    expect(parseWatcherText(ackMessage(123456))).toEqual({ type: "ack", bytes: 123456 });
  });
  it.each([
    "ping",
    "{}",
    '{"type":"ack"}',
    '{"type":"ack","bytes":-1}',
    '{"type":"ack","bytes":1.5}',
    '{"type":"nack","bytes":1}',
    `{"type":"ack","bytes":1,"x":"${"y".repeat(300)}"}`,
  ])("refuses %s", (text) => {
    expect(parseWatcherText(text)).toBeNull();
  });
});

describe("upstream replies (encodeReply for tools and tests; the relay parses)", () => {
  it("a finished reply: upstream key order, an empty head, the traces' counts; parseReply reads it back", () => {
    const bytes = encodeReply({ success: true, traces: [{ id: "t-1", nodes: 3, calls: 2 }] });
    expect(bytes).toEqual(
      encode({ success: true, error: null, head: {}, traces: [{ id: "t-1", nodes: 3, calls: 2 }] }),
    );
    expect(parseReply(bytes)).toEqual({
      success: true,
      error: null,
      head: [],
      summaries: [{ id: "t-1", nodes: 3, calls: 2 }],
    });
  });

  it("a failed reply: its error, no head, no traces", () => {
    const bytes = encodeReply({ success: false, error: "sandbox crashed" });
    expect(bytes).toEqual(encode({ success: false, error: "sandbox crashed", head: null, traces: [] }));
    expect(parseReply(bytes)).toMatchObject({ success: false, error: "sandbox crashed", head: null, summaries: [] });
  });
});

describe("producer answers", () => {
  const answers: IngestAnswer[] = [
    { ok: true, seq: 4, applied: 2, duplicates: 1, producers: { w1: 3 } },
    { ok: false, status: 422, error: "unknown_trace", message: "trace: no open for t9", field: "trace" },
  ];
  it.each(answers)("round-trips %j", (a) => {
    expect(parseAnswer(encodeAnswer(a))).toEqual(a);
  });
  it.each([
    "",
    "null",
    "[]",
    '{"ok":true}',
    '{"ok":true,"seq":-1,"applied":0,"duplicates":0,"producers":{}}',
    '{"ok":false,"status":400}',
  ])("refuses %j", (text) => {
    expect(() => parseAnswer(text)).toThrow(/not a relay answer/);
  });
});

describe("run and runs socket messages", () => {
  const entry = {
    id: "run:1",
    run: "run",
    status: "live" as const,
    created: "2026-01-01T00:00:00.000Z",
    updated: "2026-01-01T00:00:01.000Z",
    ended: null,
    seq: 3,
    traces: 1,
    nodes: 2,
    calls: 0,
    tokens: 10,
    rewards: null,
    reward: null,
    scores: {},
    error: null,
    kind: "train",
    env: null,
    step: 3,
    policy_version: 2,
    staleness: 1,
  };
  const summary = {
    run: "run",
    created: entry.created,
    updated: entry.updated,
    episodes: 1,
    live: 1,
    finished: 0,
    failed: 0,
    finish_refused: 0,
  };
  const runMessages: RunMessage[] = [
    { type: "snapshot", run: "run", aggregates: null, episodes: [entry], truncated: false, limit: 200 },
    { type: "changes", upserts: [entry], deletes: ["run:2"], aggregates: null },
    {
      type: "changes",
      upserts: [],
      deletes: [],
      aggregates: null,
      steps: [
        {
          step: 3,
          kind: "train",
          episodes: 1,
          live: 1,
          finished: 0,
          failed: 0,
          mean_reward: null,
          std_reward: null,
          mean_rewards: {},
          zero_variance_share: null,
          groups: { complete: 0, zero_variance: 0 },
          mean_turns: 2,
          mean_tokens: 10,
          staleness: { mean: 1, max: 1 },
          ended: { count: 0, truncated: 0, timeouts: 0, errored: 0 },
          truncated_share: null,
          timeout_share: null,
          error_share: null,
          output_tokens: { mean: null, p90: null },
        },
      ],
      steps_gone: [{ step: 2, kind: null }],
    },
  ];
  it.each(runMessages)("run socket: round-trips $type", (m) => {
    expect(parseRunMessage(encodeRunMessage(m))).toEqual(m);
  });
  const runsMessages: RunsMessage[] = [
    { type: "runs", runs: [summary], truncated: false, limit: 200 },
    { type: "run_changes", upserts: [summary], deletes: ["old"] },
  ];
  it.each(runsMessages)("runs socket: round-trips $type", (m) => {
    expect(parseRunsMessage(encodeRunsMessage(m))).toEqual(m);
  });
  it.each([
    '{"type":"changes"}',
    '{"type":"snapshot","run":"r","aggregates":null,"episodes":[{}],"truncated":false,"limit":1}',
    '{"type":"runs"}',
    '"x"',
    "nope",
  ])("refuses %s", (text) => {
    expect(() => parseRunMessage(text)).toThrow(/not a run message|not an index message/);
    expect(() => parseRunsMessage(text)).toThrow(/not a runs message|not an index message/);
  });
});
