"""The producer side of the relay's envelope: what the relay has acknowledged, per trace.

This mirrors ``src/envelope/producer.ts`` (``ProducerCursor``) and the worker's own
``TraceCursor``: the view advances only when the relay acknowledges a delta, so after a send
that failed (whether or not it reached the relay) the next, re-diffed delta goes out with the
same ``acked`` view and the relay trims what it already holds. The envelope is::

    {"producer": str, "seq": int,
     "acked": {"open": bool, "<list field>": int (non-zero counts only),
               "links": {node index: acknowledged semantic_parents count}},
     "delta": <the upstream delta's msgpack bytes, as bin>}

Beyond counts, the cursor also closes the one gap the envelope cannot: *idempotent* fields
that a failed send carried and the re-diffed delta no longer carries (see
:meth:`ProducerCursor.prepare`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .wire import LIST_FIELDS, Document, Encoder, pack, parse_delta, to_bytes


@dataclass
class TraceAck:
    """What the relay acknowledged of one trace."""

    open: bool = False
    """Whether the trace's ``open`` was acknowledged."""
    counts: Dict[str, int] = field(default_factory=lambda: dict.fromkeys(LIST_FIELDS, 0))
    """Acknowledged item count per list field."""
    links: Dict[int, int] = field(default_factory=dict)
    """Per acknowledged node index: the ``semantic_parents`` it carried when first acknowledged,
    plus the links acknowledged for it later through ``links``."""
    scalars: Dict[str, Any] = field(default_factory=dict)
    """The last acknowledged value of every ``set`` field."""
    pending: List[Any] = field(default_factory=list)
    """The acknowledged ``pending`` preview (nodes clear it, an explicit ``pending`` replaces it)."""


@dataclass
class Unsettled:
    """What failed sends of one trace carried since that trace's last acknowledged send."""

    set_fields: Dict[str, None] = field(default_factory=dict)
    """``set`` fields of the failed deltas (an ordered set)."""
    pending: bool = False
    """Whether a failed delta carried ``pending``."""


@dataclass
class Outgoing:
    """One delta ready to go: its envelope and what the cursor needs once it is answered."""

    trace: str
    seq: int
    delta: Dict[str, Any]
    """The delta as sent (after any re-assertion of unsettled fields)."""
    delta_bytes: bytes
    """Its msgpack bytes: the caller's bytes untouched unless fields were re-asserted."""
    envelope: bytes
    """The envelope's msgpack bytes; a transport retry sends exactly these again."""
    reasserted: List[str] = field(default_factory=list)
    """Fields added to the delta by the cursor (``set.<name>`` or ``pending``)."""


