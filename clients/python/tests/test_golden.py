"""Every golden case, replayed through RelaySink into a real relay the way a streamer sends it.

Frames listed in `ack_lost` reach the relay but the sink sees a failure (the connection
breaks before the answer is read), so its acknowledged view does not advance, exactly like
the worker whose cursor stayed put. The fetched episode must equal the golden bytes.
"""

from __future__ import annotations

import asyncio
from typing import Any, Dict, Union

import httpx
import pytest

from conftest import Relay
from episode_relay import FinishMismatch, RelayError, RelaySink, WebSocketChannel
from helpers import FaultyChannel, FaultyTransport, case_names, episode_id, live_traces, load_case, packb, unpackb

CASES = case_names()


def test_golden_cases_present() -> None:
    assert len(CASES) >= 12, CASES
    assert "ack_lost" in CASES and "gap_detected" in CASES


async def replay(relay: Relay, name: str, transport: str) -> Dict[str, Any]:
    case = load_case(name)
    eid = episode_id(f"{name}-{transport}")
    faulty = FaultyTransport()
    client = httpx.AsyncClient(transport=faulty, timeout=60)
    channel: Union[str, FaultyChannel] = "http"
    if transport == "ws":
        channel = FaultyChannel(WebSocketChannel(relay.url, eid, token=relay.token, timeout=60))
    sink = RelaySink(relay.url, eid, token=relay.token, transport=channel, client=client, retry_for=0, timeout=60)
    lost = set(case.ack_lost)
    checkpoints = dict(case.checkpoints)
    stats = {"acked": 0, "lost": 0, "duplicates": 0}
    try:
        for i, frame in enumerate(case.frames):
            delta = unpackb(frame)
            assert packb(delta) == frame, f"frame {i} does not re-pack to its own bytes"
            seq_before = sink.cursor.seq
            if i in lost:
                (channel if isinstance(channel, FaultyChannel) else faulty).fail_next("lost")
                with pytest.raises(RelayError):
                    await sink.send(delta)
                stats["lost"] += 1
            else:
                ack = await sink.send(delta)
                assert ack["ok"] is True and ack["applied"] == 1, ack
                stats["acked"] += 1
            assert sink.cursor.seq == seq_before + 1
            if i + 1 in checkpoints:
                assert live_traces(await sink.fetch()) == checkpoints[i + 1], f"checkpoint after {i + 1} frames"
        # what went on the wire: one envelope per frame, in order, each carrying the frame's
        # exact bytes, and the cursor of the last acknowledged send
        bodies = [b for b, _ in channel.sent] if isinstance(channel, FaultyChannel) else [s.body for s in faulty.delta_bodies()]
        envelopes = [unpackb(b) for b in bodies]
        assert [e["delta"] for e in envelopes] == case.frames
        assert [e["seq"] for e in envelopes] == list(range(1, len(case.frames) + 1))
        assert all(e["producer"] == sink.producer for e in envelopes)
        assert all(list(e) == ["producer", "seq", "cursor", "delta"] for e in envelopes)

        reply = unpackb(case.reply)
        assert packb(reply) == case.reply
        if case.finish_error is not None:
            with pytest.raises(FinishMismatch) as info:
                await sink.finish(reply)
            assert str(info.value) == case.finish_error
            assert info.value.status == 409 and info.value.error == "finish_mismatch"
        else:
            answer = await sink.finish(reply)
            assert answer["ok"] is True and answer["status"] == "finished"
            got = await sink.fetch()
            assert case.episode is not None
            assert len(got) == len(case.episode)
            assert got == case.episode, f"{name}: the served episode differs from the golden bytes"
            # the same reply again is taken as one
            again = await sink.finish(case.reply)
            assert again["status"] == "finished"
    finally:
        await sink.close()
        await client.aclose()
    return stats


@pytest.mark.parametrize("name", CASES)
def test_golden_http(relay: Relay, name: str) -> None:
    stats = asyncio.run(replay(relay, name, "http"))
    assert stats["lost"] == len(load_case(name).ack_lost)


@pytest.mark.parametrize("name", CASES)
def test_golden_ws(relay: Relay, name: str) -> None:
    stats = asyncio.run(replay(relay, name, "ws"))
    assert stats["lost"] == len(load_case(name).ack_lost)
