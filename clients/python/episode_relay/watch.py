"""Live watches from Python: one episode (:func:`watch_episode`) or a whole run (:func:`watch_run`).

``watch_episode`` speaks the watcher protocol of docs/watching.md as the TypeScript client
(clients/typescript/watch.ts) does: a hello, a catch-up (a snapshot, then frames), live frames,
the finish; it acknowledges what it received (every message while catching up, then every
``ack_bytes``), and after a drop (a network failure, a deploy, a relay restart) it reconnects
with backoff and resumes after the last seq it applied, so nothing is missed or applied twice. A
1013 (the relay is busy) waits the relay's retry hint. Only a definite refusal (401, 403, 404, a
page that is not the relay, a relay without its secret) ends it, raising :class:`RelayError`
with the relay's reason; a relay that never answered gives up after ``give_up`` seconds.

``watch_run`` follows a run's socket (``GET /v1/runs/{run}`` upgraded): its rows as they appear,
change and end, and its training steps, resuming the same way (a new snapshot after each
reconnect; only what changed meanwhile is reported).

The token travels as the ``Sec-WebSocket-Protocol`` entry ``bearer.<token>`` beside
``episode-relay`` (never in the URL, which logs keep), and in ``Authorization`` on the one HTTP
request a failed handshake is followed by (to learn the relay's reason). Both need the optional
``websockets`` package (the ``ws`` extra; Debian: python3-websockets).

``watch_episode_sync`` / ``watch_run_sync`` run the same watch on a thread of their own, for a
notebook (whose event loop is already running) or a plain script: iterate them, read ``episode``
and call ``finished()`` without ``await``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import queue
import random
import re
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote, urlencode

import httpx

from .assembly import EpisodeAssembly
from .transport import (
    FinishMismatch,
    RelayError,
    auth_headers,
    check_base_url,
    check_episode_id,
    check_token_transport,
    error_from_answer,
    foreign_answer,
    network_error,
    RELAY_HEADER,
)
from .wire import unpack

#: The subprotocol the relay speaks, and the prefix of the entry that carries a token (src/protocol/http/credentials.ts).
WS_PROTOCOL = "episode-relay"
WS_TOKEN_PREFIX = "bearer."
#: What a watcher acknowledges between two acks once live, unless the relay's hello says (src/protocol/watch/protocol.ts).
ACK_BYTES = 1024 * 1024
#: Close codes (src/protocol/http/errors.ts): try again later (with a retry hint), too slow (resume now).
CLOSE_TRY_LATER = 1013
CLOSE_TOO_SLOW = 4008
_RETRY_HINT = re.compile(r"retry in (\d{1,7}) ms")


def retry_hint_ms(reason: str) -> Optional[int]:
    """The relay's retry hint in a 1013 close reason (``… retry in N ms``), else None."""
    m = _RETRY_HINT.search(reason or "")
    return int(m.group(1)) if m else None


def reconnect_delay(code: int, reason: str, attempt: int, backoff: Tuple[float, float], rand: Any = random.random) -> float:
    """Seconds before reconnect attempt ``attempt`` (0 first) after a close with ``code``: the
    relay's 1013 hint and up to half again at random; at once after a first 4008 (too slow: resume
    now); else full jitter below ``first * 2**attempt``, capped (clients/typescript/watch.ts)."""
    hint = retry_hint_ms(reason) if code == CLOSE_TRY_LATER else None
    if hint is not None:
        return hint / 1000 * (1 + rand() / 2)
    if code == CLOSE_TOO_SLOW and attempt == 0:
        return 0.0
    first, cap = backoff
    return min(cap, first * 2**attempt) * rand()


def _transient(status: int) -> bool:
    """A probe answer that means "try again later" (426: the endpoint is fine, it wants a socket)."""
    return status in (426, 408, 429) or status >= 500


def _ws_url(http_url: str) -> str:
    if http_url.startswith("https://"):
        return "wss://" + http_url[len("https://") :]
    return "ws://" + http_url[len("http://") :]


def _connect_function() -> Any:
    try:
        from websockets.asyncio.client import connect  # websockets >= 13

        return connect
    except ImportError:
        pass
    try:
        from websockets.client import connect  # type: ignore[no-redef,attr-defined,unused-ignore]  # 10-12 (Debian 12: 10.4)
    except ImportError as e:
        raise ImportError("watching needs the `websockets` package: pip install 'episode-relay[ws]' (Debian: python3-websockets)") from e
    return connect


