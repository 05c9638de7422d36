"""docs/python.md's run snippets, run as written against a real relay: fetch_run writes a run's
finished episodes, the groups snippet prints the run's zero-variance share, its groups and a
group's rollouts, and the episodes snippet lists the finished rollouts that pass its filters.

Only the relay's address and the run's name differ from the page (a run of this test's own); the
``token`` the page's prose speaks of is the fixture's. The run: chat_basic three times in one
group (``g-1``), two scoring correct 1.0 and one correct 0.0 (set by one more delta before the
reply), so the group has a spread and the episodes snippet's ``correct ≥ 1`` keeps two."""

from __future__ import annotations

import re
import time
import uuid
from pathlib import Path
from typing import Any, Dict

import httpx
import pytest

from conftest import ROOT, Relay
from helpers import load_case, packb, unpackb

DOC = ROOT / "docs" / "python.md"
DEFAULT_URL = "http://127.0.0.1:8787"
DEFAULT_RUN = '"run-42"'
CASE = load_case("chat_basic")
TRACE = unpackb(CASE.frames[0])["trace"]
GROUP = "g-1"


def snippet(name: str) -> str:
    m = re.search(rf"<!-- doc-snippet: {re.escape(name)} -->\s*```python\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/python.md has no python snippet {name}"
    return m.group(1)


def run_snippet(name: str, relay: Relay, run: str, scope: Dict[str, Any]) -> Dict[str, Any]:
    code = snippet(name)
    assert DEFAULT_RUN in code
    code = code.replace(DEFAULT_URL, relay.url).replace(DEFAULT_RUN, f'"{run}"')
    exec(compile(code, f"docs/python.md:{name}", "exec"), scope)
    return scope


def post(relay: Relay, path: str, body: bytes) -> None:
    r = httpx.post(relay.url + path, content=body, headers={"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def run(relay: Relay) -> str:
    name = f"py-docs-{uuid.uuid4().hex[:8]}"
    for rollout, correct in (("a", 1.0), ("b", 1.0), ("c", 0.0)):
        eid = f"{name}:{rollout}"
        for frame in CASE.frames:
            post(relay, f"/v1/episodes/{eid}/deltas", frame)
        post(relay, f"/v1/episodes/{eid}/deltas", packb({"trace": TRACE, "set": {"rewards": {"correct": {"score": correct, "weight": 1.0}}}}))
        reply = unpackb(CASE.reply)
        reply["head"]["group"] = {"id": GROUP}
        post(relay, f"/v1/episodes/{eid}/reply", packb(reply))
    end = time.monotonic() + 30
    while True:
        r = httpx.get(f"{relay.url}/v1/runs/{name}", headers={"authorization": f"Bearer {relay.token}"}, timeout=10)
        if r.status_code == 200 and (r.json().get("aggregates") or {}).get("counts", {}).get("finished") == 3:
            return name
        if time.monotonic() > end:
            raise AssertionError(f"run {name} never showed 3 finished episodes: {r.status_code} {r.text[:300]}")
        time.sleep(0.1)


def test_fetch_run_writes_each_finished_episode(relay: Relay, run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scope = run_snippet("fetch-run", relay, run, {"token": relay.token})
    written = {p.name: p.read_bytes() for p in tmp_path.glob("*.msgpack")}
    assert sorted(written) == [f"{run}:{r}.msgpack" for r in "abc"]
    for name, body in written.items():
        got = httpx.get(f"{relay.url}/v1/episodes/{name[: -len('.msgpack')]}", headers={"authorization": f"Bearer {relay.token}"}, timeout=30)
        assert got.status_code == 200 and body == got.content
    assert scope["cursor"], "the last cursor, to resume after it"


def test_groups_prints_the_share_the_groups_and_a_groups_rollouts(relay: Relay, run: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_snippet("groups", relay, run, {"token": relay.token})
    lines = capsys.readouterr().out.strip().splitlines()
    assert float(lines[0]) == 0  # one finished group, not zero-variance (its correct scores differ)
    mean = 2 / 3
    std = (((1 - mean) ** 2 * 2 + mean**2) / 3) ** 0.5
    head = lines[1].split(" ", 4)
    assert head[:2] == [GROUP, "3"]
    # one key of weight 1: the trainer's reward is its score
    assert (float(head[2]), float(head[3])) == pytest.approx((mean, std))
    stats = eval(head[4])  # the printed dict: {key: (mean, std)}
    assert stats["correct"] == pytest.approx((mean, std))
    rollouts = [line.split(" ", 2) for line in lines[2:]]
    assert [r[0] for r in rollouts][-1] == f"{run}:c" and sorted(r[0] for r in rollouts) == [f"{run}:{r}" for r in "abc"]
    assert len(lines) == 5


def test_episodes_lists_the_finished_rollouts_past_the_filters(relay: Relay, run: str, capsys: pytest.CaptureFixture[str]) -> None:
    run_snippet("episodes", relay, run, {"token": relay.token, "url": relay.url})
    lines = capsys.readouterr().out.strip().splitlines()
    # a and b score correct 1.0 with 3 model calls and no timeout; c scores 0.0
    assert sorted(line.split(" ")[0] for line in lines) == [f"{run}:a", f"{run}:b"]
    for line in lines:
        assert line.split(" ")[2] == "3" and line.endswith("agent_completed")
