"""RelaySink through trouble between it and the relay: a small TCP proxy in front of the real
relay answers the next connections with a gateway's 502/503 or a proxy's 401 (no relay header),
cuts them mid-stream (the ack lost), or stops listening (refused). Each is retried with the same
envelope and the episode ends exact; only a definite refusal (a page or a 404 that is not the
relay) ends a send at once, without a retry."""

from __future__ import annotations

import asyncio
import logging
from typing import List, Optional, Set, Tuple

import pytest

from conftest import Relay
from episode_relay import RelayError, RelaySink
from episode_relay.transport import RelayHttp
from helpers import episode_id, load_case

Fault = Tuple[str, int, str, bytes]  # ("answer", status, content type, body) or ("reset", 0, "", b"")

GATEWAY_502: Fault = ("answer", 502, "application/json", b'{"error":"bad_gateway","message":"upstream down"}')
GATEWAY_503_PAGE: Fault = ("answer", 503, "text/html", b"<!doctype html><title>503</title>Service Unavailable")
PROXY_401: Fault = ("answer", 401, "text/html", b"<!doctype html><title>Sign in</title>")
PAGE_200: Fault = ("answer", 200, "text/html", b"<!doctype html><title>Welcome</title>")
PAGE_404: Fault = ("answer", 404, "text/html", b"<!doctype html><title>Not Found</title>")
RESET: Fault = ("reset", 0, "", b"")


async def _read_head(reader: asyncio.StreamReader) -> Optional[bytes]:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


class FlakyProxy:
    """A TCP proxy to the relay at ``target`` (host, port). Each new connection passes through,
    or takes the next planned fault: an answer of its own (never with the relay's header), or
    ``reset``: the request goes through and the connection is cut as the answer comes back (for
    a WebSocket, right after its handshake: the first acknowledgement is lost)."""

    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self.plan: List[Fault] = []
        self.faulted = 0
        self.port = 0
        self._server: Optional[asyncio.AbstractServer] = None
        self._open: Set[asyncio.StreamWriter] = set()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def up(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def down(self) -> None:
        """Stop listening (connections are refused) and cut what is open."""
        assert self._server is not None
        self._server.close()
        self.drop()
        await self._server.wait_closed()

    def fail(self, fault: Fault, n: int) -> None:
        """The next ``n`` connections take ``fault``; open ones are cut first."""
        self.plan = [fault] * n
        self.drop()

    def drop(self) -> None:
        for w in list(self._open):
            w.transport.abort()

    async def close(self) -> None:
        if self._server is not None and self._server.is_serving():
            await self.down()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.add(writer)
        try:
            head = await _read_head(reader)
            if head is None:
                return
            fault = self.plan.pop(0) if self.plan else None
            if fault is not None:
                self.faulted += 1
            if fault is not None and fault[0] == "answer":
                await reader.readexactly(_content_length(head))
                _, status, kind, body = fault
                writer.write(
                    f"HTTP/1.1 {status} Fault\r\ncontent-type: {kind}\r\ncontent-length: {len(body)}\r\nconnection: close\r\n\r\n".encode() + body
                )
                await writer.drain()
                return
            up_reader, up_writer = await asyncio.open_connection(*self.target)
            self._open.add(up_writer)
            up_writer.write(head)
            pipes = [asyncio.ensure_future(self._pipe(reader, up_writer)), asyncio.ensure_future(self._pipe(up_reader, writer, cut=fault is not None))]
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            for t in pipes:
                t.cancel()
            self._open.discard(up_writer)
            up_writer.transport.abort()
        except (ConnectionError, asyncio.IncompleteReadError, OSError):
            pass
        finally:
            self._open.discard(writer)
            writer.transport.abort()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: bool = False) -> None:
        """Copy until the reader's side closes; with ``cut``, stop as the answer comes (passing a
        WebSocket's 101 head first), so the caller cuts both connections."""
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    return
                if cut:
                    if not chunk.startswith(b"HTTP/1.1 101"):
                        return
                    end = chunk.index(b"\r\n\r\n") + 4
                    writer.write(chunk[:end])
                    await writer.drain()
                    if len(chunk) == end:
                        await reader.read(65536)  # the socket's first message back: cut before it arrives
                    return
                writer.write(chunk)
                await writer.drain()
        except (ConnectionError, OSError):
            return


