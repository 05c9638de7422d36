"""docs/export.md's notebook script, run as written against a real relay (only the relay's address,
the token and the run's name differ from the page): it loads the run into pandas, selects by the
list's filters and by a search, and writes the exact episodes of a selection to JSONL."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import ROOT, Relay
from episode_relay import announce_dispatch
from helpers import load_case

pytest.importorskip("pandas")

DOC = ROOT / "docs" / "export.md"
#: (case, kind, step): two train rollouts of steps 2..3 stop on max_turns (large_routing, odd_values)
PLAN = [("chat_basic", "train", 1), ("large_routing", "train", 2), ("odd_values", "train", 3), ("tool_calls_pending", "eval", 2), ("odd_values", "eval", 3)]


def snippet(name: str) -> str:
    m = re.search(rf"<!-- docs-snippet: {re.escape(name)} -->\s*```python\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/export.md has no python snippet {name}"
    return m.group(1)


def test_the_notebook_script_runs_as_written(relay: Relay, tmp_path: Path) -> None:
    run = f"py-docs-export-{uuid.uuid4().hex[:8]}"
    headers = {"authorization": f"Bearer {relay.token}", "content-type": "application/msgpack"}
    for i, (name, kind, step) in enumerate(PLAN):
        eid = f"{run}:r{i}"
        asyncio.run(announce_dispatch(relay.url, eid, {"id": uuid.uuid4().hex, "kind": kind, "env": "docs", "group": f"g{step}", "task": "t", "policy_version": step, "step": step, "started": 1.0}, token=relay.token))
        case = load_case(name)
        for frame in case.frames:
            assert httpx.post(f"{relay.url}/v1/episodes/{eid}/deltas", content=frame, headers=headers, timeout=60).status_code == 200
        assert httpx.post(f"{relay.url}/v1/episodes/{eid}/reply", content=case.reply, headers=headers, timeout=60).status_code == 200
    deadline = time.monotonic() + 30
    while True:
        r = httpx.get(f"{relay.url}/v1/runs/{run}/episodes", params={"status": "finished"}, headers=headers, timeout=30)
        rows = r.json()["episodes"] if r.status_code == 200 else []
        if len(rows) == len(PLAN) and all(e["kind"] for e in rows):
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    script = snippet("notebook")
    assert "http://127.0.0.1:8787" in script and '"run-42"' in script
    script = script.replace("http://127.0.0.1:8787", relay.url).replace('"run-42"', json.dumps(run))
    env = {**os.environ, "RELAY_TOKEN": relay.token, "PYTHONPATH": str(ROOT / "clients" / "python")}
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert f"{len(PLAN)} rollouts" in done.stdout
    hard = sorted(e["id"] for e in rows if e["kind"] == "train" and 2 <= e["step"] <= 3 and e["stop_condition"] == "max_turns")
    assert hard == [f"{run}:r1", f"{run}:r2"]
    assert f"{len(hard)} episodes written to hard.jsonl" in done.stdout
    lines = (tmp_path / "hard.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == hard
