"""RelaySink against a real relay: failures before the relay, transport retries, a lost ack
retracted by the next send, the last flush re-delivered by finish, auth, the ws transport's
reconnect, and the mirror beside the worker's own transport."""

from __future__ import annotations

import asyncio
import copy
from typing import Any, Dict, List

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayError, RelaySink, WebSocketChannel
from helpers import FaultyChannel, FaultyTransport, closed_port, episode_id, live_traces, load_case, packb, ref_apply, unpackb


def frames_of(name: str) -> List[Dict[str, Any]]:
    return [unpackb(f) for f in load_case(name).frames]


def test_network_failure_before_the_relay(relay: Relay) -> None:
    """A send whose request never reaches the relay (connection refused) raises, even after
    the sink's own retries; the next send of the re-diffed delta succeeds with a new seq, and
    the episode stays exact."""
    case = load_case("chat_basic")

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            sink = RelaySink(relay.url, episode_id("refused"), token=relay.token, client=client, retry_for=0.5, retry_backoff=0.01)
            for i, frame in enumerate(case.frames):
                if i == 3:
                    faulty.fail_next(*["refused"] * 200)  # longer than retry_for
                    with pytest.raises(RelayError) as info:
                        await sink.send(unpackb(frame))
                    assert info.value.status is None and info.value.retryable
                    assert sink.cursor.seq == 4  # one seq for the attempt, kept across its retries
                    faulty.plan.clear()
                    # the streamer re-diffs at its next flush: nothing changed meanwhile, so the
                    # same delta goes again, with a fresh seq
                ack = await sink.send(unpackb(frame))
                assert ack["applied"] == 1 and ack["duplicates"] == 0
            bodies = faulty.delta_bodies()
            assert [s.fault for s in bodies].count("refused") >= 3  # retried until retry_for ran out
            assert len({s.body for s in bodies if s.fault == "refused"}) == 1  # same envelope each retry
            seqs = [unpackb(s.body)["seq"] for s in bodies if s.fault is None]
            assert seqs == [1, 2, 3, 5, 6, 7, 8, 9]
            await sink.finish(case.reply)
            assert await sink.fetch() == case.episode
            await sink.close()

    asyncio.run(run())


def test_transport_retry_reuses_the_envelope(relay: Relay) -> None:
    """An answer lost after the relay applied the delta, then a 503: the sink retries the very
    same envelope; the relay acknowledges the resend as a duplicate, so send() succeeds and
    the delta is applied once."""
    case = load_case("tool_calls_pending")

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            sink = RelaySink(relay.url, episode_id("retry"), token=relay.token, client=client, retry_for=5, retry_backoff=0.01)
            for i, frame in enumerate(case.frames):
                if i in (1, 4):
                    faulty.fail_next("lost", "503")
                ack = await sink.send(frame)  # bytes go through untouched
                if i in (1, 4):
                    assert ack["applied"] == 0 and ack["duplicates"] == 1, ack
                else:
                    assert ack["applied"] == 1 and ack["duplicates"] == 0, ack
            bodies = faulty.delta_bodies()
            assert len(bodies) == len(case.frames) + 4
            for i in (1, 4):
                attempts = [s for s in bodies if unpackb(s.body)["seq"] == i + 1]
                assert [s.fault for s in attempts] == ["lost", "503", None]
                assert len({s.body for s in attempts}) == 1
            await sink.finish(unpackb(case.reply))
            assert await sink.fetch() == case.episode
            await sink.close()

    asyncio.run(run())


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_a_lost_ack_is_retracted_by_the_next_send(relay: Relay, transport: str) -> None:
    """A send that reached the relay but whose ack was lost overwrote `ok`, `timing` and
    `pending`; the worker's values then went back, so its re-diffed delta does not carry them.
    The next envelope carries the old cursor: the relay retracts the lost frame and ends equal
    to the worker, the delta sent untouched."""
    frames = frames_of("chat_basic")
    first = frames[0]
    tid = first["trace"]
    lost = {"trace": tid, "set": {"ok": not first["set"]["ok"], "timing": {"changed": 1.5}}, "pending": [{"role": "tool", "content": "preview"}]}
    after = {"trace": tid, "set": {"num_input_tokens": 77}}

    async def run() -> None:
        eid = episode_id(f"retract-{transport}")
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            channel: Any = "http"
            if transport == "ws":
                channel = FaultyChannel(WebSocketChannel(relay.url, eid, token=relay.token))
            sink = RelaySink(relay.url, eid, token=relay.token, transport=channel, client=client, retry_for=0)
            await sink.send(first)
            (channel if transport == "ws" else faulty).fail_next("lost")
            with pytest.raises(RelayError):
                await sink.send(lost)
            # the relay holds the lost delta's values for now
            held = unpackb(live_traces(await sink.fetch()))[0]
            assert held["ok"] == (not first["set"]["ok"]) and held["pending"] == lost["pending"]

            ack = await sink.send(after)
            assert ack["applied"] == 1
            sent = unpackb(channel.sent[-1][0] if transport == "ws" else faulty.delta_bodies()[-1].body)
            assert sent["cursor"] == 1 and unpackb(sent["delta"]) == after

            # the worker's state: the acknowledged deltas
            worker: Dict[str, Any] = {}
            ref_apply(worker, copy.deepcopy(first))
            ref_apply(worker, copy.deepcopy(after))
            assert live_traces(await sink.fetch()) == packb(list(worker.values()))
            await sink.close()

    asyncio.run(run())


