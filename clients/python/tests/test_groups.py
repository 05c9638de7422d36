"""fetch_groups / fetch_groups_page / fetch_group against a real relay: the golden case chat_basic
pushed as several rollouts per group (the reply head's ``group.id`` set by the test, the rewards
set by one more delta before the reply), one group whose rewards are all equal (zero variance)
and one live rollout; the run's numbers, each group's statistics, paging by cursor, the rollouts'
advantages, and refusals. Paging and the checks before anything is sent are also driven by
scripted answers."""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any, Dict, List, Optional, Tuple

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayError, fetch_group, fetch_groups, fetch_groups_page
from helpers import load_case, mint_token, packb, unpackb

CASE = load_case("chat_basic")
TRACE: str = unpackb(CASE.frames[0])["trace"]
TASK_KEY: str = unpackb(CASE.frames[0])["open"]["task"]["key"]

# (correct, format) scores per rollout; weights 1.0 and 0.25 as in the golden case
VARIED = "grp-varied"
VARIED_SCORES = [(1.0, 0.5), (0.0, 0.5), (0.0, 1.0), (1.0, 0.0)]
ZERO = "grp-zero"
ZERO_SCORES = [(1.0, 0.5)] * 3
# a group id a URL path must escape
ODD = "grp/odd id:1%"
ODD_SCORES = [(0.0, 0.0), (1.0, 1.0)]


def rewards(correct: float, fmt: float) -> Dict[str, Dict[str, float]]:
    return {"correct": {"score": correct, "weight": 1.0}, "format": {"score": fmt, "weight": 0.25}}


def weighted(correct: float, fmt: float) -> float:
    """The trainer's reward of one trace: the sum of score × weight (the relay showed the weighted mean before issue 40)."""
    return correct * 1.0 + fmt * 0.25


