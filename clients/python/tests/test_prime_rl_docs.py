"""docs/prime-rl.md's snippets, run as written against a real relay: the bridge command (run
beside a recorded prime-rl run, stopped with SIGTERM once the rollout is in), its --once form,
and the raw path (RelayForwarder.on_delta given to an env's run).

Only the relay's address, the token placeholder and the run directory's name differ from the
page. verifiers and prime-rl are not installable here: the raw path's ``env.run`` is a stand-in
that hands a golden case's frames to ``on_delta`` as verifiers' env client does (unpacked dicts,
in order) and returns the episode, and ``prime_rl.orchestrator.live.dispatch_info`` is a stand-in
returning prime-rl's 8 keys."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import types
import uuid
from pathlib import Path
from typing import Any, Dict

from conftest import ROOT
from conftest import Relay as RelayFixture
from helpers import load_case, packb, unpackb
from prime_rl_run import RECORDED, TRACES, Relay, expected_annotations, expected_episode, fresh_copy, stream_records

DOC = ROOT / "docs" / "prime-rl.md"
DEFAULT_URL = "http://127.0.0.1:8787"
EPISODE = "0a1b2c3d4e5f40718293a4b5c6d7e8f9"  # the recorded rollout's dispatch id


def snippet(name: str, lang: str) -> str:
    m = re.search(rf"<!-- docs-snippet: {re.escape(name)} -->\s*```{lang}\n(.*?)```", DOC.read_text(), re.S)
    assert m, f"docs/prime-rl.md has no {lang} snippet {name}"
    return m.group(1)


def shell_env(tmp_path: Path) -> Dict[str, str]:
    """`python3` on PATH is this interpreter (with the client on PYTHONPATH), as the page assumes."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    link = bin_dir / "python3"
    if not link.exists():
        link.symlink_to(sys.executable)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(ROOT / "clients" / "python")}


def as_run(script: str, relay: RelayFixture, run: str) -> str:
    assert DEFAULT_URL in script and "outputs/my-run" in script
    return script.replace(DEFAULT_URL, relay.url).replace("outputs/my-run", f"outputs/{run}").replace("RELAY_TOKEN=...", f"RELAY_TOKEN={relay.token}")


def check_recorded(api: Relay, run: str, out: Path) -> None:
    ep = f"{run}:{EPISODE}"
    record = stream_records(out / TRACES)[0]
    assert api.episode(ep) == packb(expected_episode(out / TRACES, record, "complete"))
    assert api.annotations(ep) == packb(expected_annotations(out / TRACES, ep, [t["id"] for t in record["traces"]]))


def test_the_bridge_command_runs_as_written(relay: RelayFixture, tmp_path: Path) -> None:
    api = Relay(relay.url, relay.token)
    run = f"docs-{uuid.uuid4().hex[:8]}"
    out = fresh_copy(RECORDED, tmp_path / "outputs" / run)
    script = as_run(snippet("bridge", "sh"), relay, run)
    p = subprocess.Popen(["bash", "-ec", script], cwd=tmp_path, env=shell_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        ep = f"{run}:{EPISODE}"
        api.wait(
            "the recorded rollout finished, with its annotations",
            lambda: (api.status(ep) or {}).get("status") == "finished" and unpackb(api.annotations(ep) or packb({"version": 0}))["version"] == 2,
        )
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        stdout, stderr = p.communicate(timeout=30)
    assert p.returncode == 0, stderr.decode()
    stats = json.loads(stdout.decode().strip().splitlines()[-1])
    assert stats["finished"] == 1 and stats["annotations"] == 2, stats
    check_recorded(api, run, out)
    assert (out / "relay-bridge.json").exists()


def test_the_once_command_runs_as_written(relay: RelayFixture, tmp_path: Path) -> None:
    api = Relay(relay.url, relay.token)
    run = f"docs-{uuid.uuid4().hex[:8]}"
    out = fresh_copy(RECORDED, tmp_path / "outputs" / run)
    script = as_run(snippet("bridge-once", "sh"), relay, run)
    r = subprocess.run(["bash", "-ec", script], cwd=tmp_path, env={**shell_env(tmp_path), "RELAY_TOKEN": relay.token}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    assert stats["finished"] == 1 and stats["lines"] == 4 and stats["announced"] == 1, stats
    check_recorded(api, run, out)


def test_the_once_command_on_a_run_with_nothing_yet_prints_its_counts_at_zero(relay: RelayFixture, tmp_path: Path) -> None:
    run = f"docs-{uuid.uuid4().hex[:8]}"
    (tmp_path / "outputs" / run).mkdir(parents=True)
    script = as_run(snippet("bridge-once", "sh"), relay, run)
    r = subprocess.run(["bash", "-ec", script], cwd=tmp_path, env={**shell_env(tmp_path), "RELAY_TOKEN": relay.token}, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    stats = json.loads(r.stdout.strip().splitlines()[-1])
    named = ("lines", "applied", "duplicates", "finished", "annotations", "retries", "refused")
    assert {k: stats.get(k) for k in named} == dict.fromkeys(named, 0), stats


def test_the_on_delta_snippet_forwards_the_raw_deltas(relay: RelayFixture) -> None:
    """The raw path keeps what the files lose: the episode is the golden one byte for byte,
    routing repairs included, with prime-rl's identity."""
    case = load_case("routing_repair_u8")
    identity = {"id": uuid.uuid4().hex, "kind": "train", "env": "routing", "group": str(uuid.uuid4()), "task": "idx=0", "policy_version": 3, "step": 4, "started": 1764700000.5}

    live = types.ModuleType("prime_rl.orchestrator.live")
    live.dispatch_info = lambda meta: dict(meta.identity)  # type: ignore[attr-defined]
    stand_ins = {"prime_rl": types.ModuleType("prime_rl"), "prime_rl.orchestrator": types.ModuleType("prime_rl.orchestrator"), "prime_rl.orchestrator.live": live}
    assert not any(name in sys.modules for name in stand_ins)
    sys.modules.update(stand_ins)

    class Episode:
        def __init__(self, doc: Dict[str, Any]) -> None:
            self.doc = doc

        def model_dump(self, mode: str = "python") -> Dict[str, Any]:
            return self.doc

    class Env:
        """prime-rl's Env.run: the env client's deltas to on_delta as they land, then the episode."""

        async def run(self, client: Any, model_name: str, cache_salt: str, task_data: Any, on_delta: Any = None) -> Episode:
            for frame in case.frames:
                on_delta(unpackb(frame))
                await asyncio.sleep(0)
            return Episode(unpackb(case.episode))

    code = snippet("on-delta", "python")
    assert DEFAULT_URL in code
    namespace: Dict[str, Any] = {}
    exec(compile(code.replace(DEFAULT_URL, relay.url), str(DOC), "exec"), namespace)
    run = f"docs-{uuid.uuid4().hex[:8]}"
    meta = types.SimpleNamespace(dispatch_id=identity["id"], identity=identity)
    try:
        asyncio.run(namespace["run_rollout"](Env(), None, "model", "salt", {}, meta, token=relay.token, run=run))
    finally:
        for name in stand_ins:
            del sys.modules[name]
    api = Relay(relay.url, relay.token)
    ep = f"{run}:{identity['id']}"
    assert api.episode(ep) == case.episode
    status = api.status(ep)
    assert status is not None and status["status"] == "finished" and status["dispatch"] == identity
