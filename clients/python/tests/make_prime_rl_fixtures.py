"""Write a prime-rl run made of the golden cases: the files prime-rl's file monitor would have
written for them, and the order it would have written them in.

    python3 clients/python/tests/make_prime_rl_fixtures.py [OUT]   # default: tests/fixtures/prime-rl/golden-run

Each golden case (test/fixtures/golden/*.msgpack: frames are the deltas a worker sent) becomes
one rollout of one prime-rl run, as prime-rl's orchestrator and file monitor would have recorded it
(clients/python/tests/fixtures/prime-rl/README.md says where each field comes from):

- ``files/monitors/file/traces/live/<trace>.jsonl``: every line ``FileMonitor.log_live`` appended
  for the trace: the delta without ``routing_repairs`` and without the nodes' ``routed_experts`` /
  ``sampling_mask``, ``dispatch`` as the last key of the line holding ``open``, serialized as
  orjson does with ``default=str`` and ``OPT_NON_STR_KEYS`` (bytes as Python's repr, NaN and ±inf
  as null, int keys as decimal strings), each line followed by a blank line. A discarded trace's
  file holds what it had when prime-rl deleted it.
- ``live/pending/<dispatch id>.json``: the dispatch identity (no newline), for each rollout before
  its first line, and one rollout that never streams.
- ``stream/00000.jsonl`` and ``stream.index.jsonl``: each episode's record (``Episode.to_record``:
  no routing, None fields left out, per-token floats rounded to 4 decimals, the arrival stamps in
  ``info``) and its index row (``index_row``).
- ``annotations/{orch,trainer}/00000.jsonl`` and their indexes: the orchestrator's record per
  shipped trace (``info.ship``, ``info.advantage``, per-branch ``advantages``) and the trainer's
  per trained branch (``trainer_logprobs``, ``entropies``, ``is_masked``; null off the loss mask
  and at position 0).
- ``events.jsonl``: the file operations in prime-rl's order, rollouts interleaved: ``write`` a
  whole file, ``append`` record N of a file (a record is a line and the blank lines after it),
  ``delete`` a file. ``cases.json``: per case its rollout (episode, dispatch, traces) and how it
  was recorded (``complete``, ``short``: prime-rl retired it before its last lines were written,
  ``record-only``: no live file, ``retry``).

Python's json stands in for orjson; the only difference a reader can see is the spelling of some
floats (``1e+300`` for orjson's ``1e300``). ``ack_lost`` and ``gap_detected`` are left out: their
frames are a worker-side retry protocol and a reply that disagrees with its frames, neither of
which a prime-rl run's files can hold.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import msgpack

HERE = Path(__file__).resolve().parent
GOLDEN = HERE.parents[2] / "test" / "fixtures" / "golden"
OUT = HERE / "fixtures" / "prime-rl" / "golden-run"
TRACES = Path("monitors/file/traces")

#: case → how prime-rl recorded it; the `short` ones lose their last frames (log_live drops a
#: trace's unwritten appends when the rollout retires in the same flush).
PLAN: Dict[str, Tuple[str, int]] = {
    "chat_basic": ("short", 2),
    "discard_retry": ("retry", 0),
    "empty_trace": ("complete", 0),
    "failed_sends": ("complete", 0),
    "large_routing": ("complete", 0),
    "multi_trace_links": ("complete", 0),
    "odd_values": ("complete", 0),
    "routing_repair_u8": ("complete", 0),
    "routing_repair_widen": ("record-only", 0),
    "tool_calls_pending": ("short", 2),
}
EVAL_CASES = {"odd_values"}
ROLLOUT_SEED = "golden-run"
STEP = 4
POLICY = 3
FLOAT_DECIMALS = 4
#: per-token float fields of a node that to_record rounds
TOKEN_FLOAT_FIELDS = ("logprobs", "advantages", "reference_logprobs", "trainer_logprobs", "entropies")
LIST_FIELDS = ("nodes", "calls", "payload", "errors", "extra_usage", "request_rewrites", "response_rewrites")


def unpackb(b: bytes) -> Any:
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


def hexid(*parts: str) -> str:
    return hashlib.md5(":".join((ROLLOUT_SEED, *parts)).encode()).hexdigest()


def uuid_str(h: str) -> str:
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


# ---- orjson as prime-rl calls it ----


def orjson_like(obj: Any) -> Any:
    """What orjson with ``default=str`` and ``OPT_NON_STR_KEYS`` writes, as the value json.loads
    gives back: bytes → ``str(b)``, NaN/±inf → None, int keys → decimal strings."""
    if isinstance(obj, bytes):
        return str(obj)
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k) if isinstance(k, int) and not isinstance(k, bool) else k: orjson_like(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [orjson_like(v) for v in obj]
    return obj


def dumps(obj: Any) -> bytes:
    return json.dumps(orjson_like(obj), ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def live_line(delta: Dict[str, Any], dispatch: Dict[str, Any]) -> bytes:
    """``FileMonitor.log_live`` for one delta: routing stripped, dispatch on the open line."""
    line = {k: v for k, v in delta.items() if k != "routing_repairs"}
    if "nodes" in delta:
        line["nodes"] = [{k: v for k, v in n.items() if k not in ("routed_experts", "sampling_mask")} for n in delta["nodes"]]
    if "open" in delta:
        line["dispatch"] = dispatch
    return dumps(line) + b"\n\n"


# ---- Episode.to_record, approximately ----


def json_mode(v: Any) -> Any:
    """pydantic's JSON mode with exclude_none: None (and NaN/inf) fields left out of maps, bytes
    as UTF-8 text (pydantic would refuse bytes that are not UTF-8; here they are escaped)."""
    if isinstance(v, dict):
        return {k: json_mode(x) for k, x in v.items() if x is not None and not (isinstance(x, float) and not math.isfinite(x))}
    if isinstance(v, list):
        return [None if isinstance(x, float) and not math.isfinite(x) else json_mode(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return v


def record_node(node: Dict[str, Any]) -> Dict[str, Any]:
    n = {k: v for k, v in node.items() if k not in ("routed_experts", "sampling_mask")}
    for f in TOKEN_FLOAT_FIELDS:
        if isinstance(n.get(f), list):
            n[f] = [round(x, FLOAT_DECIMALS) if isinstance(x, float) and math.isfinite(x) else x for x in n[f]]
    return json_mode(n)


def record_of(episode: Dict[str, Any], dispatch: Dict[str, Any], kind: str, arrival: float) -> Dict[str, Any]:
    head = {k: v for k, v in episode.items() if k != "traces"}
    # prime-rl stamps the run and the GRPO group on every episode it dispatches
    head["group"] = {"id": dispatch["group"]}
    head["run"] = {"type": "train", "id": ROLLOUT_SEED, "work": {"type": kind, "step": dispatch["step"], "policy": {"start": dispatch["policy_version"], "end": dispatch["policy_version"] + 1}}}
    rec = json_mode(head)
    traces = []
    for t in episode["traces"]:
        tr = json_mode({k: v for k, v in t.items() if k != "nodes"})
        tr_nodes = [record_node(n) for n in t["nodes"]]
        out: Dict[str, Any] = {}
        for k in t:
            if k == "nodes":
                out["nodes"] = tr_nodes
            elif k in tr:
                out[k] = tr[k]
        start = (t.get("timing") or {}).get("start")
        # stamp_arrival: kind, the dispatch step and the trace's start, the arrival
        info = dict(out.get("info") or {})
        info["kind"] = kind
        info["dispatch"] = {"step": dispatch["step"], "time": start}
        info["arrival"] = {"step": STEP + 1, "time": arrival}
        out["info"] = info
        traces.append(out)
    rec["traces"] = traces
    return rec


def index_row(line: int, rec: Dict[str, Any], chunk: int, offset: int) -> Dict[str, Any]:
    """``traces/index.py`` ``index_row``: the episode's summary where the stream holds it."""
    traces = rec["traces"]
    costs = [c["usage"]["cost"] for t in traces for c in t.get("calls", []) if isinstance((c.get("usage") or {}).get("cost"), (int, float))]
    rewards = []
    for t in traces:
        if t.get("rewards"):
            rewards.append(sum((r.get("score") or 0) * (1 if r.get("weight") is None else r["weight"]) for r in t["rewards"].values()))
    first_info = traces[0].get("info", {}) if traces else {}
    dispatch_t = (first_info.get("dispatch") or {}).get("time")
    arrival_t = (first_info.get("arrival") or {}).get("time")
    stop = None
    for t in traces:
        stop = t.get("stop_condition", stop)
    return {
        "cost": sum(costs) if costs else None,
        "line": line,
        "offset": offset,
        "id": rec["id"],
        "kind": first_info.get("kind", "eval"),
        "trace_ids": [t["id"] for t in traces],
        "env": rec["env"].get("name") or rec["env"].get("id"),
        "group": (rec.get("group") or {}).get("id"),
        "ok": rec["ok"],
        "num_errors": len(rec["errors"]),
        "reward": sum(rewards) / len(rewards) if rewards else None,
        "advantage": None,
        "input_tokens": sum(t.get("num_input_tokens") or 0 for t in traces),
        "output_tokens": sum(t.get("num_output_tokens") or 0 for t in traces),
        "turns": sum(1 for t in traces for n in t["nodes"] if (n.get("message") or {}).get("role") == "assistant"),
        "branches": sum(max(0, len(t["nodes"]) - len({n["parent"] for n in t["nodes"] if "parent" in n})) for t in traces),
        "stop_condition": stop,
        "truncated": any(t.get("stop_condition") in ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens") for t in traces),
        "dispatch": dispatch_t,
        "arrival": arrival_t,
        "duration": max(0.0, arrival_t - dispatch_t) if isinstance(arrival_t, float) and isinstance(dispatch_t, float) else None,
        "chunk": chunk,
    }


# ---- annotations ----


def branches(nodes: List[Dict[str, Any]]) -> List[List[int]]:
    """verifiers ``Trace.branches``: one path root→leaf per leaf, leaves in ascending index."""
    parents = {n.get("parent") for n in nodes if n.get("parent") is not None}
    paths = []
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path, at, seen = [], leaf, set()
        while at is not None and at not in seen and 0 <= at < len(nodes):
            seen.add(at)
            path.append(at)
            at = nodes[at].get("parent")
        paths.append(path[::-1])
    return paths


def annotations_of(rec_trace: Dict[str, Any], ship_time: float, seed: int) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """The orchestrator's record for a shipped trace and the trainer's per trained branch."""
    nodes = rec_trace["nodes"]
    advantage = round(0.25 * ((seed % 5) - 2), 4)
    orch_branches = []
    trainer = []
    trained: set = set()
    for index, path in enumerate(branches(nodes)):
        adv: List[float] = []
        lp: List[Optional[float]] = []
        ent: List[Optional[float]] = []
        masked: List[Optional[bool]] = []
        for i in path:
            n = nodes[i]
            logprobs = iter(n.get("logprobs") or [])
            for k, sampled in enumerate(n.get("mask") or [False] * len(n.get("token_ids") or [])):
                first = i not in trained
                if sampled:
                    v = next(logprobs, None)
                    adv.append(advantage)
                    lp.append(round(v - 0.0125 * (1 + k % 3), 4) if first and isinstance(v, float) else None)
                    ent.append(round(0.05 * (1 + (k + seed) % 7), 4) if first else None)
                    masked.append((k + seed) % 11 == 0 if first else None)
                else:
                    adv.append(0.0)
                    lp.append(None)
                    ent.append(None)
                    masked.append(None)
        for i in path:
            if nodes[i].get("sampled"):
                trained.add(i)
        if not adv:
            continue
        orch_branches.append({"index": index, "advantages": adv})
        if any(v is not None for v in lp[1:]):
            lp[0] = ent[0] = masked[0] = None  # the packing boundary's shift
            trainer.append({"version": 1, "trace_id": rec_trace["id"], "info": {}, "branches": [{"index": index, "trainer_logprobs": lp, "entropies": ent, "is_masked": masked}]})
    orch = {"version": 1, "trace_id": rec_trace["id"], "info": {"effective": True, "ship": {"step": STEP + 1, "time": ship_time}, "advantage": advantage}, "branches": orch_branches}
    return orch, trainer


# ---- the run ----


class Files:
    """The run's files as they grow, and the events that grow them."""

    def __init__(self) -> None:
        self.content: Dict[str, bytearray] = {}
        self.records: Dict[str, int] = {}
        self.events: List[Dict[str, Any]] = []

    def write(self, path: str, data: bytes) -> None:
        self.content[path] = bytearray(data)
        self.events.append({"op": "write", "path": path})

    def append(self, path: str, record: bytes) -> int:
        """Append one record; returns the offset it starts at."""
        buf = self.content.setdefault(path, bytearray())
        offset = len(buf)
        buf += record
        self.records[path] = self.records.get(path, 0) + 1
        self.events.append({"op": "append", "path": path, "record": self.records[path]})
        return offset

    def delete(self, path: str) -> None:
        self.events.append({"op": "delete", "path": path})


def identity(name: str, i: int, env: str = "golden", task: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``dispatch_info``: ``task`` is the task data's name, else ``idx=N``."""
    data = (task or {}).get("data") or {}
    return {
        "id": hexid(name, "dispatch"),
        "kind": "eval" if name in EVAL_CASES else "train",
        "env": env,
        "group": uuid_str(hexid(name, "group")),
        "task": str(data["name"]) if data.get("name") else f"idx={data.get('idx', i)}",
        "policy_version": POLICY,
        "step": STEP,
        "started": 1764700000.0 + i * 10 + 0.125,
    }


def steps_of(name: str, i: int, cases: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """The case's operations in prime-rl's order (before interleaving)."""
    c = unpackb((GOLDEN / f"{name}.msgpack").read_bytes())
    how, dropped = PLAN[name]
    episode = unpackb(c["episode"])
    d = identity(name, i, episode["env"]["name"], episode["task"])  # dispatch_info's env is the env's name
    frames = [unpackb(f) for f in c["frames"]]
    kept = frames[: len(frames) - dropped] if dropped else frames
    traces = list(dict.fromkeys(f["trace"] for f in frames))
    cases[name] = {
        "how": how,
        "dropped_frames": dropped,
        "dispatch": d,
        "episode_id": episode["id"],
        "traces": traces,
        "final_traces": [t["id"] for t in episode["traces"]],
    }
    steps: List[Tuple[str, Any]] = []
    live = f"{TRACES}/live"
    if how != "record-only":
        # prime-rl recomputes `started` for every event: the pending file's differs a little
        steps.append(("write", (f"{live}/pending/{d['id']}.json", dumps({**d, "started": d["started"] - 0.0003}))))
        streamed = False
        for f in kept:
            path = f"{live}/{f['trace']}.jsonl"
            if f.get("discard"):
                steps.append(("delete", path))
                continue
            if not streamed:
                steps.append(("delete", f"{live}/pending/{d['id']}.json"))
                streamed = True
            steps.append(("append", (path, live_line(f, d))))
    steps.append(("record", (name, episode, d)))
    if how != "record-only":
        for t in traces:
            if not any(f.get("discard") and f["trace"] == t for f in frames):
                steps.append(("delete", f"{live}/{t}.jsonl"))
    return steps


def build(out: Path) -> None:
    names = sorted(PLAN)
    cases: Dict[str, Any] = {}
    per_case = [steps_of(name, i, cases) for i, name in enumerate(names)]
    files = Files()
    # rollouts run concurrently: their operations interleave, each rollout's in its own order
    merged: List[Tuple[str, Any]] = []
    while any(per_case):
        for steps in per_case:
            if steps:
                merged.append(steps.pop(0))
    stream = f"{TRACES}/stream/00000.jsonl"
    index = f"{TRACES}/stream.index.jsonl"
    shipped: List[Tuple[str, Dict[str, Any]]] = []
    line = 0
    for op, arg in merged:
        if op == "write":
            files.write(*arg)
        elif op == "append":
            files.append(*arg)
        elif op == "delete":
            files.delete(arg)
        else:
            name, episode, d = arg
            kind = d["kind"]
            start = episode["traces"][0]["timing"]["start"] if episode["traces"] else d["started"]
            arrival = start + 60.0
            rec = record_of(episode, d, kind, arrival)
            offset = files.append(stream, dumps(rec) + b"\n")
            line += 1
            files.append(index, dumps(index_row(line, rec, 0, offset)) + b"\n")
            cases[name]["stream_line"] = line
            if kind == "train":
                shipped.append((name, rec))
    # a rollout that was dispatched and has not streamed yet
    waiting = identity("never_streamed", len(names))
    files.write(f"{TRACES}/live/pending/{waiting['id']}.json", dumps(waiting))
    cases["never_streamed"] = {"how": "pending", "dispatch": waiting, "traces": []}
    # the shipped batch: the orchestrator's records, then the trainer's
    for producer in ("orch", "trainer"):
        chunk = f"{TRACES}/annotations/{producer}/00000.jsonl"
        idx = f"{TRACES}/annotations/{producer}.index.jsonl"
        for seed, (name, rec) in enumerate(shipped):
            for t in rec["traces"]:
                orch, trainer = annotations_of(t, 1764709000.0 + seed, seed)
                for r in [orch] if producer == "orch" else trainer:
                    offset = files.append(chunk, dumps(r) + b"\n")
                    files.append(idx, dumps({"trace_id": r["trace_id"], "chunk": 0, "offset": offset, "info": r["info"] or {}}) + b"\n")
    if out.exists():
        shutil.rmtree(out)
    for path, data in files.content.items():
        target = out / "files" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(bytes(data))
    (out / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in files.events))
    (out / "cases.json").write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    build(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
