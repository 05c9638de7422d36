"""prime-rl's file-monitor records, read back into the relay's forms. Pure: no I/O.

What prime-rl writes (``monitors/file/monitor.py`` and ``traces/``; docs/prime-rl.md says more):

- a **live line** (``traces/live/<trace>.jsonl``) is one verifiers delta as orjson wrote it
  (``default=str``, numpy and non-str keys allowed), without ``routing_repairs`` and without the
  nodes' ``routed_experts`` / ``sampling_mask``, the trace's ``open`` line carrying the rollout's
  ``dispatch`` as its last key;
- a **finished record** (``traces/stream/NNNNN.jsonl``) is ``Episode.to_record()``: the episode
  with its traces, JSON mode, ``exclude_none``, per-token floats rounded.

:func:`live_delta` turns a live line back into the wire delta as far as the file allows;
:func:`completion` is what a finished record adds to what the live file carried (prime-rl drops a
trace's last unwritten lines when it retires the rollout); :func:`reply_of` is the reply that ends
the episode.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import re
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..transport import check_episode_id
from ..wire import LIST_FIELDS

#: The keys of a trace's ``open`` header (verifiers ``DeltaStreamer``).
OPEN_KEYS = ("version", "id", "verifiers", "task")
#: Keys prime-rl's ``stamp_arrival`` writes into a finished trace's ``info``: the orchestrator's
#: bookkeeping, not the rollout's (the dispatch identity carries kind and step).
ARRIVAL_STAMPS = ("kind", "dispatch", "arrival")

_RUN_CHAR = re.compile(r"[^A-Za-z0-9._:-]")


class LineError(ValueError):
    """A live line that cannot be a delta (not a JSON map with a str ``trace``, bad ``links`` key)."""


def _bytes_from_repr(text: str) -> Optional[bytes]:
    """``b'...'`` (Python's repr of bytes, what orjson's ``default=str`` wrote) back to the bytes."""
    if len(text) < 3 or text[0] != "b" or text[1] not in "'\"" or text[-1] != text[1]:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, bytes) else None


def _ndarray_bytes(obj: Dict[str, Any]) -> Dict[str, Any]:
    """json ``object_hook``: an ndarray map (``{"__nd__": true, dtype, shape, data}``) gets its
    ``data`` bytes back. Only there is a ``b'...'`` string known to have been bytes; anywhere else
    it stays the string the file holds (a tool's output may well print ``b'...'``)."""
    if obj.get("__nd__") is True:
        data = obj.get("data")
        if isinstance(data, str):
            raw = _bytes_from_repr(data)
            if raw is not None:
                obj["data"] = raw
    return obj


def live_delta(line: bytes) -> Tuple[Dict[str, Any], Optional[Dict[str, Any]]]:
    """One live line → ``(delta, dispatch)``: the wire delta and the identity the line carried.

    - ``dispatch`` is popped (prime-rl's ``fold_lines`` pops it before ``EpisodeAssembly.apply``).
    - ``links`` keys are ints again (orjson's ``OPT_NON_STR_KEYS`` wrote them as decimal strings;
      on the wire they are ints, and the reference does ``int(index)``).
    - ``null`` stays null: NaN and ±inf were written as null and cannot be told from a real None.
    - a ``"b'...'"`` string stays a string, except as an ndarray map's ``data`` (see
      :func:`_ndarray_bytes`): prime-rl's own fold reads the same string, so the relay shows what
      prime-rl's dashboard shows.
    - ints stay ints and floats floats (``json`` keeps ``1.0`` a float, as orjson wrote it).
    """
    try:
        obj = json.loads(line, object_hook=_ndarray_bytes)
    except (ValueError, RecursionError) as e:
        raise LineError(f"not JSON: {e}") from e
    if not isinstance(obj, dict) or not isinstance(obj.get("trace"), str):
        raise LineError("a live line is a JSON object with a str `trace`")
    dispatch = obj.pop("dispatch", None)
    if dispatch is not None and not isinstance(dispatch, dict):
        raise LineError("`dispatch` must be an object")
    links = obj.get("links")
    if isinstance(links, dict):
        try:
            obj["links"] = {int(k): v for k, v in links.items()}
        except ValueError as e:
            raise LineError(f"a `links` key is not a node index: {e}") from e
    return obj, dispatch


# ---- names ----


def run_name(text: str) -> str:
    """A run name the relay takes (an episode id's part before its last ``:``): the characters it
    allows, at most 95 so that ``RUN:<32 hex>`` fits in 128."""
    name = _RUN_CHAR.sub("-", text).strip(":")[:95] or "prime-rl"
    return name


def episode_name(run: str, key: str) -> str:
    """``RUN:KEY``, or ``RUN:<sha1 of KEY>`` when KEY has characters an id cannot hold."""
    candidate = f"{run}:{key}"
    try:
        return check_episode_id(candidate)
    except Exception:
        return check_episode_id(f"{run}:{hashlib.sha1(key.encode('utf-8')).hexdigest()[:32]}")


# ---- finished records ----


def head_of(record: Mapping[str, Any]) -> Dict[str, Any]:
    """The reply's ``head``: the record without its traces (``id, env, task, group, run, ok,
    errors`` as ``to_record`` kept them: a None field is absent)."""
    return {k: v for k, v in record.items() if k != "traces"}


def record_traces(record: Mapping[str, Any]) -> List[Dict[str, Any]]:
    traces = record.get("traces")
    if not isinstance(traces, list) or not all(isinstance(t, dict) and isinstance(t.get("id"), str) for t in traces):
        raise ValueError("a finished record's `traces` is a list of objects with a str `id`")
    return traces


def reply_of(record: Mapping[str, Any]) -> Dict[str, Any]:
    """The upstream reply that ends the episode: the record's head, its traces' counts."""
    summaries = [{"id": t["id"], "nodes": len(t.get("nodes") or []), "calls": len(t.get("calls") or [])} for t in record_traces(record)]
    return {"success": True, "error": None, "head": head_of(record), "traces": summaries}


def failed_reply(error: str) -> Dict[str, Any]:
    return {"success": False, "error": error, "head": None, "traces": []}


def identity_of(record: Mapping[str, Any], row: Mapping[str, Any]) -> Dict[str, Any]:
    """A dispatch identity rebuilt from a finished record and its index row, for an episode the
    bridge never saw live: ``kind, env, group, task, policy_version, step`` as prime-rl's
    ``dispatch_info`` would have said them (``policy_version`` = the policy span's start, ``step`` =
    ``run.work.step``); ``id`` and ``started`` are not in the record, so they are left out."""
    run = record.get("run") if isinstance(record.get("run"), dict) else {}
    work = run.get("work") if isinstance(run.get("work"), dict) else {}
    policy = work.get("policy") if isinstance(work.get("policy"), dict) else {}
    env = record.get("env") if isinstance(record.get("env"), dict) else {}
    group = record.get("group") if isinstance(record.get("group"), dict) else {}
    task = record.get("task") if isinstance(record.get("task"), dict) else {}
    data = task.get("data") if isinstance(task.get("data"), dict) else {}
    name = data.get("name")
    values = {
        "kind": row.get("kind") if isinstance(row.get("kind"), str) else work.get("type") or run.get("type"),
        "env": row.get("env") if isinstance(row.get("env"), str) else env.get("name") or env.get("id"),
        "group": group.get("id"),
        "task": str(name) if name else (f"idx={data['idx']}" if "idx" in data else None),
        "policy_version": policy.get("start"),
        "step": work.get("step"),
    }
    return {k: v for k, v in values.items() if v is not None}


def _normal(value: Any) -> Any:
    """A value as ``to_record`` would keep it, for comparing a live value with the record's: None
    (and NaN, which JSON mode makes None) dropped from maps, recursively."""
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items() if v is not None and not (isinstance(v, float) and math.isnan(v))}
    if isinstance(value, list):
        return [_normal(v) for v in value]
    return value


