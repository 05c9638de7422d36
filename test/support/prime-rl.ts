// prime-rl's shapes for tests: one rollout's dispatch identity as its orchestrator makes it
// (`dispatch_info` in orchestrator/live.py: these 8 keys in this order; `id` a uuid4 hex, `group`
// a hyphenated uuid, `task` the task's name or `idx=N`, `started` wall-clock seconds).
export const PRIME_DISPATCH = {
  id: "0a1b2c3d4e5f40718293a4b5c6d7e8f9",
  kind: "train",
  env: "gsm8k",
  group: "3b9c5e2a-7d41-4f6e-9a0b-1c2d3e4f5a6b",
  task: "idx=0",
  policy_version: 2,
  step: 3,
  started: 1764644000.25,
};
