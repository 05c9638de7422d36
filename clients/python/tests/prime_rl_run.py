"""A prime-rl run for the bridge's tests: the golden run's files written in prime-rl's order, the
reference fold of the same files, and the bridge as a subprocess.

The reference here is independent of the bridge's code: the live lines are read as prime-rl's own
``fold_lines`` reads them (``json.loads``, ``dispatch`` popped) and folded with the tests'
``ref_apply`` (verifiers' ``EpisodeAssembly.apply``; it does ``int(index)`` on ``links`` keys as
the reference does), the reply from the record as the relay takes it.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

import httpx

from helpers import ref_apply
from episode_relay.wire import LIST_FIELDS

HERE = Path(__file__).resolve().parent
PRIME_RL = HERE / "fixtures" / "prime-rl"
GOLDEN_RUN = PRIME_RL / "golden-run"
RECORDED = PRIME_RL / "recorded"
TRACES = Path("monitors/file/traces")
OPEN_KEYS = ("version", "id", "verifiers", "task")
STAMPS = ("kind", "dispatch", "arrival")


def records(data: bytes) -> List[bytes]:
    """A file's records: each non-blank line with the blank lines after it."""
    out: List[bytes] = []
    cur = b""
    for ln in data.splitlines(keepends=True):
        if ln.strip() and cur.strip():
            out.append(cur)
            cur = b""
        cur += ln
    if cur:
        out.append(cur)
    return out


class Replay:
    """Writes a fixture run into ``target`` event by event, as prime-rl would: whole files
    atomically (tmp + rename), appends, deletes."""

    def __init__(self, source: Path, target: Path) -> None:
        self.source = source
        self.target = target
        self.events = [json.loads(line) for line in (source / "events.jsonl").read_text().splitlines() if line]
        self.done = 0
        self._records: Dict[str, List[bytes]] = {}

    def record(self, path: str, n: int) -> bytes:
        if path not in self._records:
            self._records[path] = records((self.source / "files" / path).read_bytes())
        return self._records[path][n - 1]

    def step(self) -> Dict[str, Any]:
        e = self.events[self.done]
        self.done += 1
        path = self.target / e["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        if e["op"] == "write":
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_bytes((self.source / "files" / e["path"]).read_bytes())
            os.replace(tmp, path)
        elif e["op"] == "delete":
            path.unlink(missing_ok=True)
        else:
            with open(path, "ab") as f:
                f.write(self.record(e["path"], e["record"]))
        return e

    def run(self, until: Optional[int] = None, pause: float = 0.0) -> None:
        end = len(self.events) if until is None else until
        while self.done < end:
            self.step()
            if pause:
                time.sleep(pause)

    @property
    def finished(self) -> bool:
        return self.done == len(self.events)


def read_state(path: Path) -> Dict[str, Any]:
    try:
        data: Dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, ValueError):  # not written yet (it is replaced atomically: never half)
        return {}


def seen_by_bridge(state_path: Path, run_dir: Path, event: Dict[str, Any]) -> bool:
    """Whether the bridge's saved state shows it read what ``event`` is about to delete: a live
    file to its end, a pending file announced. (The tests delete only then, so that what the
    relay gets does not depend on timing; prime-rl deleting first is the `short` and
    `record-only` cases.)"""
    path = Path(event["path"])
    state = read_state(state_path)
    if path.parent.name == "pending":
        return any(e.get("pending_file") == path.stem and e.get("identified") for e in state.get("episodes", {}).values())
    if path.parent.name == "live" and path.suffix == ".jsonl":
        f = state.get("files", {}).get(path.stem)
        if f is None:
            return False
        if f.get("refused"):
            return True
        size = (run_dir / event["path"]).stat().st_size
        return bool(f.get("cursor")) and f["cursor"]["offset"] == size
    return True


def all_read(state_path: Path, run_dir: Path) -> bool:
    """The bridge's saved state has every live file of ``run_dir`` read to its end."""
    live = run_dir / TRACES / "live"
    return all(seen_by_bridge(state_path, run_dir, {"path": str(p.relative_to(run_dir))}) for p in live.glob("*.jsonl"))


def cases(source: Path = GOLDEN_RUN) -> Dict[str, Dict[str, Any]]:
    data: Dict[str, Dict[str, Any]] = json.loads((source / "cases.json").read_text())
    return data


def live_lines(path: Path) -> Iterator[Dict[str, Any]]:
    """A live file's deltas as prime-rl's ``fold_lines`` reads them."""
    for rec in records(path.read_bytes()):
        if rec.strip():
            d = json.loads(rec)
            d.pop("dispatch", None)
            yield d


def stream_records(traces_dir: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (traces_dir / "stream" / "00000.jsonl").read_bytes().splitlines() if line.strip()]


def normal(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: normal(x) for k, x in v.items() if x is not None and not (isinstance(x, float) and math.isnan(x))}
    if isinstance(v, list):
        return [normal(x) for x in v]
    return v


