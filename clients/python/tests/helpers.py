"""Golden cases, fault injection and a tiny reference assembly for the tests."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Deque, Dict, List, Optional, Tuple

import httpx
import msgpack

from episode_relay import RelayError, WebSocketChannel
from episode_relay.wire import LIST_FIELDS


def unpackb(b: bytes) -> Any:
    return msgpack.unpackb(b, raw=False, strict_map_key=False)


def packb(o: Any) -> bytes:
    return msgpack.packb(o, use_bin_type=True)


@dataclass
class Case:
    name: str
    frames: List[bytes]
    reply: bytes
    episode: Optional[bytes]
    finish_error: Optional[str]
    checkpoints: List[Tuple[int, bytes]]
    ack_lost: List[int]


FIXTURES = Path(__file__).resolve().parents[3] / "test" / "fixtures" / "golden"
"""The public golden cases, kept in the repository (test/fixtures/golden/README.md)."""
PUBLIC_CASES = (
    "ack_lost", "chat_basic", "discard_retry", "empty_trace", "failed_sends", "gap_detected",
    "large_routing", "multi_trace_links", "odd_values", "routing_repair_u8", "routing_repair_widen", "tool_calls_pending",
)


def case_paths() -> Dict[str, Path]:
    """Every golden case by name: the fixtures, then those of ``GOLDEN_DIR`` (if set) that the
    fixtures do not hold."""
    paths = {p.stem: p for p in sorted(FIXTURES.glob("*.msgpack"))}
    extra = os.environ.get("GOLDEN_DIR")
    if extra:
        for p in sorted(Path(extra).glob("*.msgpack")):
            paths.setdefault(p.stem, p)
    return paths


def case_names() -> List[str]:
    return sorted(case_paths())


def load_case(name: str) -> Case:
    c = unpackb(case_paths()[name].read_bytes())
    return Case(
        name=c["name"],
        frames=list(c["frames"]),
        reply=c["reply"],
        episode=c["episode"],
        finish_error=c["finish_error"],
        checkpoints=[(cp["after"], cp["traces"]) for cp in c["checkpoints"]],
        ack_lost=list(c["ack_lost"]),
    )


def _b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode("ascii")


def mint_token(secret: str, role: str, episodes: List[str], ttl: int = 3600) -> str:
    """An HS256 JWT with the relay's claims (`role`, `episodes`, `iat`, `exp`), signed with the
    UTF-8 bytes of `secret`, as `npm run token` mints them."""
    now = int(time.time())
    header = _b64url(json.dumps({"alg": "HS256", "typ": "JWT"}, separators=(",", ":")).encode())
    claims = _b64url(json.dumps({"role": role, "episodes": episodes, "iat": now, "exp": now + ttl}, separators=(",", ":")).encode())
    signing_input = f"{header}.{claims}".encode("ascii")
    signature = _b64url(hmac.new(secret.encode("utf-8"), signing_input, hashlib.sha256).digest())
    return f"{header}.{claims}.{signature}"


def episode_id(prefix: str) -> str:
    return f"py-{prefix}-{uuid.uuid4().hex[:12]}"[:128]


def closed_port() -> int:
    """A loopback port nothing listens on (bound and released)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Seen:
    """One request as the fault-injecting transport saw it."""

    method: str
    path: str
    body: bytes
    headers: Dict[str, str]
    fault: Optional[str]
    status: Optional[int] = None