def test_a_lost_open_is_retracted_and_opened_again(relay: Relay) -> None:
    """The first delta of a trace (its `open`) reaches the relay but its ack is lost; the
    worker re-sends `open` with its first nodes (cursor 0): the relay retracts the first and
    takes the second as sent."""
    frames = frames_of("chat_basic")
    tid = frames[0]["trace"]
    merged = {"trace": tid, "open": frames[0]["open"], **{k: v for k, v in frames[2].items() if k != "trace"}}
    merged["set"] = {**frames[0]["set"], **frames[1]["set"], **frames[2]["set"]}

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            sink = RelaySink(relay.url, episode_id("open"), token=relay.token, client=client, retry_for=0)
            faulty.fail_next("lost")
            with pytest.raises(RelayError):
                await sink.send(frames[0])
            await sink.send(merged)
            env = unpackb(faulty.delta_bodies()[-1].body)
            assert env["cursor"] == 0
            worker: Dict[str, Any] = {}
            ref_apply(worker, copy.deepcopy(merged))
            assert live_traces(await sink.fetch()) == packb(list(worker.values()))
            await sink.close()

    asyncio.run(run())


def test_finish_redelivers_a_failed_last_flush(relay: Relay) -> None:
    """The streamer swallows a failure of its exit flush: finish() sends that last delta again
    (the same envelope) before the reply, so the reply's counts match and the episode is exact."""
    case = load_case("tool_calls_pending")

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            sink = RelaySink(relay.url, episode_id("last-flush"), token=relay.token, client=client, retry_for=0)
            for frame in case.frames[:-1]:
                await sink.send(frame)
            faulty.fail_next("refused")  # the exit flush never reaches the relay
            with pytest.raises(RelayError):
                await sink.send(case.frames[-1])
            assert sink.undelivered is not None
            answer = await sink.finish(case.reply)
            assert answer["status"] == "finished"
            assert await sink.fetch() == case.episode
            await sink.close()

    asyncio.run(run())


def test_mirror_keeps_the_primary_transport_first(relay: Relay) -> None:
    """RelayMirror: the worker's own send is primary; only the deltas it acknowledged reach the
    relay, in the background, so a delta whose primary send failed is replaced by the re-diff
    there as it is at the env client."""
    case = load_case("ack_lost")

    async def run() -> None:
        from episode_relay import RelayForwarder, RelayMirror

        primary_got: List[bytes] = []
        lost = set(case.ack_lost)
        sent = 0

        async def primary(delta: Any) -> None:
            nonlocal sent
            i = sent
            sent += 1
            if i in lost:
                raise ConnectionError("the env client's ack was lost")
            primary_got.append(delta)

        forwarder = RelayForwarder(relay.url, episode_id("mirror"), token=relay.token)
        mirror = RelayMirror(primary, forwarder)
        for frame in case.frames:
            try:
                await mirror(frame)
            except ConnectionError:
                pass  # the streamer keeps its cursor and re-diffs
        forwarder.on_reply(case.reply)
        assert await forwarder.close(timeout=60)
        assert forwarder.finish_result is not None and forwarder.finish_result["status"] == "finished"
        async with httpx.AsyncClient(timeout=30) as client:
            got = await client.get(f"{relay.url}/v1/episodes/{forwarder.episode_id}", headers={"authorization": f"Bearer {relay.token}"})
        assert got.content == case.episode
        assert len(primary_got) == len(case.frames) - len(lost)

    asyncio.run(run())


def test_refusal_is_not_retried(relay: Relay) -> None:
    """A delta the relay cannot apply (unknown trace) raises at once with the relay's code."""

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            sink = RelaySink(relay.url, episode_id("refused"), token=relay.token, client=client, retry_for=5)
            with pytest.raises(RelayError) as info:
                await sink.send({"trace": "nope", "calls": [{"x": 1}]})
            assert info.value.status == 422 and info.value.error == "unknown_trace" and not info.value.retryable
            assert len(faulty.delta_bodies()) == 1
            await sink.close()

    asyncio.run(run())


