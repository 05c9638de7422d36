"""Bulk fetch of a run's finished episodes: ``GET {url}/v1/runs/{run}/finished``.

The relay answers a msgpack *sequence* (documents one after another) of maps
``{"id": str, "cursor": str, "episode": <the finished episode>}``, oldest ended first, where
``episode`` is embedded as is: the exact bytes ``GET /v1/episodes/{id}`` answers.
:func:`fetch_run` streams the answer and splits it as it arrives with ``msgpack.Unpacker``:
the id and cursor are decoded, the episode is only *skipped* (walked, never built into Python
objects) and its span of the received bytes is yielded, so it is byte for byte what the relay
sent. Only the element being read is kept. An answer the relay ended on its budget (rows it
read without sending them: outside the token's scope, or gone) ends with ``{"cursor": str,
"more": true}``; :func:`fetch_run` then asks again from that cursor by itself.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Generator, Iterator, List, Optional, Tuple, TypeVar, Union
from urllib.parse import quote

import httpx
import msgpack

from .transport import MSGPACK, RelayError, auth_headers, check_base_url, check_relay_answer, error_from_answer, network_error

#: One finished episode: ``(id, cursor, episode_bytes)``.
RunEpisode = Tuple[str, str, bytes]


class _More:
    """The last element of an answer that stopped on the relay's budget: ask again from ``cursor``."""

    def __init__(self, cursor: str) -> None:
        self.cursor = cursor


def run_path(run: str) -> str:
    """``/v1/runs/{run}/finished`` with the run name escaped."""
    return f"/v1/runs/{quote(run, safe='')}/finished"


