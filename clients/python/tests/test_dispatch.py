"""The rollout's dispatch identity from the Python side: ``dispatch=`` on the sink and the
forwarder, ``announce_dispatch`` for a pending rollout, against a real relay; the episode stays
exact, the run's row carries the identity, and another identity is refused (409)."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayError, RelayForwarder, RelaySink, announce_dispatch, fetch_annotations, post_annotations
from helpers import load_case, unpackb

#: prime-rl's ``dispatch_info`` for one rollout (orchestrator/live.py): 8 keys in its order.
IDENTITY: Dict[str, Any] = {
    "id": "0a1b2c3d4e5f40718293a4b5c6d7e8f9",
    "kind": "train",
    "env": "gsm8k",
    "group": "3b9c5e2a-7d41-4f6e-9a0b-1c2d3e4f5a6b",
    "task": "idx=0",
    "policy_version": 2,
    "step": 3,
    "started": 1764644000.25,
}


def run_of(episode: str) -> str:
    return episode.rsplit(":", 1)[0]


async def get_json(relay: Relay, path: str) -> Any:
    async with httpx.AsyncClient(timeout=30) as c:
        r = await c.get(relay.url + path, headers={"authorization": f"Bearer {relay.token}"})
        assert r.status_code == 200, r.text
        return r.json()


def fresh(prefix: str) -> str:
    import uuid

    return f"py-{prefix}-{uuid.uuid4().hex[:8]}:{uuid.uuid4().hex[:8]}"


def test_sink_carries_the_identity(relay: Relay) -> None:
    """``RelaySink(dispatch=)``: the episode is the golden one; status and the run's row carry the
    identity; a second sink naming another identity for the same episode is refused 409."""
    case = load_case("chat_basic")
    ep = fresh("disp")

    async def run() -> None:
        sink = RelaySink(relay.url, ep, token=relay.token, dispatch=IDENTITY)
        for frame in case.frames:
            await sink.send(unpackb(frame))
        await sink.finish(case.reply)
        assert await sink.fetch() == case.episode
        await sink.close()
        status = await get_json(relay, f"/v1/episodes/{ep}/status")
        assert status["dispatch"] == IDENTITY
        rows = (await get_json(relay, f"/v1/runs/{run_of(ep)}/episodes"))["episodes"]
        assert [(r["kind"], r["step"], r["policy_version"], r["staleness"], r["group"]) for r in rows] == [("train", 3, 2, 1, IDENTITY["group"])]
        other = RelaySink(relay.url, ep + "x", token=relay.token, dispatch={**IDENTITY, "step": 4})
        await other.send(unpackb(case.frames[0]))
        await other.close()
        # another identity for the same episode: refused, not retried
        clash = RelaySink(relay.url, ep + "x", token=relay.token, dispatch=IDENTITY, retry_for=5)
        with pytest.raises(RelayError) as info:
            await clash.send(unpackb(case.frames[1]))
        assert info.value.status == 409 and info.value.error == "dispatch_conflict" and not info.value.retryable
        await clash.close()

    asyncio.run(run())


def test_pending_then_forwarded(relay: Relay) -> None:
    """``announce_dispatch`` before the first trace: a pending row (no traces, stage pending);
    then a forwarder with the same identity streams the rollout: the same episode, exact."""
    case = load_case("tool_calls_pending")
    ep = f"py-pend-{IDENTITY['id'][:8]}:{IDENTITY['id']}"

    async def run() -> None:
        first = await announce_dispatch(relay.url, ep, IDENTITY, token=relay.token)
        assert first == {"ok": True, "created": True, "changed": True, "status": "live", "dispatch": IDENTITY}
        again = await announce_dispatch(relay.url, ep, dict(reversed(list(IDENTITY.items()))), token=relay.token)
        assert again["changed"] is False
        rows = (await get_json(relay, f"/v1/runs/{run_of(ep)}/episodes"))["episodes"]
        assert len(rows) == 1 and rows[0]["traces"] == 0 and rows[0]["live"]["stage"] == "pending"
        fwd = RelayForwarder(relay.url, ep, token=relay.token, dispatch=IDENTITY)
        for frame in case.frames:
            fwd.on_delta(frame)
        fwd.on_reply(case.reply)
        assert await fwd.close(timeout=30)
        assert fwd.finish_result is not None and fwd.finish_result["status"] == "finished"
        async with httpx.AsyncClient(timeout=30) as c:
            r = await c.get(f"{relay.url}/v1/episodes/{ep}", headers={"authorization": f"Bearer {relay.token}", "accept": "application/msgpack"})
            assert r.content == case.episode
        rows = (await get_json(relay, f"/v1/runs/{run_of(ep)}/episodes"))["episodes"]
        assert rows[0]["traces"] == 1 and rows[0]["status"] == "finished"
        with pytest.raises(RelayError) as info:
            await announce_dispatch(relay.url, ep, {**IDENTITY, "group": "other"}, token=relay.token)
        assert info.value.status == 409

    asyncio.run(run())


def test_annotations_posted_and_read(relay: Relay) -> None:
    """``post_annotations`` (prime-rl's records, one or a list) after the rollout ended; the relay
    merges them per trace; ``fetch_annotations`` reads them back; a trace the episode lacks is 422."""
    case = load_case("chat_basic")
    ep = fresh("ann")
    trace = unpackb(case.frames[0])["trace"]

    async def run() -> None:
        sink = RelaySink(relay.url, ep, token=relay.token, dispatch=IDENTITY)
        for frame in case.frames:
            await sink.send(unpackb(frame))
        await sink.finish(case.reply)
        await sink.close()
        orch = {"version": 1, "trace_id": trace, "info": {"effective": True, "ship": {"step": 4, "time": 1.5}}, "branches": [{"index": 0, "advantages": [0.0, 0.5]}]}
        trainer = {"version": 1, "trace_id": trace, "info": {}, "branches": [{"index": 0, "trainer_logprobs": [None, -0.25], "is_masked": [None, False]}]}
        assert (await post_annotations(relay.url, ep, orch, token=relay.token))["version"] == 1
        assert (await post_annotations(relay.url, ep, [trainer], token=relay.token))["version"] == 2
        doc = await fetch_annotations(relay.url, ep, token=relay.token)
        assert doc["version"] == 2 and doc["episode"] == ep
        [merged] = doc["traces"]
        assert merged["info"] == {"effective": True, "ship": {"step": 4, "time": 1.5}}
        assert merged["branches"] == [orch["branches"][0], trainer["branches"][0]]
        with pytest.raises(RelayError) as info:
            await post_annotations(relay.url, ep, {**trainer, "trace_id": "nope"}, token=relay.token)
        assert info.value.status == 422 and info.value.error == "unknown_trace"

    asyncio.run(run())