class _Socket:
    """What the two watches share: connect with the token in the subprotocol, probe a failed
    handshake over HTTP, reconnect with backoff, ping."""

    def __init__(self, url: str, path: str, token: Optional[str], backoff: Tuple[float, float], give_up: float, ping_interval: float, what: str) -> None:
        self.base = check_base_url(url)
        self.path = path
        self.token = token
        if token:
            check_token_transport(self.base)
        self.backoff = backoff
        self.give_up = give_up
        self.ping_interval = ping_interval
        self.what = what
        self.attempt = 0
        self.ever_opened = False
        self.started = time.monotonic()
        self.last_network: Optional[RelayError] = None

    async def open(self, query: Dict[str, str]) -> Any:
        """A connected socket, or raises: :class:`RelayError` for a definite refusal, ``_Retry`` otherwise."""
        connect = _connect_function()
        params = inspect.signature(connect).parameters
        url = _ws_url(self.base) + self.path + (f"?{urlencode(query)}" if query else "")
        kwargs: Dict[str, Any] = {"compression": None, "max_size": None, "open_timeout": 30}
        if "ping_interval" in params:
            kwargs["ping_interval"] = None  # text pings below, which the relay's platform answers without waking it
        if self.token:
            kwargs["subprotocols"] = [WS_PROTOCOL, f"{WS_TOKEN_PREFIX}{self.token}"]
        try:
            ws = await connect(url, **kwargs)
        except Exception as e:  # a failed handshake, a refused connection, a timeout
            refusal = await self.probe()
            if refusal is not None:
                raise refusal from None
            raise _Retry(1006, f"{type(e).__name__}: {e}") from None
        self.ever_opened = True
        self.last_network = None
        return ws

    async def probe(self) -> Optional[RelayError]:
        """The refusal behind a failed handshake (the same endpoint over HTTP: the relay answers
        401/403/404 as it did the upgrade, 426 when access and route are fine), else None."""
        url = self.base + self.path
        try:
            async with httpx.AsyncClient(timeout=10) as client:
                r = await client.get(url, headers=auth_headers(self.token, self.base))
        except (httpx.HTTPError, OSError) as e:
            self.last_network = network_error(e, f"GET {url}", 10)
            return None
        self.last_network = None
        if r.headers.get(RELAY_HEADER) is None:
            err = foreign_answer(r.status_code, r.headers.get("content-type"), f"GET {url}")
            return None if err.retryable else err
        if not _transient(r.status_code):
            return error_from_answer(r.status_code, r.content, f"watch {self.what}")
        if r.status_code == 503:
            err = error_from_answer(r.status_code, r.content, f"watch {self.what}")
            return err if err.error == "auth_not_configured" else None
        return None

    def delay(self, code: int, reason: str) -> float:
        """Seconds to wait before the next attempt; raises :class:`RelayError` once a watch that
        never connected has tried for ``give_up`` seconds."""
        if not self.ever_opened and time.monotonic() - self.started >= self.give_up:
            why = self.last_network.message if self.last_network else f"the relay closed every attempt ({code} {reason})".rstrip()
            raise RelayError(f"watch {self.what}: gave up after {round(self.give_up)} s: {why}", error="unreachable")
        d = reconnect_delay(code, reason, self.attempt, self.backoff)
        self.attempt += 1
        return d

    async def follow(
        self,
        watch: Any,
        query: Callable[[], Dict[str, str]],
        session: Callable[[Any], Awaitable[bool]],
        end: Callable[[BaseException, str], None],
        reconnecting: Optional[Callable[["_Retry", float], None]] = None,
    ) -> None:
        """The one reconnect loop of every watch: open, run ``session`` until it says the watch is over
        (True), and after a drop (``_Retry``) wait ``delay`` and resume; a definite refusal or a bug
        ends the watch through ``end(error, state)``."""
        try:
            while True:
                watch.state = "resuming" if self.ever_opened else "connecting"
                try:
                    ws = await self.open(query())
                    try:
                        if await session(ws):
                            return
                    finally:
                        await _close_quietly(ws)
                    raise _Retry(1006, "closed")  # pragma: no cover (a session ends by a close)
                except _Retry as r:
                    delay = self.delay(r.code, r.reason)
                    if reconnecting is not None:
                        reconnecting(r, delay)
                    await asyncio.sleep(delay)
        except RelayError as e:
            end(e, "unreachable" if e.error == "unreachable" else "refused")
        except asyncio.CancelledError:
            raise
        except BaseException as e:  # a bug: say it rather than hang
            end(e, "failed")

    async def pinger(self, ws: Any) -> None:
        try:
            while True:
                await asyncio.sleep(self.ping_interval)
                await ws.send("ping")
        except Exception:
            pass  # the socket closed: its reader sees why