def test_token_is_sent_and_required(relay: Relay) -> None:
    """The token travels as `Authorization: Bearer`; without one an auth-on relay refuses (401),
    over HTTP and on the ingest socket."""
    delta = {"trace": "t", "open": {"version": 1, "id": "t", "verifiers": "x", "task": {}}}

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            eid = episode_id("auth")
            sink = RelaySink(relay.url, eid, token=relay.token, client=client)
            await sink.send(delta)
            assert faulty.seen[-1].headers["authorization"] == f"Bearer {relay.token}"
            await sink.close()
            probe = await client.get(f"{relay.url}/v1/episodes/{eid}/status")
        if probe.status_code != 401:
            pytest.skip(f"this relay does not require tokens (status without one: {probe.status_code})")
        for transport in ("http", "ws"):
            anonymous = RelaySink(relay.url, episode_id("anon"), transport=transport, retry_for=0, timeout=10)
            with pytest.raises(RelayError) as info:
                await anonymous.send(delta)
            assert info.value.status == 401, repr(info.value)
            assert not info.value.retryable
            await anonymous.close()

    asyncio.run(run())


def test_ws_reconnects_after_a_broken_socket(relay: Relay) -> None:
    """Over the producer socket: the socket breaks after a delivered message (ack lost) and a
    connection attempt is refused; the sink reconnects on the next send and the episode is exact."""
    case = load_case("multi_trace_links")

    async def run() -> None:
        eid = episode_id("ws-reconnect")
        inner = WebSocketChannel(relay.url, eid, token=relay.token, timeout=30)
        channel = FaultyChannel(inner)
        sink = RelaySink(relay.url, eid, token=relay.token, transport=channel, retry_for=0)
        for i, frame in enumerate(case.frames):
            if i == 6:
                channel.fail_next("lost")
                with pytest.raises(RelayError):
                    await sink.send(frame)
                assert inner._ws is None  # dropped; the next send reconnects
            if i == 9:  # the socket is gone and the relay is unreachable for one send
                await inner.close()
                good = inner.url
                inner.url = f"ws://127.0.0.1:{closed_port()}/v1/episodes/{eid}/ingest"
                with pytest.raises(RelayError) as info:
                    await sink.send(frame)
                assert info.value.retryable
                inner.url = good
            ack = await sink.send(frame)
            assert ack["applied"] == 1
        await sink.finish(case.reply)
        assert await sink.fetch() == case.episode
        await sink.close()

    asyncio.run(run())


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_cancelled_send_then_resend(relay: Relay, transport: str) -> None:
    """A send cancelled mid-flight (a cancelled rollout's flush) counts as failed: the streamer
    keeps its cursor and re-sends; the episode stays exact whether or not the cancelled
    delta had reached the relay."""
    case = load_case("large_routing")

    async def run() -> None:
        sink = RelaySink(relay.url, episode_id(f"cancel-{transport}"), token=relay.token, transport=transport, retry_for=0)
        cancelled = 0
        for i, frame in enumerate(case.frames):
            if i in (3, 6, 9, 12):
                task = asyncio.ensure_future(sink.send(frame))
                if i > 3:  # frame 3 is cancelled before it starts; the others in flight (or done)
                    await asyncio.sleep(0.001 * (i - 3))
                task.cancel()
                try:
                    await task
                    continue  # it finished first: acknowledged, as the streamer would see it
                except asyncio.CancelledError:
                    cancelled += 1
            ack = await sink.send(frame)
            assert ack["applied"] == 1
        assert cancelled > 0
        await sink.finish(case.reply)
        assert await sink.fetch() == case.episode
        await sink.close()

    asyncio.run(run())


def test_named_producer_with_clock_seq(relay: Relay) -> None:
    """A fixed producer name starts seq from the clock (a uint64 on the wire), so a second sink
    with the same name (a restarted process) never reuses a seq the relay already applied."""
    case = load_case("routing_repair_u8")

    async def run() -> None:
        eid = episode_id("named")
        first = RelaySink(relay.url, eid, token=relay.token, producer="worker-7")
        assert first.cursor.seq + 1 > 2**32
        for frame in case.frames:
            ack = await first.send(frame)
        assert ack["producers"] == {"worker-7": first.cursor.seq}
        await first.finish(case.reply)
        assert await first.fetch() == case.episode
        await first.close()
        await asyncio.sleep(0.002)  # the clock moves on
        again = RelaySink(relay.url, eid, token=relay.token, producer="worker-7")
        assert again.cursor.seq > first.cursor.seq
        await again.close()

    asyncio.run(run())


