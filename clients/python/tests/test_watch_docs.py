"""docs/python.md's "Watching live" snippets, run as written against a real relay while the
episodes they watch are still being written (only the relay's address, the episode id and the
run's name differ from the page; ``token`` is a watcher's)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any, Dict, List

import httpx
import pytest

from conftest import Relay
from helpers import load_case, mint_token, packb, unpackb
from test_python_docs import DEFAULT_RUN, DEFAULT_URL, snippet

CASE = load_case("tool_calls_pending")
TRACE = unpackb(CASE.frames[0])["trace"]
DEFAULT_EPISODE = '"run-42:episode-7"'


def post(relay: Relay, path: str, body: bytes) -> None:
    r = httpx.post(relay.url + path, content=body, headers={"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text


def write_later(relay: Relay, ids: List[str], scores: List[float]) -> threading.Thread:
    """Writes each episode (its frames, a reward, the reply) on a thread, while the snippet watches."""

    def run() -> None:
        for eid, score in zip(ids, scores):
            for frame in CASE.frames:
                post(relay, f"/v1/episodes/{eid}/deltas", frame)
                time.sleep(0.02)
            post(relay, f"/v1/episodes/{eid}/deltas", packb({"trace": TRACE, "set": {"rewards": {"correct": {"score": score, "weight": 1.0}}}}))
            post(relay, f"/v1/episodes/{eid}/reply", CASE.reply)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def run_snippet(name: str, relay: Relay, replace: Dict[str, str], scope: Dict[str, Any]) -> None:
    code = snippet(name)
    assert DEFAULT_URL in code
    for old, new in replace.items():
        assert old in code, f"{name}: {old} is not in the snippet"
        code = code.replace(old, new)
    exec(compile(code, f"docs/python.md:{name}", "exec"), scope)


def test_the_watch_snippet_prints_each_delta_and_ends_with_the_served_bytes(relay: Relay, capsys: pytest.CaptureFixture[str]) -> None:
    eid = f"py-watch-doc:{uuid.uuid4().hex[:8]}"
    writer = write_later(relay, [eid], [1.0])
    scope: Dict[str, Any] = {"token": mint_token(relay.secret, "watcher", [eid])}
    run_snippet("watch", relay, {DEFAULT_URL: relay.url, DEFAULT_EPISODE: f'"{eid}"'}, scope)
    writer.join(60)
    served = httpx.get(f"{relay.url}/v1/episodes/{eid}", headers={"authorization": f"Bearer {relay.token}"}, timeout=30).content
    assert scope["episode"] == served
    lines = capsys.readouterr().out.strip().splitlines()
    # one line per delta, seq by seq (the reward's delta last), the trace's node count never shrinking
    seqs = [int(line.split()[0]) for line in lines]
    assert seqs == list(range(seqs[0], len(CASE.frames) + 2)), lines
    counts = [int(line.split()[2]) for line in lines]
    assert counts == sorted(counts) and counts[-1] == len(unpackb(served)["traces"][0]["nodes"])


def test_the_watch_run_snippet_prints_the_three_rollouts_with_their_rewards(relay: Relay, capsys: pytest.CaptureFixture[str]) -> None:
    run = f"py-watch-run-doc-{uuid.uuid4().hex[:8]}"
    ids = [f"{run}:{n}" for n in "abc"]
    writer = write_later(relay, ids, [1.0, 0.5, 0.0])
    scope: Dict[str, Any] = {"token": mint_token(relay.secret, "watcher", [f"{run}:*"])}
    run_snippet("watch-run", relay, {DEFAULT_URL: relay.url, DEFAULT_RUN: f'"{run}"'}, scope)
    writer.join(60)
    lines = capsys.readouterr().out.strip().splitlines()
    got = {line.split()[0]: line.split()[1:] for line in lines}
    assert sorted(got) == ids
    assert {i: (v[2], float(v[3])) for i, v in got.items()} == {ids[0]: ("finished", 1.0), ids[1]: ("finished", 0.5), ids[2]: ("finished", 0.0)}
    assert scope["w"].watch.state == "closed"