def expected_episode(traces_dir: Path, record: Dict[str, Any], how: str) -> Dict[str, Any]:
    """The episode the relay must end with: the record's head, and per trace of the record:

    - ``complete`` / ``retry``: the fold of its live file;
    - ``short``: the fold of its live file, each list completed with the record's items beyond it,
      the scalars whose value differs (None entries aside) taken from the record;
    - ``record-only``: the record's trace (header, lists, scalars).

    The arrival stamps (``info.kind``, ``info.dispatch``, ``info.arrival``) are prime-rl's, not
    the rollout's, and stay out.
    """
    head = {k: v for k, v in record.items() if k != "traces"}
    out = []
    for rec in record["traces"]:
        scalars = {k: v for k, v in rec.items() if k not in OPEN_KEYS and k not in LIST_FIELDS}
        if isinstance(scalars.get("info"), dict):
            scalars["info"] = {k: v for k, v in scalars["info"].items() if k not in STAMPS}
        if how == "record-only":
            out.append({**{k: rec[k] for k in OPEN_KEYS if k in rec}, **{f: rec.get(f, []) for f in LIST_FIELDS}, **scalars})
            continue
        folded: Dict[str, Dict[str, Any]] = {}
        for d in live_lines(traces_dir / "live" / f"{rec['id']}.jsonl"):
            ref_apply(folded, d)
        t = {k: v for k, v in folded[rec["id"]].items() if k != "pending"}
        if how == "short":
            for f in LIST_FIELDS:
                t[f] = t[f] + (rec.get(f) or [])[len(t[f]) :]
            for k, v in scalars.items():
                if k in t and normal(t[k]) != normal(v):
                    t[k] = v
        out.append(t)
    return {**head, "traces": out}


def deep_merge(a: Dict[str, Any], b: Dict[str, Any]) -> Dict[str, Any]:
    """prime-rl's ``_deep_merge``: maps merge key by key, anything else is replaced."""
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(out.get(k), dict) and isinstance(v, dict) else v
    return out


def expected_annotations(traces_dir: Path, episode: str, trace_ids: List[str]) -> Optional[Dict[str, Any]]:
    """What GET .../annotations must answer for the episode: per trace (in the reply's order) the
    producers' records in name order, each producer's in its index order, merged as the relay
    documents it (info deeply, a record's empty info skipped; branch entries one after another).
    None when no record names the episode's traces."""
    by_trace: Dict[str, List[Dict[str, Any]]] = {}
    root = traces_dir / "annotations"
    for index in sorted(root.glob("*.index.jsonl")):
        producer = index.name[: -len(".index.jsonl")]
        chunk = (root / producer / "00000.jsonl").read_bytes()
        for line in index.read_bytes().splitlines():
            row = json.loads(line)
            if row["trace_id"] in trace_ids:
                rec = json.loads(chunk[row["offset"] :].split(b"\n", 1)[0])
                by_trace.setdefault(row["trace_id"], []).append(rec)
    traces = []
    n = 0
    for t in trace_ids:
        if t not in by_trace:
            continue
        info: Dict[str, Any] = {}
        branches: List[Any] = []
        for rec in by_trace[t]:
            n += 1
            if rec["info"]:
                info = deep_merge(info, rec["info"])
            branches += rec["branches"]
        traces.append({"version": 1, "trace_id": t, "info": info, "branches": branches})
    return {"episode": episode, "version": n, "traces": traces} if traces else None


