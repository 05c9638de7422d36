"""The export's truncation columns without pandas (the DataFrame tests need it; these rows do not):
``is_truncated`` is the trainer's (a trace stopped at a framework limit, or its last call without an
``error`` finished with ``length``; any trace for a rollout) and ``is_timeout`` the first trace's; no
``truncated`` column (the API's deprecated alias of ``is_timeout``, which reads as the trainer's truncation)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from episode_relay.export import BRANCH_COLUMNS, ROLLOUT_COLUMNS, branch_records, rollout_record, trace_truncated


def trace(tid: str, calls: List[Dict[str, Any]], stop: Optional[str] = None, timeout: bool = False) -> Dict[str, Any]:
    return {"id": tid, "stop_condition": stop, "is_timeout": timeout, "calls": calls, "nodes": [{"parent": None, "message": {"role": "assistant", "content": "x"}}]}


def call(finish: Optional[str], error: Optional[str] = None) -> Dict[str, Any]:
    return {"finish_reason": finish, "error": error}


def test_a_trace_is_truncated_by_its_stop_or_its_last_successful_call() -> None:
    assert trace_truncated(trace("a", [call("stop"), call("length")]))
    assert not trace_truncated(trace("b", [call("length"), call("stop")]))
    assert trace_truncated(trace("c", [call("length"), call(None, error="boom")]))  # the failed call does not count
    assert not trace_truncated(trace("d", [call("length"), call(None)]))  # a successful call without a reason
    assert trace_truncated(trace("e", [], stop="max_turns"))
    assert not trace_truncated(trace("f", [call("stop")], stop="max_turns_reached"))  # not a framework limit
    assert not trace_truncated(trace("g", []))


def test_rollout_and_branch_rows_carry_both_names_and_not_the_alias() -> None:
    row = {"id": "r:1", "run": "r", "status": "finished"}
    # the first trace timed out and ended well; the second (a judge) was cut at `length`
    episode = {"traces": [trace("t0", [call("stop")], timeout=True), trace("t1", [call("length")])]}
    rec = rollout_record(row, episode)
    assert set(ROLLOUT_COLUMNS) == set(rec)
    assert "truncated" not in ROLLOUT_COLUMNS and "truncated" not in BRANCH_COLUMNS
    assert (rec["is_truncated"], rec["is_timeout"]) == (True, True)
    branches = branch_records(row, episode)
    assert all(set(BRANCH_COLUMNS) == set(b) for b in branches)
    assert [(b["trace"], b["is_truncated"], b["is_timeout"]) for b in branches] == [
        ("t0", False, True),
        ("t1", True, False),
    ]
    calm = rollout_record(row, {"traces": [trace("t0", [call("stop")])]})
    assert (calm["is_truncated"], calm["is_timeout"]) == (False, False)