class ProducerCursor:
    """Tracks the relay's acknowledged view of each trace and wraps deltas in envelopes.

    Usage: :meth:`prepare` a delta, send ``Outgoing.envelope``, then call
    :meth:`acknowledge` once the relay answered 200, or :meth:`fail` when the send raised.
    ``seq`` grows by one per :meth:`prepare`, so a seq is never reused for another delta;
    re-sending the same ``Outgoing.envelope`` (a transport retry) reuses its seq, which the
    relay answers as a duplicate without applying it twice.
    """

    def __init__(self, producer: str, start_seq: int = 1) -> None:
        if not isinstance(producer, str) or len(producer) > 256:
            raise ValueError("producer must be a str of at most 256 characters")
        if start_seq < 1:
            raise ValueError("start_seq must be >= 1")
        self.producer = producer
        self.seq = start_seq - 1
        """The last seq handed out."""
        self.traces: Dict[str, TraceAck] = {}
        self.unsettled: Dict[str, Unsettled] = {}

    def acked_view(self, delta: Dict[str, Any]) -> Dict[str, Any]:
        """The envelope's ``acked`` map for ``delta``: open flag, non-zero list counts in
        upstream order, and the acknowledged link count of every node named in ``links``."""
        t = self.traces.get(delta["trace"])
        view: Dict[str, Any] = {"open": bool(t and t.open)}
        links: Dict[int, int] = {}
        if t is not None:
            for f in LIST_FIELDS:
                if t.counts[f]:
                    view[f] = t.counts[f]
        for key in delta.get("links") or {}:
            index = int(key)
            links[index] = t.links.get(index, 0) if t is not None else 0
        view["links"] = links
        return view

    def prepare(self, delta: Document, default: Optional[Encoder] = None) -> Outgoing:
        """Wrap ``delta`` (a dict, or its msgpack bytes) in the next envelope.

        Re-assertion after a failed send: the relay de-duplicates list items, links and
        ``open`` by the ``acked`` counts, but ``set`` and ``pending`` are plain overwrites.
        A failed send may still have reached the relay, and the worker's next diff (taken
        against its unchanged cursor) omits a field whose value went back to the last
        acknowledged one. So when the previous send(s) of this trace failed:

        - every field those failed deltas carried in ``set`` that this delta's ``set`` does
          not carry is added to ``set`` with its last *acknowledged* value (the relay may
          hold the failed value; after this it holds the worker's);
        - if a failed delta carried ``pending`` and this one carries neither ``pending`` nor
          ``nodes`` (which would reset the preview anyway), ``pending`` is added with its last
          acknowledged value.

        Both are no-ops for a relay that never saw the failed delta. Only possible when the
        relay holds the trace (its ``open`` was acknowledged); otherwise the worker re-sends
        ``open`` with every field anyway. The delta's bytes are left untouched unless a field
        is added (then the delta is re-packed, which reproduces every other byte).
        """
        data = to_bytes(delta, default)
        parsed = parse_delta(data)
        trace = parsed["trace"]
        reasserted: List[str] = []
        u = self.unsettled.get(trace)
        t = self.traces.get(trace)
        if u is not None and t is not None and t.open and not parsed.get("discard"):
            parsed, reasserted = _reassert(parsed, u, t)
            if reasserted:
                data = pack(parsed)
        self.seq += 1
        envelope = pack({"producer": self.producer, "seq": self.seq, "acked": self.acked_view(parsed), "delta": data})
        return Outgoing(trace=trace, seq=self.seq, delta=parsed, delta_bytes=data, envelope=envelope, reasserted=reasserted)

    def acknowledge(self, out: Outgoing) -> None:
        """The relay answered 200 for ``out``: advance the acknowledged view of its trace."""
        d = out.delta
        trace = out.trace
        self.unsettled.pop(trace, None)
        if d.get("discard"):
            self.traces.pop(trace, None)
            return
        t = self.traces.get(trace)
        if t is None:
            t = self.traces[trace] = TraceAck()
        if "open" in d:
            t.open = True
        for key, items in (d.get("links") or {}).items():
            index = int(key)
            t.links[index] = t.links.get(index, 0) + len(items or [])
        base = t.counts["nodes"]
        for k, node in enumerate(d.get("nodes") or []):
            parents = node.get("semantic_parents") if isinstance(node, dict) else None
            t.links[base + k] = len(parents or [])
        for f in LIST_FIELDS:
            t.counts[f] += len(d.get(f) or [])
        for name, value in (d.get("set") or {}).items():
            t.scalars[name] = value
        if "nodes" in d:
            t.pending = []
        if "pending" in d:
            t.pending = d["pending"]

    def fail(self, out: Outgoing) -> None:
        """The send of ``out`` raised: remember what it may have overwritten on the relay."""
        d = out.delta
        if d.get("discard"):
            return
        u = self.unsettled.setdefault(out.trace, Unsettled())
        for name in d.get("set") or {}:
            u.set_fields[name] = None
        if "pending" in d:
            u.pending = True


def _reassert(delta: Dict[str, Any], u: Unsettled, t: TraceAck) -> "tuple[Dict[str, Any], List[str]]":
    """``delta`` with the unsettled fields re-asserted at their acknowledged values."""
    have_set = delta.get("set") or {}
    add_set = {name: t.scalars[name] for name in u.set_fields if name not in have_set and name in t.scalars}
    add_pending = u.pending and "pending" not in delta and "nodes" not in delta
    if not add_set and not add_pending:
        return delta, []
    reasserted = [f"set.{name}" for name in add_set]
    out: Dict[str, Any] = {}
    new_set = {**have_set, **add_set} if add_set else None
    for key, value in delta.items():
        if key == "pending" and new_set is not None and "set" not in out:
            out["set"] = new_set  # upstream order: ... lists, set, pending
        out[key] = new_set if key == "set" and new_set is not None else value
    if new_set is not None and "set" not in out:
        out["set"] = new_set
    if add_pending:
        out["pending"] = t.pending
        reasserted.append("pending")
    return out, reasserted
