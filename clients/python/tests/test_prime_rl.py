"""The prime-rl bridge (``python -m episode_relay.prime_rl``) on prime-rl's own file formats,
against a real relay: files appear while the bridge runs, as prime-rl writes them.

The runs are clients/python/tests/fixtures/prime-rl: ``recorded`` (one rollout, written from
prime-rl's source by hand) and ``golden-run`` (the golden cases as prime-rl would have recorded
them: make_prime_rl_fixtures.py). Every episode is compared byte for byte with the reference fold
of the same files (prime_rl_run.expected_episode)."""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List, Optional

import pytest

from conftest import Relay as RelayFixture
from helpers import packb, ref_apply, unpackb
from prime_rl_run import (
    GOLDEN_RUN, RECORDED, TRACES, BridgeProcess, Proxy, Relay, Replay, cases, expected_annotations, expected_episode, expected_seq,
    all_read, fresh_copy, live_lines, once, read_state, seal, seen_by_bridge, stream_records,
    records as records_of,
)  # fmt: skip


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


def test_no_line_per_http_request_unless_verbose() -> None:
    """httpx (0.24 and later) logs every request at INFO: the bridge's default keeps a line per pass, and its
    own request lines (DEBUG) show with --verbose only. Whatever httpx this runs with."""
    import logging

    from episode_relay.prime_rl.__main__ import PER_REQUEST_LOGGERS, configure_logging

    names = (*PER_REQUEST_LOGGERS, "episode_relay.prime_rl")
    kept = {n: logging.getLogger(n).level for n in names}
    try:
        configure_logging()
        assert not any(logging.getLogger(n).isEnabledFor(logging.INFO) for n in PER_REQUEST_LOGGERS)
        assert not logging.getLogger("episode_relay.prime_rl.http").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("episode_relay.prime_rl").isEnabledFor(logging.INFO)  # its progress lines
        configure_logging(quiet=True)
        assert not logging.getLogger("episode_relay.prime_rl").isEnabledFor(logging.INFO)
        configure_logging(verbose=True)
        assert logging.getLogger("episode_relay.prime_rl.http").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("httpx").isEnabledFor(logging.INFO)  # the bridge's line, not httpx's too
    finally:
        for n, level in kept.items():
            logging.getLogger(n).setLevel(level)


def test_recorded_rollout(relay: RelayFixture, tmp_path: Path) -> None:
    """The hand-recorded rollout (fixtures/prime-rl/recorded): its live file, pending file and
    finished record, bridged with --once: the fold of the file, the identity from its open line,
    the eval rollout waiting as a pending row."""
    api = Relay(relay.url, relay.token)
    run = run_name("rec")
    out = fresh_copy(RECORDED, tmp_path / "run")
    stats = once(out, relay.url, relay.token, tmp_path / "state.json", "--run", run)
    assert stats["finished"] == 1 and stats["announced"] == 1 and stats["lines"] == 4, stats
    # it says how far it got while it runs, not only at its exit; --quiet leaves that out (the same files into a new run)
    assert re.search(r"INFO progress: .*\b4 lines\b", stats["log"]), stats["log"]
    # a line per pass, not one per HTTP request (httpx 0.24+ logs each at INFO): those only with --verbose
    assert "HTTP" not in stats["log"], stats["log"]
    quiet = once(out, relay.url, relay.token, tmp_path / "quiet-state.json", "--run", run_name("recq"), "--quiet")
    assert quiet["lines"] == 4 and "progress:" not in quiet["log"] and " INFO " not in quiet["log"], quiet["log"]
    loud = once(out, relay.url, relay.token, tmp_path / "loud-state.json", "--run", run_name("recv"), "--verbose")
    assert loud["lines"] == 4 and "progress:" in loud["log"] and re.search(r"DEBUG HTTP POST http://\S+/v1/episodes/\S+: 200\n", loud["log"]), loud["log"]
    assert "HTTP Request" not in loud["log"], loud["log"]  # the bridge's line, not httpx's too
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