class Retries(logging.Handler):
    """Counts the sink's "retrying" log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1


@pytest.fixture()
def retries() -> "Retries":
    handler = Retries()
    log = logging.getLogger("episode_relay")
    old = log.level
    log.setLevel(logging.INFO)
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)
    log.setLevel(old)


def _target(relay: Relay) -> Tuple[str, int]:
    host, port = relay.url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


async def _stored(relay: Relay, eid: str) -> bytes:
    """The episode as the relay holds it (fetched straight from the relay, not through the proxy)."""
    http = RelayHttp(relay.url, eid, token=relay.token)
    try:
        return await http.get_episode()
    finally:
        await http.close()


@pytest.mark.parametrize("transport", ["http", "ws"])
@pytest.mark.parametrize("name,fault", [("502", GATEWAY_502), ("503-page", GATEWAY_503_PAGE), ("proxy-401", PROXY_401), ("reset", RESET)])
def test_transient_answers_are_retried_and_the_episode_is_exact(relay: Relay, transport: str, name: str, fault: Fault, retries: Retries) -> None:
    case = load_case("multi_trace_links")

    async def run() -> None:
        proxy = FlakyProxy(_target(relay))
        await proxy.up()
        eid = episode_id(f"transient-{name}-{transport}")
        sink = RelaySink(proxy.url, eid, token=relay.token, transport=transport, retry_for=30, retry_backoff=0.02)
        try:
            for i, frame in enumerate(case.frames):
                if i == 3:
                    proxy.fail(fault, 3)
                ack = await sink.send(frame)
                assert ack["ok"] is True
            assert proxy.faulted == 3
            assert retries.count >= 3 if fault is not RESET else retries.count >= 1
            await sink.finish(case.reply)
        finally:
            await sink.close()
            await proxy.close()
        assert await _stored(relay, eid) == case.episode

    asyncio.run(run())


@pytest.mark.parametrize("transport", ["http", "ws"])
def test_connections_refused_while_the_relay_restarts_are_retried(relay: Relay, transport: str, retries: Retries) -> None:
    case = load_case("chat_basic")

    async def run() -> None:
        proxy = FlakyProxy(_target(relay))
        await proxy.up()
        eid = episode_id(f"transient-refused-{transport}")
        sink = RelaySink(proxy.url, eid, token=relay.token, transport=transport, retry_for=30, retry_backoff=0.02)
        try:
            for i, frame in enumerate(case.frames):
                if i == 2:
                    await proxy.down()
                    sending = asyncio.ensure_future(sink.send(frame))
                    while retries.count < 3:  # three attempts refused, then it listens again
                        await asyncio.sleep(0.01)
                    assert not sending.done()
                    await proxy.up()
                    assert (await sending)["ok"] is True
                    continue
                await sink.send(frame)
            await sink.finish(case.reply)
        finally:
            await sink.close()
            await proxy.close()
        assert await _stored(relay, eid) == case.episode

    asyncio.run(run())


@pytest.mark.parametrize("transport", ["http", "ws"])
@pytest.mark.parametrize("name,fault,status", [("page", PAGE_200, 200), ("page-404", PAGE_404, 404), ("page-405", ("answer", 405, "text/html", b""), 405)])
def test_a_page_or_404_that_is_not_the_relay_is_not_retried(relay: Relay, transport: str, name: str, fault: Fault, status: int, retries: Retries) -> None:
    async def run() -> None:
        proxy = FlakyProxy(_target(relay))
        await proxy.up()
        proxy.fail(fault, 5)
        sink = RelaySink(proxy.url, episode_id(f"foreign-{name}-{transport}"), token=relay.token, transport=transport, retry_for=30, retry_backoff=0.02)
        try:
            with pytest.raises(RelayError) as e:
                await sink.send({"trace": "t", "open": {}})
            assert e.value.error == "not_the_relay"
            assert e.value.status == status
            assert not e.value.retryable
            assert proxy.faulted == 1
            assert retries.count == 0
        finally:
            await sink.close()
            await proxy.close()

    asyncio.run(run())
