"""Talking to the relay: errors, the HTTP client, and the two delta channels.

A *delta channel* carries one ingest message (an envelope's bytes) to the relay and returns
the relay's acknowledgement (``{"ok": true, "seq", "applied", "duplicates", "producers"}``, and
``"unknown": [key, ...]`` when the message held delta keys the relay does not know),
which the relay sends only after the write is durable. It raises :class:`RelayError` on
anything else. Two are provided:

- :class:`HttpChannel`: ``POST {url}/v1/episodes/{id}/deltas`` on one keep-alive
  ``httpx.AsyncClient`` connection.
- :class:`WebSocketChannel`: the producer socket ``GET {url}/v1/episodes/{id}/ingest``; one
  binary message in, one JSON text acknowledgement out, in order. After any failure the
  socket is dropped (an acknowledgement may still be in flight on it) and the next send
  opens a new one.

Any object with ``async send(body: bytes) -> dict`` and ``async close()`` can stand in
(see :class:`DeltaChannel`).
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import json
import os
import re
from typing import Any, Dict, Mapping, Optional, Protocol
from urllib.parse import quote, urlsplit

import httpx


MSGPACK = "application/msgpack"

#: The relay sets this header on every answer it gives (src/protocol/http/route.ts RELAY_HEADER): an answer
#: without it is not the relay's (a web page, a proxy's error).
RELAY_HEADER = "x-episode-relay"
#: The rule an episode id follows (the relay's refusal and the TypeScript client say the same).
EPISODE_ID_RULE = 'episode ids are 1-128 characters of [A-Za-z0-9._:-], and not "watch"'
_EPISODE_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RelayError(Exception):
    """The relay did not take a message. ``str(err)`` is the relay's (or the network's) text.

    Attributes: ``status`` (HTTP status, None for network errors and timeouts), ``error``
    (the relay's error code such as ``producer_conflict``, or ``network`` / ``timeout``),
    ``field`` (where the relay found the problem, when it says), ``retryable`` (True when the
    same message may succeed later: network errors, timeouts, 5xx but ``auth_not_configured``,
    408, 429, and ``gateway``: an answer something in front of the relay gave in its place).
    """

    def __init__(self, message: str, status: Optional[int] = None, error: Optional[str] = None, field: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.error = error
        self.field = field

    @property
    def retryable(self) -> bool:
        if self.error == "gateway":
            return True
        if self.error == "auth_not_configured":
            return False  # the relay refuses everything until it has a RELAY_SECRET
        return self.status is None or self.status >= 500 or self.status in (408, 429)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, error={self.error!r}, field={self.field!r}, message={self.message!r})"


class FinishMismatch(RelayError, RuntimeError):
    """``finish`` was refused because the reply's counts disagree with what the relay
    assembled (``409 finish_mismatch``): a delta was lost. ``str(err)`` is the reference
    ``EpisodeAssembly.finish`` message, e.g. ``served trace T assembled 4 nodes / 2 calls,
    server reports 5 / 2``."""


def error_from_answer(status: int, body: bytes, what: str) -> RelayError:
    """A :class:`RelayError` for a non-200 answer, from the relay's JSON error body."""
    info: Dict[str, Any] = {}
    try:
        parsed = json.loads(body.decode("utf-8")) if body else {}
        if isinstance(parsed, dict):
            info = parsed
    except (ValueError, UnicodeDecodeError):
        pass
    message = _str_or_none(info.get("message"))
    error = _str_or_none(info.get("error"))
    if message is None:
        text = body[:200].decode("utf-8", "replace") if body else ""
        message = f"{what}: HTTP {status}{': ' + text if text else ''}"
    cls = FinishMismatch if status == 409 and error == "finish_mismatch" else RelayError
    return cls(message, status=status, error=error, field=_str_or_none(info.get("field")))


def _settled(task: "asyncio.Future[Any]") -> None:
    """Mark an abandoned task's outcome as seen (no 'exception was never retrieved')."""
    if not task.cancelled():
        task.exception()


def _str_or_none(v: Any) -> Optional[str]:
    return v if isinstance(v, str) else None


def _refusal(info: Dict[str, Any], fallback: str) -> RelayError:
    """The :class:`RelayError` for a refusal body ``{"error", "field", "message", ["status"]}``."""
    status = info.get("status")
    return RelayError(
        _str_or_none(info.get("message")) or fallback,
        status=status if isinstance(status, int) and not isinstance(status, bool) else None,
        error=_str_or_none(info.get("error")),
        field=_str_or_none(info.get("field")),
    )


def check_base_url(url: str) -> str:
    """The relay's base URL without a trailing ``/``; raises :class:`RelayError` (``bad_url``, not
    retryable) at once for anything but ``http://`` / ``https://``."""
    if not isinstance(url, str) or not re.match(r"(?i)https?://[^/\s]+", url):
        raise RelayError(f"the relay's URL must start with http:// or https://, got {url!r} (e.g. http://127.0.0.1:8787)", status=0, error="bad_url")
    return url.rstrip("/")


def check_episode_id(episode_id: str) -> str:
    """``episode_id`` if the relay can take it; raises :class:`RelayError` (``bad_episode_id``) at once otherwise."""
    if episode_id == "watch":
        raise RelayError('"watch" is reserved and cannot name an episode', status=400, error="bad_episode_id")
    if not isinstance(episode_id, str) or not _EPISODE_ID.fullmatch(episode_id):
        raise RelayError(f"{episode_id!r} is not an episode id: {EPISODE_ID_RULE}", status=400, error="bad_episode_id")
    return episode_id


def network_error(e: BaseException, what: str, timeout: float) -> RelayError:
    """A :class:`RelayError` that names what failed: refused, DNS, TLS, timeout, or else the error."""
    if isinstance(e, httpx.TimeoutException) or isinstance(e, asyncio.TimeoutError):
        return RelayError(f"{what}: no answer within {timeout} s", error="timeout")
    # the reason may sit a few causes down (anyio wraps "Connect call failed" in "All connection attempts failed")
    chain = []
    x: Optional[BaseException] = e
    while x is not None and len(chain) < 8:
        chain.append(x)
        x = x.__cause__ or x.__context__
    if any(isinstance(c, ConnectionRefusedError) for c in chain):
        return RelayError(f"{what}: connection refused: is the relay running there?", error="network")
    text = " ".join(f"{type(c).__name__}: {c}" for c in chain)
    if re.search(r"Connection refused|ECONNREFUSED|Errno 111", text):
        return RelayError(f"{what}: connection refused: is the relay running there?", error="network")
    if re.search(r"Name or service not known|nodename nor servname|getaddrinfo|Temporary failure in name resolution|Errno -[23]", text):
        return RelayError(f"{what}: the host name does not resolve", error="network")
    if re.search(r"SSL|TLS|WRONG_VERSION_NUMBER|certificate", text, re.I):
        return RelayError(f"{what}: TLS failed ({e}): an https:// URL for a relay that speaks http://?", error="network")
    return RelayError(f"{what}: {type(e).__name__}: {e}", error="network")


def foreign_answer(status: int, content_type: Optional[str], what: str) -> RelayError:
    """The :class:`RelayError` for an answer without the relay's header. A page (2xx) or a 404 (405,
    410: no such path, not that method) is what a web server or another API answers there:
    ``not_the_relay``, final. Any other status (a
    proxy's 502, Cloudflare's error page, a local router while the relay starts) is something in
    front of the relay failing in its place: ``gateway``, retryable."""
    kind = content_type or "no content type"
    if 200 <= status < 300 or status in (404, 405, 410):
        return RelayError(
            f"{what}: the address answered {status} ({kind}) but not as an Episode Relay: check the relay's base URL",
            status=status,
            error="not_the_relay",
        )
    return RelayError(
        f"{what}: answered {status} ({kind}) in the relay's place (a proxy, or a local relay still starting): try again later",
        status=status,
        error="gateway",
    )


def check_relay_answer(r: httpx.Response, what: str) -> None:
    """Raise :class:`RelayError` when the answer is not the relay's (see :func:`foreign_answer`)."""
    if r.headers.get(RELAY_HEADER) is None:
        raise foreign_answer(r.status_code, r.headers.get("content-type"), what)


def episode_path(episode_id: str, action: str = "") -> str:
    """``/v1/episodes/{id}[/action]`` with the id escaped."""
    path = f"/v1/episodes/{quote(episode_id, safe='')}"
    return f"{path}/{action}" if action else path


#: Set to ``1`` to send a token over plain ``http://`` (or ``ws://``) to a host that is not this
#: machine (e.g. a relay inside a private network): otherwise the clients refuse, since anyone on
#: the way could read the token.
ALLOW_HTTP_ENV = "EPISODE_RELAY_ALLOW_HTTP"


def _loopback(host: Optional[str]) -> bool:
    if not host:
        return False
    h = host.lower().rstrip(".")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h.strip("[]")).is_loopback
    except ValueError:
        return False