def same(a: Any, b: Any) -> bool:
    """Whether a live value and a record value say the same (None entries aside)."""
    return bool(_normal(a) == _normal(b))


def _scalars(rec: Mapping[str, Any], have: Optional[Mapping[str, Any]]) -> Dict[str, Any]:
    """The record trace's scalar fields (all but the header and the lists), its ``info`` without
    the arrival stamps the relay's copy does not have."""
    out: Dict[str, Any] = {}
    for k, v in rec.items():
        if k in OPEN_KEYS or k in LIST_FIELDS:
            continue
        if k == "info" and isinstance(v, dict):
            had = have.get("info") if have is not None and isinstance(have.get("info"), dict) else {}
            v = {ik: iv for ik, iv in v.items() if ik not in ARRIVAL_STAMPS or ik in had}
        out[k] = v
    return out


def _length(trace: Mapping[str, Any], field: str) -> int:
    items = trace.get(field)
    return len(items) if isinstance(items, list) else 0


def completion(rec: Mapping[str, Any], have: Optional[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """The deltas that bring the relay's copy of a trace (``have``, None when the relay has none)
    to the finished record's trace ``rec``.

    - The relay has none: the whole trace from the record (``open``, every list, every scalar).
    - The relay has more items of a list than the record (a fold the record disagrees with): it is
      rebuilt from the record (a ``discard``, then the whole trace).
    - The live file fell short (fewer items in a list, or ``timing`` that did not reach the
      record's: prime-rl drops a trace's unwritten lines when the rollout retires): the missing
      items, the links the record's streamed nodes gained, and the scalars that differ.
    - Otherwise nothing: the relay keeps the live file's fold, which is the more exact copy
      (the record rounds per-token floats and drops None fields).
    """
    tid = rec["id"]
    if have is None:
        delta: Dict[str, Any] = {"trace": tid, "open": {k: rec[k] for k in OPEN_KEYS if k in rec}}
        for f in LIST_FIELDS:
            if _length(rec, f):
                delta[f] = rec[f]
        scalars = _scalars(rec, None)
        if scalars:
            delta["set"] = scalars
        return [delta]
    if any(_length(have, f) > _length(rec, f) for f in LIST_FIELDS):
        return [{"trace": tid, "discard": True}, *completion(rec, None)]
    short = any(_length(have, f) < _length(rec, f) for f in LIST_FIELDS)
    if not short and same(have.get("timing"), rec.get("timing")):
        return []
    delta = {"trace": tid}
    links = _new_links(rec.get("nodes") or [], have.get("nodes") or [])
    if links:
        delta["links"] = links
    for f in LIST_FIELDS:
        n = _length(have, f)
        if _length(rec, f) > n:
            delta[f] = rec[f][n:]
    changed = {k: v for k, v in _scalars(rec, have).items() if k in have and not same(have[k], v)}
    if changed:
        delta["set"] = changed
    return [delta] if len(delta) > 1 else []


def _new_links(rec_nodes: List[Any], have_nodes: List[Any]) -> Dict[int, List[Any]]:
    """Per node the relay holds, the semantic links the record has beyond the relay's."""
    out: Dict[int, List[Any]] = {}
    for i, (r, h) in enumerate(zip(rec_nodes, have_nodes)):
        if not isinstance(r, dict) or not isinstance(h, dict):
            continue
        rs = r.get("semantic_parents") or []
        hs = h.get("semantic_parents") or []
        if len(rs) > len(hs) and same(rs[: len(hs)], hs):
            out[i] = rs[len(hs) :]
    return out
