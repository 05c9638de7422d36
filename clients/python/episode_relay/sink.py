"""``RelaySink``: the ``send`` callable of verifiers' ``DeltaStreamer``, writing to a relay."""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from typing import Any, Awaitable, Callable, Dict, List, Mapping, Optional, Union

import httpx

from .producer import Outgoing, ProducerCursor
from .tokenizer import TokenizerShipment, TokenizerSource, run_of
from .transport import DeltaChannel, HttpChannel, RelayError, RelayHttp, WebSocketChannel, check_base_url, check_episode_id, error_from_answer
from .wire import Document, Encoder, default_encoder, pack, to_bytes, unpack

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
    dispatch: Optional[Mapping[str, Any]] = None,
) -> "tuple[ProducerCursor, RelayHttp, DeltaChannel]":
    """The producer cursor, the HTTP client and the delta channel shared by the sink and the
    forwarder. A named producer starts its seq from the clock, so a restart never reuses one."""
    if start_seq is None:
        start_seq = 1 if producer is None else clock_seq()
    cursor = ProducerCursor(producer if producer is not None else new_producer_name(), start_seq, dispatch)
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

    Pass it as ``DeltaStreamer(traces, send=RelaySink(url, episode_id))``. Each call packs the
    delta (``msgpack.packb(delta, use_bin_type=True)``: the worker's own bytes; a delta given as
    bytes is sent untouched), wraps it in the producer envelope with the next ``seq`` and the
    ``cursor`` (the seq of the last send the relay acknowledged), and delivers it. It returns only
    after the relay answered 200, which the relay sends after the durable write; on anything else
    it raises :class:`~episode_relay.RelayError`, so the streamer keeps its cursor and re-diffs at
    the next flush.

    Exactly-once: a send that raised may still have reached the relay (the ack was lost). The
    streamer's next delta is diffed against its unchanged cursor, so it repeats or undoes what
    the lost one carried; its envelope carries the same unchanged cursor, and the relay retracts
    the lost frame before applying it. The relay ends with exactly the reference assembly over the
    deltas the streamer counted as sent.

    A *retryable* failure (network error, timeout, 5xx, 408, 429, or an error answer without the
    relay's header such as a proxy's 502: e.g. the relay restarting, or a deploy) is retried, with
    jittered backoff, with the very same envelope (same seq: the relay acknowledges a duplicate
    without applying it again) until ``retry_for`` seconds have passed, then ``send`` raises.
    Refusals (the relay's 4xx; a page or a 404 that is not the relay) are never retried.

    The streamer swallows a failure of its exit flush: :meth:`finish` re-delivers that last
    delta (same envelope) before it posts the reply, so the reply's counts match.

    Args:
        url: The relay's base URL, e.g. ``http://127.0.0.1:8787``.
        episode_id: 1-128 characters of ``[A-Za-z0-9._:-]``.
        token: Sent as ``Authorization: Bearer <token>`` when given.
        producer: The envelope's producer name. Default: a fresh unique name, with seq from 1.
            With an explicit name, seq starts from :func:`clock_seq` unless ``start_seq`` says
            otherwise, so a restarted process never reuses a seq the relay already applied.
        transport: ``"http"`` (one keep-alive connection) or ``"ws"`` (the producer
            WebSocket), or any :class:`~episode_relay.transport.DeltaChannel`.
        timeout: Seconds for one attempt (connect, write, answer).
        retry_for: Seconds to keep retrying one envelope on retryable failures (default 30: long
            enough to ride out a relay restart or a deploy); 0 raises at the first failure.
        retry_backoff: Seconds before the first retry (drawn between half and all of it); doubles
            per retry (up to 2 s).
        client: An ``httpx.AsyncClient`` to use instead of the sink's own (not closed by
            :meth:`close`).
        default: msgpack ``default`` encoder for dict deltas; by default verifiers' own
            ``msgpack_encoder`` when importable.
        start_seq: The first seq to use.
        dispatch: The rollout's identity in the trainer, prime-rl's ``dispatch_info`` shape
            (``{id, kind, env, group, task, policy_version, step, started}``, every key optional):
            it rides with the envelopes until one is acknowledged. The relay keeps it beside the
            episode (never in it): the run's list, groups and steps go by it. Set once: another
            identity for the same episode is refused (409 ``dispatch_conflict``).
        tokenizer: The model's ``tokenizer.json`` (a path, or a model name such as
            ``Qwen/Qwen3-4B`` in the local Hugging Face cache; never downloaded), sent to the
            run once per process before the first delta, so pages decode token ids
            (:mod:`episode_relay.tokenizer`). A name not found raises at once; a refused upload
            is logged, and the deltas go on.
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
        retry_for: float = 30.0,
        retry_backoff: float = 0.2,
        client: Optional[httpx.AsyncClient] = None,
        default: Optional[Encoder] = None,
        start_seq: Optional[int] = None,
        dispatch: Optional[Mapping[str, Any]] = None,
        tokenizer: Optional[TokenizerSource] = None,
    ) -> None:
        self.url = check_base_url(url)
        self.episode_id = check_episode_id(episode_id)
        self.cursor, self.http, self.channel = producer_connection(
            self.url, episode_id, token, producer, transport, timeout, client, start_seq, dispatch
        )
        self._tokenizer = None if tokenizer is None else TokenizerShipment(tokenizer, self.url, run_of(self.episode_id), token)
        self.retry_for = max(0.0, float(retry_for))
        self.retry_backoff = retry_backoff
        self.default = default if default is not None else default_encoder()
        self.last_ack: Optional[Dict[str, Any]] = None
        """The relay's answer to the last acknowledged delta."""
        self.unknown: List[str] = []
        """Delta keys the relay said it does not know (the acks' ``unknown``), in the order first named:
        a newer verifiers' fields, kept by the relay but worth an upgrade of it."""
        self.undelivered: Optional[Outgoing] = None
        """The last delta, when its send raised (the streamer re-diffs it, or :meth:`finish` re-sends it)."""
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
            if self._tokenizer is not None:
                await self._tokenizer.ship(self.http.client)
                self._tokenizer = None
            out = self.cursor.prepare(delta, self.default)
            self.undelivered = out
            out, ack = await self._deliver(out)
            self.cursor.acknowledge(out)
            self.undelivered = None
            self.last_ack = ack
            return ack

    async def _deliver(self, out: Outgoing) -> "tuple[Outgoing, Dict[str, Any]]":
        """Send ``out`` until the relay answers; the envelope it took (see :meth:`ProducerCursor.rebased`) and its answer."""
        while True:
            ack = await retrying(lambda: self.channel.send(out.envelope), f"delta seq {out.seq} for trace {out.trace}", self.retry_for, self.retry_backoff)
            self._note_unknown(ack)
            again = self.cursor.rebased(out, ack)
            if again is None:
                return out, ack
            log_rebase(self.episode_id, self.cursor.producer, out.seq, again.seq)
            self.undelivered = out = again

    def _note_unknown(self, ack: Mapping[str, Any]) -> None:
        """Warn once per name the relay does not know (it kept the data; the relay may want an upgrade)."""
        new = [k for k in ack.get("unknown") or [] if isinstance(k, str) and k not in self.unknown]
        if new:
            self.unknown.extend(new)
            logger.warning("episode %s: the relay does not know the delta key(s) %s (kept as sent; see docs/protocol.md)", self.episode_id, ", ".join(new))

    async def finish(self, reply: Document) -> Dict[str, Any]:
        """POST the run's reply (``{success, error, head, traces}``, a dict or its bytes).

        If the last delta's send raised (the streamer swallows a failed exit flush), it is sent
        again first, the same envelope, so the relay holds every delta the worker made.
        Returns the relay's JSON (``{"ok": true, "status": "finished"|"failed", ...}``).
        Raises :class:`~episode_relay.FinishMismatch` (a ``RuntimeError``, whose text is the
        reference ``served trace ... assembled ...`` / ``served episode is missing trace ...``
        message) when the counts disagree, :class:`~episode_relay.RelayError` on any other
        failure. Retryable failures are retried like deltas (the relay takes the same reply
        twice as one).
        """
        body = to_bytes(reply, self.default)
        async with self._lock:
            if self.undelivered is not None:
                out = self.undelivered
                logger.info("episode %s: re-sending delta seq %d (its send failed) before the reply", self.episode_id, out.seq)
                out, self.last_ack = await self._deliver(out)
                self.cursor.acknowledge(out)
                self.undelivered = None
            return await retrying(lambda: self.http.post("reply", body), "reply", self.retry_for, self.retry_backoff)

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


