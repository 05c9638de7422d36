"""list_episodes / fetch_episodes_page against a real relay: the golden case chat_basic pushed as
rollouts of two tasks (the open frame's task key set by the test) with rewards, and one with a
stop condition and a timeout, set by one more delta before the reply; one live and one failed
episode. Each filter gives the expected episodes, both sorts, paging by cursor, the relay's 400
``bad_filter`` with its field, and the arguments refused before anything is sent. Following a short
(or empty) page with a cursor is driven by scripted answers."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import httpx
import pytest

from conftest import Relay
from episode_relay import EpisodeEntry, RelayError, fetch_episodes_page, list_episodes
from helpers import load_case, mint_token, packb, unpackb

CASE = load_case("chat_basic")
TRACE: str = unpackb(CASE.frames[0])["trace"]
TASK_A: str = unpackb(CASE.frames[0])["open"]["task"]["key"]
TASK_B = "task-b"

# name, task, (correct, format) scores (weights 1.0 and 0.25 as in the golden case), stop condition set with is_timeout
FINISHED: List[Tuple[str, str, Tuple[float, float], Optional[str]]] = [
    # the trainer's reward: correct × 1 + format × 0.25 (the weighted means before issue 40 were 0.9, 0.1, 1.0, 0.8, 0.2)
    ("a-0", TASK_A, (1.0, 0.5), None),  # reward 1.125
    ("a-1", TASK_A, (0.0, 0.5), None),  # 0.125
    ("a-2", TASK_A, (1.0, 1.0), None),  # 1.25
    ("b-0", TASK_B, (1.0, 0.0), "max_turns"),  # 1.0, truncated
    ("b-1", TASK_B, (0.0, 1.0), None),  # 0.25
]
# best reward first, then those without one by id descending
BY_REWARD = ["a-2", "a-0", "b-0", "b-1", "a-1", "live", "failed"]


def post(relay: Relay, path: str, body: bytes) -> None:
    r = httpx.post(relay.url + path, content=body, headers={"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text


def push(relay: Relay, eid: str, task: str, frames: int, extra: Optional[Dict[str, Any]]) -> None:
    """chat_basic's first ``frames`` frames into ``eid`` (the open frame with ``task`` as its key), then ``extra`` set on its trace."""
    opening = unpackb(CASE.frames[0])
    opening["open"]["task"]["key"] = task
    post(relay, f"/v1/episodes/{eid}/deltas", packb(opening))
    for frame in CASE.frames[1:frames]:
        post(relay, f"/v1/episodes/{eid}/deltas", frame)
    if extra is not None:
        post(relay, f"/v1/episodes/{eid}/deltas", packb({"trace": TRACE, "set": extra}))


def push_at_once(relay: Relay, eid: str, task: str, frames: int) -> None:
    """Like ``push`` without ``extra``, in one message (an array of envelopes): the row goes to the index at once on
    creation with these counters (a live episode's later turns reach it only after INDEX_FLUSH_MS, 30 s)."""
    opening = unpackb(CASE.frames[0])
    opening["open"]["task"]["key"] = task
    deltas = [packb(opening), *CASE.frames[1:frames]]
    post(relay, f"/v1/episodes/{eid}/deltas", packb([{"producer": "t", "seq": i + 1, "delta": d} for i, d in enumerate(deltas)]))


def rewards(correct: float, fmt: float) -> Dict[str, Dict[str, float]]:
    return {"correct": {"score": correct, "weight": 1.0}, "format": {"score": fmt, "weight": 0.25}}


@pytest.fixture(scope="module")
def run(relay: Relay) -> str:
    name = f"py-episodes-{uuid.uuid4().hex[:8]}"
    for short, task, scores, stop in FINISHED:
        extra: Dict[str, Any] = {"rewards": rewards(*scores)}
        if stop is not None:
            extra.update(stop_condition=stop, is_timeout=True)
        push(relay, f"{name}:{short}", task, len(CASE.frames), extra)
        post(relay, f"/v1/episodes/{name}:{short}/reply", CASE.reply)
    push_at_once(relay, f"{name}:live", TASK_A, 4)  # 2 calls, 65 tokens, no rewards
    push(relay, f"{name}:failed", TASK_A, 2, None)
    post(relay, f"/v1/episodes/{name}:failed/reply", packb({"success": False, "error": "sandbox crashed", "head": None, "traces": []}))
    # the index takes the rows in the background (the live one's counters came with its creation)
    deadline = time.monotonic() + 30
    while True:
        rows = {e["id"]: e for e in list_episodes(relay.url, name, token=relay.token, limit=500)}
        if len(rows) == len(FINISHED) + 2 and rows[f"{name}:live"]["calls"] == 2 and rows[f"{name}:failed"]["status"] == "failed":
            return name
        assert time.monotonic() < deadline, f"run {name} not indexed: {rows}"
        time.sleep(0.1)


def names(run: str, episodes: Any) -> List[str]:
    return [e["id"][len(run) + 1 :] for e in episodes]


