"""The Python client never does the wrong thing quietly: a URL without a scheme or an id the
relay cannot take is refused before anything is sent; an address that answers but is not the
relay (a web page) is named as such; a relay that is not there is named as refused."""

from __future__ import annotations

import asyncio
import http.server
import socket
import threading
from typing import Iterator, List

import httpx
import pytest

from episode_relay import RelaySink, fetch_run
from episode_relay.transport import RelayError


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture()
def web_page() -> Iterator[str]:
    """A plain web server answering every request with an HTML page (not the relay)."""

    class Page(http.server.BaseHTTPRequestHandler):
        def _page(self) -> None:
            body = b"<!doctype html><title>dashboard</title>"
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = _page  # noqa: N815
        do_POST = _page  # noqa: N815

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def test_a_url_without_a_scheme_is_refused_at_once() -> None:
    with pytest.raises(RelayError) as e:
        RelaySink("127.0.0.1:8787", "ep-1")
    assert e.value.error == "bad_url"
    assert "http://" in str(e.value)
    assert not e.value.retryable


@pytest.mark.parametrize("bad", ["run:a#b", "run:a?b=1", "a/b", "watch", "", "x" * 129])
def test_an_id_the_relay_cannot_take_is_refused_at_once(bad: str) -> None:
    with pytest.raises(RelayError) as e:
        RelaySink("http://127.0.0.1:8787", bad)
    assert e.value.error == "bad_episode_id"
    assert "[A-Za-z0-9._:-]" in str(e.value) or "reserved" in str(e.value)


def test_an_address_that_is_not_the_relay_is_named(web_page: str) -> None:
    async def run() -> None:
        async with RelaySink(web_page, "ep-1", retry_for=0) as sink:
            with pytest.raises(RelayError) as e:
                await sink.send({"trace": "t", "open": {}})
            assert e.value.error == "not_the_relay"
            assert "text/html" in str(e.value)
            assert "base URL" in str(e.value)

    asyncio.run(run())
    with pytest.raises(RelayError) as e:
        list(fetch_run(web_page, "run-1"))
    assert e.value.error == "not_the_relay"


def test_a_relay_that_is_not_there_is_named_as_refused() -> None:
    url = f"http://127.0.0.1:{_free_port()}"

    async def run() -> None:
        async with RelaySink(url, "ep-1", retry_for=0) as sink:
            with pytest.raises(RelayError) as e:
                await sink.send({"trace": "t", "open": {}})
            assert "connection refused" in str(e.value)
            assert url in str(e.value)

    asyncio.run(run())
    with pytest.raises(RelayError) as e:
        list(fetch_run(url, "run-1"))
    assert "connection refused" in str(e.value)


def test_a_name_that_does_not_resolve_and_https_against_http_are_named(web_page: str) -> None:
    with pytest.raises(RelayError) as e:
        list(fetch_run("http://no-such-relay.invalid", "run-1", timeout=10))
    assert "does not resolve" in str(e.value)
    with pytest.raises(RelayError) as e:
        list(fetch_run(web_page.replace("http://", "https://"), "run-1", timeout=10))
    assert "TLS failed" in str(e.value)
    assert "https://" in str(e.value)


@pytest.mark.parametrize(
    "url",
    ["http://relay.example.com", "http://10.0.0.5:8787", "http://relay.test", "http://127.0.0.1.nip.io"],
)
def test_a_token_is_never_sent_over_plain_http_to_another_host(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPISODE_RELAY_ALLOW_HTTP", raising=False)
    sent: List[httpx.Request] = []
    client = httpx.Client(transport=httpx.MockTransport(lambda r: sent.append(r) or httpx.Response(500)))
    with pytest.raises(RelayError) as info:
        list(fetch_run(url, "run-1", token="t", client=client))
    assert info.value.error == "insecure_url" and not info.value.retryable
    assert "https://" in str(info.value) and "EPISODE_RELAY_ALLOW_HTTP=1" in str(info.value)
    with pytest.raises(RelayError) as info:
        RelaySink(url, "run-1:e1", token="t")
    assert info.value.error == "insecure_url"
    with pytest.raises(RelayError) as info:
        RelaySink(url, "run-1:e1", token="t", transport="ws")
    assert info.value.error == "insecure_url"
    assert sent == []
    # without a token nothing secret travels; told to allow it, it goes
    list(fetch_run(url, "run-1", client=httpx.Client(transport=httpx.MockTransport(lambda r: sent.append(r) or _empty_answer()))))
    monkeypatch.setenv("EPISODE_RELAY_ALLOW_HTTP", "1")
    list(fetch_run(url, "run-1", token="t", client=httpx.Client(transport=httpx.MockTransport(lambda r: sent.append(r) or _empty_answer()))))
    assert [r.headers.get("authorization") for r in sent] == [None, "Bearer t"]


@pytest.mark.parametrize("url", ["https://relay.example.com", "http://127.0.0.1:8787", "http://localhost:8787", "http://[::1]:8787", "http://a.localhost"])
def test_a_token_goes_over_https_and_to_this_machine(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EPISODE_RELAY_ALLOW_HTTP", raising=False)
    sent: List[httpx.Request] = []
    list(fetch_run(url, "run-1", token="t", client=httpx.Client(transport=httpx.MockTransport(lambda r: sent.append(r) or _empty_answer()))))
    assert [r.headers.get("authorization") for r in sent] == ["Bearer t"]


def _empty_answer() -> httpx.Response:
    return httpx.Response(200, content=b"", headers={"content-type": "application/msgpack", "x-episode-relay": "1"})
