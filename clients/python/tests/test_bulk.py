"""fetch_run: a run's finished episodes streamed from a real relay, each the exact bytes the relay
serves and the golden case holds; resumable by cursor; only a token's episodes; refusals raised.
The splitting is also driven by scripted answers (any chunking, a truncated or foreign answer)."""

from __future__ import annotations

import time
import uuid
from typing import Dict, Iterator, List, Optional

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayError, fetch_run
from helpers import load_case, mint_token, packb

# finished in this order, so the bulk fetch answers them in it (oldest ended first)
FINISHED = ["chat_basic", "large_routing", "odd_values", "multi_trace_links", "tool_calls_pending"]
FAILED_REPLY = packb({"success": False, "error": "sandbox crashed", "head": None, "traces": []})


def post(relay: Relay, path: str, body: bytes, status: int = 200) -> None:
    r = httpx.post(relay.url + path, content=body, headers={"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == status, r.text


def push(relay: Relay, eid: str, name: str, frames: Optional[int] = None, reply: bool = True) -> None:
    """The case's frames as bare deltas (none of these cases loses an ack), then its reply."""
    case = load_case(name)
    for frame in case.frames[:frames]:
        post(relay, f"/v1/episodes/{eid}/deltas", frame)
    if reply:
        post(relay, f"/v1/episodes/{eid}/reply", case.reply)
        time.sleep(0.005)  # apart in time: the bulk fetch orders by when each ended


def indexed(relay: Relay, run: str, counts: Dict[str, int]) -> None:
    """Wait until the run's index shows these counts (episodes update it in the background)."""
    deadline = time.monotonic() + 20
    while True:
        r = httpx.get(f"{relay.url}/v1/runs/{run}", headers={"authorization": f"Bearer {relay.token}"}, timeout=10)
        got = ((r.json().get("aggregates") or {}).get("counts") or {}) if r.status_code == 200 else {}
        if all(got.get(k) == v for k, v in counts.items()):
            return
        assert time.monotonic() < deadline, f"run {run} not indexed with {counts}: {r.status_code} {r.text[:300]}"
        time.sleep(0.05)


def get_episode(relay: Relay, eid: str) -> bytes:
    r = httpx.get(f"{relay.url}/v1/episodes/{eid}", headers={"authorization": f"Bearer {relay.token}"}, timeout=60)
    assert r.status_code == 200
    return r.content


@pytest.fixture(scope="module")
def run(relay: Relay) -> str:
    """A run with the FINISHED cases finished, one live and one failed episode."""
    name = f"py-bulk-{uuid.uuid4().hex[:8]}"
    for case in FINISHED:
        push(relay, f"{name}:{case}", case)
    push(relay, f"{name}:live", "chat_basic", frames=3, reply=False)
    push(relay, f"{name}:failed", "chat_basic", frames=1, reply=False)
    post(relay, f"/v1/episodes/{name}:failed/reply", FAILED_REPLY)
    push(relay, f"{name}:sub:chat_basic", "chat_basic")  # run NAME:sub, not NAME
    indexed(relay, name, {"finished": len(FINISHED), "live": 1, "failed": 1})
    return name


def test_fetch_run_yields_the_finished_episodes_byte_exact(relay: Relay, run: str) -> None:
    got = list(fetch_run(relay.url, run, token=relay.token))
    assert [i for i, _, _ in got] == [f"{run}:{c}" for c in FINISHED]
    for eid, cursor, episode in got:
        case = load_case(eid.split(":", 1)[1])
        assert isinstance(episode, bytes) and isinstance(cursor, str) and cursor
        assert episode == case.episode, f"{eid}: differs from the golden bytes"
        assert episode == get_episode(relay, eid), f"{eid}: differs from GET"
    assert len({c for _, c, _ in got}) == len(got)
    assert [i for i, _, _ in fetch_run(relay.url, f"{run}:sub", token=relay.token)] == [f"{run}:sub:chat_basic"]


def test_fetch_run_resumes_after_a_cursor(relay: Relay, run: str) -> None:
    ids = [i for i, _, _ in fetch_run(relay.url, run, token=relay.token)]
    for k in (1, 2, len(ids) - 1, len(ids)):
        head: List[str] = []
        cursor = ""
        stream = fetch_run(relay.url, run, token=relay.token)
        for eid, cursor, _ in stream:
            head.append(eid)
            if len(head) == k:
                break
        stream.close()  # stopping early closes the connection
        rest = [i for i, _, _ in fetch_run(relay.url, run, token=relay.token, cursor=cursor)]
        assert head == ids[:k]
        assert rest == ids[k:], f"after {k}"


def test_fetch_run_scope_and_refusals(relay: Relay, run: str) -> None:
    some = mint_token(relay.secret, "watcher", [f"{run}:chat_basic", f"{run}:o*", f"{run}:live"])
    got = list(fetch_run(relay.url, run, token=some))
    assert [i for i, _, _ in got] == [f"{run}:chat_basic", f"{run}:odd_values"]
    assert got[1][2] == load_case("odd_values").episode
    # a token for another run: refused as for a run that does not exist
    with pytest.raises(RelayError) as info:
        list(fetch_run(relay.url, run, token=mint_token(relay.secret, "watcher", ["elsewhere:*"])))
    assert info.value.status == 404 and info.value.error == "not_found"
    with pytest.raises(RelayError) as info:
        list(fetch_run(relay.url, run))
    assert info.value.status == 401 and info.value.error == "unauthorized"
    with pytest.raises(RelayError) as info:
        list(fetch_run(relay.url, run, token=relay.token, cursor="not-a-cursor"))
    assert info.value.status == 400 and info.value.error == "bad_cursor"
    assert not info.value.retryable


# ---- scripted answers ----


def element(eid: str, cursor: str, episode: bytes) -> bytes:
    """An element as the relay writes it: the head of the map, then the episode's bytes as they are."""
    return b"\x83" + packb("id") + packb(eid) + packb("cursor") + packb(cursor) + packb("episode") + episode


def scripted(chunks: List[bytes], seen: Optional[List[int]] = None) -> httpx.Client:
    def body() -> Iterator[bytes]:
        for i, c in enumerate(chunks):
            if seen is not None:
                seen.append(i)
            yield c

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/runs/S/finished"
        return httpx.Response(200, content=body(), headers={"content-type": "application/msgpack", "x-episode-relay": "1"})

    return httpx.Client(transport=httpx.MockTransport(handler))


ITEMS = [(f"S:{n}", f"c{i}", load_case(n).episode) for i, n in enumerate(["chat_basic", "odd_values", "empty_trace", "multi_trace_links"])]
BODY = b"".join(element(*it) for it in ITEMS)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [1, 3, 64, 4096, len(BODY)])
def test_fetch_run_splits_at_any_chunking(size: int) -> None:
    chunks = [BODY[i : i + size] for i in range(0, len(BODY), size)]
    assert list(fetch_run("http://relay.test", "S", client=scripted(chunks))) == ITEMS


def test_fetch_run_yields_before_the_answer_ends_and_raises_on_a_truncated_one() -> None:
    first = element(*ITEMS[0])  # type: ignore[arg-type]
    second = element(*ITEMS[1])  # type: ignore[arg-type]
    seen: List[int] = []
    stream = fetch_run("http://relay.test", "S", client=scripted([first, second[:100]], seen))
    assert next(stream) == ITEMS[0]
    assert seen == [0]  # yielded before the second chunk was read
    with pytest.raises(RelayError) as info:
        next(stream)
    assert info.value.error == "truncated" and "resume with the last cursor" in str(info.value)


def test_fetch_run_refuses_an_answer_that_is_not_elements() -> None:
    with pytest.raises(RelayError) as info:
        list(fetch_run("http://relay.test", "S", client=scripted([packb([1, 2, 3])])))
    assert info.value.error == "bad_answer"
    with pytest.raises(RelayError) as info:
        list(fetch_run("http://relay.test", "S", client=scripted([b"\x82" + packb("id") + packb("S:x") + packb("cursor") + packb("c")])))
    assert info.value.error == "bad_answer" and "lacks" in str(info.value)


def test_fetch_run_asks_again_after_an_answer_the_relay_ended_on_its_budget() -> None:
    more = b"\x82" + packb("cursor") + packb("c-more") + packb("more") + packb(True)
    answers = [element(*ITEMS[0]) + more, element(*ITEMS[1])]  # type: ignore[arg-type]
    asked: List[Optional[str]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.params.get("cursor"))
        return httpx.Response(200, content=answers[len(asked) - 1], headers={"content-type": "application/msgpack", "x-episode-relay": "1"})

    got = list(fetch_run("http://127.0.0.1:9", "S", cursor="c-start", client=httpx.Client(transport=httpx.MockTransport(handler))))
    assert got == ITEMS[:2]
    assert asked == ["c-start", "c-more"]