class _Retry(Exception):
    """The socket dropped or could not open: reconnect (after ``code`` and ``reason``'s delay)."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def _close_of(e: BaseException) -> Tuple[int, str]:
    """The close code and reason of a websockets ConnectionClosed (1006 when none came)."""
    rcvd = getattr(e, "rcvd", None)
    if rcvd is not None:
        return int(rcvd.code), str(rcvd.reason)
    code = getattr(e, "code", None)
    return (int(code), str(getattr(e, "reason", ""))) if code else (1006, str(e))


@dataclass(frozen=True)
class WatchUpdate:
    """One thing an episode watch saw, after it was applied to ``watch.episode``.

    ``type`` is one of ``hello`` (the relay took the watcher; ``status`` and ``seq`` its view),
    ``snapshot`` (the state as of ``seq`` replaced the assembly; ``reason``: join, trimmed, ahead,
    rewind), ``delta`` (one frame applied at ``seq``: ``trace`` and the ``delta`` dict, with its
    links and routing repairs), ``caught_up`` (live from ``seq`` on), ``status`` (the status
    changed without ending: ``finish_refused`` with the reference's ``error``), ``reconnecting``
    (the socket dropped: ``code`` and ``reason``, retried after ``delay`` s) and ``finish`` (the
    run ended: ``status`` finished or failed, the ``episode`` bytes when finished, else ``error``).
    """

    type: str
    seq: int
    trace: Optional[str] = None
    delta: Optional[Dict[str, Any]] = None
    status: Optional[str] = None
    reason: Optional[str] = None
    error: Optional[str] = None
    episode: Optional[bytes] = None
    code: Optional[int] = None
    delay: Optional[float] = None


_END = object()


class EpisodeWatch:
    """A live watch of one episode (see :func:`watch_episode`). Iterate it (``async for``) for its
    :class:`WatchUpdate` s, or just ``await finished()``."""

    def __init__(
        self,
        url: str,
        episode_id: str,
        token: Optional[str] = None,
        after: Optional[int] = None,
        routing: bool = True,
        traces: Optional[List[str]] = None,
        backoff: Tuple[float, float] = (0.25, 10.0),
        give_up: float = 30.0,
        ping_interval: float = 30.0,
        ack_every: Optional[int] = None,
    ) -> None:
        self.id = check_episode_id(episode_id)
        self._sock = _Socket(url, f"/v1/episodes/{quote(episode_id, safe='')}/watch", token, backoff, give_up, ping_interval, f"episode {episode_id!r}")
        self.url = self._sock.base
        self.routing = routing
        self.traces = list(traces or [])
        self.ack_every = ack_every
        #: The episode as assembled so far (the reference assembly: ``episode.live_traces()``).
        self.episode = EpisodeAssembly()
        #: The last seq applied.
        self.seq = 0
        #: The run's status as the relay last said: new, live, finish_refused, finished, failed.
        self.status = "new"
        #: connecting, catching_up, live, resuming, finished, failed, refused, unreachable, closed.
        self.state = "connecting"
        #: The finished episode's msgpack bytes, once it finished.
        self.finished_bytes: Optional[bytes] = None
        #: The reference's message when the run failed or its reply did not match; the refusal's text when refused.
        self.error: Optional[str] = None
        self._resume_after: Optional[int] = after
        self._incoming: Optional[EpisodeAssembly] = None
        self._ack_bytes = ACK_BYTES
        self._updates: "Optional[asyncio.Queue[Any]]" = None
        self._task: "Optional[asyncio.Task[None]]" = None
        self._done: "Optional[asyncio.Future[bytes]]" = None
        self._ws: Any = None
        self._closed = False

    # ---- the caller's side ----

    def _start(self) -> None:
        if self._done is None:
            self._done = asyncio.get_running_loop().create_future()
            if self._closed:
                self._end(RelayError(f"watch of episode {self.id!r} closed before the run ended", error="closed"), "closed")
            else:
                self._task = asyncio.ensure_future(self._run())

    def __aiter__(self) -> AsyncIterator[WatchUpdate]:
        if self._updates is None:
            self._updates = asyncio.Queue()
        self._start()
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[WatchUpdate]:
        assert self._updates is not None
        while True:
            u = await self._updates.get()
            if u is _END:
                break
            yield u
        if self.state in ("refused", "unreachable"):
            await self._result()  # raises why: the relay's refusal, or what failed

    async def finished(self) -> bytes:
        """The finished episode's msgpack bytes (equal to ``GET /v1/episodes/{id}``). Raises
        :class:`RelayError`: the relay's refusal, ``unreachable``, ``episode_failed`` (the run
        failed: its error), ``finish_mismatch`` (the reply's counts disagreed), ``closed``."""
        self._start()
        return await self._result()

    async def _result(self) -> bytes:
        assert self._done is not None
        return await asyncio.shield(self._done)

    async def close(self) -> None:
        """Stop watching (``finished()`` then raises ``closed`` unless the run already ended)."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._end(RelayError(f"watch of episode {self.id!r} closed before the run ended", error="closed"), "closed")

    # ---- the connection ----

    def _emit(self, u: WatchUpdate) -> None:
        if self._updates is not None:
            self._updates.put_nowait(u)

    def _end(self, outcome: Any, state: str) -> None:
        if self._done is None or self._done.done():
            return
        self.state = state
        if isinstance(outcome, BaseException):
            if self.error is None:
                self.error = str(outcome)
            self._done.set_exception(outcome)
            self._done.exception()  # seen: nobody need await finished()
        else:
            self._done.set_result(outcome)
        if self._updates is not None:
            self._updates.put_nowait(_END)

    def _query(self) -> Dict[str, str]:
        q: Dict[str, str] = {}
        if self._resume_after is not None:
            q["after"] = str(self._resume_after)
        if not self.routing:
            q["routing"] = "0"
        if self.traces:
            q["traces"] = ",".join(self.traces)
        return q

    async def _run(self) -> None:
        await self._sock.follow(self, self._query, self._session, self._end, self._reconnecting)

    def _reconnecting(self, r: "_Retry", delay: float) -> None:
        self._emit(WatchUpdate("reconnecting", self.seq, code=r.code, reason=r.reason, delay=delay))

    async def _session(self, ws: Any) -> bool:
        """One connection, until it drops (``_Retry``) or the run ends (True)."""
        self._ws = ws
        received = acked = 0
        pinger = asyncio.ensure_future(self._sock.pinger(ws))
        try:
            while True:
                try:
                    data = await ws.recv()
                except Exception as e:  # ConnectionClosed
                    raise _Retry(*_close_of(e)) from None
                if isinstance(data, str):
                    continue  # "pong"
                received += len(data)
                try:
                    ended = self._handle(unpack(data))
                except Exception as e:  # our state can no longer be trusted: start over from a snapshot
                    self._resume_after = None
                    self._incoming = None
                    await _close_quietly(ws, 4000, "client could not apply a message")
                    raise _Retry(4000, f"could not apply a message: {e}") from None
                if ended:
                    await _close_quietly(ws, 1000, "finished")
                    return True
                # catching up, the relay sends as fast as this watcher acknowledges: ack each message
                every = (self.ack_every or self._ack_bytes) if self.state == "live" else 1
                if received - acked >= every:
                    acked = received
                    try:
                        await ws.send(json.dumps({"type": "ack", "bytes": received}, separators=(",", ":")))
                    except Exception as e:
                        raise _Retry(*_close_of(e)) from None
        finally:
            self._ws = None
            pinger.cancel()

    def _handle(self, m: Any) -> bool:
        """Apply one message; True when the run ended."""
        if not isinstance(m, dict) or not isinstance(m.get("type"), str):
            raise ValueError("a watch message is a map with a str type")
        t = m["type"]
        if t == "hello":
            self._sock.attempt = 0  # the relay took this watcher: backoff starts over
            self._incoming = None  # a new hello starts over (a retraction rewound the episode)
            self.status = m["status"]
            if isinstance(m.get("ack_bytes"), int) and m["ack_bytes"] > 0:
                self._ack_bytes = m["ack_bytes"]
            self.state = "catching_up"
            self._emit(WatchUpdate("hello", int(m["seq"]), status=m["status"]))
        elif t == "snapshot":
            nxt = self._incoming if self._incoming is not None else EpisodeAssembly()
            self._incoming = nxt
            for d in m["deltas"]:
                nxt.apply(d)
            if m.get("more"):
                return False
            self.episode, self._incoming = nxt, None
            self.seq = self._resume_after = int(m["seq"])
            self._emit(WatchUpdate("snapshot", self.seq, reason=m.get("reason")))
        elif t == "frames":
            for seq, frame in m["frames"]:
                if seq <= self.seq:
                    continue  # never apply twice
                delta = self.episode.apply(frame)
                self.seq = self._resume_after = int(seq)
                self._emit(WatchUpdate("delta", self.seq, trace=delta["trace"], delta=delta))
        elif t == "caught_up":
            self.state = "live"
            self._emit(WatchUpdate("caught_up", int(m["seq"])))
        elif t == "status":
            self.status, self.error = m["status"], m.get("error")
            self._emit(WatchUpdate("status", int(m["seq"]), status=m["status"], error=m.get("error")))
        elif t == "finish":
            self.status, self.error = m["status"], m.get("error")
            outcome: Any
            if m["status"] == "finished":
                try:
                    self.finished_bytes = outcome = self.episode.finish_reply(m["reply"])
                except FinishMismatch as e:
                    self.error = str(e)
                    outcome = e
            else:
                outcome = RelayError(f"episode {self.id!r} failed: {self.error}", error="episode_failed")
            self._emit(WatchUpdate("finish", int(m["seq"]), status=m["status"], error=self.error, episode=self.finished_bytes))
            self._end(outcome, "finished" if m["status"] == "finished" else "failed")
            return True
        # annotations and later relays' types: nothing this client needs
        return False


async def _close_quietly(ws: Any, code: int = 1000, reason: str = "") -> None:
    try:
        await asyncio.wait_for(ws.close(code, reason), timeout=2)
    except BaseException:
        pass


def watch_episode(
    url: str,
    episode_id: str,
    token: Optional[str] = None,
    after: Optional[int] = None,
    routing: bool = True,
    **options: Any,
) -> EpisodeWatch:
    """Watch one episode live: ``async for update in watch_episode(url, id, token=t)``, and/or
    ``episode = await w.finished()``; ``w.episode`` is the assembly so far. ``after``: resume after
    that seq instead of starting from a snapshot; ``routing=False``: no routing bytes. Options:
    ``traces`` (only these), ``backoff`` ((first, cap) s), ``give_up`` (s without ever connecting),
    ``ping_interval`` (s), ``ack_every`` (bytes between acks once live). It starts when first
    iterated or awaited."""
    return EpisodeWatch(url, episode_id, token=token, after=after, routing=routing, **options)


# ---- a run ----


@dataclass(frozen=True)
class RunUpdate:
    """One change of a run (see :func:`watch_run`). ``type``: ``new`` (a row first seen),
    ``updated`` (it changed), ``finished`` / ``failed`` (it ended: once per row, also for a row first
    seen ended), ``deleted`` (it left the run; ``id`` only), ``step`` (a training step's numbers
    changed: ``step``), ``step_gone`` (a step left: ``step`` holds its ``step`` and ``kind``). ``row``
    is the run's index entry as the API shows it (``id``, ``status``, ``reward``, ``step``,
    ``group``, ``calls``, ``rewards``…: docs/http-api.md)."""

    type: str
    id: Optional[str] = None
    row: Optional[Dict[str, Any]] = None
    step: Optional[Dict[str, Any]] = None


_ENDED = ("finished", "failed")


class RunWatch:
    """A live watch of one run's rows (see :func:`watch_run`): ``rows`` by id, ``aggregates``."""

    def __init__(
        self,
        url: str,
        run: str,
        token: Optional[str] = None,
        limit: Optional[int] = None,
        backoff: Tuple[float, float] = (0.25, 10.0),
        give_up: float = 30.0,
        ping_interval: float = 30.0,
    ) -> None:
        if not isinstance(run, str) or not run:
            raise RelayError(f"{run!r} is not a run name", status=400, error="bad_run")
        self.run = run
        self._sock = _Socket(url, f"/v1/runs/{quote(run, safe='')}", token, backoff, give_up, ping_interval, f"run {run!r}")
        self.url = self._sock.base
        self.limit = limit
        #: The run's rows (index entries) by id, as last seen.
        self.rows: Dict[str, Dict[str, Any]] = {}
        #: The run's aggregates (None for a token covering only part of it).
        self.aggregates: Optional[Dict[str, Any]] = None
        #: Whether the last snapshot held only the relay's first ``limit`` rows.
        self.truncated = False
        self.state = "connecting"
        self._ended: set = set()
        self._updates: "Optional[asyncio.Queue[Any]]" = None
        self._task: "Optional[asyncio.Task[None]]" = None
        self._done: "Optional[asyncio.Future[None]]" = None

    def __aiter__(self) -> AsyncIterator[RunUpdate]:
        if self._updates is None:
            self._updates = asyncio.Queue()
        if self._task is None:
            self._done = asyncio.get_running_loop().create_future()
            self._task = asyncio.ensure_future(self._run())
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[RunUpdate]:
        assert self._updates is not None and self._done is not None
        while True:
            u = await self._updates.get()
            if u is _END:
                break
            yield u
        await asyncio.shield(self._done)

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._finish(None, "closed")

    def _finish(self, error: Optional[BaseException], state: str) -> None:
        if self._done is None or self._done.done():
            return
        self.state = state
        if error is not None:
            self._done.set_exception(error)
            self._done.exception()
        else:
            self._done.set_result(None)
        if self._updates is not None:
            self._updates.put_nowait(_END)

    def _emit(self, u: RunUpdate) -> None:
        if self._updates is not None:
            self._updates.put_nowait(u)

    async def _run(self) -> None:
        await self._sock.follow(self, lambda: {"limit": str(self.limit)} if self.limit else {}, self._session, self._finish)

    async def _session(self, ws: Any) -> bool:
        """One connection, until it drops (``_Retry``): a run socket has no end of its own."""
        pinger = asyncio.ensure_future(self._sock.pinger(ws))
        try:
            while True:
                try:
                    text = await ws.recv()
                except Exception as e:
                    raise _Retry(*_close_of(e)) from None
                if not isinstance(text, str) or text == "pong":
                    continue
                try:
                    m = json.loads(text)
                except ValueError:
                    continue  # not a message this client reads
                if isinstance(m, dict):
                    self._handle(m)
        finally:
            pinger.cancel()

    def _handle(self, m: Dict[str, Any]) -> None:
        if m.get("type") == "snapshot":
            self._sock.attempt = 0
            self.state = "live"
            self.aggregates = m.get("aggregates")
            self.truncated = bool(m.get("truncated"))
            rows = m.get("episodes") or []
            seen = {r["id"] for r in rows}
            if not self.truncated:  # a whole snapshot: a row it lacks left the run meanwhile
                for gone in [i for i in self.rows if i not in seen]:
                    self._delete(gone)
            for r in rows:
                self._upsert(r)
        elif m.get("type") == "changes":
            self.aggregates = m.get("aggregates")
            for r in m.get("upserts") or []:
                self._upsert(r)
            for i in m.get("deletes") or []:
                self._delete(i)
            for s in m.get("steps") or []:
                self._emit(RunUpdate("step", step=s))
            for s in m.get("steps_gone") or []:
                self._emit(RunUpdate("step_gone", step=s))

    def _upsert(self, row: Dict[str, Any]) -> None:
        rid = row["id"]
        old = self.rows.get(rid)
        if old == row:
            return  # a reconnect's snapshot: unchanged
        self.rows[rid] = row
        if old is None:
            self._emit(RunUpdate("new", rid, row))
        elif row.get("status") not in _ENDED or rid in self._ended:
            self._emit(RunUpdate("updated", rid, row))
        if row.get("status") in _ENDED and rid not in self._ended:
            self._ended.add(rid)
            self._emit(RunUpdate(row["status"], rid, row))

    def _delete(self, rid: str) -> None:
        if self.rows.pop(rid, None) is not None:
            self._ended.discard(rid)
            self._emit(RunUpdate("deleted", rid))


