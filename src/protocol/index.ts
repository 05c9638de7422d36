// The protocol's one entry for everything outside src/ (the clients, the CLI, the dashboard, the
// tools and benches): the wire codec, the assembly, the envelope, the watch protocol, index rows
// and the HTTP rules. Pure modules only (src/protocol/tsconfig.json checks it without the Workers
// runtime's types; biome.json forbids runtime imports here and deep imports from outside).

export * from "./annotations/fold.js";
export * from "./annotations/records.js";
export * from "./assembly/delta.js";
export * from "./assembly/episode-assembly.js";
export * from "./assembly/errors.js";
export * from "./assembly/ndarray.js";
export * from "./assembly/node.js";
export * from "./assembly/reply.js";
export * from "./assembly/trace.js";
export * from "./billing/usage.js";
export * from "./envelope/answer.js";
export * from "./envelope/dispatch.js";
export * from "./envelope/envelope.js";
export * from "./envelope/memory-episode.js";
export * from "./envelope/producer.js";
export {
  DEFAULT_RULES,
  noWork,
  type Rule,
  SEGMENT_STEPS,
  segmentFlags,
  type TextRule,
  type TextWork,
  TURN_STEPS,
  textRules,
} from "./flags/rules.js";
export * from "./http/auth.js";
export * from "./http/credentials.js";
export * from "./http/errors.js";
export * from "./http/keys.js";
export * from "./http/route.js";
export * from "./limits/vars.js";
export * from "./registry/aggregates.js";
export * from "./registry/entry.js";
export * from "./registry/groups.js";
export * from "./registry/index-protocol.js";
export * from "./registry/ranking.js";
export * from "./registry/reward-trend.js";
export * from "./registry/rewards.js";
export * from "./registry/row-filter.js";
export * from "./registry/rows.js";
export * from "./registry/run.js";
export * from "./registry/run-timeline.js";
export * from "./registry/steps.js";
export * from "./registry/truncation.js";
export * from "./registry/zero-variance-trend.js";
export * from "./search/query.js";
export { nodeSegments, type Segment, taskSegment } from "./search/segments.js";
export * from "./watch/protocol.js";
export * from "./wire/errors.js";
export * from "./wire/json-view.js";
export * from "./wire/lossless.js";
export * from "./wire/reader.js";
export * from "./wire/writer.js";