def replay_with(bridge: Any, api: Relay, replay: Replay, state: Path, run_dir: Path, until: Optional[int] = None, on_step: Any = None) -> None:
    """Replay events while the bridge runs (``bridge()`` gives the running one); a file is
    deleted only once the bridge read it."""
    end = len(replay.events) if until is None else until
    while replay.done < end:
        e = replay.events[replay.done]
        if e["op"] == "delete":
            api.wait(f"the bridge reading {e['path']}", lambda: seen_by_bridge(state, run_dir, e), bridge=bridge())
        replay.step()
        if on_step is not None:
            on_step(replay.done)


def wait_golden_run(api: Relay, run: str, bridge: BridgeProcess, state: Path) -> None:
    for name, case in cases().items():
        if case["how"] != "pending":
            api.wait(f"{name} finished", lambda: (api.status(episode_of(run, case)) or {}).get("status") == "finished", bridge=bridge)
    total = sum(len(GOLDEN_RUN.joinpath("files", TRACES, "annotations", f"{p}.index.jsonl").read_bytes().splitlines()) for p in ("orch", "trainer"))
    api.wait("every annotation record posted", lambda: sum(unpackb(api.annotations(episode_of(run, c)) or packb({"version": 0}))["version"] for c in cases().values() if c["how"] != "pending") >= total, bridge=bridge)


def test_torn_last_line_is_applied_once_complete(relay: RelayFixture, tmp_path: Path) -> None:
    """prime-rl's appends are not atomic: a line cut short is not sent until its newline is there,
    and then once."""
    api = Relay(relay.url, relay.token)
    run = run_name("torn")
    src = RECORDED / TRACES / "live" / "5f0c2d6e9a8b4c1d8e7f6a5b4c3d2e1f.jsonl"
    data = src.read_bytes()
    out = tmp_path / "run"
    live = out / TRACES / "live" / src.name
    live.parent.mkdir(parents=True)
    first, second = data.index(b"\n\n") + 2, data.index(b"\n\n", data.index(b"\n\n") + 2) + 2
    cut = first + (second - first) // 2
    state = tmp_path / "state.json"
    ep = f"{run}:0a1b2c3d4e5f40718293a4b5c6d7e8f9"

    def relay_lines() -> int:
        return int((api.status(ep) or {}).get("seq", 0))

    live.write_bytes(data[:cut])
    assert once(out, relay.url, relay.token, state, "--run", run)["lines"] == 1 and relay_lines() == 1
    with open(live, "ab") as f:
        f.write(data[cut : second - 1])  # the line whole, its blank line not yet
    assert once(out, relay.url, relay.token, state, "--run", run)["lines"] == 2 and relay_lines() == 2
    with open(live, "ab") as f:
        f.write(data[second - 1 : second + 10])
    assert once(out, relay.url, relay.token, state, "--run", run)["lines"] == 2 and relay_lines() == 2
    with open(live, "ab") as f:
        f.write(data[second + 10 :])
    stats = once(out, relay.url, relay.token, state, "--run", run)
    assert stats["lines"] == 4 and stats["applied"] == 4 and stats.get("duplicates", 0) == 0 and relay_lines() == 4
    doc = unpackb(api.episode(ep))
    folded: Dict[str, Any] = {}
    for d in live_lines(live):
        ref_apply(folded, d)
    assert packb(doc["traces"]) == packb(list(folded.values()))


