"""RelayForwarder: ordered background delivery with same-seq retries, and its give-up policy."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import defaultdict
from typing import Dict, List

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayForwarder, WebSocketChannel
from helpers import FaultyChannel, FaultyTransport, closed_port, episode_id, load_case, unpackb


def check_same_envelope_retries(faulty: FaultyTransport, frames: List[bytes]) -> None:
    """Every attempt of one seq carried the same bytes; seqs 1..n carried the frames in order."""
    by_seq: Dict[int, List[bytes]] = defaultdict(list)
    for s in faulty.delta_bodies():
        by_seq[unpackb(s.body)["seq"]].append(s.body)
    assert sorted(by_seq) == list(range(1, len(frames) + 1))
    for seq, bodies in by_seq.items():
        assert len(set(bodies)) == 1, f"seq {seq} was re-sent with different bytes"
        assert unpackb(bodies[0])["delta"] == frames[seq - 1]


def test_forwarder_delivers_a_case_through_failures(relay: Relay) -> None:
    """Refused connections, lost answers and 503s at several points: on_delta never blocks,
    every delta is applied exactly once in order, then the reply; the episode is exact."""
    case = load_case("multi_trace_links")

    async def run() -> None:
        faulty = FaultyTransport(paths=("/deltas", "/reply"))
        faulty.fail_next("refused", "refused", None, "lost", "503", None, None, "lost", "lost", None, "503")
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            fwd = RelayForwarder(relay.url, episode_id("fwd"), token=relay.token, client=client, backoff_initial=0.01, backoff_max=0.05)
            started = time.monotonic()
            for frame in case.frames:
                fwd.on_delta(unpackb(frame))  # dicts, as a delta callback gets them
            fwd.on_reply(unpackb(case.reply))
            assert time.monotonic() - started < 0.5  # returned at once
            assert await fwd.drain(timeout=60)
            assert not fwd.gave_up and fwd.delivered == len(case.frames)
            assert fwd.retries == 7
            assert fwd.finish_result is not None and fwd.finish_result["status"] == "finished"
            check_same_envelope_retries(faulty, case.frames)
            # duplicates were acknowledged, not applied twice: the episode is exact
            assert await fwd.http.get_episode() == case.episode
            assert await fwd.close()
            assert fwd.status == "closed" or fwd.status == "finished"

    asyncio.run(run())


def test_forwarder_rides_out_an_unreachable_relay(relay: Relay) -> None:
    """Nothing listens for the first second (real connection refusals); deltas arrive from
    another thread meanwhile; once the relay is back everything lands, in order."""
    case = load_case("failed_sends")

    async def run() -> None:
        faulty = FaultyTransport(paths=("/deltas", "/reply"))
        faulty.unreachable_until = time.monotonic() + 1.0
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            fwd = RelayForwarder(relay.url, episode_id("fwd-down"), token=relay.token, client=client, backoff_initial=0.05, backoff_max=0.2)
            await fwd.start()
            loop = asyncio.get_running_loop()

            def produce() -> None:  # a delta callback on another thread, with bytes
                for frame in case.frames:
                    fwd.on_delta(frame)
                    time.sleep(0.05)
                fwd.on_reply(case.reply)

            thread = threading.Thread(target=produce)
            thread.start()
            await loop.run_in_executor(None, thread.join)
            assert fwd.buffered > 0  # still waiting for the relay
            assert await fwd.drain(timeout=60)
            assert fwd.retries > 0
            assert [s.fault for s in faulty.seen].count("refused") >= 3
            check_same_envelope_retries(faulty, case.frames)
            assert await fwd.http.get_episode() == case.episode
            await fwd.close()

    asyncio.run(run())


def test_forwarder_over_ws(relay: Relay) -> None:
    """The same over the producer socket, with acknowledgements lost on a broken socket."""
    case = load_case("routing_repair_widen")

    async def run() -> None:
        eid = episode_id("fwd-ws")
        channel = FaultyChannel(WebSocketChannel(relay.url, eid, token=relay.token, timeout=30))
        channel.fail_next(None, "lost", None, None, "lost", "lost")
        fwd = RelayForwarder(relay.url, eid, token=relay.token, transport=channel, backoff_initial=0.01)
        for frame in case.frames:
            fwd.on_delta(frame)
        fwd.on_reply(case.reply)
        assert await fwd.drain(timeout=60)
        assert fwd.delivered == len(case.frames) and fwd.retries == 3
        assert fwd.finish_result is not None
        assert await fwd.http.get_episode() == case.episode
        await fwd.close()

    asyncio.run(run())


def test_forwarder_gives_up_when_the_buffer_is_full(caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens and the buffer holds 3 messages: the 4th on_delta gives up, with one
    warning, the buffer is discarded, and later calls are ignored; nothing raises."""
    frames = load_case("chat_basic").frames
    caplog.set_level(logging.INFO, logger="episode_relay")

    async def run() -> None:
        fwd = RelayForwarder(f"http://127.0.0.1:{closed_port()}", episode_id("full"), max_buffer=3, give_up_after=None, backoff_initial=0.05)
        for frame in frames:  # 8 deltas
            fwd.on_delta(frame)
        fwd.on_reply({"success": True})
        assert fwd.gave_up and "buffer full" in (fwd.gave_up_reason or "")
        assert fwd.buffered == 0 or fwd.buffered == 1  # at most the one in flight
        assert fwd.dropped == 5  # deltas 5-8 and the reply; the 4th gave up
        assert not await fwd.drain(timeout=5)
        assert fwd.status == "gave_up"
        assert not await fwd.close(timeout=5)

    asyncio.run(run())
    warnings = [r for r in caplog.records if r.name == "episode_relay" and r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "giving up" in warnings[0].getMessage()


def test_forwarder_gives_up_after_a_long_outage(caplog: pytest.LogCaptureFixture) -> None:
    """One message failing for `give_up_after` seconds ends the forwarding; drain returns False."""
    caplog.set_level(logging.WARNING, logger="episode_relay")

    async def run() -> None:
        fwd = RelayForwarder(f"http://127.0.0.1:{closed_port()}", episode_id("outage"), give_up_after=0.5, backoff_initial=0.05, backoff_max=0.1)
        fwd.on_delta({"trace": "t", "discard": True})
        started = time.monotonic()
        assert not await fwd.drain(timeout=10)
        assert 0.4 < time.monotonic() - started < 5
        assert fwd.gave_up and "failed for" in (fwd.gave_up_reason or "")
        fwd.on_delta({"trace": "t", "discard": True})  # ignored, no raise
        assert fwd.dropped == 1
        await fwd.close()

    asyncio.run(run())
    assert len([r for r in caplog.records if r.name == "episode_relay" and r.levelno >= logging.WARNING]) == 1


def test_forwarder_gives_up_on_a_refusal(relay: Relay) -> None:
    """A delta the relay refuses (4xx) cannot succeed by retrying: the forwarder gives up at once."""

    async def run() -> None:
        fwd = RelayForwarder(relay.url, episode_id("fwd-refused"), token=relay.token, backoff_initial=0.01)
        fwd.on_delta({"trace": "nope", "nodes": []})
        fwd.on_delta({"trace": "nope", "calls": [{}]})
        assert not await fwd.drain(timeout=30)
        assert fwd.gave_up and "unknown_trace" in (fwd.gave_up_reason or ""), fwd.gave_up_reason
        assert fwd.retries == 0
        await fwd.close()

    asyncio.run(run())


def test_forwarder_records_a_refused_reply(relay: Relay) -> None:
    """gap_detected: every delta lands, the reply is refused with the reference text."""
    case = load_case("gap_detected")

    async def run() -> None:
        fwd = RelayForwarder(relay.url, episode_id("fwd-gap"), token=relay.token)
        for frame in case.frames:
            fwd.on_delta(frame)
        fwd.on_reply(case.reply)
        assert await fwd.drain(timeout=30)
        assert fwd.finish_result is None and fwd.finish_error is not None
        assert str(fwd.finish_error) == case.finish_error
        await fwd.close()

    asyncio.run(run())


def test_forwarder_of_a_named_producer_whose_clock_stepped_back(relay: Relay) -> None:
    """A forwarder restarted with its clock behind (same producer name, a lower seq) re-forwards
    the episode from its first delta: the relay's answers name the later seq it holds, and the
    forwarder goes on above it; the episode is exact."""
    case = load_case("chat_basic")

    async def run() -> None:
        eid = episode_id("fwd-clock")
        before = RelayForwarder(relay.url, eid, token=relay.token, producer="mirror-2", start_seq=9_000_000)
        before.on_delta(case.frames[0])
        assert await before.drain(timeout=30)
        await before.close()
        after = RelayForwarder(relay.url, eid, token=relay.token, producer="mirror-2", start_seq=1_000)
        for frame in case.frames:
            after.on_delta(frame)
        after.on_reply(case.reply)
        assert await after.drain(timeout=60)
        assert not after.gave_up and after.delivered == len(case.frames)
        assert after.cursor.seq == 9_000_000 + len(case.frames)
        assert after.finish_result is not None and after.finish_result["status"] == "finished"
        assert await after.http.get_episode() == case.episode
        await after.close()

    asyncio.run(run())