async def announce_dispatch(
    url: str,
    episode_id: str,
    dispatch: Mapping[str, Any],
    token: Optional[str] = None,
    *,
    timeout: float = 30.0,
    retry_for: float = 30.0,
    client: Optional[httpx.AsyncClient] = None,
) -> Dict[str, Any]:
    """``POST /v1/episodes/{id}/dispatch``: announce a rollout the trainer dispatched, before its
    first trace streams. The run lists it as a pending rollout (no traces, stage ``pending``) until
    its first trace streams, it ends, or the relay's PENDING_TIMEOUT_SECONDS pass. Returns the
    relay's answer (``{"ok": true, "created", "changed", "status", "dispatch"}``); raises
    :class:`~episode_relay.RelayError` (409 ``dispatch_conflict`` when the episode already has
    another identity). Retryable failures are retried (the same identity again changes nothing)."""
    http = RelayHttp(check_base_url(url), check_episode_id(episode_id), token=token, timeout=timeout, client=client)
    body = pack(dict(dispatch))
    try:
        return await retrying(lambda: http.post("dispatch", body), "dispatch", retry_for, 0.2)
    finally:
        await http.close()


async def post_annotations(
    url: str,
    episode_id: str,
    records: Union[Mapping[str, Any], "list[Mapping[str, Any]]"],
    token: Optional[str] = None,
    *,
    timeout: float = 30.0,
    retry_for: float = 30.0,
    client: Optional[httpx.AsyncClient] = None,
) -> Dict[str, Any]:
    """``POST /v1/episodes/{id}/annotations``: the trainer's annotation records of the episode's
    traces, in prime-rl's shape (``{"version": 1, "trace_id", "info", "branches": [{"index",
    "trainer_logprobs", "entropies", "is_masked", "advantages", ...}]}``; one record or a list). The
    relay merges them per trace (accepted while live, finished or archived) and tells watchers.
    Returns ``{"ok": true, "version": records merged, "bytes": ...}``; raises
    :class:`~episode_relay.RelayError` (422 ``unknown_trace``, 413 ``annotations_too_large``, 400
    naming the field). Retryable failures are retried; a retry after a lost answer merges the records
    again (harmless: a later entry equal to an earlier one folds to the same values)."""
    http = RelayHttp(check_base_url(url), check_episode_id(episode_id), token=token, timeout=timeout, client=client)
    body = pack(records if isinstance(records, Mapping) else list(records))
    try:
        return await retrying(lambda: http.post("annotations", body), "annotations", retry_for, 0.2)
    finally:
        await http.close()