def test_killed_and_restarted_midway(relay: RelayFixture, tmp_path: Path) -> None:
    """SIGKILL at five points of the golden run (the last among the annotations), a new bridge
    on the same state each time: every episode and its annotations end exact (no loss, no
    duplicate), the relay applied each frame once (its seq), and what the killed bridges had
    sent and not saved came back to the relay as duplicates."""
    api = Relay(relay.url, relay.token)
    run = run_name("kill")
    out = tmp_path / "run"
    state = tmp_path / "state.json"
    replay = Replay(GOLDEN_RUN, out)
    replay.run(until=1)
    args = ("--run", run, "--poll", "0.05", "--finish-grace", "1")
    bridge = BridgeProcess(out, relay.url, relay.token, state, tmp_path / "bridge.log", *args).start()
    kills = {40, 80, 110, 140, len(replay.events) - 6}
    killed = []

    def maybe_kill(done: int) -> None:
        nonlocal bridge
        if done in kills:
            bridge.kill()
            killed.append(done)
            bridge = BridgeProcess(out, relay.url, relay.token, state, tmp_path / "bridge.log", *args).start()

    try:
        replay_with(lambda: bridge, api, replay, state, out, on_step=maybe_kill)
        wait_golden_run(api, run, bridge, state)
        assert sorted(killed) == sorted(kills)
        check_golden_run(api, run, GOLDEN_RUN)
        for name, case in cases().items():
            if case["how"] != "pending":
                assert (api.status(episode_of(run, case)) or {})["seq"] == expected_seq(case), name
    finally:
        assert bridge.stop() == 0, bridge.tail()
    stats = read_state(state)["stats"]
    frames = sum(expected_seq(c) for c in cases().values() if c["how"] != "pending")
    # every frame acknowledged once in a saved state: as applied, or (re-sent) as a duplicate
    assert stats["applied"] + stats.get("duplicates", 0) == frames, stats


def test_resent_after_a_crash_is_a_duplicate(relay: RelayFixture, tmp_path: Path) -> None:
    """A bridge that dies after the relay acknowledged lines and before its state said so sends
    them again from the older state: the relay counts each one as a duplicate and applies
    nothing twice; the run still ends exact."""
    api = Relay(relay.url, relay.token)
    run = run_name("dup")
    out = tmp_path / "run"
    state = tmp_path / "state.json"
    replay = Replay(GOLDEN_RUN, out)
    # events 20..40 only append to live files: what the bridge sends for them stays resendable
    window = replay.events[20:40]
    assert all(e["op"] == "append" and "/live/" in e["path"] for e in window)
    args = (out, relay.url, relay.token, state, tmp_path / "bridge.log", "--run", run, "--poll", "0.05", "--finish-grace", "1")

    def phase(until: int) -> Dict[str, Any]:
        bridge = BridgeProcess(*args).start()
        replay_with(lambda: bridge, api, replay, state, out, until=until)
        api.wait("the bridge reading every live file", lambda: all_read(state, out), bridge=bridge)
        assert bridge.stop() == 0, bridge.tail()
        return read_state(state)["stats"]

    first = phase(20)
    older = state.read_bytes()
    second = phase(40)
    sent = second["lines"] - first.get("lines", 0)
    assert sent == len(window) and second.get("duplicates", 0) == 0
    state.write_bytes(older)  # the crash: the relay has those lines, the state does not
    bridge = BridgeProcess(*args).start()
    try:
        replay_with(lambda: bridge, api, replay, state, out)
        wait_golden_run(api, run, bridge, state)
        check_golden_run(api, run, GOLDEN_RUN)
        for name, case in cases().items():
            if case["how"] != "pending":
                assert (api.status(episode_of(run, case)) or {})["seq"] == expected_seq(case), name
    finally:
        assert bridge.stop() == 0, bridge.tail()
    final = read_state(state)["stats"]
    frames = sum(expected_seq(c) for c in cases().values() if c["how"] != "pending")
    assert final["duplicates"] == sent and final["applied"] + final["duplicates"] == frames, final


