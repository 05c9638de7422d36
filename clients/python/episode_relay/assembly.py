"""The reference ``EpisodeAssembly``, byte-exact: apply upstream deltas in order, read the live
traces (the golden cases' checkpoint form) and ``finish(head, summaries)`` the episode.

The rules are the reference client's (``verifiers/v1/serve/delta.py``; test/fixtures/golden/README.md
states them): a discard drops a trace; otherwise ``open``, ``links``, ``routing_repairs``, the
list fields, ``set``, ``pending``, in that order. Values are kept as msgpack decoded them (str and
bytes distinct, floats as floats, maps in arrival order), so packing a trace or the finished
episode gives the reference's bytes. :func:`watch_episode <episode_relay.watch.watch_episode>`
keeps one of these per watch; the relay's own (TypeScript) assembly is the same rules.
"""

from __future__ import annotations

import sys
from array import array
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from .transport import FinishMismatch
from .wire import LIST_FIELDS, Document, pack, unpack

#: The integer dtypes an ndarray map may have: item sizes, and the ``array`` module's codes.
_ITEM_SIZE = {"uint8": 1, "uint16": 2, "uint32": 4, "uint64": 8, "int8": 1, "int16": 2, "int32": 4, "int64": 8}
_ARRAY_CODE = {"uint8": "B", "uint16": "H", "uint32": "I", "uint64": "Q", "int8": "b", "int16": "h", "int32": "i", "int64": "q"}


class DeltaError(ValueError):
    """A delta that does not fit the assembly (an unknown trace, a node that does not exist, a bad
    routing row). Nothing was changed."""


def promote(a: str, b: str) -> Optional[str]:
    """numpy's result dtype for joining two integer arrays (None where numpy leaves the ints)."""
    if a == b:
        return a
    sa, sb = _ITEM_SIZE[a], _ITEM_SIZE[b]
    ua, ub = a.startswith("u"), b.startswith("u")
    if ua == ub:
        return a if sa >= sb else b
    u, s = (sa, sb) if ua else (sb, sa)  # sizes of the unsigned and the signed one
    if s > u:
        return f"int{s * 8}"
    if u >= 8:
        return None  # numpy gives float64: not a routing array any more
    return f"int{u * 16}"


def _elements(data: bytes, dtype: str) -> array:
    a = array(_ARRAY_CODE[dtype])
    if a.itemsize != _ITEM_SIZE[dtype]:  # pragma: no cover (every CPython platform has these sizes)
        raise DeltaError(f"this platform has no {_ITEM_SIZE[dtype]}-byte {dtype}")
    a.frombytes(data)
    if sys.byteorder == "big":  # the data is little-endian
        a.byteswap()
    return a