def check_token_transport(url: str) -> None:
    """Raise :class:`RelayError` (``insecure_url``, not retryable) before a token would travel in
    clear text: over ``http://``/``ws://`` to a host other than this machine, unless
    ``EPISODE_RELAY_ALLOW_HTTP=1``."""
    u = urlsplit(url)
    if u.scheme.lower() in ("http", "ws") and not _loopback(u.hostname) and os.environ.get(ALLOW_HTTP_ENV) != "1":
        raise RelayError(
            f"refusing to send a bearer token over plain {u.scheme}:// to {u.hostname}: anyone on the way could read it; "
            f"use https:// (or set {ALLOW_HTTP_ENV}=1 to allow it, e.g. inside a private network)",
            status=0,
            error="insecure_url",
        )


def auth_headers(token: Optional[str], url: str) -> Dict[str, str]:
    """``Authorization: Bearer`` for ``token`` (none: no header), once the URL may carry it (:func:`check_token_transport`)."""
    if not token:
        return {}
    check_token_transport(url)
    return {"authorization": f"Bearer {token}"}


def parse_ack(body: bytes, what: str) -> Dict[str, Any]:
    """The JSON of a 200 answer; raises when it is not ``{"ok": true, ...}``."""
    try:
        ack = json.loads(body.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise RelayError(f"{what}: the relay answered 200 with a body that is not JSON ({e})", status=200, error="bad_answer") from e
    if not isinstance(ack, dict) or ack.get("ok") is not True:
        raise RelayError(f"{what}: the relay answered 200 without ok: true: {body[:200]!r}", status=200, error="bad_answer")
    return ack


class DeltaChannel(Protocol):
    """Carries ingest messages (envelope bytes) to one episode."""

    async def send(self, body: bytes) -> Dict[str, Any]:
        """Deliver ``body``; return the relay's acknowledgement or raise :class:`RelayError`."""
        ...

    async def close(self) -> None:
        """Release the connection."""
        ...


class RelayHttp:
    """The relay's HTTP API for one episode over one keep-alive ``httpx.AsyncClient``."""

    def __init__(
        self,
        url: str,
        episode_id: str,
        token: Optional[str] = None,
        timeout: float = 30.0,
        client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.episode_id = episode_id
        self.token = token
        if token:
            check_token_transport(self.url)  # at once, not at the first send
        self.timeout = timeout
        self._own_client = client is None
        self._inflight: "set[asyncio.Future[httpx.Response]]" = set()
        self.client = client if client is not None else httpx.AsyncClient(
            timeout=httpx.Timeout(timeout),
            limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )

    async def request(self, method: str, action: str = "", body: Optional[bytes] = None, headers: Optional[Mapping[str, str]] = None) -> httpx.Response:
        """One request to ``/v1/episodes/{id}[/action]``; network errors become :class:`RelayError`."""
        url = self.url + episode_path(self.episode_id, action)
        h = {**auth_headers(self.token, self.url), **(headers or {})}
        if body is not None:
            h.setdefault("content-type", MSGPACK)
        what = f"{method} {url}"
        # The request runs in its own task, shielded: a caller cancelled mid-request gets its
        # CancelledError at once while the exchange finishes (bounded by the timeout) and
        # gives the connection back. Cancelling httpx mid-request can otherwise leave the
        # pooled connection unusable (later requests end in PoolTimeout).
        task = asyncio.ensure_future(self.client.request(method, url, content=body, headers=h, timeout=self.timeout))
        self._inflight.add(task)
        task.add_done_callback(_settled)
        task.add_done_callback(self._inflight.discard)
        try:
            r = await asyncio.shield(task)
        except (httpx.HTTPError, OSError) as e:
            raise network_error(e, what, self.timeout) from e
        check_relay_answer(r, what)
        return r

    async def post(self, action: str, body: bytes) -> Dict[str, Any]:
        """POST msgpack ``body``; the JSON answer on 200, else :class:`RelayError`."""
        r = await self.request("POST", action, body)
        what = f"POST {episode_path(self.episode_id, action)}"
        if r.status_code != 200:
            raise error_from_answer(r.status_code, r.content, what)
        return parse_ack(r.content, what)

    async def get_episode(self) -> bytes:
        """``GET /v1/episodes/{id}``: the episode's msgpack bytes (live form before finish)."""
        r = await self.request("GET", "", headers={"accept": MSGPACK})
        if r.status_code != 200:
            raise error_from_answer(r.status_code, r.content, f"GET {episode_path(self.episode_id)}")
        return r.content

    async def close(self) -> None:
        """Let requests abandoned by cancelled callers finish (up to the timeout), then close
        the client if this object created it."""
        if self._inflight:
            await asyncio.wait(list(self._inflight), timeout=self.timeout)
        if self._own_client:
            await self.client.aclose()


class HttpChannel:
    """Delta channel: ``POST .../deltas`` on the keep-alive connection of a :class:`RelayHttp`."""

    def __init__(self, http: RelayHttp) -> None:
        self.http = http

    async def send(self, body: bytes) -> Dict[str, Any]:
        return await self.http.post("deltas", body)

    async def close(self) -> None:
        """Nothing of its own: the :class:`RelayHttp` owner closes the connection."""


def _ws_connect_function() -> Any:
    try:
        from websockets.asyncio.client import connect  # websockets >= 13

        return connect
    except ImportError:
        pass
    try:
        from websockets.client import connect  # type: ignore[no-redef,attr-defined,unused-ignore]  # 10-12 (Debian 12: 10.4)
    except ImportError as e:  # pragma: no cover
        raise ImportError("transport='ws' needs the `websockets` package (Debian: python3-websockets)") from e
    return connect


class WebSocketChannel:
    """Delta channel over the producer WebSocket ``GET {url}/v1/episodes/{id}/ingest``.

    Each :meth:`send` writes one binary message and waits for its JSON text acknowledgement
    (``{"ok": true, ...}`` or ``{"ok": false, "status", "error", "message"}``). Sends are
    serialized, so acknowledgements pair with messages in order. A timeout, a closed socket
    or an unreadable answer drops the socket; the next send reconnects.
    """

    def __init__(self, url: str, episode_id: str, token: Optional[str] = None, timeout: float = 30.0) -> None:
        base = url.rstrip("/")
        if base.startswith("https://"):
            base = "wss://" + base[len("https://") :]
        elif base.startswith("http://"):
            base = "ws://" + base[len("http://") :]
        self.url = base + episode_path(episode_id, "ingest")
        self.token = token
        if token:
            check_token_transport(self.url)
        self.timeout = timeout
        self._ws: Any = None
        self._lock = asyncio.Lock()
        self._closing: "set[asyncio.Future[None]]" = set()

    async def _connect(self) -> Any:
        connect = _ws_connect_function()
        params = inspect.signature(connect).parameters
        kwargs: Dict[str, Any] = {"compression": None, "max_size": 16 * 1024 * 1024, "open_timeout": self.timeout}
        headers = auth_headers(self.token, self.url)
        if headers:
            kwargs["additional_headers" if "additional_headers" in params else "extra_headers"] = headers
        try:
            return await connect(self.url, **kwargs)
        except asyncio.TimeoutError as e:
            raise RelayError(f"connect {self.url}: timed out after {self.timeout} s", error="timeout") from e
        except Exception as e:  # InvalidStatus / InvalidStatusCode, OSError, InvalidHandshake, ...
            status = getattr(getattr(e, "response", None), "status_code", None) or getattr(e, "status_code", None)
            if status is None:
                raise network_error(e, f"connect {self.url}", self.timeout) from e
            # websockets >= 13: e.response.headers; 10-12: e.headers
            headers = getattr(getattr(e, "response", None), "headers", None) or getattr(e, "headers", None)
            if headers is not None and headers.get(RELAY_HEADER) is None:
                raise foreign_answer(status, headers.get("content-type"), f"connect {self.url}") from e
            raise RelayError(f"connect {self.url}: {type(e).__name__}: {e}", status=status, error="handshake") from e

    def _discard(self) -> None:
        """Forget the socket at once (its acknowledgements can no longer be paired with
        messages) and close it in the background."""
        ws, self._ws = self._ws, None
        if ws is not None:
            task = asyncio.ensure_future(self._close_quietly(ws))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_quietly(ws: Any) -> None:
        try:
            await asyncio.wait_for(ws.close(), timeout=2)
        except BaseException:
            pass

    async def send(self, body: bytes) -> Dict[str, Any]:
        async with self._lock:
            if self._ws is None:
                self._ws = await self._connect()
            try:
                await asyncio.wait_for(self._ws.send(body), timeout=self.timeout)
                answer = await asyncio.wait_for(self._ws.recv(), timeout=self.timeout)
            except asyncio.TimeoutError as e:
                self._discard()
                raise RelayError(f"{self.url}: no acknowledgement within {self.timeout} s", error="timeout") from e
            except Exception as e:  # ConnectionClosed and friends
                self._discard()
                raise RelayError(f"{self.url}: {type(e).__name__}: {e}", error="network") from e
            except BaseException:  # cancelled mid-exchange: an acknowledgement may be in flight
                self._discard()
                raise
            try:
                ack = json.loads(answer)
                if not isinstance(ack, dict):
                    raise ValueError("not a JSON object")
            except (ValueError, TypeError) as e:
                self._discard()
                raise RelayError(f"{self.url}: unreadable acknowledgement {answer!r:.200}", error="bad_answer") from e
            if ack.get("ok") is True:
                return ack
            raise _refusal(ack, f"{self.url}: refused: {answer!r:.200}")

    async def close(self) -> None:
        async with self._lock:
            self._discard()
        if self._closing:
            await asyncio.gather(*list(self._closing), return_exceptions=True)