def test_failed_run_reply(relay: Relay) -> None:
    """A failed run's reply (`success: false`, an error, no head) ends the episode as failed."""
    case = load_case("chat_basic")

    async def run() -> None:
        sink = RelaySink(relay.url, episode_id("failed-run"), token=relay.token)
        for frame in case.frames[:3]:
            await sink.send(frame)
        answer = await sink.finish({"success": False, "error": "env crashed", "head": None, "traces": []})
        assert answer["ok"] is True and answer["status"] == "failed"
        status = (await sink.http.request("GET", "status")).json()
        assert status["status"] == "failed" and status["error"] == "env crashed"
        with pytest.raises(RelayError) as info:  # no more deltas
            await sink.send(case.frames[3])
        assert info.value.status == 409 and info.value.error == "episode_finished"
        await sink.close()

    asyncio.run(run())


def test_a_named_producer_whose_clock_stepped_back_loses_nothing(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    """A process restarted with its clock behind the one before (same producer name, a lower
    clock seq) re-streams the episode from scratch: the relay holds a later seq of that name, and
    would take every new envelope as a duplicate. Its answer names that seq, so the sink goes on
    above it: every delta applied once, the episode exact."""
    case = load_case("chat_basic")

    async def run() -> None:
        eid = episode_id("clock-back")
        before = RelaySink(relay.url, eid, token=relay.token, producer="worker-9", start_seq=5_000_000)
        await before.send(case.frames[0])
        await before.close()
        # the restart: the clock now reads a million microseconds earlier
        after = RelaySink(relay.url, eid, token=relay.token, producer="worker-9", start_seq=4_000_000)
        with caplog.at_level("WARNING", logger="episode_relay"):
            first = await after.send(case.frames[0])
        assert first["applied"] == 1 and first["duplicates"] == 0
        assert first["producers"] == {"worker-9": 5_000_001}
        assert after.cursor.seq == 5_000_001
        assert any("sent again as seq 5000001" in r.getMessage() for r in caplog.records)
        for frame in case.frames[1:]:
            ack = await after.send(frame)
            assert ack["applied"] == 1
        await after.finish(case.reply)
        assert await after.fetch() == case.episode
        await after.close()

    asyncio.run(run())


def test_a_retry_answered_as_a_duplicate_is_not_sent_again(relay: Relay) -> None:
    """The genuine duplicate (a retry of an envelope the relay had applied, its answer lost) is
    answered with the producer's seq equal to this sink's: nothing is re-sent, nothing applied twice."""
    case = load_case("chat_basic")

    async def run() -> None:
        faulty = FaultyTransport()
        async with httpx.AsyncClient(transport=faulty, timeout=30) as client:
            sink = RelaySink(relay.url, episode_id("dup"), token=relay.token, producer="worker-3", start_seq=70, client=client, retry_backoff=0.01)
            await sink.send(case.frames[0])
            faulty.fail_next("lost")  # applied by the relay, the answer lost: the retry is a duplicate
            ack = await sink.send(case.frames[1])
            assert ack["applied"] == 0 and ack["duplicates"] == 1 and ack["producers"] == {"worker-3": 71}
            assert sink.cursor.seq == 71
            for frame in case.frames[2:]:
                await sink.send(frame)
            await sink.finish(case.reply)
            assert await sink.fetch() == case.episode
            await sink.close()

    asyncio.run(run())


def test_unknown_keys_are_named_once_and_kept(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    """A newer verifiers' delta keys: the acks name them (``unknown``), the sink keeps each name once
    and warns once; the relay keeps the unknown list in the episode (appended after the known lists)."""

    async def run() -> None:
        eid = episode_id("unknown")
        sink = RelaySink(relay.url, eid, token=relay.token)
        first = await sink.send({"trace": "t1", "open": {"id": "t1"}, "future_list": [1], "set": {"future_scalar": 2, "is_timeout": False}})
        assert first["unknown"] == ["future_list", "set.future_scalar"]
        second = await sink.send({"trace": "t1", "future_list": [3], "future_flag": "x"})
        assert second["unknown"] == ["future_list", "future_flag"]
        known = await sink.send({"trace": "t1", "payload": [{"k": 1}], "set": {"num_total_tokens": 4}})
        assert "unknown" not in known
        assert sink.unknown == ["future_list", "set.future_scalar", "future_flag"]
        await sink.finish({"success": True, "error": None, "head": {"id": eid}, "traces": [{"id": "t1", "nodes": 0, "calls": 0}]})
        trace = unpackb(await sink.fetch())["traces"][0]
        assert trace["future_list"] == [1, 3]
        assert list(trace).index("future_list") == list(trace).index("response_rewrites") + 1
        assert trace["future_scalar"] == 2 and trace["payload"] == [{"k": 1}]
        await sink.close()

    with caplog.at_level("WARNING", logger="episode_relay"):
        asyncio.run(run())
    warned = [r.getMessage() for r in caplog.records if "does not know" in r.getMessage()]
    assert len(warned) == 2
    assert "future_list, set.future_scalar" in warned[0] and "future_flag" in warned[1]