def post(relay: Relay, path: str, body: bytes) -> None:
    r = httpx.post(relay.url + path, content=body, headers={"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text


def push(relay: Relay, eid: str, group: Optional[str], scores: Optional[Tuple[float, float]]) -> None:
    """chat_basic into ``eid``; with ``scores`` one more delta sets its rewards, and with ``group`` the
    reply (head ``group.id`` = group) finishes it; without, it stays live."""
    for frame in CASE.frames:
        post(relay, f"/v1/episodes/{eid}/deltas", frame)
    if scores is not None:
        post(relay, f"/v1/episodes/{eid}/deltas", packb({"trace": TRACE, "set": {"rewards": rewards(*scores)}}))
    if group is not None:
        reply = unpackb(CASE.reply)
        reply["head"]["group"] = {"id": group}
        post(relay, f"/v1/episodes/{eid}/reply", packb(reply))


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


def pstd(xs: List[float]) -> float:
    mean = sum(xs) / len(xs)
    return math.sqrt(sum((x - mean) ** 2 for x in xs) / len(xs))


@pytest.fixture(scope="module")
def run(relay: Relay) -> str:
    """Groups VARIED (4 rollouts, rewards differ), ZERO (3, all equal) and ODD (2), plus a live rollout."""
    name = f"py-groups-{uuid.uuid4().hex[:8]}"
    for i, s in enumerate(VARIED_SCORES):
        push(relay, f"{name}:varied-{i}", VARIED, s)
    for i, s in enumerate(ZERO_SCORES):
        push(relay, f"{name}:zero-{i}", ZERO, s)
    for i, s in enumerate(ODD_SCORES):
        push(relay, f"{name}:odd-{i}", ODD, s)
    push(relay, f"{name}:live", None, None)
    indexed(relay, name, {"finished": len(VARIED_SCORES) + len(ZERO_SCORES) + len(ODD_SCORES), "live": 1})
    return name


def test_fetch_groups_page_has_the_run_numbers(relay: Relay, run: str) -> None:
    page = fetch_groups_page(relay.url, run, token=relay.token)
    assert page["run"] == run
    assert page["groups_total"] == 4  # VARIED, ZERO, ODD and the live rollout's (its task key)
    assert page["finished_groups"] == 3
    assert page["zero_variance_groups"] == 1
    assert page["zero_variance_share"] == pytest.approx(1 / 3)
    assert page["cursor"] is None
    assert sorted(g["id"] for g in page["groups"]) == sorted([VARIED, ZERO, ODD, TASK_KEY])


def test_each_group_has_its_counts_and_reward_statistics(relay: Relay, run: str) -> None:
    groups = {g["id"]: g for g in fetch_groups(relay.url, run, token=relay.token)}
    varied = groups[VARIED]
    assert (varied["size"], varied["finished"], varied["failed"], varied["live"]) == (4, 4, 0, 0)
    assert varied["task"] == TASK_KEY
    correct = [c for c, _ in VARIED_SCORES]
    fmt = [f for _, f in VARIED_SCORES]
    assert set(varied["rewards"]) == {"correct", "format"}
    for key, xs in (("correct", correct), ("format", fmt)):
        stats = varied["rewards"][key]
        assert stats["mean"] == pytest.approx(sum(xs) / len(xs)), key
        assert stats["std"] == pytest.approx(pstd(xs)), key
        assert (stats["min"], stats["max"]) == (min(xs), max(xs)), key
    zero = groups[ZERO]
    assert (zero["size"], zero["finished"], zero["live"]) == (3, 3, 0)
    assert zero["rewards"]["correct"] == {"mean": 1.0, "std": 0.0, "min": 1.0, "max": 1.0}
    assert zero["rewards"]["format"]["std"] == 0.0
    live = groups[TASK_KEY]
    assert (live["size"], live["finished"], live["live"]) == (1, 0, 1)
    assert groups[ODD]["size"] == 2
    totals = [weighted(c, f) for c, f in VARIED_SCORES]
    assert varied["mean_reward"] == pytest.approx(sum(totals) / len(totals))
    assert varied["std_reward"] == pytest.approx(pstd(totals))
    # the groups whose rewards vary come before those that do not
    assert varied["spread"] == pytest.approx(max(totals) - min(totals)) and varied["spread"] > 0
    assert not zero["spread"]


def test_fetch_groups_follows_the_cursors(relay: Relay, run: str) -> None:
    for sort in (None, "spread", "size", "task"):
        whole = [g["id"] for g in fetch_groups_page(relay.url, run, token=relay.token, sort=sort, limit=500)["groups"]]
        paged = [g["id"] for g in fetch_groups(relay.url, run, token=relay.token, sort=sort, limit=1)]
        assert paged == whole, sort
        assert sorted(paged) == sorted([VARIED, ZERO, ODD, TASK_KEY]), sort
    first = fetch_groups_page(relay.url, run, token=relay.token, limit=1)
    assert len(first["groups"]) == 1 and isinstance(first["cursor"], str)
    assert first["groups_total"] == 4 and first["zero_variance_groups"] == 1  # the run's numbers on every page
    second = fetch_groups_page(relay.url, run, token=relay.token, limit=1, cursor=first["cursor"])
    assert second["groups"][0]["id"] != first["groups"][0]["id"]
    sizes = [g["size"] for g in fetch_groups(relay.url, run, token=relay.token, sort="size")]
    assert sizes == sorted(sizes, reverse=True)
    spread = [g["id"] for g in fetch_groups(relay.url, run, token=relay.token, sort="spread")]
    assert spread.index(VARIED) < spread.index(ZERO)


def test_fetch_group_has_the_rollouts_best_first_with_their_advantages(relay: Relay, run: str) -> None:
    g = fetch_group(relay.url, run, VARIED, token=relay.token)
    assert g["id"] == VARIED and g["size"] == 4 and g["finished"] == 4
    ids = [r["id"] for r in g["rollouts"]]
    expected = sorted(range(len(VARIED_SCORES)), key=lambda i: -weighted(*VARIED_SCORES[i]))
    assert ids == [f"{run}:varied-{i}" for i in expected]
    correct = [c for c, _ in VARIED_SCORES]
    fmt = [f for _, f in VARIED_SCORES]
    for r in g["rollouts"]:
        i = int(r["id"].rsplit("-", 1)[1])
        c, f = VARIED_SCORES[i]
        assert r["status"] == "finished"
        assert r["rewards"] == rewards(c, f)
        assert r["reward"] == pytest.approx(weighted(c, f))
        assert r["calls"] == 3 and isinstance(r["tokens"], int)
        assert r["stop_condition"] == "agent_completed" and r["truncated"] is False and r["error"] is None
        totals = [weighted(*s) for s in VARIED_SCORES]
        mean_total = sum(totals) / len(totals)
        assert r["advantage"]["raw"] == pytest.approx(weighted(c, f) - mean_total), r["id"]
        assert r["advantage"]["normalized"] == pytest.approx((weighted(c, f) - mean_total) / pstd(totals)), r["id"]
        for key, xs, x in (("correct", correct, c), ("format", fmt, f)):
            adv = r["key_advantages"][key]
            mean = sum(xs) / len(xs)
            assert adv["raw"] == pytest.approx(x - mean), (r["id"], key)
            assert adv["normalized"] == pytest.approx((x - mean) / pstd(xs)), (r["id"], key)

    zero = fetch_group(relay.url, run, ZERO, token=relay.token)
    assert len(zero["rollouts"]) == 3
    for r in zero["rollouts"]:
        assert r["advantage"] == {"raw": 0.0, "normalized": None}
        assert r["key_advantages"]["correct"] == {"raw": 0.0, "normalized": None}
        assert r["key_advantages"]["format"]["normalized"] is None

    odd = fetch_group(relay.url, run, ODD, token=relay.token)  # escaped in the path
    assert odd["id"] == ODD and [r["id"] for r in odd["rollouts"]] == [f"{run}:odd-1", f"{run}:odd-0"]

    live = fetch_group(relay.url, run, TASK_KEY, token=relay.token)
    assert [(r["id"], r["status"]) for r in live["rollouts"]] == [(f"{run}:live", "live")]


def test_refusals(relay: Relay, run: str) -> None:
    with pytest.raises(RelayError) as info:
        fetch_group(relay.url, run, "no-such-group", token=relay.token)
    assert info.value.status == 404 and info.value.error == "not_found"
    with pytest.raises(RelayError) as info:
        fetch_groups_page(relay.url, run)
    assert info.value.status == 401 and info.value.error == "unauthorized"
    # a token that covers only some of the run's episodes may not see its groups
    some = mint_token(relay.secret, "watcher", [f"{run}:varied-*"])
    with pytest.raises(RelayError) as info:
        list(fetch_groups(relay.url, run, token=some))
    assert info.value.status == 403
    with pytest.raises(RelayError) as info:
        fetch_group(relay.url, run, VARIED, token=some)
    assert info.value.status == 403
    whole = mint_token(relay.secret, "watcher", [f"{run}:*"])
    assert fetch_groups_page(relay.url, run, token=whole)["groups_total"] == 4
    with pytest.raises(RelayError) as info:
        fetch_groups_page(relay.url, run, token=relay.token, sort="reward")
    assert info.value.status == 400 and not info.value.retryable


def test_a_cursor_the_relay_did_not_hand_out_is_refused(relay: Relay, run: str) -> None:
    with pytest.raises(RelayError) as info:
        fetch_groups_page(relay.url, run, token=relay.token, cursor="not-a-cursor")
    assert (info.value.status, info.value.error) == (400, "bad_cursor")


# ---- scripted answers ----


def scripted(pages: Dict[Optional[str], Dict[str, Any]], seen: List[httpx.Request], header: bool = True) -> httpx.Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        cursor = request.url.params.get("cursor")
        headers = {"content-type": "application/json", **({"x-episode-relay": "1"} if header else {})}
        return httpx.Response(200, content=json.dumps(pages[cursor]).encode(), headers=headers)

    return httpx.Client(transport=httpx.MockTransport(handler))


def page(ids: List[str], cursor: Optional[str]) -> Dict[str, Any]:
    groups = [{"id": i, "task": None, "size": 1, "finished": 1, "failed": 0, "live": 0, "rewards": {}, "spread": None} for i in ids]
    return {"run": "S", "groups_total": 3, "finished_groups": 3, "zero_variance_groups": 0, "zero_variance_share": 0.0, "groups": groups, "cursor": cursor}


def test_fetch_groups_sends_the_parameters_and_follows_cursors() -> None:
    seen: List[httpx.Request] = []
    client = scripted({None: page(["a", "b"], "c1"), "c1": page(["c"], None)}, seen)
    assert [g["id"] for g in fetch_groups("https://relay.test/", "S:x", token="t", sort="size", limit=2, client=client)] == ["a", "b", "c"]
    assert [r.url.raw_path.decode() for r in seen] == ["/v1/runs/S%3Ax/groups?sort=size&limit=2", "/v1/runs/S%3Ax/groups?sort=size&limit=2&cursor=c1"]
    assert all(r.headers["authorization"] == "Bearer t" for r in seen)


def test_fetch_groups_stops_on_a_repeated_cursor_and_refuses_a_foreign_answer() -> None:
    with pytest.raises(RelayError) as info:
        list(fetch_groups("http://relay.test", "S", client=scripted({None: page(["a"], "c1"), "c1": page(["b"], "c1")}, [])))
    assert info.value.error == "bad_answer" and "same cursor" in str(info.value)
    with pytest.raises(RelayError) as info:
        fetch_groups_page("http://relay.test", "S", client=scripted({None: page([], None)}, [], header=False))
    assert info.value.error == "not_the_relay"
    with pytest.raises(RelayError) as info:
        fetch_groups_page("http://relay.test", "S", client=scripted({None: {"groups": "no"}}, []))
    assert info.value.error == "bad_answer"


def test_a_group_path_is_escaped_and_unsendable_names_are_refused_before_sending() -> None:
    seen: List[httpx.Request] = []
    detail = {**page(["x"], None)["groups"][0], "id": "a/b c", "rollouts": []}
    client = httpx.Client(
        transport=httpx.MockTransport(
            lambda r: (seen.append(r), httpx.Response(200, content=json.dumps(detail).encode(), headers={"x-episode-relay": "1"}))[1]
        )
    )
    assert fetch_group("http://relay.test", "S", "a/b c", client=client)["id"] == "a/b c"
    assert seen[0].url.raw_path == b"/v1/runs/S/groups/a%2Fb%20c"
    for bad in ("", ".", ".."):
        with pytest.raises(RelayError) as info:
            fetch_group("http://relay.test", "S", bad, client=client)
        assert info.value.error == "bad_group"
    with pytest.raises(RelayError) as info:
        fetch_group("relay.test", "S", "g")
    assert info.value.error == "bad_url"
    assert len(seen) == 1


def test_a_relay_that_is_not_there_is_a_network_error() -> None:
    from helpers import closed_port

    with pytest.raises(RelayError) as info:
        fetch_groups_page(f"http://127.0.0.1:{closed_port()}", "S", timeout=5)
    assert info.value.error == "network" and "connection refused" in str(info.value)