class BridgeProcess:
    """``python -m episode_relay.prime_rl`` as a user runs it, in its own process group."""

    def __init__(self, run_dir: Path, url: str, token: str, state: Path, log: Path, *extra: str) -> None:
        self.args = [
            sys.executable, "-m", "episode_relay.prime_rl", str(run_dir), "--relay", url, "--token", token,
            "--state", str(state), *extra,
        ]  # fmt: skip
        self.log = log
        self.proc: Optional[subprocess.Popen] = None

    def start(self, *more: str) -> "BridgeProcess":
        env = {**os.environ, "PYTHONPATH": str(HERE.parent)}
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([*self.args, *more], stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)
        return self

    def kill(self) -> None:
        """SIGKILL: no chance to save anything."""
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM: the bridge saves its state and exits 0."""
        assert self.proc is not None
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""


def once(run_dir: Path, url: str, token: str, state: Path, *extra: str, env: Optional[Dict[str, str]] = None, prelude: str = "") -> Dict[str, Any]:
    """One ``--once`` run; its stats (the JSON it prints) and its log in ``["log"]``."""
    code = f"{prelude}\nimport sys\nfrom episode_relay.prime_rl.__main__ import main\nsys.exit(main(sys.argv[1:]))"
    r = subprocess.run(
        [sys.executable, "-c", code, str(run_dir), "--relay", url, "--token", token, "--state", str(state), "--once", *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE.parent), **(env or {})},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    stats: Dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    stats["log"] = r.stderr
    return stats


class Relay:
    """The relay's HTTP API, as the tests read it."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.client = httpx.Client(timeout=30, headers={"authorization": f"Bearer {token}"})

    def get(self, url: str, **kw: Any) -> httpx.Response:
        """A GET, sent again once on a kept-alive connection the server had closed as the request
        went out (it answered nothing; a GET is safe to repeat), as browsers do."""
        try:
            return self.client.get(url, **kw)
        except httpx.RemoteProtocolError:
            return self.client.get(url, **kw)

    def status(self, episode: str) -> Optional[Dict[str, Any]]:
        r = self.get(f"{self.url}/v1/episodes/{episode}/status")
        if r.status_code == 404:
            return None
        r.raise_for_status()
        body: Dict[str, Any] = r.json()
        return body

    def episode(self, episode: str) -> bytes:
        r = self.get(f"{self.url}/v1/episodes/{episode}", headers={"accept": "application/msgpack"})
        r.raise_for_status()
        return r.content

    def annotations(self, episode: str) -> Optional[bytes]:
        r = self.get(f"{self.url}/v1/episodes/{episode}/annotations", headers={"accept": "application/msgpack"})
        if r.status_code == 404:
            return None
        r.raise_for_status()
        return r.content

    def rows(self, run: str) -> List[Dict[str, Any]]:
        rows: List[Dict[str, Any]] = []
        cursor = None
        while True:
            r = self.get(f"{self.url}/v1/runs/{run}/episodes", params={"limit": 500, **({"cursor": cursor} if cursor else {})})
            r.raise_for_status()
            body = r.json()
            rows += body["episodes"]
            cursor = body.get("cursor")
            if not cursor:
                return rows

    def wait(self, what: str, check: Any, timeout: float = 90.0, bridge: Optional[BridgeProcess] = None) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if bridge is not None and not bridge.alive():
                raise AssertionError(f"the bridge exited while waiting for {what}:\n{bridge.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}" + (f"\n{bridge.tail()}" if bridge else ""))
            time.sleep(0.1)


def seal(plain: Path, frame_bytes: int = 4096) -> Path:
    """Seal a chunk as prime-rl's ``chunks.seal`` does (pyzstd's SeekableZstdFile): independent
    zstd frames of at most ``frame_bytes`` decompressed bytes, then the seek table (a skippable
    frame), written to ``NNNNN.jsonl.zst``; the plain chunk is removed after."""
    import struct

    import zstandard

    data = plain.read_bytes()
    frames, entries = [], []
    for i in range(0, len(data), frame_bytes):
        piece = data[i : i + frame_bytes]
        c = zstandard.ZstdCompressor(level=3).compress(piece)
        frames.append(c)
        entries.append(struct.pack("<II", len(c), len(piece)))
    table = b"".join(entries) + struct.pack("<IBI", len(frames), 0, 0x8F92EAB1)
    sealed = plain.with_name(plain.name + ".zst")
    sealed.write_bytes(b"".join(frames) + struct.pack("<II", 0x184D2A5E, len(table)) + table)
    plain.unlink()
    return sealed


def expected_seq(case: Dict[str, Any], source: Path = GOLDEN_RUN) -> int:
    """The frames the relay applies for a rollout, each once: its live files' lines, a discard
    per retried trace, one completion per trace a record had to complete or create."""
    live = source / "files" / TRACES / "live"
    lines = sum(len(records((live / f"{t}.jsonl").read_bytes())) for t in case["traces"] if (live / f"{t}.jsonl").exists())
    discards = len(case["traces"]) - len(case["final_traces"])
    completions = len(case["final_traces"]) if case["how"] in ("short", "record-only") else 0
    if case["how"] == "short":
        completions = 1  # the short golden cases have one trace
    return lines + discards + completions


class Proxy:
    """A TCP forwarder in front of the relay that can go away (a relay outage: connections
    refused, open ones cut) and come back on the same port."""

    def __init__(self, upstream_port: int) -> None:
        import socket as _socket

        self.upstream = upstream_port
        probe = _socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = int(probe.getsockname()[1])
        probe.close()
        self._listener: Any = None
        self._conns: List[Any] = []
        self._lock = __import__("threading").Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "Proxy":
        import socket as _socket
        import threading

        ls = _socket.socket()
        ls.setsockopt(_socket.SOL_SOCKET, _socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", self.port))
        ls.listen(64)
        self._listener = ls
        threading.Thread(target=self._accept, args=(ls,), daemon=True).start()
        return self

    def _accept(self, ls: Any) -> None:
        import socket as _socket
        import threading

        while True:
            try:
                client, _ = ls.accept()
            except OSError:
                return
            try:
                server = _socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a: Any, b: Any) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def stop(self) -> None:
        import socket as _socket

        if self._listener is not None:
            self._listener.close()
            self._listener = None
        with self._lock:
            conns, self._conns = self._conns, []
        for c in conns:
            try:
                c.shutdown(_socket.SHUT_RDWR)
                c.close()
            except OSError:
                pass


def fresh_copy(source: Path, target: Path) -> Path:
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target)
    return target