async def fetch_annotations(
    url: str, episode_id: str, token: Optional[str] = None, *, timeout: float = 30.0, client: Optional[httpx.AsyncClient] = None
) -> Dict[str, Any]:
    """``GET /v1/episodes/{id}/annotations``: ``{"episode", "version", "traces": [merged record per trace]}``."""
    http = RelayHttp(check_base_url(url), check_episode_id(episode_id), token=token, timeout=timeout, client=client)
    try:
        r = await http.request("GET", "annotations", headers={"accept": "application/msgpack"})
        if r.status_code != 200:
            raise error_from_answer(r.status_code, r.content, f"GET /v1/episodes/{episode_id}/annotations")
        doc: Dict[str, Any] = unpack(r.content)
        return doc
    finally:
        await http.close()


def log_rebase(episode_id: str, producer: str, seq: int, now: int) -> None:
    logger.warning(
        "episode %s: the relay holds a later seq of producer %r than seq %d (this process's clock is behind an earlier one's): sent again as seq %d",
        episode_id,
        producer,
        seq,
        now,
    )


async def retrying(attempt: "Callable[[], Awaitable[Dict[str, Any]]]", what: str, retry_for: float, backoff: float) -> Dict[str, Any]:
    """``attempt()`` until it answers, retrying retryable failures for up to ``retry_for`` seconds."""
    deadline = time.monotonic() + retry_for
    delay = backoff
    while True:
        try:
            return await attempt()
        except RelayError as e:
            if not e.retryable or time.monotonic() + delay > deadline:
                raise
            logger.info("%s: %s; retrying in %.2f s", what, e, delay)
        # jittered: sinks dropped together (a relay restart) come back spread out
        await asyncio.sleep(delay * (0.5 + random.random() / 2))
        delay = min(delay * 2, 2.0)
