"""Reading prime-rl's growing files by offset: whole lines of a followed file, one record of a
chunked stream. Nothing here reads a file whole.

- A **followed file** (a live trace, an index) is appended to by prime-rl and may be torn at its
  end: :func:`follow` returns the whole lines after a cursor and the cursor after them; a torn
  last line waits for its newline. A file replaced under the same name (another inode, shorter
  than the cursor, or different bytes just before it) is reported, not misread.
- A **chunked stream** (``stream/``, ``annotations/<producer>/``) is a directory of
  ``NNNNN.jsonl`` chunks; a chunk prime-rl sealed is ``NNNNN.jsonl.zst`` (seekable zstd, offsets
  in decompressed bytes). :class:`Chunks` reads the line at ``(chunk, offset)`` of either.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

logger = logging.getLogger("episode_relay.prime_rl")

#: Bytes kept of a followed file just before its cursor, to tell a replaced file from a grown one.
TAIL_BYTES = 32
#: Largest line read (a live line or a record): the relay takes at most 32 MiB per message.
MAX_LINE_BYTES = 64 * 1024 * 1024
_BLOCK = 1024 * 1024


@dataclass
class Cursor:
    """Where reading a followed file stands: its inode, the bytes consumed, the bytes just before."""

    ino: int
    offset: int = 0
    tail: str = ""
    """Hex of up to TAIL_BYTES bytes before ``offset``."""

    def to_json(self) -> Dict[str, Any]:
        return {"ino": self.ino, "offset": self.offset, "tail": self.tail}

    @staticmethod
    def from_json(d: Dict[str, Any]) -> "Cursor":
        return Cursor(int(d["ino"]), int(d["offset"]), str(d.get("tail", "")))


@dataclass
class Followed:
    """What :func:`follow` found."""

    status: str
    """``new`` (read from the start), ``grown``, ``same``, ``replaced`` (read nothing: the caller
    decides), ``gone``, ``too_long`` (a line longer than MAX_LINE_BYTES)."""
    lines: List[bytes]
    cursor: Optional[Cursor]
    """The cursor after ``lines`` (None when gone or replaced)."""
    ends: List[int] = field(default_factory=list)
    """The offset just after each line (where a cursor stopping after it would stand)."""
    more: bool = False
    """Complete lines are left beyond the budget."""


def _tail(f: Any, offset: int) -> str:
    start = max(0, offset - TAIL_BYTES)
    f.seek(start)
    return bytes(f.read(offset - start)).hex()


def follow(path: Path, cursor: Optional[Cursor], budget: int = 8 * 1024 * 1024, limit: Optional[int] = None) -> Followed:
    """The whole lines of ``path`` after ``cursor`` (blank lines dropped), about ``budget`` bytes
    at most (one longer line is read whole, up to MAX_LINE_BYTES), none past byte ``limit``."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return Followed("gone", [], None)
    with f:
        st = os.fstat(f.fileno())
        if cursor is not None:
            # inodes are reused: a file recreated under the name may even have the old size
            if st.st_ino != cursor.ino or st.st_size < cursor.offset or _tail(f, cursor.offset) != cursor.tail:
                return Followed("replaced", [], None)
            if st.st_size == cursor.offset:
                return Followed("same", [], cursor)
        start = cursor.offset if cursor is not None else 0
        f.seek(start)
        data = bytearray()
        cut = -1  # where in `data` the last newline is
        room = None if limit is None else max(0, limit - start)
        while len(data) < budget or cut < 0:
            block = f.read(_BLOCK if room is None else min(_BLOCK, room - len(data)))
            if not block:
                break
            nl = block.rfind(b"\n")
            if nl >= 0:
                cut = len(data) + nl
            data += block
            if cut < 0 and len(data) > MAX_LINE_BYTES:
                return Followed("too_long", [], cursor)
        status = "new" if cursor is None else "grown"
        if cut < 0:  # nothing whole yet: a torn line waits for its newline
            return Followed(status, [], cursor or Cursor(st.st_ino, 0, ""))
        end = start + cut + 1
        lines: List[bytes] = []
        ends: List[int] = []
        pos = start
        for ln in bytes(data[: cut + 1]).split(b"\n")[:-1]:
            pos += len(ln) + 1
            if ln.strip():
                lines.append(ln)
                ends.append(pos)
        return Followed(status, lines, Cursor(st.st_ino, end, _tail(f, end)), ends, more=len(data) >= budget)


def cursor_at(path: Path, offset: int) -> Cursor:
    """A cursor at ``offset`` of ``path`` (stopping partway through what :func:`follow` read)."""
    with open(path, "rb") as f:
        return Cursor(os.fstat(f.fileno()).st_ino, offset, _tail(f, offset))