def test_each_filter_gives_the_expected_episodes(relay: Relay, run: str) -> None:
    def ls(**kw: Any) -> List[str]:
        return sorted(names(run, list_episodes(relay.url, run, token=relay.token, **kw)))

    finished = sorted(n for n, *_ in FINISHED)
    assert ls() == sorted(finished + ["live", "failed"])
    assert ls(task=TASK_B) == ["b-0", "b-1"]
    assert ls(stop="max_turns") == ["b-0"]
    assert ls(truncated=True) == ["b-0"]
    assert ls(truncated=False, status="finished") == ["a-0", "a-1", "a-2", "b-1"]
    # the trainer's truncation (b-0 stopped at max_turns; chat_basic's last call finished with "stop") and the timeout
    assert ls(is_truncated=True) == ["b-0"]
    assert ls(is_truncated=False, status="finished") == ["a-0", "a-1", "a-2", "b-1"]
    assert ls(is_timeout=True) == ["b-0"]
    assert ls(errored=True) == ["failed"]
    assert ls(errored=False) == sorted(finished + ["live"])
    assert ls(min_turns=3) == finished
    assert ls(min_tokens=60) == sorted(finished + ["live"])
    assert ls(min_turns=1, min_tokens=1, status="live") == ["live"]
    assert ls(rewards={"correct": (1, None)}) == ["a-0", "a-2", "b-0"]
    assert ls(rewards={"correct": (None, 0.0), "format": (0.5, None)}) == ["a-1", "b-1"]
    assert ls(task=TASK_A, rewards={"format": (0.25, 0.75)}) == ["a-0", "a-1"]
    assert ls(rewards={"reward": (0, 1)}) == ["a-1", "b-0", "b-1"]  # "reward" selects the trainer's total
    assert ls(task="no-such-task") == []


def test_rows_sorts_and_paging(relay: Relay, run: str) -> None:
    rows = {e["id"][len(run) + 1 :]: e for e in list_episodes(relay.url, run, token=relay.token)}
    b0: EpisodeEntry = rows["b-0"]
    assert (b0["task"], b0["stop_condition"], b0["truncated"], b0["calls"], b0["tokens"]) == (TASK_B, "max_turns", True, 3, 99)
    assert (b0["is_truncated"], b0["is_timeout"], rows["a-0"]["is_truncated"], rows["a-0"]["is_timeout"]) == (True, True, False, False)
    assert b0["reward"] == 1.0 and b0["scores"] == {"correct": 1.0, "format": 0.0}
    assert (rows["failed"]["error"], rows["live"]["reward"]) == ("sandbox crashed", None)

    by_reward = names(run, list_episodes(relay.url, run, token=relay.token, sort="reward"))
    assert by_reward == BY_REWARD
    assert names(run, list_episodes(relay.url, run, token=relay.token, sort="reward", limit=1)) == BY_REWARD
    by_update = names(run, list_episodes(relay.url, run, token=relay.token))
    assert names(run, list_episodes(relay.url, run, token=relay.token, limit=2)) == by_update
    top = names(run, list_episodes(relay.url, run, token=relay.token, sort="reward", status="finished", rewards={"correct": (1, None)}, limit=2))
    assert top == ["a-2", "a-0", "b-0"]

    page = fetch_episodes_page(relay.url, run, token=relay.token, sort="reward", limit=2)
    assert names(run, page["episodes"]) == BY_REWARD[:2] and isinstance(page["cursor"], str) and page["searched"] >= 2
    following = fetch_episodes_page(relay.url, run, token=relay.token, sort="reward", limit=2, cursor=page["cursor"])
    assert names(run, following["episodes"]) == BY_REWARD[2:4]

    # a token sees the episodes its patterns cover
    some = mint_token(relay.secret, "watcher", [f"{run}:a-*"])
    assert sorted(names(run, list_episodes(relay.url, run, token=some))) == ["a-0", "a-1", "a-2"]


def test_the_relay_refuses_a_bad_filter_naming_the_parameter(relay: Relay, run: str) -> None:
    # what the client leaves to the relay: its own limits
    for kw, field in (
        ({"rewards": {k: (0, None) for k in "abcde"}}, "reward"),  # at most 4 ranges
        ({"task": "x" * 300}, "task"),  # at most 256 characters
        ({"min_turns": 10**20}, "min_turns"),  # beyond the relay's whole numbers
    ):
        with pytest.raises(RelayError) as info:
            list(list_episodes(relay.url, run, token=relay.token, **kw))
        assert (info.value.status, info.value.error, info.value.field) == (400, "bad_filter", field), kw
        assert not info.value.retryable
    with pytest.raises(RelayError) as info:
        fetch_episodes_page(relay.url, run)
    assert (info.value.status, info.value.error) == (401, "unauthorized")
    with pytest.raises(RelayError) as info:
        fetch_episodes_page(relay.url, run, token=relay.token, cursor="not-a-cursor")
    assert (info.value.status, info.value.error, info.value.field) == (400, "bad_cursor", "cursor")


# ---- the client's checks and paging, over scripted answers ----


def scripted(pages: Dict[Optional[str], Any], seen: List[httpx.Request]) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = pages[request.url.params.get("cursor")]
        return httpx.Response(200, content=json.dumps(body).encode(), headers={"content-type": "application/json", "x-episode-relay": "1"})

    return httpx.Client(transport=httpx.MockTransport(handler))