def test_a_relay_outage_loses_nothing(relay: RelayFixture, tmp_path: Path) -> None:
    """The relay goes away twice while prime-rl writes (connections refused, open ones cut): the
    bridge retries and every episode still ends exact."""
    api = Relay(relay.url, relay.token)
    run = run_name("outage")
    proxy = Proxy(relay.port).start()
    out = tmp_path / "run"
    state = tmp_path / "state.json"
    replay = Replay(GOLDEN_RUN, out)
    replay.run(until=1)
    bridge = BridgeProcess(out, proxy.url, relay.token, state, tmp_path / "bridge.log", "--run", run, "--poll", "0.05", "--finish-grace", "1").start()
    outages = []

    def flap() -> None:
        # twice away for 2 s. The replay deletes a file only once the bridge read it, so it waits
        # out the outage and every line still reaches the relay (prime-rl would not wait: the
        # records would then complete what it deleted)
        for _ in range(2):
            time.sleep(1.0)
            proxy.stop()
            outages.append(time.monotonic())
            time.sleep(2.0)
            proxy.start()

    flapper = threading.Thread(target=flap, daemon=True)
    try:
        flapper.start()
        replay_with(lambda: bridge, api, replay, state, out)
        flapper.join()
        wait_golden_run(api, run, bridge, state)
        check_golden_run(api, run, GOLDEN_RUN)
    finally:
        proxy.stop()
        assert bridge.stop() == 0, bridge.tail()
    stats = read_state(state)["stats"]
    assert len(outages) == 2 and stats["retries"] > 0 and stats.get("refused", 0) == 0, stats
    assert "retrying until the relay answers" in bridge.tail()


def in_flight(replay: Replay, at: int) -> Dict[str, Dict[str, Any]]:
    """The golden rollouts that had lines on disk and no finished record before event ``at``."""
    stream_lines = 0
    recorded_before: set = set()
    started: set = set()
    line_of = {c["stream_line"]: n for n, c in cases().items() if "stream_line" in c}
    for e in replay.events[:at]:
        if e["op"] == "append" and e["path"].endswith("stream/00000.jsonl"):
            stream_lines += 1
            recorded_before.add(line_of[stream_lines])
        if e["op"] == "append" and "/live/" in e["path"]:
            started.update(n for n, c in cases().items() if Path(e["path"]).stem in c["traces"])
    return {n: cases()[n] for n in started - recorded_before}


def add_recorded_rollout(api: Relay, bridge: Any, out: Path, state: Path) -> None:
    """prime-rl, relaunched, runs the recorded rollout in the same output directory: its live
    lines, its record and index row after the stream's (offsets where they land), its live file
    deleted once read, its annotations after the annotation streams'."""
    src = RECORDED / TRACES
    dst = out / TRACES
    (dst / "live").mkdir(parents=True, exist_ok=True)
    name = "live/5f0c2d6e9a8b4c1d8e7f6a5b4c3d2e1f.jsonl"
    for rec in records_of((src / name).read_bytes()):
        with open(dst / name, "ab") as f:
            f.write(rec)

    def append_indexed(chunk: Path, index: Path, line: bytes, row: Dict[str, Any]) -> None:
        chunk.parent.mkdir(parents=True, exist_ok=True)
        offset = chunk.stat().st_size if chunk.exists() else 0
        with open(chunk, "ab") as f:
            f.write(line)
        n = len(index.read_bytes().splitlines()) if index.exists() else 0
        if "line" in row:
            row = {**row, "line": n + 1}
        with open(index, "ab") as f:
            f.write(json.dumps({**row, "offset": offset}, separators=(",", ":")).encode() + b"\n")

    record = (src / "stream" / "00000.jsonl").read_bytes()
    append_indexed(dst / "stream" / "00000.jsonl", dst / "stream.index.jsonl", record, json.loads((src / "stream.index.jsonl").read_bytes()))
    api.wait("the bridge reading the recorded live file", lambda: seen_by_bridge(state, out, {"path": str(TRACES / name)}), bridge=bridge())
    (dst / name).unlink()
    for producer in ("orch", "trainer"):
        line = (src / "annotations" / producer / "00000.jsonl").read_bytes()
        row = json.loads((src / "annotations" / f"{producer}.index.jsonl").read_bytes())
        append_indexed(dst / "annotations" / producer / "00000.jsonl", dst / "annotations" / f"{producer}.index.jsonl", line, row)