def _bytes_of(a: array) -> bytes:
    if sys.byteorder == "big":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _ndarray(v: Any, where: str) -> Tuple[str, List[int], bytes]:
    if not isinstance(v, dict) or v.get("__nd__") is not True:
        raise DeltaError(f"{where}: not an ndarray map (`__nd__: true` missing)")
    dtype, shape, data = v.get("dtype"), v.get("shape"), v.get("data")
    if dtype not in _ITEM_SIZE:
        raise DeltaError(f"{where}.dtype: unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not shape or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise DeltaError(f"{where}.shape: must be a non-empty array of non-negative ints")
    if not isinstance(data, bytes):
        raise DeltaError(f"{where}.data: must be bin")
    size = _ITEM_SIZE[dtype]
    for d in shape:
        size *= d
    if size != len(data):
        raise DeltaError(f"{where}.data: {len(data)} bytes do not match shape {shape} of {dtype}")
    return dtype, shape, data


def repair_last_row(current: Any, row: Any, where: str) -> Dict[str, Any]:
    """A routing repair: the node's array without its last row, then ``row``, in numpy's promoted
    dtype (uint8 with uint16 gives uint16, either way round), as a fresh ndarray map."""
    dtype, shape, data = _ndarray(current, f"{where} (the node's routed_experts)")
    rdtype, rshape, rdata = _ndarray(row, where)
    if len(rshape) != len(shape) or rshape[0] != 1 or rshape[1:] != shape[1:]:
        raise DeltaError(f"{where}: repair row has shape {rshape}, expected {[1, *shape[1:]]}")
    out = promote(dtype, rdtype)
    if out is None:
        raise DeltaError(f"{where}: cannot combine {dtype} with {rdtype}")
    per_row = len(rdata) // _ITEM_SIZE[rdtype]
    kept = _elements(data, dtype)[: max(shape[0] - 1, 0) * per_row]
    joined = array(_ARRAY_CODE[out], kept)
    joined.extend(iter(_elements(rdata, rdtype)))  # element by element: the row may be narrower
    return {"__nd__": True, "dtype": out, "shape": [max(shape[0] - 1, 0) + 1, *shape[1:]], "data": _bytes_of(joined)}


def _copy_node(n: Any) -> Any:
    """A node as stored: a copy with its own ``semantic_parents`` list (key order unchanged)."""
    if not isinstance(n, dict):
        return n
    c = dict(n)
    if isinstance(c.get("semantic_parents"), list):
        c["semantic_parents"] = list(c["semantic_parents"])
    return c


def _int_keyed(v: Any, field: str) -> Dict[int, Any]:
    if not isinstance(v, dict) or not all(isinstance(k, int) and not isinstance(k, bool) for k in v):
        raise DeltaError(f"{field}: must be a map with int keys (node indices)")
    return v


class EpisodeAssembly:
    """One episode's traces as the deltas built them (the reference client's assembly)."""

    def __init__(self) -> None:
        #: The live traces in arrival order (the order their ``open`` was first applied), each a
        #: dict in the reference's key order, with its ``pending``.
        self.traces: Dict[str, Dict[str, Any]] = {}

    def apply(self, delta: Document) -> Dict[str, Any]:
        """Apply one delta (a dict, or its msgpack bytes); returns it as a dict. Raises
        :class:`DeltaError` and changes nothing when it does not fit."""
        d = unpack(bytes(delta)) if isinstance(delta, (bytes, bytearray, memoryview)) else delta
        if not isinstance(d, Mapping) or not isinstance(d.get("trace"), str):
            raise DeltaError("a delta is a map with a str `trace`")
        tid: str = d["trace"]
        if d.get("discard") is True:
            self.traces.pop(tid, None)
            return dict(d)
        trace = self.traces.get(tid)
        if trace is None and not isinstance(d.get("open"), Mapping):
            raise DeltaError(f"unknown trace {tid!r} and no `open`")
        # every check first, and the changed nodes built aside: then changes that cannot fail
        nodes: List[Dict[str, Any]] = trace["nodes"] if trace is not None else []
        changed: Dict[int, Dict[str, Any]] = {}

        def node(i: int, field: str) -> Dict[str, Any]:
            if i < 0 or i >= len(nodes):
                raise DeltaError(f"{field}[{i}]: node {i} does not exist (the trace holds {len(nodes)} node(s))")
            if i not in changed:
                changed[i] = _copy_node(nodes[i])
            return changed[i]

        if "links" in d:
            for i, links in _int_keyed(d["links"], "links").items():
                if not isinstance(links, list):
                    raise DeltaError(f"links[{i}]: must be an array")
                if links:
                    n = node(i, "links")
                    n["semantic_parents"] = [*(n.get("semantic_parents") or []), *links]
        if "routing_repairs" in d:
            for i, row in _int_keyed(d["routing_repairs"], "routing_repairs").items():
                n = node(i, "routing_repairs")
                if n.get("routed_experts") is None:
                    raise DeltaError(f"routing_repairs[{i}]: node {i} has no routed_experts to repair")
                n["routed_experts"] = repair_last_row(n["routed_experts"], row, f"routing_repairs[{i}]")
        for f in LIST_FIELDS:
            if f in d and not isinstance(d[f], list):
                raise DeltaError(f"{f}: must be an array")
        if "set" in d and not isinstance(d["set"], Mapping):
            raise DeltaError("set: must be a map")

        if trace is None:
            trace = dict(d["open"])
            for f in LIST_FIELDS:
                trace[f] = []
            trace["pending"] = []
            self.traces[tid] = trace
        for i, n in changed.items():
            trace["nodes"][i] = n
        for f in LIST_FIELDS:
            if f not in d:
                continue
            if f == "nodes":
                # each node a copy with its own semantic_parents list (later links append to it)
                trace["nodes"].extend(_copy_node(n) for n in d[f])
            else:
                trace[f].extend(d[f])
        if "set" in d:
            for k, v in d["set"].items():
                trace[k] = v  # a key already there keeps its place
        if "nodes" in d:
            trace["pending"] = []  # committed nodes absorb the preview
        if "pending" in d:
            trace["pending"] = d["pending"]
        return dict(d)

    def live_traces(self) -> List[Dict[str, Any]]:
        """The traces in arrival order, each with its ``pending`` (the golden checkpoints' form)."""
        return list(self.traces.values())

    def live_bytes(self) -> bytes:
        """:meth:`live_traces` packed: equal to a golden checkpoint's ``traces`` bytes."""
        return pack(self.live_traces())

    def finish(self, head: Mapping[str, Any], summaries: Iterable[Mapping[str, Any]]) -> Dict[str, Any]:
        """The episode: ``head``'s keys, then ``traces`` in the summaries' order, each checked
        against its summary's node and call counts (:class:`FinishMismatch` with the reference's
        message when one disagrees or is missing)."""
        traces = []
        for s in summaries:
            t = self.traces.get(s["id"])
            if t is None:
                raise FinishMismatch(f"served episode is missing trace {s['id']}", error="finish_mismatch")
            n, c = len(t["nodes"]), len(t["calls"])
            if n != s["nodes"] or c != s["calls"]:
                raise FinishMismatch(
                    f"served trace {s['id']} assembled {n} nodes / {c} calls, server reports {s['nodes']} / {s['calls']}",
                    error="finish_mismatch",
                )
            traces.append({k: v for k, v in t.items() if k != "pending"})
        return {**head, "traces": traces}

    def finish_reply(self, reply: Document) -> bytes:
        """The finished episode's msgpack bytes for an upstream reply ``{success, error, head, traces}``."""
        r = unpack(bytes(reply)) if isinstance(reply, (bytes, bytearray, memoryview)) else reply
        return pack(self.finish(r.get("head") or {}, r.get("traces") or []))
