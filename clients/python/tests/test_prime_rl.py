"""The prime-rl bridge (``python -m episode_relay.prime_rl``) on prime-rl's own file formats,
against a real relay: files appear while the bridge runs, as prime-rl writes them.

The runs are clients/python/tests/fixtures/prime-rl: ``recorded`` (one rollout, written from
prime-rl's source by hand) and ``golden-run`` (the golden cases as prime-rl would have recorded
them: make_prime_rl_fixtures.py). Every episode is compared byte for byte with the reference fold
of the same files (prime_rl_run.expected_episode)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Dict

import pytest

from conftest import Relay as RelayFixture
from helpers import packb, unpackb
from prime_rl_run import GOLDEN_RUN, RECORDED, TRACES, BridgeProcess, Relay, Replay, cases, expected_annotations, expected_episode, fresh_copy, once, read_state, seen_by_bridge, stream_records


def run_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def episode_of(run: str, case: Dict[str, Any]) -> str:
    key = case["episode_id"] if case["how"] == "record-only" else case["dispatch"]["id"]
    return f"{run}:{key}"


def pending_identity(run_dir: Path, dispatch_id: str) -> Dict[str, Any]:
    """The identity as the bridge first saw it: the pending file's (prime-rl recomputes `started`)."""
    return json.loads((GOLDEN_RUN / "files" / TRACES / "live" / "pending" / f"{dispatch_id}.json").read_text())


def check_golden_run(relay: Relay, run: str, source: Path) -> None:
    """Every rollout of the golden run is in the relay, equal to the reference fold, with its identity."""
    traces_dir = source / "files" / TRACES
    recs = {r["id"]: r for r in stream_records(traces_dir)}
    for name, case in cases().items():
        if case["how"] == "pending":
            continue
        ep = episode_of(run, case)
        status = relay.status(ep)
        assert status is not None and status["status"] == "finished", (name, status)
        want = packb(expected_episode(traces_dir, recs[case["episode_id"]], case["how"]))
        assert relay.episode(ep) == want, f"{name}: the relay's episode differs from the fold of the same files"
        if case["how"] == "record-only":
            d = case["dispatch"]
            rebuilt = {"kind": d["kind"], "env": d["env"], "group": d["group"], "task": d["task"], "policy_version": d["policy_version"], "step": d["step"]}
            assert status["dispatch"] == rebuilt, name
        else:
            assert status["dispatch"] == pending_identity(source, case["dispatch"]["id"]), name
        want_ann = expected_annotations(traces_dir, ep, case["final_traces"])
        got_ann = relay.annotations(ep)
        if want_ann is None:
            assert unpackb(got_ann or packb({"version": 0}))["version"] == 0, name
        else:
            assert got_ann == packb(want_ann), f"{name}: the relay's annotations differ from the records' merge"


