"""The episode's reward as the trainer counts it (``episode_relay.export.episode_reward``, the
relay's ``src/protocol/registry/rewards.ts``), against the rule restated here, and the export's
expected answer read from a trace's ``open.task``. No relay, no pandas."""

from __future__ import annotations

import json
from typing import Any, List

from episode_relay import episode_reward, rollout_record, trace_reward
from helpers import load_case, unpackb


def trainer_reward(traces: List[Any]) -> Any:
    """The trainer's rule, restated: per trace with scores the sum of score × weight, the mean over those traces;
    per key the mean of its scores over the traces that have it."""
    totals, by_key = [], {}
    for r in traces:
        scored = [(k, v["score"], v.get("weight", 1)) for k, v in (r or {}).items() if isinstance(v, dict) and isinstance(v.get("score"), (int, float))]
        if not scored:
            continue
        totals.append(sum(s * w for _, s, w in scored))
        for k, s, _ in scored:
            by_key.setdefault(k, []).append(float(s))
    return (sum(totals) / len(totals) if totals else None), {k: sum(v) / len(v) for k, v in sorted(by_key.items())}


def test_episode_reward_is_the_trainers() -> None:
    assert episode_reward([unpackb(load_case("chat_basic").episode)["traces"][0]["rewards"]]) == (1.125, {"correct": 1.0, "format": 0.5})
    # several traces, one of them reward-less (a judge's seat): skipped, not a 0
    traces = [{"correct": {"score": 1, "weight": 1}, "format": {"score": 0.5, "weight": 0.25}}, None, {"judge": None}, {"correct": {"score": 0}}]
    assert episode_reward(traces) == trainer_reward(traces) == (0.5625, {"correct": 0.5, "format": 0.5})
    assert episode_reward([None, {}]) == (None, {})
    assert trace_reward(0.25) == 0.25


def test_every_golden_episode_equals_the_recount() -> None:
    for name in ("chat_basic", "multi_trace_links", "tool_calls_pending", "odd_values", "empty_trace", "discard_retry"):
        traces = [t.get("rewards") for t in unpackb(load_case(name).episode)["traces"]]
        assert episode_reward(traces) == trainer_reward(traces), name
        assert rollout_record({"id": name}, unpackb(load_case(name).episode))["reward"] == trainer_reward(traces)[0], name