def whole_lines(path: Path, cursor: Optional[Cursor], budget: int, limit: Optional[int] = None) -> Followed:
    """:func:`follow` for an index: a replaced index is read again from its start."""
    got = follow(path, cursor, budget, limit)
    if got.status == "replaced":
        logger.warning("%s was replaced (a new run in the same directory?): reading it again from the start", path)
        got = follow(path, None, budget, limit)
        got.status = "replaced"
    return got


def _zstd_opener() -> Tuple[Optional[str], Any]:
    """``("pyzstd", module)``, ``("zstandard", module)`` or ``(None, None)``."""
    try:
        import pyzstd  # type: ignore[import-not-found,unused-ignore]

        return "pyzstd", pyzstd
    except ImportError:
        pass
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]

        return "zstandard", zstandard
    except ImportError:
        return None, None


class SealedChunk(Exception):
    """A sealed (zstd) chunk and no zstd module to read it."""


class _Forward:
    """A forward-only decompressing reader (``zstandard``) with its own buffer: ``line_at`` moves
    it forward; an offset behind it reopens the chunk."""

    def __init__(self, zstandard: Any, path: Path) -> None:
        self.raw = open(path, "rb")
        self.reader = zstandard.ZstdDecompressor().stream_reader(self.raw, read_across_frames=True)
        self.position = 0
        """The decompressed offset of ``buf[0]``."""
        self.buf = b""

    def close(self) -> None:
        try:
            self.reader.close()
        finally:
            self.raw.close()

    def line_at(self, offset: int) -> bytes:
        while self.position + len(self.buf) < offset:  # skip to the offset
            self.position += len(self.buf)
            self.buf = self.reader.read(_BLOCK)
            if not self.buf:
                raise ValueError(f"offset {offset} is past the chunk's end")
        self.buf = self.buf[offset - self.position :]
        self.position = offset
        searched = 0
        while True:
            nl = self.buf.find(b"\n", searched)
            if nl >= 0:
                line, self.buf = self.buf[:nl], self.buf[nl + 1 :]
                self.position += nl + 1
                return line
            if len(self.buf) > MAX_LINE_BYTES:
                raise ValueError("a record longer than the limit")
            searched = len(self.buf)
            more = self.reader.read(_BLOCK)
            if not more:
                raise ValueError("a record without its newline")
            self.buf += more


class Chunks:
    """Reads single lines of a chunked stream directory by ``(chunk, offset)``.

    A sealed chunk is read with ``pyzstd`` (seekable) or ``zstandard`` (forward only: one reader
    is kept and moved forward, since rows are read in order). Without either, reading a sealed
    chunk raises :class:`SealedChunk`.
    """

    def __init__(self, directory: Path, single_file: Optional[Path] = None) -> None:
        self.directory = directory
        self.single_file = single_file
        """The older layout: one plain file, rows without ``chunk``."""
        self._zstd_kind, self._zstd = _zstd_opener()
        self._forward: Optional[Tuple[int, _Forward]] = None

    @property
    def can_read_sealed(self) -> bool:
        return self._zstd_kind is not None

    def close(self) -> None:
        if self._forward is not None:
            self._forward[1].close()
            self._forward = None

    def line_at(self, chunk: Optional[int], offset: int) -> bytes:
        """The line (without its newline) that starts at ``offset`` of ``chunk``. Raises
        FileNotFoundError when neither the chunk nor its sealed twin exists, SealedChunk when the
        sealed twin cannot be read here, ValueError for a line without an end."""
        if chunk is None:
            if self.single_file is None:
                raise FileNotFoundError("an index row without `chunk` and no single-file stream")
            return _plain_line(self.single_file, offset)
        plain = self.directory / f"{chunk:05d}.jsonl"
        try:
            return _plain_line(plain, offset)
        except FileNotFoundError:
            pass
        sealed = self.directory / f"{chunk:05d}.jsonl.zst"
        if not sealed.exists():
            raise FileNotFoundError(f"{plain} (or its sealed {sealed.name})")
        if self._zstd_kind is None:
            raise SealedChunk(str(sealed))
        if self._zstd_kind == "pyzstd":
            with self._zstd.SeekableZstdFile(str(sealed), "rb") as f:
                f.seek(offset)
                return _line_of(f.readline(MAX_LINE_BYTES + 1))
        if self._forward is None or self._forward[0] != chunk or self._forward[1].position > offset:
            self.close()
            self._forward = (chunk, _Forward(self._zstd, sealed))
        return self._forward[1].line_at(offset)


def _plain_line(path: Path, offset: int) -> bytes:
    with open(path, "rb") as f:
        f.seek(offset)
        return _line_of(f.readline(MAX_LINE_BYTES + 1))


def _line_of(line: bytes) -> bytes:
    if not line.endswith(b"\n"):
        raise ValueError("a record without its newline (torn, or longer than the limit)")
    return line[:-1]
