"""The README's quickstart, run as written against a real relay: its worker snippet streams a
batch of rollouts (one sink per rollout, ids ``RUN:<uuid hex>``), each finished with its reply,
and its fetch snippet then writes every finished episode of the run, byte for byte the golden
episode.

Only the relay's address and the run's name differ from the README (each test run gets a run of
its own). verifiers is not installable here: ``verifiers.v1.serve.delta`` is a stand-in whose
``DeltaStreamer`` does what the snippet relies on (``send`` awaited once per delta, in order, and a
flush on exit), and the rollout given to the snippet is a stand-in that registers its trace with
``on_trace`` and returns the reply, replaying a golden case."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
import types
import uuid
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List

import httpx
import pytest

from conftest import ROOT, Relay
from episode_relay import fetch_run
from helpers import load_case, unpackb

README = ROOT / "README.md"
DEFAULT_URL = "http://127.0.0.1:8787"
DEFAULT_RUN = "grpo-42"
CASES = ("chat_basic", "tool_calls_pending", "multi_trace_links")


def snippet(name: str) -> str:
    m = re.search(rf"<!-- doc-snippet: {re.escape(name)} -->\s*```python\n(.*?)```", README.read_text(), re.S)
    assert m, f"README.md has no python snippet {name}"
    return m.group(1)


def as_run(code: str, relay: Relay, run: str) -> str:
    assert DEFAULT_URL in code and f'"{DEFAULT_RUN}"' in code
    return code.replace(DEFAULT_URL, relay.url).replace(f'"{DEFAULT_RUN}"', f'"{run}"')


class FramesTrace:
    """A trace as the stand-in streamer sees it: the deltas it will diff to, in order."""

    def __init__(self, frames: List[bytes]) -> None:
        self.frames = frames


class DeltaStreamer:
    """Stand-in for verifiers' ``DeltaStreamer(traces, send)``: ``watch`` adds a trace; every
    delta is sent by awaiting ``send``, in order; the exit flush runs when the rollout is done."""

    def __init__(self, traces: List[Any], send: Callable[[Dict[str, Any]], Awaitable[Any]]) -> None:
        self.traces = traces
        self.send = send
        self.sent = 0

    def watch(self, trace: FramesTrace) -> None:
        self.traces.append(trace)

    async def __aenter__(self) -> "DeltaStreamer":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if exc[0] is not None:
            return
        for trace in self.traces:
            for frame in trace.frames:
                await self.send(unpackb(frame))  # the worker's delta dicts
                self.sent += 1


async def golden_rollout(task: str, on_trace: Callable[[FramesTrace], None]) -> Dict[str, Any]:
    """A worker's rollout, replayed: the golden case's trace registered, its reply returned."""
    case = load_case(task)
    on_trace(FramesTrace(case.frames))
    await asyncio.sleep(0)
    return unpackb(case.reply)


def stand_in_verifiers(monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["verifiers", "verifiers.v1", "verifiers.v1.serve", "verifiers.v1.serve.delta"]
    assert not any(n in sys.modules for n in names), "verifiers is importable here: run the snippet against it instead"
    for n in names:
        monkeypatch.setitem(sys.modules, n, types.ModuleType(n))
    sys.modules["verifiers.v1.serve.delta"].DeltaStreamer = DeltaStreamer  # type: ignore[attr-defined]


def finished_ids(relay: Relay, run: str, want: int) -> List[str]:
    """The run's finished episodes, once its index holds `want` of them (rows land in the background)."""
    end = time.monotonic() + 30
    while True:
        r = httpx.get(f"{relay.url}/v1/runs/{run}/episodes", params={"status": "finished"}, headers={"authorization": f"Bearer {relay.token}"}, timeout=10)
        if r.status_code == 200:
            ids = [e["id"] for e in r.json()["episodes"]]
            if len(ids) >= want:
                return ids
        if time.monotonic() > end:
            raise AssertionError(f"run {run}'s index shows {r.status_code} {r.text[:300]}")
        time.sleep(0.1)


def test_the_quickstart_streams_a_batch_and_fetches_the_run(relay: Relay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_verifiers(monkeypatch)
    monkeypatch.setenv("RELAY_TOKEN", relay.token)
    run = f"readme-{uuid.uuid4().hex[:8]}"

    worker: Dict[str, Any] = {"__name__": "worker"}
    exec(compile(as_run(snippet("quickstart-worker"), relay, run), "README.md:quickstart-worker", "exec"), worker)
    assert worker["RUN"] == run and worker["TOKEN"] == relay.token
    replies = asyncio.run(worker["worker_loop"](golden_rollout, list(CASES), concurrency=2))
    assert replies == [unpackb(load_case(c).reply) for c in CASES]

    # one episode per rollout, named RUN:<32 hex digits>, each the golden episode byte for byte
    ids = finished_ids(relay, run, len(CASES))
    assert len(ids) == len(CASES) and all(re.fullmatch(rf"{run}:[0-9a-f]{{32}}", i) for i in ids), ids
    expected = sorted(load_case(c).episode for c in CASES)
    stored = sorted(httpx.get(f"{relay.url}/v1/episodes/{i}", headers={"authorization": f"Bearer {relay.token}"}, timeout=30).content for i in ids)
    assert stored == expected

    # step 3: the fetch snippet writes each finished episode to <id>.msgpack in the working folder
    monkeypatch.chdir(tmp_path)
    fetch: Dict[str, Any] = {"__name__": "fetch"}
    exec(compile(as_run(snippet("quickstart-fetch"), relay, run), "README.md:quickstart-fetch", "exec"), fetch)
    written = {p.name: p.read_bytes() for p in tmp_path.glob("*.msgpack")}
    assert sorted(written) == sorted(f"{i}.msgpack" for i in ids)
    assert sorted(written.values()) == expected
    assert fetch["cursor"], "the last cursor is kept, to fetch only what finishes next"
    # passing that cursor again yields nothing new: the run's episodes are all written
    assert list(fetch_run(relay.url, run, token=os.environ["RELAY_TOKEN"], cursor=fetch["cursor"])) == []
