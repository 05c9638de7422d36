"""``RelaySink``: the ``send`` callable of verifiers' ``DeltaStreamer``, writing to a relay."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any, Dict, Optional, Union

import httpx

from .producer import Outgoing, ProducerCursor
from .transport import DeltaChannel, HttpChannel, RelayError, RelayHttp, WebSocketChannel
from .wire import Document, Encoder, default_encoder, to_bytes

logger = logging.getLogger("episode_relay")


def new_producer_name(prefix: str = "py") -> str:
    """A producer name no other sink uses: ``py-<32 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def clock_seq() -> int:
    """A seq start above any seq an earlier process could have used: microseconds since the
    epoch (~1.8e15, well inside the relay's integer range)."""
    return max(1, time.time_ns() // 1000)



def producer_connection(
    url: str,
    episode_id: str,
    token: Optional[str],
    producer: Optional[str],
    transport: Union[str, DeltaChannel],
    timeout: float,
    client: Optional[httpx.AsyncClient],
    start_seq: Optional[int],
) -> "tuple[ProducerCursor, RelayHttp, DeltaChannel]":
    """The producer cursor, the HTTP client and the delta channel shared by the sink and the
    forwarder. A named producer starts its seq from the clock, so a restart never reuses one."""
    if start_seq is None:
        start_seq = 1 if producer is None else clock_seq()
    cursor = ProducerCursor(producer if producer is not None else new_producer_name(), start_seq)
    http = RelayHttp(url, episode_id, token=token, timeout=timeout, client=client)
    channel: DeltaChannel
    if transport == "http":
        channel = HttpChannel(http)
    elif transport == "ws":
        channel = WebSocketChannel(url, episode_id, token=token, timeout=timeout)
    elif isinstance(transport, str):
        raise ValueError(f"transport must be 'http', 'ws' or a DeltaChannel, not {transport!r}")
    else:
        channel = transport
    return cursor, http, channel

class RelaySink:
    """Streams one episode's deltas to an Episode Relay, exactly once.

    Pass it as ``DeltaStreamer(traces, send=RelaySink(url, episode_id))``. Each call packs
    the delta (``msgpack.packb(delta, use_bin_type=True)``: the worker's own bytes; a delta
    given as bytes is sent untouched), wraps it in the producer envelope with the next
    ``seq`` and the relay's acknowledged view of the delta's trace, and delivers it. It
    returns only after the relay answered 200, which the relay sends after the durable
    write; on anything else (a refusal, a network error, a timeout) it raises
    :class:`~episode_relay.RelayError`, so the streamer keeps its cursor and re-diffs at the
    next flush.

    Exactly-once: the acknowledged view advances only on a 200 (per trace: ``open``, item
    counts of each list field, per node its ``semantic_parents`` count; a ``discard`` drops
    the trace). A re-diffed delta after a failed send therefore carries the counts the worker
    diffed against, and the relay drops what it already holds. ``set`` and ``pending`` are
    overwrites that counts cannot de-duplicate: after a failed send of a trace, fields the
    failed delta(s) carried and the next delta lacks are re-asserted with their last
    acknowledged values (see :meth:`ProducerCursor.prepare`), so the relay ends equal to the
    worker whether or not the failed delta reached it.

    ``seq`` grows by one per send attempt and is never reused for another delta. With
    ``retries > 0`` a *retryable* failure (network error, timeout, 5xx, 408, 429) is retried
    with the very same envelope (same seq: the relay acknowledges a duplicate without
    applying it again) before ``send`` gives up and raises. Refusals (4xx) never are.

    Args:
        url: The relay's base URL, e.g. ``http://127.0.0.1:8787``.
        episode_id: 1-128 characters of ``[A-Za-z0-9._:-]``.
        token: Sent as ``Authorization: Bearer <token>`` when given.
        producer: The envelope's producer name. Default: a fresh unique name, with seq from 1.
            With an explicit name, seq starts from :func:`clock_seq` unless ``start_seq`` says
            otherwise, so a restarted process never reuses a seq the relay already applied
            (the relay would acknowledge it as a duplicate and drop the delta).
        transport: ``"http"`` (one keep-alive connection) or ``"ws"`` (the producer
            WebSocket), or any :class:`~episode_relay.transport.DeltaChannel`.
        timeout: Seconds for one request (connect, write, answer).
        retries: Transport-level retries of one envelope on retryable failures before
            ``send`` raises (default 2; 0 raises at once and leaves it to the streamer's
            re-diff, which only happens at its next flush: the final flush of a run is not
            retried by the streamer).
        retry_backoff: Seconds before the first retry; doubles per retry.
        client: An ``httpx.AsyncClient`` to use instead of the sink's own (not closed by
            :meth:`close`).
        default: msgpack ``default`` encoder for dict deltas; by default verifiers' own
            ``msgpack_encoder`` when importable.
        start_seq: The first seq to use.
    """

    def __init__(
        self,
        url: str,
        episode_id: str,
        token: Optional[str] = None,
        producer: Optional[str] = None,
        transport: Union[str, DeltaChannel] = "http",
        *,
        timeout: float = 30.0,
        retries: int = 2,
        retry_backoff: float = 0.2,
        client: Optional[httpx.AsyncClient] = None,
        default: Optional[Encoder] = None,
        start_seq: Optional[int] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.episode_id = episode_id
        self.cursor, self.http, self.channel = producer_connection(
            self.url, episode_id, token, producer, transport, timeout, client, start_seq
        )
        self.retries = max(0, int(retries))
        self.retry_backoff = retry_backoff
        self.default = default if default is not None else default_encoder()
        self.last_ack: Optional[Dict[str, Any]] = None
        """The relay's answer to the last acknowledged delta."""
        self._lock = asyncio.Lock()
        self._closed = False

    @property
    def producer(self) -> str:
        """The producer name in every envelope."""
        return self.cursor.producer

    async def __call__(self, delta: Document) -> None:
        """``DeltaStreamer``'s ``send``: :meth:`send`, without the acknowledgement."""
        await self.send(delta)

    async def send(self, delta: Document) -> Dict[str, Any]:
        """Deliver one delta; return the relay's acknowledgement, raise on any failure.

        Concurrent calls are serialized in call order (the streamer already serializes
        its flushes).
        """
        if self._closed:
            raise RelayError("the sink is closed", error="closed")
        async with self._lock:
            out = self.cursor.prepare(delta, self.default)
            if out.reasserted:
                logger.debug("trace %s: re-asserting %s after a failed send", out.trace, ", ".join(out.reasserted))
            try:
                ack = await self._deliver(out)
            except BaseException:
                self.cursor.fail(out)
                raise
            self.cursor.acknowledge(out)
            self.last_ack = ack
            return ack

    async def _deliver(self, out: Outgoing) -> Dict[str, Any]:
        attempt = 0
        while True:
            try:
                return await self.channel.send(out.envelope)
            except RelayError as e:
                if not e.retryable or attempt >= self.retries:
                    raise
                delay = self.retry_backoff * (2**attempt)
                attempt += 1
                logger.info("delta seq %d for trace %s: %s; retrying in %.2f s", out.seq, out.trace, e, delay)
                await asyncio.sleep(delay)

    async def finish(self, reply: Document) -> Dict[str, Any]:
        """POST the run's reply (``{success, error, head, traces}``, a dict or its bytes).

        Returns the relay's JSON (``{"ok": true, "status": "finished"|"failed", ...}``).
        Raises :class:`~episode_relay.FinishMismatch` (a ``RuntimeError``, whose text is the
        reference ``served trace ... assembled ...`` / ``served episode is missing trace ...``
        message) when the counts disagree, :class:`~episode_relay.RelayError` on any other
        failure. Retryable failures are retried like deltas (the relay takes the same reply
        twice as one).
        """
        body = to_bytes(reply, self.default)
        async with self._lock:
            attempt = 0
            while True:
                try:
                    return await self.http.post("reply", body)
                except RelayError as e:
                    if not e.retryable or attempt >= self.retries:
                        raise
                    delay = self.retry_backoff * (2**attempt)
                    attempt += 1
                    await asyncio.sleep(delay)

    async def fetch(self) -> bytes:
        """The episode's msgpack bytes as the relay serves them now."""
        return await self.http.get_episode()

    async def close(self) -> None:
        """Close the socket / connection. Further sends raise."""
        if self._closed:
            return
        self._closed = True
        try:
            await self.channel.close()
        finally:
            await self.http.close()

    async def __aenter__(self) -> "RelaySink":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()
