"""ProducerCursor on its own (no relay): the envelope and its cursor."""

from __future__ import annotations

import enum
from pathlib import Path

import pytest

from episode_relay import ProducerCursor, RelaySink
from helpers import case_names, load_case, packb, unpackb

CASES = case_names()


@pytest.mark.parametrize("name", CASES)
def test_cursor_is_the_last_acknowledged_send(name: str) -> None:
    """For every frame, the envelope carries the frame's bytes untouched and `cursor` is the seq
    of the last frame whose send was acknowledged (frames in `ack_lost` are not)."""
    case = load_case(name)
    cursor = ProducerCursor("p")
    last_acked = 0
    for i, frame in enumerate(case.frames):
        out = cursor.prepare(frame)
        assert out.delta_bytes is frame and out.seq == i + 1
        env = unpackb(out.envelope)
        assert list(env) == ["producer", "seq", "cursor", "delta"]
        assert env == {"producer": "p", "seq": i + 1, "cursor": last_acked, "delta": frame}, f"frame {i}"
        if i not in case.ack_lost:
            cursor.acknowledge(out)
            last_acked = i + 1


def test_envelope_bytes() -> None:
    cursor = ProducerCursor("worker-7", start_seq=12)
    delta = {"trace": "t", "open": {"version": 1}}
    out = cursor.prepare(delta)
    assert out.envelope == packb({"producer": "worker-7", "seq": 12, "cursor": 0, "delta": packb(delta)})
    cursor.acknowledge(out)
    failed = cursor.prepare({"trace": "t", "calls": [1]})
    assert unpackb(failed.envelope)["cursor"] == 12
    # the send of 13 raised: the next envelope still says 12, and the relay retracts 13 if it had it
    out = cursor.prepare({"trace": "t", "calls": [1, 2]})
    assert out.seq == 14 and unpackb(out.envelope)["cursor"] == 12


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