def fetch_run(
    url: str,
    run: str,
    token: Optional[str] = None,
    cursor: Optional[str] = None,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> Iterator[RunEpisode]:
    """Yield ``(id, cursor, episode_bytes)`` for each finished episode of ``run`` (an episode
    id's part before its last ``:``, or ``~`` for ids without one), oldest ended first, as the
    answer streams in.

    ``episode_bytes`` is exactly what ``GET /v1/episodes/{id}`` answers for that episode.
    ``cursor``: continue after the element that carried it (e.g. the last one seen before a
    dropped connection). ``token``: any valid token; the relay sends only the episodes its
    ``episodes`` patterns cover. ``timeout``: seconds to connect and between two reads.
    ``client``: a ``httpx.Client`` to use (default: one of its own, closed at the end).

    Raises :class:`RelayError`: a refusal (4xx, ``status`` and ``error`` from the relay), a
    server error, a network error or timeout, or an answer that ends inside an element
    (``error="truncated"``); resume with the last cursor. Stopping the iteration early closes
    the connection.
    """
    base = check_base_url(url)
    own = client is None
    http = client if client is not None else httpx.Client(timeout=httpx.Timeout(timeout))
    target = base + run_path(run)
    headers = {**auth_headers(token, base), "accept": MSGPACK}
    what = f"GET run {run} finished episodes"
    try:
        yield from follow_pages(http, target, headers, [], cursor, what, timeout, lambda chunks: _elements(chunks, what))
    finally:
        if own:
            http.close()


T = TypeVar("T")


def follow_pages(
    http: httpx.Client,
    target: str,
    headers: Dict[str, str],
    query: List[Tuple[str, str]],
    cursor: Optional[str],
    what: str,
    timeout: float,
    read_page: "Callable[[Iterator[bytes]], Generator[T, None, Optional[str]]]",
) -> Iterator[T]:
    """GET a run's bulk answer page after page (``query``, then ``cursor`` once there is one). Each
    page's bytes go to ``read_page``, which yields what it reads and returns the next page's cursor
    (the ``{more: true, cursor}`` a page ends with) or None after the last page. A refusal raises
    the relay's :class:`RelayError`; a network failure or timeout, :func:`network_error`'s."""
    while True:
        page = query + ([("cursor", cursor)] if cursor else [])
        try:
            with http.stream("GET", target, params=page, headers=headers) as res:
                check_relay_answer(res, what)
                if res.status_code != 200:
                    raise error_from_answer(res.status_code, res.read(), what)
                more = yield from read_page(res.iter_bytes())
        except (httpx.HTTPError, OSError) as e:
            raise network_error(e, f"{what} ({target})", timeout) from e
        if more is None:
            return
        cursor = more


def _elements(chunks: Iterator[bytes], what: str) -> "Generator[RunEpisode, None, Optional[str]]":
    """A page of the msgpack answer: its ``(id, cursor, episode)`` elements; returns the next page's cursor."""
    splitter = _Splitter()
    more: Optional[str] = None
    for chunk in chunks:
        for element in splitter.feed(chunk):
            if isinstance(element, _More):
                more = element.cursor
            else:
                yield element
    if splitter.pending():
        raise RelayError(
            f"{what}: the answer ended inside an element ({splitter.pending()} bytes left); resume with the last cursor",
            status=200,
            error="truncated",
        )
    return more


class _Splitter:
    """Splits a msgpack sequence of ``{id, cursor, episode}`` maps fed in arbitrary chunks.

    The same bytes go to an ``Unpacker`` (which finds where each value ends: ``tell()`` after
    ``skip()``) and to ``self._buf``, which holds the stream from offset ``self._base`` on (the
    element being read), so a value's span is cut from the received bytes themselves. A value
    cut short raises ``OutOfData``; the next ``feed`` goes on from where it stopped.
    """

    def __init__(self) -> None:
        # max_buffer_size=0: no cap (the default 100 MiB would refuse a larger episode)
        self._unpacker = msgpack.Unpacker(raw=False, max_buffer_size=0)
        self._buf = bytearray()
        self._base = 0
        self._left: Optional[int] = None  # entries of the current element still to read
        self._key: Optional[str] = None  # the key whose value is next
        self._start: Optional[int] = None  # stream offset where the value being skipped starts
        self._fields: Dict[str, Any] = {}
        #: The ``row`` of the element last returned (a bulk fetch with ``row=1``), else None.
        self.last_row: Any = None

    def pending(self) -> int:
        """Bytes received that no complete element took."""
        return len(self._buf)

    def feed(self, chunk: bytes) -> Iterator[Union[RunEpisode, _More]]:
        self._unpacker.feed(chunk)
        self._buf += chunk
        while True:
            try:
                element = self._step()
            except msgpack.OutOfData:
                return
            except (ValueError, msgpack.UnpackException) as e:
                raise RelayError(f"bulk answer: not a msgpack sequence of elements ({e})", status=200, error="bad_answer") from e
            if element is not None:
                yield element

    def _step(self) -> Optional[Union[RunEpisode, _More]]:
        """Read one header, key or value; the element once its last value is read."""
        u = self._unpacker
        if self._left is None:
            n = u.read_map_header()  # a ValueError when the next value is not a map
            self._left, self._fields = n, {}
            return self._done() if n == 0 else None
        if self._key is None:
            key = u.unpack()
            if not isinstance(key, str):
                raise RelayError(f"bulk answer: expected a str key, got {key!r:.80}", status=200, error="bad_answer")
            self._key = key
            return None
        if self._key in ("id", "cursor", "more", "row"):
            value: Any = u.unpack()
        else:
            # the episode (or a field this client does not know): its span, never decoded
            if self._start is None:
                self._start = u.tell()
            u.skip()
            value = bytes(self._buf[self._start - self._base : u.tell() - self._base])
            self._start = None
        self._fields[self._key] = value
        self._key = None
        self._left -= 1
        return self._done() if self._left == 0 else None

    def _done(self) -> Union[RunEpisode, _More]:
        f = self._fields
        id_, cursor, episode = f.get("id"), f.get("cursor"), f.get("episode")
        more = f.get("more") is True and isinstance(cursor, str) and id_ is None
        if not more and (not isinstance(id_, str) or not isinstance(cursor, str) or not isinstance(episode, bytes)):
            raise RelayError(f"bulk answer: an element lacks id, cursor or episode (keys {sorted(f)})", status=200, error="bad_answer")
        # the element is read: drop its bytes
        end = self._unpacker.tell()
        del self._buf[: end - self._base]
        self._base = end
        self.last_row = f.get("row")
        self._left, self._fields = None, {}
        if more:
            return _More(str(cursor))
        return str(id_), str(cursor), bytes(episode)  # type: ignore[arg-type]