def check_recorded(api: Relay, run: str, traces_dir: Path) -> None:
    ep = f"{run}:0a1b2c3d4e5f40718293a4b5c6d7e8f9"
    api.wait("the recorded rollout finished", lambda: (api.status(ep) or {}).get("status") == "finished")
    api.wait("its annotations", lambda: unpackb(api.annotations(ep) or packb({"version": 0}))["version"] == 2)
    rec = [r for r in stream_records(traces_dir) if r["id"] == "9d8c7b6a5f4e4d3c2b1a0f9e8d7c6b5a"][0]
    assert api.episode(ep) == packb(expected_episode(RECORDED / TRACES, rec, "complete"))
    assert api.annotations(ep) == packb(expected_annotations(RECORDED / TRACES, ep, ["5f0c2d6e9a8b4c1d8e7f6a5b4c3d2e1f"]))


def check_orphans(api: Relay, run: str, lost: Dict[str, Dict[str, Any]], bridge: Any) -> None:
    assert lost, "the test means to cut rollouts in flight"
    for name, case in lost.items():
        ep = episode_of(run, case)
        api.wait(f"{name} failed", lambda: (api.status(ep) or {}).get("status") == "failed", bridge=bridge())
        assert "live files of this rollout are gone" in (api.status(ep) or {})["error"], name


def test_relaunch_wipes_the_live_directory(relay: RelayFixture, tmp_path: Path) -> None:
    """prime-rl relaunched in the same output directory: its first flush removes live/ (pending
    files too) and new rollouts stream while the stream and annotations go on. The rollouts cut
    in flight end failed, saying why (after --orphan-after); the finished ones stay finished; the
    new rollout ends exact, with its annotations."""
    api = Relay(relay.url, relay.token)
    run = run_name("wipe")
    out = tmp_path / "run"
    state = tmp_path / "state.json"
    replay = Replay(GOLDEN_RUN, out)
    replay.run(until=1)
    bridge = BridgeProcess(out, relay.url, relay.token, state, tmp_path / "bridge.log", "--run", run, "--poll", "0.05", "--finish-grace", "1", "--orphan-after", "1").start()
    try:
        at = 80
        replay_with(lambda: bridge, api, replay, state, out, until=at)
        api.wait("the bridge reading every live file", lambda: all_read(state, out), bridge=bridge)
        lost = in_flight(replay, at)
        done = [n for n, c in cases().items() if c["how"] != "pending" and n not in lost and c.get("stream_line", 99) <= sum(1 for e in replay.events[:at] if e["path"].endswith("stream/00000.jsonl"))]
        shutil.rmtree(out / TRACES / "live")
        add_recorded_rollout(api, lambda: bridge, out, state)
        check_orphans(api, run, lost, lambda: bridge)
        check_recorded(api, run, out / TRACES)
        for name in done:
            assert (api.status(episode_of(run, cases()[name])) or {}).get("status") == "finished", name
        assert done
    finally:
        assert bridge.stop() == 0, bridge.tail()
    assert read_state(state)["stats"]["orphaned"] == len(lost)


def test_run_directory_replaced(relay: RelayFixture, tmp_path: Path) -> None:
    """The whole output directory replaced by another run's (a new stream and index, shorter than
    the bridge's cursors): the bridge reads the new files from their start; what was in flight in
    the old one ends failed; the new run's rollout ends exact with its annotations."""
    api = Relay(relay.url, relay.token)
    run = run_name("repl")
    out = tmp_path / "run"
    state = tmp_path / "state.json"
    replay = Replay(GOLDEN_RUN, out)
    replay.run(until=1)
    bridge = BridgeProcess(out, relay.url, relay.token, state, tmp_path / "bridge.log", "--run", run, "--poll", "0.05", "--finish-grace", "1", "--orphan-after", "1").start()
    try:
        at = 70
        replay_with(lambda: bridge, api, replay, state, out, until=at)
        api.wait("the bridge reading every live file", lambda: all_read(state, out), bridge=bridge)
        lost = in_flight(replay, at)
        shutil.rmtree(out)
        fresh_copy(RECORDED, out)
        check_orphans(api, run, lost, lambda: bridge)
        check_recorded(api, run, out / TRACES)
    finally:
        assert bridge.stop() == 0, bridge.tail()
    assert "was replaced" in bridge.tail()


