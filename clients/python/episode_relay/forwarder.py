"""``RelayForwarder``: forward the deltas a client receives to a relay, in the background."""

from __future__ import annotations

import asyncio
import collections
import logging
import random
import threading
import time
from typing import Any, Awaitable, Callable, Deque, Dict, Mapping, Optional, Tuple, Union

import httpx

from .sink import log_rebase, producer_connection
from .tokenizer import TokenizerShipment, TokenizerSource, run_of
from .transport import DeltaChannel, FinishMismatch, RelayError, check_base_url, check_episode_id
from .wire import Document, Encoder, default_encoder, to_bytes

logger = logging.getLogger("episode_relay")

_Item = Tuple[str, bytes]  # ("delta" | "reply", msgpack bytes)


class RelayForwarder:
    """Mirrors the episode stream one process receives (the env client's delta callback)
    into a relay, without ever slowing down or failing the rollout.

    ``on_delta(delta)`` and ``on_reply(reply)`` only pack (dicts) and enqueue; they return at
    once and never raise. A background asyncio task sends the queue in order, one envelope at
    a time. An envelope is built once, when its turn comes, and a failed post is retried with
    the *same* envelope (same seq) with exponential backoff (``backoff_initial`` doubling up
    to ``backoff_max``, with jitter) until the relay acknowledges it; if the post had in fact
    been applied, the relay answers the retry as a duplicate. So the relay applies every
    delta exactly once, in order, and the reply after the last one.

    Deltas are forwarded as received: the forwarder sees the wire, not the worker's cursor,
    so it does not de-duplicate content the worker itself repeated (a worker-side lost
    acknowledgement); the relay then assembles what a reference ``EpisodeAssembly`` fed the
    same frames would.

    Policy when the relay is unreachable or refuses (the buffer is bounded):

    - While failures are retryable (network error, timeout, 5xx, 408, 429), deltas keep
      queueing, up to ``max_buffer`` messages or ``max_buffer_bytes`` bytes (counting the one
      in flight).
    - The forwarder **gives up** on the episode when the buffer would overflow, when one
      message has failed for ``give_up_after`` seconds, or when the relay refuses a delta
      (a 4xx: retrying cannot help). Dropping single deltas would silently corrupt the
      relay's copy, so instead it stops: it discards the whole buffer, logs one warning on
      the ``episode_relay`` logger, ignores every later ``on_delta`` / ``on_reply``, and sets
      :attr:`gave_up` and :attr:`gave_up_reason`. The relay keeps the prefix it acknowledged
      (and never gets a reply, so it never claims the episode finished).
    - A reply refused with ``409 finish_mismatch`` is recorded in :attr:`finish_error` and
      logged; it is not retried.

    ``on_delta`` / ``on_reply`` may be called from the event loop's thread or, once the
    forwarder is running (after the first call from the loop, :meth:`start` or
    :meth:`drain`), from any other thread.

    Args: as :class:`~episode_relay.RelaySink` (``dispatch=`` included: the rollout's identity in
    the trainer, e.g. prime-rl's ``dispatch_info``; and ``tokenizer=``, sent by the background
    task before the first delta), plus the buffer and backoff settings above.
    """

    def __init__(
        self,
        url: str,
        episode_id: str,
        token: Optional[str] = None,
        *,
        producer: Optional[str] = None,
        transport: Union[str, DeltaChannel] = "http",
        max_buffer: int = 10_000,
        max_buffer_bytes: int = 256 * 1024 * 1024,
        give_up_after: Optional[float] = 600.0,
        backoff_initial: float = 0.1,
        backoff_max: float = 5.0,
        timeout: float = 30.0,
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
        # sent by the background task before the first delta (RelaySink's ``tokenizer=``)
        self._tokenizer = None if tokenizer is None else TokenizerShipment(tokenizer, self.url, run_of(self.episode_id), token)
        self.max_buffer = max_buffer
        self.max_buffer_bytes = max_buffer_bytes
        self.give_up_after = give_up_after
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self.default = default if default is not None else default_encoder()

        self.delivered = 0
        """Deltas the relay acknowledged."""
        self.dropped = 0
        """Messages ignored because the forwarder had given up, was closed or had the reply."""
        self.retries = 0
        """Failed posts that were retried."""
        self.gave_up = False
        self.gave_up_reason: Optional[str] = None
        self.finish_result: Optional[Dict[str, Any]] = None
        """The relay's answer to the reply, once delivered."""
        self.finish_error: Optional[RelayError] = None
        """Why the reply was refused, if it was."""

        self._queue: Deque[_Item] = collections.deque()
        self._lock = threading.Lock()
        self._buffered_bytes = 0
        self._inflight: Optional[_Item] = None
        self._has_reply = False
        self._closed = False
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._task: Optional["asyncio.Task[None]"] = None
        self._wake: Optional[asyncio.Event] = None
        self._progress: Optional[asyncio.Event] = None
        self._warned_late = False

    # ---- the rollout's side: never blocks, never raises ----

    def on_delta(self, delta: Document) -> None:
        """Queue one delta (a dict or its msgpack bytes) for forwarding; returns at once."""
        self._offer("delta", delta)

    def on_reply(self, reply: Document) -> None:
        """Queue the run's reply, posted after every queued delta; returns at once."""
        self._offer("reply", reply)

    def _offer(self, kind: str, doc: Document) -> None:
        try:
            if self.gave_up or self._closed or self._has_reply:
                self.dropped += 1
                if not self.gave_up and not self._warned_late:
                    self._warned_late = True
                    logger.warning("episode %s: %s after the reply or close is not forwarded", self.episode_id, kind)
                return
            try:
                data = to_bytes(doc, self.default)
            except Exception as e:
                self._give_up(f"could not pack a {kind}: {type(e).__name__}: {e}")
                return
            with self._lock:
                queued = len(self._queue) + (1 if self._inflight is not None else 0)
                if queued + 1 > self.max_buffer or self._buffered_bytes + len(data) > self.max_buffer_bytes:
                    full = True
                else:
                    full = False
                    self._queue.append((kind, data))
                    self._buffered_bytes += len(data)
                    if kind == "reply":
                        self._has_reply = True
            if full:
                self._give_up(
                    f"buffer full ({queued} messages, {self._buffered_bytes} bytes; limits {self.max_buffer} / {self.max_buffer_bytes})"
                )
                return
            self._kick()
        except Exception:  # never into the rollout
            logger.exception("episode %s: forwarder failed to queue a %s", self.episode_id, kind)

    def _kick(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is not None and (self._loop is None or self._loop is running):
            self._ensure_started()
            assert self._wake is not None
            self._wake.set()
        elif self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._wake_in_loop)
        # else: no loop yet; start(), drain() or the next call from a loop picks the items up

    def _wake_in_loop(self) -> None:
        self._ensure_started()
        assert self._wake is not None
        self._wake.set()

    # ---- lifecycle ----

    def _ensure_started(self) -> None:
        if self._task is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._task = self._loop.create_task(self._run(), name=f"episode-relay-forwarder:{self.episode_id}")
        if self._queue:
            self._wake.set()

    async def start(self) -> None:
        """Start the background task on the running loop (the first ``on_delta`` from the
        loop does this too)."""
        self._ensure_started()

    @property
    def buffered(self) -> int:
        """Messages not yet acknowledged (queued plus the one in flight)."""
        return len(self._queue) + (1 if self._inflight is not None else 0)

    @property
    def status(self) -> str:
        """``forwarding``, ``gave_up``, ``finished`` (the reply was answered) or ``closed``."""
        if self.gave_up:
            return "gave_up"
        if self.finish_result is not None or self.finish_error is not None:
            return "finished"
        return "closed" if self._closed else "forwarding"

    async def drain(self, timeout: Optional[float] = None) -> bool:
        """Wait until everything queued so far was acknowledged (True), the forwarder gave up
        (False) or ``timeout`` seconds passed (False). Never raises for relay failures."""
        self._ensure_started()
        assert self._progress is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._progress.clear()
            if self.gave_up:
                return False
            if not self._queue and self._inflight is None:
                return True
            if self._task is not None and self._task.done():
                return False
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return False
            try:
                await asyncio.wait_for(self._progress.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                return False

    async def close(self, timeout: Optional[float] = None) -> bool:
        """:meth:`drain` (up to ``timeout`` seconds), then stop and close the connections.
        Returns whether everything was delivered."""
        delivered = await self.drain(timeout)
        self._closed = True
        if not delivered and not self.gave_up:
            logger.warning(
                "episode %s: closing the forwarder with %d message(s) not acknowledged by %s", self.episode_id, self.buffered, self.url
            )
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):
                pass
        try:
            await self.channel.close()
        finally:
            await self.http.close()
        return delivered

    async def __aenter__(self) -> "RelayForwarder":
        await self.start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    # ---- the background task ----

    def _give_up(self, reason: str) -> None:
        if self.gave_up:
            return
        with self._lock:
            self.gave_up = True
            self.gave_up_reason = reason
            lost = len(self._queue) + (1 if self._inflight is not None else 0)
            self._queue.clear()
            self._buffered_bytes = 0
        logger.warning(
            "episode %s: giving up forwarding to %s (%s); %d unsent message(s) discarded, %d delta(s) had been delivered; "
            "later deltas are ignored",
            self.episode_id, self.url, reason, lost, self.delivered,
        )
        self._signal()

    def _signal(self) -> None:
        """Wake the task and the drain() waiters, from whichever thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            running: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._set_events()
        else:
            loop.call_soon_threadsafe(self._set_events)

    def _set_events(self) -> None:
        if self._progress is not None:
            self._progress.set()
        if self._wake is not None:
            self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None and self._progress is not None
        while True:
            if not self._queue:
                self._wake.clear()
                if not self._queue:
                    await self._wake.wait()
                continue
            if self.gave_up:
                self._queue.clear()
                continue
            with self._lock:
                item = self._inflight = self._queue.popleft()
            try:
                await self._forward(item)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # a bug: stop rather than corrupt the relay's copy
                self._give_up(f"internal error: {type(e).__name__}: {e}")
            finally:
                with self._lock:
                    self._inflight = None
                    if not self.gave_up:
                        self._buffered_bytes -= len(item[1])
                self._progress.set()

    async def _forward(self, item: _Item) -> None:
        kind, data = item
        if self._tokenizer is not None:
            await self._tokenizer.ship(self.http.client)
            self._tokenizer = None
        if kind == "delta":
            try:
                out = self.cursor.prepare(data)
            except Exception as e:
                self._give_up(f"unreadable delta: {e}")
                return
            while True:
                ack = await self._retry(lambda: self.channel.send(out.envelope), f"delta seq {out.seq}")
                again = None if ack is None else self.cursor.rebased(out, ack)
                if again is None:
                    break
                log_rebase(self.episode_id, self.cursor.producer, out.seq, again.seq)
                out = again
            if ack is not None:
                self.cursor.acknowledge(out)  # every forwarded delta is acknowledged: no retraction
                self.delivered += 1
            return
        try:
            result = await self._retry(lambda: self.http.post("reply", data), "reply", refusal_gives_up=False)
        except FinishMismatch as e:
            self.finish_error = e
            logger.error("episode %s: the relay refused the reply: %s", self.episode_id, e)
            return
        except RelayError as e:
            self.finish_error = e
            logger.error("episode %s: the relay refused the reply: %s (%s)", self.episode_id, e, e.error)
            return
        if result is not None:
            self.finish_result = result

    async def _retry(
        self, attempt: Callable[[], Awaitable[Dict[str, Any]]], what: str, refusal_gives_up: bool = True
    ) -> Optional[Dict[str, Any]]:
        """Run ``attempt`` until it succeeds (its answer) or the forwarder gives up (None)."""
        first_failure: Optional[float] = None
        delay = self.backoff_initial
        while not self.gave_up:
            try:
                return await attempt()
            except RelayError as e:
                err = e
            except asyncio.CancelledError:
                raise
            except Exception as e:  # unexpected transport trouble: treat as retryable
                err = RelayError(f"{type(e).__name__}: {e}", error="network")
            if not err.retryable:
                if not refusal_gives_up:
                    raise err
                self._give_up(f"the relay refused {what}: {err} ({err.status} {err.error})")
                return None
            now = time.monotonic()
            if first_failure is None:
                first_failure = now
                logger.info("episode %s: %s failed (%s); retrying with the same envelope", self.episode_id, what, err)
            waited = now - first_failure
            if self.give_up_after is not None and waited >= self.give_up_after:
                self._give_up(f"{what} failed for {waited:.1f} s: {err}")
                return None
            self.retries += 1
            pause = min(delay, self.backoff_max) * (0.75 + random.random() * 0.5)
            if self.give_up_after is not None:
                pause = min(pause, max(0.0, self.give_up_after - waited))
            await asyncio.sleep(pause)
            delay = min(delay * 2, self.backoff_max)
        return None