def test_golden_run_written_while_the_bridge_runs(relay: RelayFixture, tmp_path: Path) -> None:
    """The golden run's files appear one operation at a time while the bridge follows them: each
    rollout ends as the reference fold of its files (short files completed from the record, a
    retry ending with the retry's traces, an episode only the stream saw named by its episode id),
    with its dispatch identity; the rollout that never streamed is a pending row."""
    api = Relay(relay.url, relay.token)
    run = run_name("prl")
    out = tmp_path / "run"
    replay = Replay(GOLDEN_RUN, out)
    replay.run(until=1)  # prime-rl has started writing
    bridge = BridgeProcess(out, relay.url, relay.token, tmp_path / "state.json", tmp_path / "bridge.log", "--run", run, "--poll", "0.05", "--finish-grace", "2").start()
    try:
        retry = cases()["discard_retry"]
        seen_retry_live = False
        while not replay.finished:
            e = replay.events[replay.done]
            if e["op"] == "delete":
                api.wait(f"the bridge reading {e['path']}", lambda: seen_by_bridge(tmp_path / "state.json", out, e), bridge=bridge)
            replay.step()
            # the retry's first line is on disk: once the relay has it, the first attempt is gone
            if e["op"] == "append" and e["path"].endswith(f"{retry['final_traces'][0]}.jsonl") and e["record"] == 1:
                ep = episode_of(run, retry)

                def retried() -> bool:
                    if api.status(ep) is None:
                        return False
                    doc = unpackb(api.episode(ep))
                    return isinstance(doc, dict) and "status" in doc and [t["id"] for t in doc["traces"]] == retry["final_traces"]

                api.wait("the retry's trace replacing the first attempt's", retried, bridge=bridge)
                seen_retry_live = True
        assert seen_retry_live
        for name, case in cases().items():
            if case["how"] != "pending":
                api.wait(f"{name} finished", lambda: (api.status(episode_of(run, case)) or {}).get("status") == "finished", bridge=bridge)
        total = sum(len(GOLDEN_RUN.joinpath("files", TRACES, "annotations", f"{p}.index.jsonl").read_bytes().splitlines()) for p in ("orch", "trainer"))
        api.wait("every annotation record posted", lambda: read_state(tmp_path / "state.json").get("stats", {}).get("annotations") == total, bridge=bridge)
        check_golden_run(api, run, GOLDEN_RUN)
        waiting = cases()["never_streamed"]
        rows = {r["id"]: r for r in api.rows(run)}
        row = rows[f"{run}:{waiting['dispatch']['id']}"]
        assert row["traces"] == 0 and row["live"]["stage"] == "pending" and row["dispatch"] == waiting["dispatch"]
        assert sum(1 for r in rows.values() if r["status"] == "finished") == len(cases()) - 1
    finally:
        code = bridge.stop()
        assert code == 0, f"{code} {bridge.log} {bridge.tail()!r}"
    stats = json.loads((tmp_path / "state.json").read_text())["stats"]
    assert stats["finished"] == len(cases()) - 1 and stats.get("refused", 0) == 0, stats


def test_recorded_rollout(relay: RelayFixture, tmp_path: Path) -> None:
    """The hand-recorded rollout (fixtures/prime-rl/recorded): its live file, pending file and
    finished record, bridged with --once: the fold of the file, the identity from its open line,
    the eval rollout waiting as a pending row."""
    api = Relay(relay.url, relay.token)
    run = run_name("rec")
    out = fresh_copy(RECORDED, tmp_path / "run")
    stats = once(out, relay.url, relay.token, tmp_path / "state.json", "--run", run)
    assert stats["finished"] == 1 and stats["announced"] == 1 and stats["lines"] == 4, stats
    traces_dir = out / TRACES
    record = stream_records(traces_dir)[0]
    open_line = json.loads((traces_dir / "live" / "5f0c2d6e9a8b4c1d8e7f6a5b4c3d2e1f.jsonl").read_bytes().split(b"\n")[0])
    ep = f"{run}:{open_line['dispatch']['id']}"
    assert api.episode(ep) == packb(expected_episode(traces_dir, record, "complete"))
    status = api.status(ep)
    assert status is not None and status["dispatch"] == open_line["dispatch"]
    # the bytes stayed the string prime-rl's fold reads
    finished = unpackb(api.episode(ep))
    assert finished["traces"][0]["info"] == {"blob": "b'\\x18\\x00ok'"} and finished["traces"][0]["metrics"] == {"len": 2.0, "bad": None}
    pending = json.loads((traces_dir / "live" / "pending" / "7e6d5c4b3a2f4e1d0c9b8a7f6e5d4c3b.json").read_text())
    row = next(r for r in api.rows(run) if r["id"] == f"{run}:{pending['id']}")
    assert row["live"]["stage"] == "pending" and row["traces"] == 0 and row["dispatch"] == pending


def test_prime_rl_fixtures_are_generated(tmp_path: Path) -> None:
    """The committed golden-run is exactly what make_prime_rl_fixtures.py writes from the golden cases."""
    import make_prime_rl_fixtures

    make_prime_rl_fixtures.build(tmp_path / "golden-run")
    made = {p.relative_to(tmp_path / "golden-run"): p.read_bytes() for p in (tmp_path / "golden-run").rglob("*") if p.is_file()}
    kept = {p.relative_to(GOLDEN_RUN): p.read_bytes() for p in GOLDEN_RUN.rglob("*") if p.is_file()}
    assert sorted(made) == sorted(kept)
    assert [str(k) for k in made if made[k] != kept[k]] == []