def test_a_sealed_stream_chunk(relay: RelayFixture, tmp_path: Path) -> None:
    """A finished run whose stream chunk prime-rl sealed (seekable zstd): without a zstd module
    the bridge says once what that means and finishes nothing from it; with zstandard, the same
    state finishes every episode from its record."""
    api = Relay(relay.url, relay.token)
    run = run_name("zst")
    out = tmp_path / "run"
    Replay(GOLDEN_RUN, out).run()
    seal(out / TRACES / "stream" / "00000.jsonl")
    state = tmp_path / "state.json"
    blocked = once(out, relay.url, relay.token, state, "--run", run, prelude="import sys\nsys.modules['zstandard'] = sys.modules['pyzstd'] = None")
    recs = stream_records(GOLDEN_RUN / "files" / TRACES)
    assert blocked["sealed_unread"] == len(recs) and blocked.get("finished", 0) == 0, blocked
    assert blocked["log"].count("is sealed (zstd)") == 1 and "python3-zstandard" in blocked["log"]
    assert all(api.status(f"{run}:{r['id']}") is None for r in recs)
    read = once(out, relay.url, relay.token, state, "--run", run)
    assert read["finished"] == len(recs) and read["sealed_unread"] == len(recs), read
    for r in recs:
        assert api.episode(f"{run}:{r['id']}") == packb(expected_episode(GOLDEN_RUN / "files" / TRACES, r, "record-only")), r["id"]
    # the annotations of episodes never seen live came before their records could be read: skipped
    assert read["annotations_unmatched"] == blocked["annotations_unmatched"] > 0 and read.get("annotations", 0) == 0


def test_annotations_posted_before_a_crash_are_not_posted_again(relay: RelayFixture, tmp_path: Path) -> None:
    """The bridge dies right after the relay merged a producer's records, before its state said
    so (the note of the relay's counts it saved before posting is on disk): the next bridge skips
    exactly what the relay merged, and every episode ends with each record once."""
    import asyncio

    import httpx

    from episode_relay.prime_rl import Bridge

    api = Relay(relay.url, relay.token)
    run = run_name("annc")
    out = tmp_path / "run"
    state = tmp_path / "state.json"
    replay = Replay(GOLDEN_RUN, out)
    first_annotation = next(i for i, e in enumerate(replay.events) if "/annotations/" in e["path"])
    replay.run(until=first_annotation)
    once(out, relay.url, relay.token, state, "--run", run)
    replay.run()

    class Died(Exception):
        pass

    async def crash() -> None:
        async with httpx.AsyncClient(timeout=30) as client:
            bridge = Bridge(out, relay.url, run=run, token=relay.token, state=state, client=client)
            post, save = bridge._post_annotations, bridge.state.save
            answered: List[str] = []

            async def post_and_note(episode: str, records: Any) -> None:
                await post(episode, records)
                answered.append(episode)

            def save_or_die() -> None:
                # dies once every post of the batch was answered: a post still in flight when the
                # test reads the relay's counts would land after them and make the count a race
                if answered:
                    raise Died("the bridge dies after the relay answered, before its state is saved")
                save()

            bridge._post_annotations = post_and_note  # type: ignore[method-assign]
            bridge.state.save = save_or_die  # type: ignore[method-assign]
            with pytest.raises(Died):
                await bridge.cycle(final=True)

    asyncio.run(crash())
    on_disk = read_state(state)
    assert on_disk["posting"]["producer"] == "orch"
    merged = sum(unpackb(api.annotations(f"{run}:{c['episode_id']}") or packb({"version": 0}))["version"] for c in cases().values() if c["how"] != "pending")
    assert merged > 0
    after = once(out, relay.url, relay.token, state, "--run", run)
    assert after["annotations_skipped"] == merged, after
    for name, case in cases().items():
        if case["how"] == "pending":
            continue
        ep = f"{run}:{case['episode_id']}"
        want = expected_annotations(GOLDEN_RUN / "files" / TRACES, ep, case["final_traces"])
        if want is not None:
            assert api.annotations(ep) == packb(want), name