def entry(i: str) -> Dict[str, Any]:
    return {"id": f"S:{i}", "run": "S", "status": "finished", "calls": 3, "tokens": 99, "reward": 0.5}


def test_short_and_empty_pages_with_a_cursor_are_followed_and_the_filters_sent() -> None:
    seen: List[httpx.Request] = []
    client = scripted(
        {
            None: {"episodes": [entry("a")], "cursor": "c1", "searched": 1000},  # short: the walk stopped on its budget
            "c1": {"episodes": [], "cursor": "c2", "searched": 1000},  # no match in this walk
            "c2": {"episodes": [entry("b"), entry("c")], "cursor": None, "searched": 12},
        },
        seen,
    )
    got = list_episodes(
        "https://relay.test/",
        "S:x",
        status="finished",
        task="t 1",
        stop="max_turns",
        is_truncated=True,
        is_timeout=False,
        truncated=False,
        errored=True,
        rewards={"correct": (1, None), "format": (None, 0.5)},
        min_turns=2,
        min_tokens=100,
        sort="reward",
        limit=3,
        token="t",
        client=client,
    )
    assert [e["id"] for e in got] == ["S:a", "S:b", "S:c"]
    query = (
        "status=finished&task=t+1&stop=max_turns&is_truncated=1&is_timeout=0&truncated=0&errored=1&reward=correct%3A1.0..&reward=format%3A..0.5"
        "&min_turns=2&min_tokens=100&sort=reward&limit=3"
    )
    assert [r.url.raw_path.decode() for r in seen] == [
        f"/v1/runs/S%3Ax/episodes?{query}",
        f"/v1/runs/S%3Ax/episodes?{query}&cursor=c1",
        f"/v1/runs/S%3Ax/episodes?{query}&cursor=c2",
    ]
    assert all(r.headers["authorization"] == "Bearer t" for r in seen)
    page = fetch_episodes_page("http://relay.test", "S", client=scripted({None: {"episodes": [entry("a")], "cursor": "c1", "searched": 1000}}, seen))
    assert page == {"episodes": [entry("a")], "cursor": "c1", "searched": 1000}
    assert seen[-1].url.raw_path == b"/v1/runs/S/episodes"  # no filter, the default sort: no parameter


def test_bad_arguments_are_refused_before_sending() -> None:
    seen: List[httpx.Request] = []
    client = scripted({None: {"episodes": [], "cursor": None, "searched": 0}}, seen)
    cases: List[Tuple[Dict[str, Any], str, str]] = [
        ({"status": "done"}, "bad_status", "status"),
        ({"task": ""}, "bad_filter", "task"),
        ({"stop": 3}, "bad_filter", "stop"),
        ({"truncated": 1}, "bad_filter", "truncated"),
        ({"errored": "yes"}, "bad_filter", "errored"),
        ({"rewards": {"correct": (1, 0)}}, "bad_filter", "reward"),
        ({"rewards": {"correct": 1}}, "bad_filter", "reward"),
        ({"rewards": {"correct": (float("nan"), None)}}, "bad_filter", "reward"),
        ({"rewards": {"correct": (None, float("inf"))}}, "bad_filter", "reward"),
        ({"rewards": {"": (0, 1)}}, "bad_filter", "reward"),
        ({"rewards": [("correct", (0, 1))]}, "bad_filter", "reward"),
        ({"min_turns": -1}, "bad_filter", "min_turns"),
        ({"min_tokens": 1.5}, "bad_filter", "min_tokens"),
        ({"sort": "spread"}, "bad_sort", "sort"),
        ({"limit": 0}, "bad_limit", "limit"),
    ]
    for kw, error, field in cases:
        with pytest.raises(RelayError) as info:
            list_episodes("http://relay.test", "S", client=client, **kw)  # at the call, not at the first next()
        assert (info.value.status, info.value.error, info.value.field) == (400, error, field), kw
        with pytest.raises(RelayError) as info:
            fetch_episodes_page("http://relay.test", "S", client=client, **kw)
        assert (info.value.error, info.value.field) == (error, field), kw
    with pytest.raises(RelayError) as info:
        list_episodes("http://relay.test", "..", client=client)
    assert info.value.error == "bad_run"
    with pytest.raises(RelayError) as info:
        list_episodes("relay.test", "S")
    assert info.value.error == "bad_url"
    assert seen == []


def test_a_repeated_cursor_and_an_answer_that_is_not_a_page_are_errors() -> None:
    with pytest.raises(RelayError) as info:
        list(list_episodes("http://relay.test", "S", client=scripted({None: {"episodes": [entry("a")], "cursor": "c1"}, "c1": {"episodes": [], "cursor": "c1"}}, [])))
    assert info.value.error == "bad_answer" and "same cursor" in str(info.value)
    with pytest.raises(RelayError) as info:
        fetch_episodes_page("http://relay.test", "S", client=scripted({None: {"episodes": "no"}}, []))
    assert info.value.error == "bad_answer"
