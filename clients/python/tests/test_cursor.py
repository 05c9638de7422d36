"""ProducerCursor on its own (no relay): the acked view, the envelope, re-assertion."""

from __future__ import annotations

import copy
import enum
from pathlib import Path
from typing import Any, Dict

import pytest

from episode_relay import LIST_FIELDS, ProducerCursor, RelaySink
from episode_relay.wire import pack
from helpers import case_names, load_case, packb, ref_apply, unpackb

CASES = case_names()


def expected_view(held: Dict[str, Dict[str, Any]], delta: Dict[str, Any]) -> Dict[str, Any]:
    """What a reference assembly fed only the acknowledged frames holds of delta's trace."""
    t = held.get(delta["trace"])
    view: Dict[str, Any] = {"open": t is not None}
    if t is not None:
        for f in LIST_FIELDS:
            if t[f]:
                view[f] = len(t[f])
    view["links"] = {int(i): len(t["nodes"][int(i)]["semantic_parents"]) for i in delta.get("links") or {}} if t else {}
    return view


@pytest.mark.parametrize("name", CASES)
def test_acked_view_matches_the_acknowledged_state(name: str) -> None:
    """For every frame, `acked` is exactly what the acknowledged frames built (frames in
    `ack_lost` are not acknowledged), and the envelope carries the frame's bytes untouched."""
    case = load_case(name)
    cursor = ProducerCursor("p")
    held: Dict[str, Dict[str, Any]] = {}
    for i, frame in enumerate(case.frames):
        out = cursor.prepare(frame)
        assert out.delta_bytes is frame and out.seq == i + 1 and out.reasserted == []
        env = unpackb(out.envelope)
        assert list(env) == ["producer", "seq", "acked", "delta"]
        assert env["producer"] == "p" and env["seq"] == i + 1 and env["delta"] == frame
        assert env["acked"] == expected_view(held, unpackb(frame)), f"frame {i}"
        assert list(env["acked"])[0] == "open" and list(env["acked"])[-1] == "links"
        if i in case.ack_lost:
            cursor.fail(out)
        else:
            cursor.acknowledge(out)
            ref_apply(held, copy.deepcopy(unpackb(frame)), skip_repairs=True)
    assert set(cursor.traces) == set(held)


def test_envelope_bytes() -> None:
    cursor = ProducerCursor("worker-7", start_seq=12)
    delta = {"trace": "t", "open": {"version": 1}, "nodes": [{"semantic_parents": [{"node": 0, "type": "x"}]}]}
    out = cursor.prepare(delta)
    assert out.envelope == packb({"producer": "worker-7", "seq": 12, "acked": {"open": False, "links": {}}, "delta": packb(delta)})
    cursor.acknowledge(out)
    out = cursor.prepare({"trace": "t", "links": {0: [{"node": 1, "type": "y"}]}, "calls": [1, 2]})
    assert unpackb(out.envelope)["acked"] == {"open": True, "nodes": 1, "links": {0: 1}}
    cursor.acknowledge(out)
    out = cursor.prepare({"trace": "t", "links": {0: [{"node": 2, "type": "z"}]}})
    assert unpackb(out.envelope)["acked"] == {"open": True, "nodes": 1, "calls": 2, "links": {0: 2}}
    assert out.seq == 14
    # the int keys of `acked.links` are msgpack ints, as the relay requires
    assert b"\xa5links\x81\x00\x02" in out.envelope


def test_discard_drops_the_trace() -> None:
    cursor = ProducerCursor("p")
    cursor.acknowledge(cursor.prepare({"trace": "a", "open": {}, "calls": [1]}))
    cursor.acknowledge(cursor.prepare({"trace": "a", "discard": True}))
    assert cursor.traces == {}
    assert unpackb(cursor.prepare({"trace": "a", "open": {}}).envelope)["acked"] == {"open": False, "links": {}}


def test_reassertion_rules() -> None:
    cursor = ProducerCursor("p")
    cursor.acknowledge(cursor.prepare({"trace": "a", "open": {}, "set": {"x": 1, "y": [1.0], "z": None}, "pending": [{"m": 1}]}))
    failed = cursor.prepare({"trace": "a", "set": {"x": 2, "y": [2.0]}, "pending": []})
    cursor.fail(failed)
    # another trace's success does not settle trace a
    cursor.acknowledge(cursor.prepare({"trace": "b", "open": {}}))
    # `pending` present, `set` absent: set goes before pending; x re-asserted, y carried anew
    out = cursor.prepare({"trace": "a", "calls": [7], "set": {"y": [3.0]}, "pending": [{"m": 2}]})
    assert list(out.delta) == ["trace", "calls", "set", "pending"]
    assert out.delta["set"] == {"y": [3.0], "x": 1} and out.delta["pending"] == [{"m": 2}]
    assert out.reasserted == ["set.x"]
    assert out.delta_bytes == pack(out.delta) and unpackb(unpackb(out.envelope)["delta"]) == out.delta
    cursor.fail(out)
    # both failed deltas are remembered; nodes make a pending re-assertion unnecessary
    out = cursor.prepare({"trace": "a", "nodes": [{"semantic_parents": []}]})
    assert list(out.delta) == ["trace", "nodes", "set"] and out.delta["set"] == {"x": 1, "y": [1.0]}
    cursor.fail(out)
    out = cursor.prepare({"trace": "a", "nodes": [{"semantic_parents": []}], "errors": ["e"]})
    cursor.acknowledge(out)
    # settled: nothing re-asserted any more, and the acked pending is [] (nodes cleared it)
    out = cursor.prepare({"trace": "a", "set": {"z": 0}})
    assert out.reasserted == [] and out.delta == {"trace": "a", "set": {"z": 0}}
    cursor.fail(cursor.prepare({"trace": "a", "pending": [{"m": 3}]}))
    out = cursor.prepare({"trace": "a", "errors": ["f"]})
    assert out.delta == {"trace": "a", "errors": ["f"], "pending": []} and out.reasserted == ["pending"]


def test_no_reassertion_before_open_is_acknowledged() -> None:
    cursor = ProducerCursor("p")
    cursor.fail(cursor.prepare({"trace": "a", "open": {}, "set": {"x": 1}, "pending": [1]}))
    out = cursor.prepare({"trace": "a", "open": {}, "set": {"x": 1}})
    assert out.reasserted == []


def test_sink_seq_start() -> None:
    assert RelaySink("http://127.0.0.1:9", "e").cursor.seq == 0
    named = RelaySink("http://127.0.0.1:9", "e", producer="worker-7")
    assert named.producer == "worker-7" and named.cursor.seq > 10**15  # above any earlier run's
    assert RelaySink("http://127.0.0.1:9", "e", producer="w", start_seq=5).cursor.seq == 4
    assert RelaySink("http://127.0.0.1:9", "e").producer != RelaySink("http://127.0.0.1:9", "e").producer


class Color(enum.Enum):
    RED = "red"


def test_dicts_pack_like_the_worker() -> None:
    cursor = ProducerCursor("p")
    out = cursor.prepare({"trace": "a", "set": {"c": Color.RED, "p": Path("/x")}}, default=RelaySink("http://127.0.0.1:9", "e").default)
    assert out.delta == {"trace": "a", "set": {"c": "red", "p": "/x"}}
    with pytest.raises(ValueError):
        cursor.prepare(b"\x93\x01\x02\x03")
    with pytest.raises(ValueError):
        cursor.prepare({"no_trace": 1})
