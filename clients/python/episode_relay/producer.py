"""The producer side of the relay's envelope: the next seq, and the cursor.

This mirrors ``src/protocol/envelope/producer.ts`` (``ProducerCursor``). The envelope is::

    {"producer": str, "seq": int, "cursor": int, "delta": <the upstream delta's msgpack bytes, as bin>,
     "dispatch": <the rollout's dispatch identity, a map; optional>}

``cursor`` is the seq of the last send the relay acknowledged: what the worker's own cursor
reflects when it diffs the next delta (verifiers' streamer awaits each send, so there is one in
flight). If a send raised after the relay had applied it (the ack was lost), the worker's next
delta is diffed against the old cursor and repeats (or undoes) what the lost one carried; its
envelope carries the old cursor, and the relay retracts the lost frame before applying it. The
relay then holds exactly the reference assembly over the frames the worker counted as sent.

A named producer's seq starts from the clock (``clock_seq``). If the clock stepped back since an
earlier process of the same name wrote, the relay holds a higher seq of that name than any this
cursor handed out, and answers its envelopes as duplicates without applying them. The answer
says so (``producers``: the relay's last seq per name), so :meth:`ProducerCursor.rebased` turns
that into a new envelope above the relay's seq: exactly once still holds, since none of this
cursor's envelopes can have been applied.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional

from .wire import Document, Encoder, pack, parse_delta, to_bytes


@dataclass
class Outgoing:
    """One delta ready to go: its envelope and what the cursor needs once it is answered."""

    trace: str
    seq: int
    delta: Dict[str, Any]
    """The delta, decoded."""
    delta_bytes: bytes
    """Its msgpack bytes: the caller's bytes untouched."""
    envelope: bytes
    """The envelope's msgpack bytes; a transport retry sends exactly these again."""


class ProducerCursor:
    """The next seq and the cursor (the seq of the last acknowledged send).

    Usage: :meth:`prepare` a delta, send ``Outgoing.envelope``, then call :meth:`acknowledge`
    once the relay answered 200; after a send that raised, call nothing (the cursor stays).
    ``seq`` grows by one per :meth:`prepare`, so a seq is never reused for another delta;
    re-sending the same ``Outgoing.envelope`` (a transport retry) reuses its seq, which the
    relay answers as a duplicate without applying it twice.
    """

    def __init__(self, producer: str, start_seq: int = 1, dispatch: Optional[Mapping[str, Any]] = None) -> None:
        if not isinstance(producer, str) or len(producer) > 256:
            raise ValueError("producer must be a str of at most 256 characters")
        if start_seq < 1:
            raise ValueError("start_seq must be >= 1")
        if dispatch is not None and not isinstance(dispatch, Mapping):
            raise ValueError("dispatch must be a mapping (the rollout's dispatch identity, e.g. prime-rl's dispatch_info)")
        self.producer = producer
        self.dispatch: Optional[Dict[str, Any]] = dict(dispatch) if dispatch is not None else None
        """The rollout's dispatch identity, sent with every envelope until one was acknowledged
        (the relay sets it once; the same again changes nothing)."""
        self.seq = start_seq - 1
        """The last seq handed out."""
        self.cursor = 0
        """The seq of the last send the relay acknowledged (0: none yet)."""

    def prepare(self, delta: Document, default: Optional[Encoder] = None) -> Outgoing:
        """Wrap ``delta`` (a dict, or its msgpack bytes, sent untouched) in the next envelope."""
        data = to_bytes(delta, default)
        parsed = parse_delta(data)
        return self._next(parsed, data, default)

    def _next(self, parsed: Dict[str, Any], data: bytes, default: Optional[Encoder] = None) -> Outgoing:
        self.seq += 1
        dispatch = self.dispatch if self.cursor == 0 else None
        envelope = envelope_bytes(self.producer, self.seq, self.cursor, data, dispatch, default)
        return Outgoing(trace=parsed["trace"], seq=self.seq, delta=parsed, delta_bytes=data, envelope=envelope)

    def rebased(self, out: Outgoing, ack: Dict[str, Any]) -> Optional[Outgoing]:
        """After the relay answered ``out`` (the last prepared): when it took it as a duplicate
        only because it holds a seq of this producer above every seq this cursor handed out (an
        earlier process of the same name, whose clock ran ahead of this one's), none of this
        cursor's envelopes was applied. The seq then continues above the relay's, and ``out``'s
        delta comes back in a new envelope to send; otherwise None (``out`` was answered as it is).
        """
        held = (ack.get("producers") or {}).get(self.producer)
        if ack.get("applied") != 0 or not ack.get("duplicates") or not isinstance(held, int) or held <= self.seq:
            return None
        self.seq = held
        return self._next(out.delta, out.delta_bytes)

    def acknowledge(self, out: Outgoing) -> None:
        """The relay answered 200 for ``out``: the cursor moves to it."""
        self.cursor = max(self.cursor, out.seq)


def envelope_bytes(
    producer: str,
    seq: int,
    cursor: Optional[int],
    delta: bytes,
    dispatch: Optional[Mapping[str, Any]] = None,
    default: Optional[Encoder] = None,
) -> bytes:
    """One envelope's msgpack bytes: ``{producer, seq, cursor, delta[, dispatch]}`` (``cursor`` None:
    left out, so the relay de-duplicates by seq only)."""
    fields: Dict[str, Any] = {"producer": producer, "seq": seq}
    if cursor is not None:
        fields["cursor"] = cursor
    fields["delta"] = delta
    if dispatch is not None:
        fields["dispatch"] = dict(dispatch)
    return pack(fields, default)