def watch_run(url: str, run: str, token: Optional[str] = None, **options: Any) -> RunWatch:
    """Follow a run's rows live: ``async for change in watch_run(url, "run-42", token=t)``
    yields :class:`RunUpdate` s (rows new, updated, finished or failed, deleted; steps). It resumes
    after drops (each reconnect's snapshot is compared with what was seen, and only differences
    are yielded), follows a run nobody wrote yet from its first rollout (the socket opens on an
    empty run), and ends only on a refusal (a token covering none of the run: 404), or
    :meth:`RunWatch.close`. Options: ``limit`` (rows in
    the snapshot), ``backoff``, ``give_up``, ``ping_interval``."""
    return RunWatch(url, run, token=token, **options)


# ---- without an event loop of one's own (notebooks, scripts) ----


class _Threaded:
    """Runs an async watch on a thread with its own event loop; its updates come through a queue."""

    def __init__(self, watch: Any) -> None:
        self.watch = watch
        self._updates: "queue.Queue[Any]" = queue.Queue()
        #: What ``finished()`` gives (episode watches), and why iterating stopped early (a refusal).
        self._outcome: List[Any] = []
        self._stopped: List[BaseException] = []
        self._ended = threading.Event()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"episode-relay {type(watch).__name__}", daemon=True)
        self._thread.start()
        self._ready.wait()

    def _main(self) -> None:
        asyncio.run(self._drive())

    async def _drive(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._ready.set()
        try:
            try:
                async for u in self.watch:
                    self._updates.put(u)
            except BaseException as e:  # the refusal: the caller's to see
                self._stopped.append(e)
            if isinstance(self.watch, EpisodeWatch):
                try:
                    self._outcome.append(await self.watch.finished())
                except BaseException as e:
                    self._outcome.append(e)
        finally:
            self._ended.set()
            self._updates.put(_END)

    def __iter__(self) -> Iterator[Any]:
        while True:
            u = self._updates.get()
            if u is _END:
                self._updates.put(_END)  # a second iteration ends at once too
                break
            yield u
        if self._stopped:
            raise self._stopped[0]

    def _raise(self) -> Any:
        out = self._outcome[0] if self._outcome else None
        if isinstance(out, BaseException):
            raise out
        return out

    def close(self) -> None:
        """Stop the watch and its thread."""
        loop = self._loop
        if loop is not None and not self._ended.is_set():
            try:
                asyncio.run_coroutine_threadsafe(self.watch.close(), loop).result(timeout=10)
            except RuntimeError:
                pass  # the loop already ended
        self._thread.join(timeout=10)


class SyncEpisodeWatch(_Threaded):
    """:func:`watch_episode` without ``await``: iterate it for :class:`WatchUpdate` s (blocking),
    read ``episode`` (the assembly as of the last update) and call ``finished()``."""

    watch: EpisodeWatch

    @property
    def episode(self) -> EpisodeAssembly:
        return self.watch.episode

    @property
    def seq(self) -> int:
        return self.watch.seq

    @property
    def status(self) -> str:
        return self.watch.status

    @property
    def state(self) -> str:
        return self.watch.state

    def finished(self, timeout: Optional[float] = None) -> bytes:
        """The finished episode's msgpack bytes (blocks until the run ends; raises as
        :meth:`EpisodeWatch.finished` does, or ``TimeoutError`` after ``timeout`` s)."""
        if not self._ended.wait(timeout):
            raise TimeoutError(f"episode {self.watch.id!r} did not end within {timeout} s")
        result: bytes = self._raise()
        return result


class SyncRunWatch(_Threaded):
    """:func:`watch_run` without ``await``: iterate it for :class:`RunUpdate` s (blocking); ``rows``."""

    watch: RunWatch

    @property
    def rows(self) -> Dict[str, Dict[str, Any]]:
        return self.watch.rows

    @property
    def aggregates(self) -> Optional[Dict[str, Any]]:
        return self.watch.aggregates


def watch_episode_sync(url: str, episode_id: str, token: Optional[str] = None, **options: Any) -> SyncEpisodeWatch:
    """:func:`watch_episode` on a thread of its own (for notebooks and scripts): starts at once."""
    return SyncEpisodeWatch(EpisodeWatch(url, episode_id, token=token, **options))


def watch_run_sync(url: str, run: str, token: Optional[str] = None, **options: Any) -> SyncRunWatch:
    """:func:`watch_run` on a thread of its own (for notebooks and scripts): starts at once."""
    return SyncRunWatch(RunWatch(url, run, token=token, **options))
