"""Live watches from Python (episode_relay/watch.py) against a real relay, and the reference
assembly they keep (episode_relay/assembly.py) against every golden case.

The target: five watchers started before an episode's first delta follow it through a relay
stop-and-start (the same port and state, as a deploy or a crash leaves it) and end by themselves
with the exact bytes the relay serves, which are the golden episode's."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any, Dict, List

import httpx
import pytest

from conftest import Relay, RestartableRelay
from episode_relay import EpisodeAssembly, FinishMismatch, RelayError, RunUpdate, WatchUpdate, watch_episode, watch_episode_sync, watch_run
from episode_relay.watch import reconnect_delay, retry_hint_ms
from helpers import case_names, episode_id, load_case, mint_token, packb, unpackb


@pytest.mark.parametrize("name", case_names())
def test_the_assembly_is_the_reference_on_every_golden_case(name: str) -> None:
    case = load_case(name)
    a = EpisodeAssembly()
    checkpoints = dict(case.checkpoints)
    lost = set(case.ack_lost)  # delivered but never acknowledged: the relay keeps them once (golden README)
    for i, frame in enumerate(case.frames):
        if i in lost:
            continue
        a.apply(frame)
        if i + 1 in checkpoints:
            assert a.live_bytes() == checkpoints[i + 1], f"{name}: the traces after {i + 1} frames differ"
    if case.finish_error is not None:
        with pytest.raises(FinishMismatch) as info:
            a.finish_reply(case.reply)
        assert str(info.value) == case.finish_error
    else:
        assert a.finish_reply(case.reply) == case.episode


def test_a_delta_that_does_not_fit_changes_nothing() -> None:
    case = load_case("routing_repair_u8")
    a = EpisodeAssembly()
    for frame in case.frames[:3]:
        a.apply(frame)
    before = a.live_bytes()
    trace = unpackb(case.frames[0])["trace"]
    nodes = len(a.traces[trace]["nodes"])
    bad = [
        {"trace": "nobody"},  # unknown, no open
        {"trace": trace, "links": {nodes: [{"node": 0, "type": "x"}]}},  # no such node
        {"trace": trace, "links": {0: [{"node": 0, "type": "x"}]}, "routing_repairs": {0: {"__nd__": True, "dtype": "uint8", "shape": [2, 1, 1], "data": b"\0\0"}}},
    ]
    for d in bad:
        with pytest.raises(ValueError):
            a.apply(packb(d))
        assert a.live_bytes() == before, d


def test_retry_hints_and_backoff_follow_the_typescript_client() -> None:
    assert retry_hint_ms("hub busy: retry in 1234 ms") == 1234
    assert retry_hint_ms("closed") is None
    assert reconnect_delay(1013, "busy: retry in 1000 ms", 3, (0.25, 10), rand=lambda: 1.0) == 1.5
    assert reconnect_delay(4008, "too slow", 0, (0.25, 10), rand=lambda: 1.0) == 0.0
    assert reconnect_delay(1006, "", 2, (0.25, 10), rand=lambda: 1.0) == 1.0
    assert reconnect_delay(1006, "", 10, (0.25, 10), rand=lambda: 1.0) == 10


def post(relay: Relay, path: str, body: bytes) -> None:
    r = httpx.post(relay.url + path, content=body, headers={"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text


def get_episode(relay: Relay, eid: str) -> bytes:
    r = httpx.get(f"{relay.url}/v1/episodes/{eid}", headers={"authorization": f"Bearer {relay.token}", "accept": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text
    return r.content


async def until(what: str, check: Any, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"{what} did not happen within {timeout} s")
        await asyncio.sleep(0.05)


def test_five_watchers_started_before_the_first_delta_end_with_the_exact_bytes_through_a_relay_restart(restartable_relay: RestartableRelay) -> None:
    relay = restartable_relay
    case = load_case("routing_repair_u8")  # nodes, calls, links and routing repairs
    eid = episode_id("watch-restart")
    watcher = mint_token(relay.secret, "watcher", [eid])
    half = len(case.frames) // 2

    async def main() -> None:
        watches = [watch_episode(relay.url, eid, token=watcher) for _ in range(5)]
        seen: List[List[WatchUpdate]] = [[] for _ in watches]

        async def follow(i: int) -> bytes:
            async for u in watches[i]:
                seen[i].append(u)
            return await watches[i].finished()

        followers = [asyncio.ensure_future(follow(i)) for i in range(5)]
        # every watcher is in (hello: the episode is new, nothing sent yet) before the first delta
        await until("five hellos", lambda: all(any(u.type == "hello" for u in s) for s in seen))
        assert all(next(u for u in s if u.type == "hello").status == "new" for s in seen)
        for frame in case.frames[:half]:
            post(relay, f"/v1/episodes/{eid}/deltas", frame)
        await until(f"every watcher at seq {half}", lambda: all(w.seq == half for w in watches))

        await asyncio.get_running_loop().run_in_executor(None, relay.stop)
        await until("every watcher noticed the drop", lambda: all(any(u.type == "reconnecting" for u in s) for s in seen))
        await asyncio.get_running_loop().run_in_executor(None, relay.start)
        for frame in case.frames[half:]:
            post(relay, f"/v1/episodes/{eid}/deltas", frame)
        post(relay, f"/v1/episodes/{eid}/reply", case.reply)

        # by themselves: nobody tells them to reconnect
        results = await asyncio.wait_for(asyncio.gather(*followers), timeout=180)
        served = get_episode(relay, eid)
        assert served == case.episode
        for i, (w, got, s) in enumerate(zip(watches, results, seen)):
            assert got == served, f"watcher {i}: the finished bytes differ from GET"
            assert w.state == "finished" and w.status == "finished" and w.finished_bytes == served
            # every frame applied once, in order, across the restart
            assert [u.seq for u in s if u.type == "delta"] == list(range(1, len(case.frames) + 1)), i
            assert s[-1].type == "finish" and s[-1].episode == served

    asyncio.run(main())


def test_a_refusal_ends_the_watch_with_the_relays_reason(relay: Relay) -> None:
    eid = episode_id("watch-refused")
    other = mint_token(relay.secret, "watcher", [f"{eid}-other"])

    async def main() -> None:
        w = watch_episode(relay.url, eid, token=other)
        got: List[WatchUpdate] = []
        with pytest.raises(RelayError) as info:
            async for u in w:
                got.append(u)
        assert info.value.status in (403, 404) and info.value.message, info.value
        assert w.state == "refused" and got == []
        with pytest.raises(RelayError):
            await w.finished()
        # no token at all: 401, saying how to pass one
        with pytest.raises(RelayError) as none:
            await watch_episode(relay.url, eid).finished()
        assert none.value.status == 401
        # a run's socket with a token covering none of it: the 404 a run nobody wrote gets over HTTP
        rw = watch_run(relay.url, "py-watch-nothing-covered", token=other)
        with pytest.raises(RelayError) as run_refused:
            async for _ in rw:
                pass
        assert run_refused.value.status == 404 and rw.state == "refused"

    asyncio.run(main())


def test_a_watch_of_a_finished_episode_and_its_sync_form(relay: Relay) -> None:
    case = load_case("multi_trace_links")
    eid = episode_id("watch-done")
    for frame in case.frames:
        post(relay, f"/v1/episodes/{eid}/deltas", frame)
    post(relay, f"/v1/episodes/{eid}/reply", case.reply)
    token = mint_token(relay.secret, "watcher", [eid])
    w = watch_episode_sync(relay.url, eid, token=token)
    updates = list(w)
    assert [u.type for u in updates][0] == "hello" and updates[-1].type == "finish"
    assert w.finished(timeout=60) == case.episode == get_episode(relay, eid)
    assert w.state == "finished"
    w.close()


def test_watch_run_yields_each_rollout_new_then_finished_with_its_reward(relay: Relay) -> None:
    case = load_case("chat_basic")
    trace = unpackb(case.frames[0])["trace"]
    run = f"py-watch-run-{uuid.uuid4().hex[:8]}"
    token = mint_token(relay.secret, "watcher", [f"{run}:*"])
    scores = {"a": 1.0, "b": 0.5, "c": 0.0}

    async def main() -> None:
        w = watch_run(relay.url, run, token=token)
        got: List[RunUpdate] = []

        async def follow() -> None:
            async for u in w:
                got.append(u)
                if sum(1 for x in got if x.type == "finished") == len(scores):
                    return

        follower = asyncio.ensure_future(follow())
        # started before the run exists: its socket opens on an empty run, and the rows come as they are written
        await until("the watch is on the run", lambda: w.state == "live", timeout=30)
        assert w.rows == {}
        loop = asyncio.get_running_loop()
        for name, score in scores.items():
            eid = f"{run}:{name}"
            for frame in case.frames:
                await loop.run_in_executor(None, post, relay, f"/v1/episodes/{eid}/deltas", frame)
            rewards = packb({"trace": trace, "set": {"rewards": {"correct": {"score": score, "weight": 1.0}}}})
            await loop.run_in_executor(None, post, relay, f"/v1/episodes/{eid}/deltas", rewards)
            await loop.run_in_executor(None, post, relay, f"/v1/episodes/{eid}/reply", case.reply)
        await asyncio.wait_for(follower, timeout=120)
        await w.close()
        rows: Dict[str, Any] = {}
        for u in got:
            assert u.id is not None and u.id.startswith(f"{run}:")
            if u.type == "new":
                assert u.id not in rows, "a row is new once"
                rows[u.id] = u
        assert sorted(rows) == [f"{run}:{n}" for n in scores]
        finished = {u.id: u.row for u in got if u.type == "finished"}
        assert sorted(finished) == sorted(rows)
        # the reward is the relay's (the row's own field), the same the list answers
        listed = httpx.get(f"{relay.url}/v1/runs/{run}/episodes", headers={"authorization": f"Bearer {token}"}, timeout=30).json()["episodes"]
        assert {e["id"]: e["reward"] for e in listed} == {i: r["reward"] for i, r in finished.items()}
        assert {i: r["reward"] for i, r in finished.items()} == {f"{run}:{n}": s for n, s in scores.items()}
        assert all(r["status"] == "finished" for r in finished.values())
        # new comes before finished for each row
        for rid in rows:
            kinds = [u.type for u in got if u.id == rid]
            assert kinds.index("new") < kinds.index("finished"), kinds

    asyncio.run(main())