class FaultyTransport(httpx.AsyncBaseTransport):
    """An httpx transport in front of the real one that fails chosen requests.

    Faults, consumed one per request from `plan` (None = pass through), or every request
    while `time.monotonic() < unreachable_until`:
    - "refused": the request goes to a port where nothing listens (a real connect error;
      it never reaches the relay);
    - "lost": the request reaches the relay and is answered, then the connection "breaks":
      the caller gets httpx.ReadError instead of the answer (the ack is lost);
    - "503": answered 503 without reaching the relay.
    Only requests whose path ends with one of `paths` are subject to faults.
    """

    def __init__(self, paths: Tuple[str, ...] = ("/deltas",)) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.plan: Deque[Optional[str]] = deque()
        self.unreachable_until = 0.0
        self.paths = paths
        self.seen: List[Seen] = []
        self._closed_port = closed_port()

    def fail_next(self, *faults: Optional[str]) -> None:
        self.plan.extend(faults)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = request.read()
        subject = request.url.path.endswith(self.paths)
        fault: Optional[str] = None
        if subject:
            if time.monotonic() < self.unreachable_until:
                fault = "refused"
            elif self.plan:
                fault = self.plan.popleft()
        seen = Seen(request.method, request.url.path, body, dict(request.headers), fault)
        self.seen.append(seen)
        if fault == "refused":
            request.url = request.url.copy_with(port=self._closed_port)
            return await self.inner.handle_async_request(request)  # raises ConnectError
        if fault == "503":
            seen.status = 503
            return httpx.Response(503, json={"error": "unavailable", "message": "injected 503"})
        response = await self.inner.handle_async_request(request)
        seen.status = response.status_code
        if fault == "lost":
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("injected: the connection broke before the answer was read", request=request)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()

    def delta_bodies(self) -> List[Seen]:
        return [s for s in self.seen if s.path.endswith("/deltas")]


class FaultyChannel:
    """The producer WebSocket with injectable ack loss: a "lost" send delivers the message and
    reads its acknowledgement, then breaks the socket and raises, as if the ack never arrived."""

    def __init__(self, inner: WebSocketChannel) -> None:
        self.inner = inner
        self.plan: Deque[Optional[str]] = deque()
        self.sent: List[Tuple[bytes, Optional[str]]] = []

    def fail_next(self, *faults: Optional[str]) -> None:
        self.plan.extend(faults)

    async def send(self, body: bytes) -> Dict[str, Any]:
        fault = self.plan.popleft() if self.plan else None
        self.sent.append((body, fault))
        ack = await self.inner.send(body)
        if fault == "lost":
            await self.inner.close()
            raise RelayError("injected: the socket broke before the acknowledgement arrived", error="network")
        return ack

    async def close(self) -> None:
        await self.inner.close()


# ---- a small reference assembly (no routing repairs) for synthetic scenarios ----


def ref_apply(traces: Dict[str, Dict[str, Any]], delta: Dict[str, Any], skip_repairs: bool = False) -> None:
    """`EpisodeAssembly.apply` from verifiers, minus routing repairs (refused, or skipped when
    only counts matter)."""
    tid = delta["trace"]
    if delta.get("discard"):
        traces.pop(tid, None)
        return
    assert skip_repairs or "routing_repairs" not in delta
    t = traces.get(tid)
    if t is None:
        t = traces[tid] = {**delta["open"], **{f: [] for f in LIST_FIELDS}, "pending": []}
    for index, links in (delta.get("links") or {}).items():
        t["nodes"][int(index)]["semantic_parents"].extend(links)
    if "nodes" in delta:
        t["nodes"].extend({**n, "semantic_parents": list(n.get("semantic_parents") or [])} for n in delta["nodes"])
    for f in LIST_FIELDS:
        if f in delta and f != "nodes":
            t[f].extend(delta[f])
    t.update(delta.get("set") or {})
    if "nodes" in delta:
        t["pending"] = []
    if "pending" in delta:
        t["pending"] = delta["pending"]


def live_traces(doc: bytes) -> bytes:
    """The `traces` of the relay's live episode document, re-packed (checkpoint form)."""
    live = unpackb(doc)
    assert isinstance(live, dict) and "traces" in live, f"unexpected live document keys: {list(live)[:8]}"
    return packb(live["traces"])


@dataclass
class Timer:
    started: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return time.monotonic() - self.started
