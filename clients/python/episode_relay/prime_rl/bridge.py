"""The bridge: follows a prime-rl run's file monitor and feeds the relay, exactly once, resumably.

One cycle (every ``poll`` seconds):

1. **pending** — each new ``live/pending/<id>.json`` is announced (``POST .../dispatch``): the run
   lists a pending rollout until its first trace streams.
2. **live** — each ``live/<trace>.jsonl`` is read by offset, whole lines only; each line is one
   envelope from the file's own producer (``prime-rl/<trace>``) with ``seq`` = the line's number
   and ``cursor`` = the one before: a line sent again after a crash is a duplicate to the relay.
   A trace opening in an episode whose other trace's file vanished is a retry: the vanished trace
   is discarded first, as verifiers' streamer did.
3. **stream** — each new row of ``stream.index.jsonl`` waits until its traces' live files are gone
   (or ``finish_grace`` passed); then its record is read at its offset, the relay's copy is
   completed from it where the live file fell short (:func:`formats.completion`, against the
   relay's own current copy, so a restart never adds twice) and the reply ends the episode.
4. **annotations** — each producer's index rows (written before the stream was read in this
   cycle) are forwarded to the episode of their trace.
5. **orphans** — an episode whose live files are all gone and that no record finished within
   ``orphan_after`` seconds (prime-rl relaunched and wiped ``live/``, or the record is lost) is
   failed with a reply that says so.

The state file is saved after every cycle; it only records what the relay acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple, TypeVar

import httpx
import msgpack

from ..producer import envelope_bytes
from ..tokenizer import TokenizerShipment, TokenizerSource
from ..transport import FinishMismatch, RelayError, RelayHttp, check_base_url, error_from_answer
from ..wire import pack, unpack
from . import formats
from .files import Chunks, Cursor, SealedChunk, cursor_at, follow, whole_lines
from .state import State

logger = logging.getLogger("episode_relay.prime_rl")
#: A line per HTTP request, at DEBUG (``--verbose``): thousands an hour on a busy run, so never by default.
http_logger = logging.getLogger("episode_relay.prime_rl.http")


async def _log_request(response: httpx.Response) -> None:
    if http_logger.isEnabledFor(logging.DEBUG):
        http_logger.debug("HTTP %s %s: %d", response.request.method, response.request.url, response.status_code)

T = TypeVar("T")

#: Bytes of live lines read per cycle, over all files (the rest waits for the next cycle).
CYCLE_READ_BYTES = 64 * 1024 * 1024
#: Bytes of live lines read per file per cycle.
FILE_READ_BYTES = 8 * 1024 * 1024
#: Envelope bytes per POST (the relay takes up to 32 MiB per message).
BATCH_BYTES = 8 * 1024 * 1024
BATCH_ENVELOPES = 512
#: Index bytes read per cycle (a stream row is ~500 bytes).
INDEX_READ_BYTES = 256 * 1024
#: Stream rows kept waiting for their live files to go, at most.
MAX_WAITING = 512
#: How long a finished record that cannot be read yet (its chunk not there, its line torn) is
#: tried again before it is skipped.
RECORD_WAIT_SECONDS = 60.0
#: Rows of sealed chunks this Python cannot read, kept to finish later (one with zstd).
MAX_SEALED_KEPT = 10000
#: How long an announced rollout that never streamed is remembered after its pending file went.
PENDING_KEEP_SECONDS = 3600.0
# a pass that moved something says so in the log, at most this often (the first one at once)
PROGRESS_EVERY_SECONDS = 10.0


@dataclass
class Layout:
    """Where prime-rl's file monitor writes, under the run's output directory
    (``get_file_monitor_dir`` = ``OUTPUT_DIR/monitors/file``; a verifiers Flow run, marked by
    ``OUTPUT_DIR/flow.json``, keeps its live traces in ``OUTPUT_DIR/live``)."""

    output_dir: Path

    @property
    def traces(self) -> Path:
        return self.output_dir / "monitors" / "file" / "traces"

    @property
    def live(self) -> Path:
        if (self.output_dir / "flow.json").is_file():
            return self.output_dir / "live"
        return self.traces / "live"

    @property
    def pending(self) -> Path:
        return self.live / "pending"

    @property
    def stream(self) -> Path:
        return self.traces / "stream"

    @property
    def stream_index(self) -> Path:
        return self.traces / "stream.index.jsonl"

    @property
    def annotations(self) -> Path:
        return self.traces / "annotations"


@dataclass
class Piece:
    """One envelope to send: who, which seq, the delta's bytes; ``done`` runs once it is acked."""

    producer: str
    seq: int
    delta: bytes
    identity: bool
    """Carry the episode's dispatch identity (the first envelope the episode gets)."""
    done: Callable[[], None]
    origin: str
    """The live file (trace id) it comes from, or "" for the bridge's own deltas."""


@dataclass
class EpisodeWork:
    episode: str
    announce: Optional[Dict[str, Any]] = None
    pieces: List[Piece] = field(default_factory=list)


def producer_of(trace: str, gen: int) -> str:
    """A live file's producer: one per trace file (and generation of it)."""
    return f"prime-rl/{trace}" if gen == 0 else f"prime-rl/{trace}/{gen}"


class Bridge:
    """Follows ``output_dir`` (a prime-rl run's output directory) into the relay at ``relay``.

    Args:
        output_dir: The run's ``output_dir`` (what prime-rl's ``monitors.setup`` got).
        relay: The relay's base URL.
        run: The relay run the episodes go to (``RUN:<dispatch id>``); default: the output
            directory's name.
        token: A producer token covering ``RUN:*``.
        state: The cursor file (default: none, nothing survives the process).
        poll: Seconds between cycles.
        finish_grace: Seconds a finished record waits for its traces' live files to go.
        orphan_after: Seconds after which an episode whose live files are all gone, and that no
            record finished, is failed.
        keep_ended: Ended episodes remembered for the annotations that come after them.
        parallel: Episodes talked to at once.
        tokenizer: The model's ``tokenizer.json`` (a path, or a model name in the local Hugging
            Face cache; never downloaded), sent to the run when the bridge starts, so pages
            decode token ids (:mod:`episode_relay.tokenizer`). A name not found raises at once.
    """

    def __init__(
        self,
        output_dir: Path,
        relay: str,
        *,
        run: Optional[str] = None,
        token: Optional[str] = None,
        state: Optional[Path] = None,
        poll: float = 1.0,
        finish_grace: float = 5.0,
        orphan_after: float = 300.0,
        keep_ended: int = 20000,
        parallel: int = 8,
        client: Optional[httpx.AsyncClient] = None,
        tokenizer: Optional[TokenizerSource] = None,
    ) -> None:
        self.layout = Layout(Path(output_dir).resolve())
        self.url = check_base_url(relay)
        self.run_name = formats.run_name(run if run is not None else self.layout.output_dir.name)
        self.token = token
        self._tokenizer = None if tokenizer is None else TokenizerShipment(tokenizer, self.url, self.run_name, token)
        self.poll = poll
        self.finish_grace = finish_grace
        self.orphan_after = orphan_after
        self.keep_ended = keep_ended
        self.state = State.load(state)
        ident = {"output_dir": str(self.layout.output_dir), "run": self.run_name}
        if self.state.identity and self.state.identity.get("run") != self.run_name:
            raise ValueError(f"{state} belongs to run {self.state.identity.get('run')!r}, not {self.run_name!r}")
        if self.state.identity != ident:
            self.state.identity = ident
            self.state.dirty = True
        self._gate = asyncio.Semaphore(max(1, parallel))
        self._own_client = client is None
        self._client = client
        self._parallel = max(1, parallel)
        self._stream_chunks = Chunks(self.layout.stream, self.layout.traces / "stream.jsonl")
        self._annotation_chunks: Dict[str, Chunks] = {}
        self._unreadable: Dict[Tuple[str, int], float] = {}
        self._warned: Set[str] = set()
        self._caught_up = False
        if self._stream_chunks.can_read_sealed and self.state.stream.get("sealed"):
            # a previous run could not read these sealed chunks; this one can
            rows = self.state.stream.pop("sealed")
            logger.info("finishing %d episode(s) recorded in sealed chunks an earlier run could not read", len(rows))
            self.state.stream.setdefault("waiting", []).extend({**r, "seen": 0.0} for r in rows)
            self.state.dirty = True

    # ---- running ----

    def episode_for(self, key: str) -> str:
        return formats.episode_name(self.run_name, key)

    async def run(self, once: bool = False) -> Dict[str, int]:
        """Cycles until cancelled (``once``: until a cycle finds nothing new), saving the state
        after each; returns the stats."""
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(60.0), limits=httpx.Limits(max_connections=self._parallel), event_hooks={"response": [_log_request]}
            )
        try:
            if self._tokenizer is not None:
                await self._tokenizer.ship(self._client)
                self._tokenizer = None
            said = None
            while True:
                progress = await self.cycle(final=once)
                self.state.save()
                if progress and (said is None or time.monotonic() - said >= PROGRESS_EVERY_SECONDS):
                    said = time.monotonic()
                    self._say_progress()
                if once and not progress:
                    return dict(self.state.stats)
                if not once:
                    await asyncio.sleep(self.poll)
        finally:
            self.state.save()
            self._stream_chunks.close()
            for c in self._annotation_chunks.values():
                c.close()
            if self._own_client and self._client is not None:
                await self._client.aclose()
                self._client = None

    async def cycle(self, final: bool = False) -> bool:
        """One pass over every source; True when something new was read or sent."""
        if not self.layout.traces.is_dir() and not self.layout.live.is_dir():
            self._warn_once("no-dir", "%s does not exist yet: waiting for prime-rl's file monitor", self.layout.traces)
            return False
        annotation_marks = self._annotation_marks()
        progress = await self._live_and_pending()
        progress = await self._stream(final) or progress
        progress = await self._annotations(annotation_marks) or progress
        await self._orphans()
        return progress

    def _say_progress(self) -> None:
        """One log line with the counts so far (INFO: ``--quiet`` leaves it out)."""
        counts = ", ".join(f"{v} {k}" for k, v in sorted(self.state.stats.items()))
        logger.info("progress: %s", counts or "nothing yet")

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning(msg, *args)

    # ---- talking to the relay ----

    def _http(self, episode: str) -> RelayHttp:
        assert self._client is not None
        return RelayHttp(self.url, episode, token=self.token, client=self._client)

    async def _retrying(self, what: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``attempt()`` until it answers: retryable failures (network, 5xx, 408, 429) are retried
        forever with backoff (a relay outage loses nothing: the bridge waits); refusals raise."""
        delay = 0.2
        first: Optional[float] = None
        logged = 0.0
        while True:
            try:
                async with self._gate:  # requests in flight, over all episodes
                    return await attempt()
            except RelayError as e:
                if not e.retryable:
                    raise
                now = time.monotonic()
                if first is None:
                    first = logged = now
                    logger.warning("%s: %s; retrying until the relay answers", what, e)
                elif now - logged > 30:
                    logged = now
                    logger.warning("%s: still failing after %.0f s: %s", what, now - first, e)
                self.state.count("retries")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def _relay_identity(self, episode: str) -> Optional[Dict[str, Any]]:
        status = await self._status(episode)
        d = status.get("dispatch") if status else None
        return d if isinstance(d, dict) else None

    async def _status(self, episode: str) -> Optional[Dict[str, Any]]:
        """The episode's status JSON, or None when the relay has no such episode."""
        http = self._http(episode)

        async def attempt() -> Optional[Dict[str, Any]]:
            r = await http.request("GET", "status")
            if r.status_code == 404:
                return None
            if r.status_code != 200:
                raise error_from_answer(r.status_code, r.content, f"GET status of {episode}")
            body: Dict[str, Any] = r.json()
            return body

        return await self._retrying(f"status of {episode}", attempt)

    async def _send(self, work: EpisodeWork) -> None:
        """Announce, then the pieces in batches; a refused piece stops its file, not the rest."""
        e = self.state.episodes.get(work.episode)
        if work.announce is not None:
            await self._announce(work.episode, work.announce)
        pieces = list(work.pieces)
        while pieces:
            batch, size = [], 0
            for p in pieces:
                if batch and (len(batch) >= BATCH_ENVELOPES or size + len(p.delta) > BATCH_BYTES):
                    break
                batch.append(p)
                size += len(p.delta) + 64
            e = self.state.episodes.get(work.episode)
            identity = e.get("dispatch") if e is not None and not e.get("identified") else None
            body = _batch_body(batch, identity)
            try:
                ack = await self._retrying(f"deltas for {work.episode}", lambda: self._http(work.episode).post("deltas", body))
            except RelayError as err:
                if err.error == "dispatch_conflict" and e is not None and not e.get("identified"):
                    # the relay holds another identity for this rollout (prime-rl recomputes
                    # `started` per event): keep the relay's, send the deltas without one
                    e["dispatch"] = await self._relay_identity(work.episode) or e.get("dispatch")
                    e["identified"] = True
                    self.state.count("dispatch_conflicts")
                    continue
                pieces = self._refused(work.episode, err, batch, pieces)
                continue
            if e is not None and identity is not None:
                e["identified"] = True
            for p in batch:
                p.done()
            self.state.count("applied", int(ack.get("applied", 0)))
            self.state.count("duplicates", int(ack.get("duplicates", 0)))
            pieces = pieces[len(batch) :]

    def _refused(self, episode: str, err: RelayError, batch: List[Piece], pieces: List[Piece]) -> List[Piece]:
        """The relay refused a batch (4xx: the batch changed nothing). The piece it names stops:
        a live file's line stops that file (prime-rl's fold would not go past it either), one of
        the bridge's own deltas is dropped. Returns what is left to send."""
        bad = _culprit(err, batch)
        suspects = [bad] if bad is not None else batch
        logger.error("episode %s: the relay refused %s: %s (%s)", episode, _what(bad), err, err.error)
        self.state.count("refused")
        files = {p.origin for p in suspects if p.origin}
        for origin in files:
            self._refuse_file(origin, f"the relay refused line {next(p.seq for p in suspects if p.origin == origin)}: {err}")
        dropped = {id(p) for p in suspects if not p.origin}
        return [p for p in pieces if p.origin not in files and id(p) not in dropped]

    async def _announce(self, episode: str, identity: Dict[str, Any]) -> None:
        body = pack(identity)
        try:
            await self._retrying(f"announce {episode}", lambda: self._http(episode).post("dispatch", body))
        except RelayError as err:
            if err.error != "dispatch_conflict":
                logger.error("episode %s: the relay refused the pending announcement: %s (%s)", episode, err, err.error)
                self.state.count("refused")
                return
            identity = await self._relay_identity(episode) or identity
            self.state.count("dispatch_conflicts")
        e = self.state.episodes.setdefault(episode, _new_episode(identity))
        e["identified"] = True
        e["pending"] = True
        self.state.count("announced")
        self.state.dirty = True

    # ---- pending files and live files ----

    async def _live_and_pending(self) -> bool:
        live_dir = self.layout.live
        present: Dict[str, Path] = {}
        if live_dir.is_dir():
            for p in live_dir.glob("*.jsonl"):
                present[p.stem] = p
        for tid in [t for t in self.state.files if t not in present]:
            self._file_gone(tid)
        works: Dict[str, EpisodeWork] = {}
        progress = self._pending_files(works)
        budget = CYCLE_READ_BYTES
        opened: List[Tuple[float, str, List[Tuple[Dict[str, Any], Optional[Dict[str, Any]]]], Cursor]] = []
        for tid in sorted(present):
            if budget <= 0:
                progress = True
                break
            path = present[tid]
            f = self.state.files.get(tid)
            if f is not None and f.get("refused"):
                continue
            cursor = Cursor.from_json(f["cursor"]) if f is not None else None
            got = follow(path, cursor, min(FILE_READ_BYTES, budget))
            if got.status == "replaced":
                self._replaced(tid, works)
                f, cursor = None, None
                got = follow(path, None, min(FILE_READ_BYTES, budget))
            if got.status == "too_long":
                self._refuse_file(tid, "a line longer than 64 MiB", path)
                continue
            if not got.lines or got.cursor is None:
                continue
            progress = True
            budget -= sum(len(ln) for ln in got.lines)
            parsed = self._parse(tid, got.lines, path)
            if parsed is None:
                continue
            if f is None:
                first, dispatch = parsed[0]
                if "open" not in first:
                    # the open line was dropped (prime-rl's event cap): prime-rl cannot fold it either
                    self._refuse_file(tid, "its first line has no `open` (a headerless trace)", path)
                    continue
                opened.append((_started(first), tid, parsed, got.cursor))
            else:
                self._queue_lines(works, tid, parsed, got.cursor)
        # new traces in the order they started (the orchestrator before its sub-agents)
        for _, tid, parsed, cur in sorted(opened, key=lambda o: (o[0], o[1])):
            if self._open_file(works, tid, parsed[0][1]):
                self._queue_lines(works, tid, parsed, cur)
        # a discard not acknowledged before the bridge stopped is sent again
        queued = {(p.producer, p.seq) for w in works.values() for p in w.pieces}
        for ep, e in self.state.episodes.items():
            for tid, tr in e["traces"].items():
                if tr["status"] == "discarding" and (tr["producer"], int(tr["seq"]) + 1) not in queued:
                    self._queue_discard(self._work(works, ep), ep, tid, tr)
        if works:
            await asyncio.gather(*(self._send(w) for w in works.values()))
        return progress

    def _parse(self, tid: str, lines: List[bytes], path: Path) -> Optional[List[Tuple[Dict[str, Any], Optional[Dict[str, Any]]]]]:
        """The file's new lines as deltas, or None when one cannot be one (the file is refused:
        prime-rl's LiveFolds drops such a file too)."""
        out = []
        for i, line in enumerate(lines):
            try:
                out.append(formats.live_delta(line))
            except formats.LineError as err:
                self._refuse_file(tid, f"line {self._seq_of(tid) + i + 1}: {err}", path)
                return None
        return out

    def _seq_of(self, tid: str) -> int:
        f = self.state.files.get(tid)
        if f is None:
            return 0
        tr = self.state.episodes.get(f["episode"], {}).get("traces", {}).get(tid)
        return int(tr["seq"]) if tr else 0

    def _work(self, works: Dict[str, EpisodeWork], episode: str) -> EpisodeWork:
        w = works.get(episode)
        if w is None:
            w = works[episode] = EpisodeWork(episode)
        return w

    def _pending_files(self, works: Dict[str, EpisodeWork]) -> bool:
        """Announce new pending files; note the ones that went."""
        pending_dir = self.layout.pending
        present: Dict[str, Path] = {}
        if pending_dir.is_dir():
            for p in pending_dir.glob("*.json"):
                present[p.stem] = p
        progress = False
        now = time.time()
        for e in self.state.episodes.values():
            if e.get("pending_file") is not None and e["pending_file"] not in present:
                del e["pending_file"]
                e["pending"] = False
                if not e.get("traces"):
                    e["gone_since"] = now  # forgotten after PENDING_KEEP_SECONDS if nothing streams
                self.state.dirty = True
        announced = {e.get("pending_file") for e in self.state.episodes.values() if e.get("pending")}
        for did, path in sorted(present.items()):
            if did in announced:
                continue
            try:
                identity = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue  # gone, or being written (prime-rl writes .tmp and renames: rare)
            if not isinstance(identity, dict):
                continue
            ep = self.episode_for(str(identity.get("id") or did))
            e = self.state.episodes.get(ep)
            if ep in self.state.ended or (e is not None and e.get("traces")):
                continue  # it already streams (or ended): nothing to announce
            if e is None:
                e = self.state.episodes[ep] = _new_episode(identity)
            e["pending_file"] = did
            if e.get("identified"):
                e["pending"] = True
                continue
            self._work(works, ep).announce = e["dispatch"]
            progress = True
        return progress

    def _file_gone(self, tid: str) -> None:
        f = self.state.files.pop(tid)
        self.state.dirty = True
        e = self.state.episodes.get(f["episode"])
        if e is None:
            return
        tr = e["traces"].get(tid)
        if tr is not None and tr["status"] == "live":
            tr["status"] = "gone"
        if not any(t["status"] == "live" for t in e["traces"].values()):
            e.setdefault("gone_since", None)
            e["gone_since"] = e["gone_since"] or time.time()

    def _open_file(self, works: Dict[str, EpisodeWork], tid: str, dispatch: Optional[Dict[str, Any]]) -> bool:
        """A new live file (its first line holds `open`): its episode, and the discards a retry implies."""
        if tid in self.state.traces and self.state.traces[tid] in self.state.ended:
            self.state.files[tid] = {"episode": self.state.traces[tid], "cursor": None, "refused": "its episode ended"}
            return False
        key = dispatch.get("id") if dispatch is not None and isinstance(dispatch.get("id"), str) and dispatch.get("id") else tid
        ep = self.episode_for(key)
        if ep in self.state.ended:
            self.state.files[tid] = {"episode": ep, "cursor": None, "refused": "its episode ended"}
            logger.warning("live file %s opens a trace in %s, which already ended: not sent", tid, ep)
            return False
        e = self.state.episodes.get(ep)
        if e is None:
            e = self.state.episodes[ep] = _new_episode(dispatch)
        w = self._work(works, ep)
        # a trace of this rollout whose file vanished before it ended was discarded (a retry)
        for old, tr in e["traces"].items():
            if tr["status"] == "gone":
                self._queue_discard(w, ep, old, tr)
        prev = e["traces"].get(tid)
        gen = prev["gen"] + 1 if prev is not None else 0
        e["traces"][tid] = {"status": "live", "producer": producer_of(tid, gen), "seq": 0, "gen": gen}
        e["gone_since"] = None
        self.state.traces[tid] = ep
        self.state.files[tid] = {"episode": ep, "cursor": None}
        self.state.dirty = True
        return True

    def _queue_discard(self, w: EpisodeWork, ep: str, tid: str, tr: Dict[str, Any]) -> None:
        seq = int(tr["seq"]) + 1
        delta = pack({"trace": tid, "discard": True})

        def done() -> None:
            tr["seq"] = seq
            tr["status"] = "discarded"
            self.state.count("discards")

        tr["status"] = "discarding"
        w.pieces.append(Piece(tr["producer"], seq, delta, False, done, ""))

    def _replaced(self, tid: str, works: Dict[str, EpisodeWork]) -> None:
        """The file was replaced under its name: its old trace is discarded, the new file read
        from its start as a new generation."""
        f = self.state.files.pop(tid)
        logger.warning("live file %s was replaced: its trace restarts from the new file", tid)
        self.state.count("replaced_files")
        e = self.state.episodes.get(f["episode"])
        tr = e["traces"].get(tid) if e is not None else None
        if e is not None and tr is not None and tr["status"] == "live":
            self._queue_discard(self._work(works, f["episode"]), f["episode"], tid, tr)

    def _queue_lines(self, works: Dict[str, EpisodeWork], tid: str, parsed: List[Tuple[Dict[str, Any], Optional[Dict[str, Any]]]], cursor: Cursor) -> None:
        f = self.state.files[tid]
        ep = f["episode"]
        tr = self.state.episodes[ep]["traces"][tid]
        w = self._work(works, ep)
        base = int(tr["seq"])
        last = len(parsed) - 1
        for i, (delta, dispatch) in enumerate(parsed):
            seq = base + i + 1

            def done(seq: int = seq, final: bool = i == last) -> None:
                tr["seq"] = seq
                if final:
                    f["cursor"] = cursor.to_json()
                self.state.count("lines")

            w.pieces.append(Piece(tr["producer"], seq, pack(delta), dispatch is not None, done, tid))

    def _refuse_file(self, tid: str, why: str, path: Optional[Path] = None) -> None:
        """Stop reading a live file (the relay refused a line of it, or it cannot be read)."""
        f = self.state.files.get(tid)
        if f is None:
            f = self.state.files[tid] = {"episode": self.state.traces.get(tid, ""), "cursor": None}
        if not f.get("refused"):
            logger.error("live file %s: %s; the bridge stops reading it", path or tid, why)
            self.state.count("refused_files")
        f["refused"] = why
        e = self.state.episodes.get(f.get("episode", ""))
        if e is not None and tid in e["traces"] and e["traces"][tid]["status"] == "live":
            e["traces"][tid]["status"] = "refused"
        self.state.dirty = True

    # ---- the finished stream ----

    async def _stream(self, final: bool) -> bool:
        st = self.state.stream
        waiting: List[Dict[str, Any]] = st.setdefault("waiting", [])
        progress = False
        index = self.layout.stream_index
        self._caught_up = True
        if len(waiting) < MAX_WAITING and index.exists():
            cursor = Cursor.from_json(st["index"]) if st.get("index") else None
            got = whole_lines(index, cursor, INDEX_READ_BYTES)
            if got.status == "replaced" and waiting:
                # their offsets point into the stream that was replaced: their records are gone
                logger.warning("%d finished record(s) waiting to be read went with the replaced stream", len(waiting))
                self.state.count("records_lost", len(waiting))
                waiting.clear()
            now = time.time()
            for line in got.lines:
                try:
                    row = json.loads(line)
                    offset = int(row["offset"])
                except (ValueError, KeyError, TypeError) as err:
                    logger.error("%s: an unreadable index row (%s): skipped", index, err)
                    self.state.count("unreadable_rows")
                    continue
                chunk = row.get("chunk")
                traces = row.get("trace_ids") if isinstance(row.get("trace_ids"), list) else []
                waiting.append(
                    {
                        "chunk": chunk if isinstance(chunk, int) else None,
                        "offset": offset,
                        "id": row.get("id"),
                        "traces": traces,
                        "kind": row.get("kind"),
                        "env": row.get("env"),
                        "seen": now,
                    }
                )
            if got.cursor is not None and (got.lines or got.status == "replaced"):
                st["index"] = got.cursor.to_json()
                self.state.dirty = True
                progress = progress or bool(got.lines)
            self._caught_up = not got.more
        elif len(waiting) >= MAX_WAITING:
            self._caught_up = False
        now = time.time()
        ready = [w for w in waiting if final or now - w["seen"] >= self.finish_grace or not self._still_live(w["traces"])]
        if not ready:
            return progress
        # rows of one episode in order, episodes in parallel
        by_episode: Dict[str, List[Dict[str, Any]]] = {}
        for w in ready:
            known = next((self.state.traces[t] for t in w["traces"] if t in self.state.traces), None)
            by_episode.setdefault(known or f"row:{w['chunk']}:{w['offset']}", []).append(w)

        finished = []

        async def finish_all(rows: List[Dict[str, Any]]) -> None:
            for row in rows:
                if await self._finish_row(row):
                    waiting.remove(row)
                    finished.append(row)
                    self.state.dirty = True

        await asyncio.gather(*(finish_all(rows) for rows in by_episode.values()))
        return progress or bool(finished)

    def _still_live(self, traces: List[str]) -> bool:
        """A trace of the row still has a live file being read, or one not read yet (it appeared
        after this pass listed the directory: the next pass reads it first)."""
        live = self.layout.live
        for t in traces:
            f = self.state.files.get(t)
            if (f is not None and not f.get("refused")) or (f is None and (live / f"{t}.jsonl").exists()):
                return True
        return False

    async def _finish_row(self, row: Dict[str, Any]) -> bool:
        """Finish the episode of one index row; False when its record is not readable yet."""
        chunk = row["chunk"]
        try:
            line = self._stream_chunks.line_at(chunk, row["offset"])
        except SealedChunk as err:
            self._sealed_row(row, err)
            return True
        except (OSError, ValueError) as err:
            # prime-rl flushes a record before its row; a directory being copied in may not have
            if time.time() - row["seen"] < RECORD_WAIT_SECONDS:
                return False
            logger.error("finished record at chunk %s offset %s: %s (for %.0f s): skipped", chunk, row["offset"], err, RECORD_WAIT_SECONDS)
            self.state.count("unreadable_records")
            return True
        try:
            record = json.loads(line)
            if not isinstance(record, dict) or not isinstance(record.get("id"), str):
                raise ValueError("a finished record is an object with a str `id`")
            traces = formats.record_traces(record)
            if row.get("id") is not None and record["id"] != row["id"]:
                raise ValueError(f"the record there is episode {record['id']}, not {row['id']} (the stream changed under its index)")
        except ValueError as err:
            logger.error("finished record at chunk %s offset %s: %s: skipped", chunk, row["offset"], err)
            self.state.count("unreadable_records")
            return True
        ep = next((self.state.traces[t["id"]] for t in traces if t["id"] in self.state.traces), None)
        await self._finish(ep if ep is not None else self.episode_for(record["id"]), record, row, traces)
        return True

    def _sealed_row(self, row: Dict[str, Any], err: SealedChunk) -> None:
        self._warn_once(
            f"sealed:{row['chunk']}",
            "stream chunk %s is sealed (zstd) and this Python has neither `zstandard` nor `pyzstd`: the episodes "
            "recorded in it cannot be finished from their records, so the relay keeps them as their live files "
            "left them (not finished), and annotations of those it never saw live are skipped. Install one "
            "(Debian: apt-get install python3-zstandard; pip install zstandard) and start the bridge again with "
            "the same state file: it finishes them.",
            err,
        )
        self.state.count("sealed_unread")
        sealed = self.state.stream.setdefault("sealed", [])
        if len(sealed) < MAX_SEALED_KEPT:
            sealed.append({k: v for k, v in row.items() if k != "seen"})

    async def _finish(self, ep: str, record: Dict[str, Any], row: Dict[str, Any], traces: List[Dict[str, Any]]) -> None:
        status = await self._status(ep)
        ended = status is not None and status.get("status") in ("finished", "failed")
        if not ended:
            have: Dict[str, Dict[str, Any]] = {}
            if status is not None:
                doc = unpack(await self._retrying(f"GET {ep}", self._http(ep).get_episode))
                for t in doc.get("traces") or [] if isinstance(doc, dict) else []:
                    if isinstance(t, dict) and isinstance(t.get("id"), str):
                        have[t["id"]] = t
            e = self.state.episodes.get(ep)
            if e is None:
                e = self.state.episodes[ep] = _new_episode(formats.identity_of(record, row))
            if status is not None and status.get("dispatch") is not None:
                e["identified"] = True
            w = EpisodeWork(ep)
            for t in traces:
                deltas = formats.completion(t, have.get(t["id"]))
                for i, d in enumerate(deltas):
                    w.pieces.append(Piece(f"prime-rl/{t['id']}/finish", i + 1, pack(d), True, lambda: self.state.count("completions"), ""))
            if w.pieces:
                await self._send(w)
            body = pack(formats.reply_of(record))
            try:
                answer = await self._retrying(f"reply for {ep}", lambda: self._http(ep).post("reply", body))
                self.state.count("finished" if answer.get("status") == "finished" else "failed")
            except FinishMismatch as err:
                logger.error("episode %s: the relay refused the reply: %s", ep, err)
                self.state.count("finish_refused")
            except RelayError as err:
                logger.error("episode %s: the relay refused the reply: %s (%s)", ep, err, err.error)
                self.state.count("finish_refused")
        for t in traces:
            f = self.state.files.get(t["id"])
            if f is not None:
                f["refused"] = "its episode ended"
        self.state.end(ep, self.keep_ended, [t["id"] for t in traces])

    # ---- annotations ----

    def _annotation_marks(self) -> Dict[str, int]:
        """Each producer's index size now: rows up to it were written before this cycle reads the
        stream, so their traces' records are already there."""
        marks: Dict[str, int] = {}
        root = self.layout.annotations
        if root.is_dir():
            for p in root.glob("*.index.jsonl"):
                try:
                    marks[p.name[: -len(".index.jsonl")]] = p.stat().st_size
                except OSError:
                    pass
        return marks

    async def _annotations(self, marks: Dict[str, int]) -> bool:
        """Each producer's new records (up to its mark) to their episodes, producers in name order
        (prime-rl's readers fold them in that order), an interrupted producer first."""
        producers = sorted(marks)
        posting = self.state.posting
        if posting is not None and posting.get("producer") in marks:
            producers.remove(posting["producer"])
            producers.insert(0, posting["producer"])
        progress = False
        for producer in producers:
            progress = await self._annotate(producer, marks[producer]) or progress
        return progress

    async def _annotate(self, producer: str, mark: int) -> bool:
        root = self.layout.annotations
        st = self.state.annotations.setdefault(producer, {"cursor": None, "skip": {}})
        skip: Dict[str, int] = st.setdefault("skip", {})
        posting = self.state.posting
        if posting is not None and posting.get("producer") == producer:
            # the last run posted this producer's records and stopped before saving the answers:
            # what the relay merged since is skipped (the bridge is the episodes' one annotator)
            for ep, before in posting.get("before", {}).items():
                now = await self._annotation_version(ep)
                if now is not None and now > before:
                    skip[ep] = skip.get(ep, 0) + now - before
            self.state.posting = None
            self.state.dirty = True
        index = root / f"{producer}.index.jsonl"
        cursor = Cursor.from_json(st["cursor"]) if st.get("cursor") else None
        got = whole_lines(index, cursor, INDEX_READ_BYTES, limit=mark)
        if got.status == "replaced":
            skip.clear()
        if not got.lines:
            if got.status == "replaced" and got.cursor is not None:
                st["cursor"] = got.cursor.to_json()
                self.state.dirty = True
            return False
        chunks = self._annotation_chunks.get(producer)
        if chunks is None:
            chunks = self._annotation_chunks[producer] = Chunks(root / producer, root / f"{producer}.jsonl")
        batches: Dict[str, List[Dict[str, Any]]] = {}
        end: Cursor = got.cursor  # type: ignore[assignment]
        left = dict(skip)  # what is still to skip once the cursor has moved past these rows
        for line, line_end in zip(got.lines, got.ends):
            try:
                row = json.loads(line)
                trace = row["trace_id"]
                chunk = row.get("chunk")
                offset = int(row["offset"])
            except (ValueError, KeyError, TypeError) as err:
                logger.error("%s: an unreadable index row (%s): skipped", index, err)
                self.state.count("unreadable_rows")
                continue
            ep = self.state.traces.get(trace)
            if ep is None:
                if not self._caught_up or any(trace in w["traces"] for w in self.state.stream.get("waiting", [])):
                    # its episode's record is not read yet: this producer waits for the stream
                    end = cursor_at(index, line_end - len(line) - 1)
                    break
                self._warn_once(
                    f"unmatched:{producer}",
                    "annotations of trace %s (%s): no episode of this run has that trace; skipped (further ones are only counted: annotations_unmatched)",
                    trace,
                    producer,
                )
                self.state.count("annotations_unmatched")
                continue
            try:
                record = json.loads(chunks.line_at(chunk if isinstance(chunk, int) else None, offset))
                if not isinstance(record, dict) or record.get("trace_id") != trace:
                    raise ValueError(f"the record at offset {offset} is not trace {trace}'s")
            except SealedChunk as err:
                self._warn_once(
                    f"sealed-annotations:{producer}:{chunk}",
                    "annotation chunk %s is sealed (zstd) and this Python has neither `zstandard` nor `pyzstd`: its records are skipped",
                    err,
                )
                self.state.count("sealed_unread")
                continue
            except (OSError, ValueError) as err:
                first = self._unreadable.setdefault((producer, offset), time.time())
                if time.time() - first < RECORD_WAIT_SECONDS:
                    end = cursor_at(index, line_end - len(line) - 1)  # not there yet: wait for it
                    break
                logger.error("annotations of %s at chunk %s offset %s: %s (for %.0f s): skipped", producer, chunk, offset, err, RECORD_WAIT_SECONDS)
                self.state.count("unreadable_records")
                continue
            if left.get(ep):
                left[ep] -= 1
                if not left[ep]:
                    del left[ep]
                self.state.count("annotations_skipped")
                continue
            batches.setdefault(ep, []).append(record)
        if batches:
            before = {}
            for ep in batches:
                known = self.state.annotated.get(ep)
                before[ep] = known if known is not None else (await self._annotation_version(ep) or 0)
            self.state.posting = {"producer": producer, "before": before}
            self.state.dirty = True
            self.state.save()
            await asyncio.gather(*(self._post_annotations(ep, records) for ep, records in batches.items()))
            self.state.posting = None
        st["cursor"] = end.to_json()
        st["skip"] = left
        self.state.dirty = True
        self.state.save()
        return True

    async def _annotation_version(self, episode: str) -> Optional[int]:
        """The relay's count of the episode's annotation records (None: no such episode)."""
        http = self._http(episode)

        async def attempt() -> Optional[int]:
            r = await http.request("GET", "annotations", headers={"accept": "application/msgpack"})
            if r.status_code == 404:
                return None
            if r.status_code != 200:
                raise error_from_answer(r.status_code, r.content, f"GET annotations of {episode}")
            doc = unpack(r.content)
            return int(doc["version"])

        return await self._retrying(f"annotations of {episode}", attempt)

    async def _post_annotations(self, episode: str, records: List[Dict[str, Any]]) -> None:
        """POST the records (in batches); a refused batch is posted record by record, so one
        refusal (a trace the episode does not hold, the size limit) only loses that record."""
        pending = list(records)
        while pending:
            batch, size = [], 0
            for r in pending:
                packed = pack(r)
                if batch and size + len(packed) > BATCH_BYTES:
                    break
                batch.append(packed)
                size += len(packed)
            body = msgpack.Packer(use_bin_type=True).pack_array_header(len(batch)) + b"".join(batch)
            try:
                ack = await self._retrying(f"annotations for {episode}", lambda: self._http(episode).post("annotations", body))
            except RelayError as err:
                if len(batch) > 1:
                    for one in pending[: len(batch)]:
                        await self._post_annotations(episode, [one])
                else:
                    logger.error("episode %s: the relay refused an annotation record of trace %s: %s (%s)", episode, pending[0].get("trace_id"), err, err.error)
                    self.state.count("annotations_refused")
                pending = pending[len(batch) :]
                continue
            self.state.set_annotated(episode, int(ack.get("version", 0)), self.keep_ended)
            self.state.count("annotations", len(batch))
            pending = pending[len(batch) :]

    # ---- orphans ----

    async def _orphans(self) -> None:
        if not self._caught_up or self.state.stream.get("waiting"):
            return
        now = time.time()
        for ep, e in list(self.state.episodes.items()):
            gone = e.get("gone_since")
            if not gone:
                continue
            if not e["traces"]:
                if not e.get("pending") and now - gone > PENDING_KEEP_SECONDS:
                    del self.state.episodes[ep]  # announced, never streamed: the relay drops it itself
                    self.state.dirty = True
                continue
            if now - gone < self.orphan_after:
                continue
            why = (
                f"prime-rl's live files of this rollout are gone and no finished record came within {self.orphan_after:g} s "
                "(a relaunch wipes live/, a crash loses the rollout)"
            )
            body = pack(formats.failed_reply(why))
            try:
                await self._retrying(f"fail {ep}", lambda: self._http(ep).post("reply", body))
                self.state.count("orphaned")
                logger.warning("episode %s: failed: %s", ep, why)
            except RelayError as err:
                logger.error("episode %s: the relay refused the failure reply: %s (%s)", ep, err, err.error)
            self.state.end(ep, self.keep_ended)


def _started(first: Dict[str, Any]) -> float:
    """When a trace started (its first ``set``'s ``timing.start``; 0 when not said)."""
    scalars = first.get("set")
    timing = scalars.get("timing") if isinstance(scalars, dict) else None
    start = timing.get("start") if isinstance(timing, dict) else None
    return float(start) if isinstance(start, (int, float)) and not isinstance(start, bool) else 0.0


def _new_episode(dispatch: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    return {"dispatch": dispatch, "identified": False, "traces": {}, "gone_since": None, "pending": False}


def _batch_body(batch: List[Piece], identity: Optional[Dict[str, Any]]) -> bytes:
    """The msgpack array of the batch's envelopes (``cursor`` = seq - 1: every earlier seq of the
    producer was acknowledged, or is in this batch before it). The episode's identity rides on
    the first envelope that asks for it, while the relay has not acknowledged one."""
    envs = []
    for p in batch:
        d = identity if p.identity else None
        if d is not None:
            identity = None
        envs.append(envelope_bytes(p.producer, p.seq, p.seq - 1, p.delta, d))
    return msgpack.Packer(use_bin_type=True).pack_array_header(len(envs)) + b"".join(envs)


def _culprit(err: RelayError, batch: List[Piece]) -> Optional[Piece]:
    """The piece a batch refusal names (``field`` ``batch[i]...``)."""
    f = err.field or ""
    if f.startswith("batch["):
        try:
            return batch[int(f[len("batch[") : f.index("]")])]
        except (ValueError, IndexError):
            return None
    return batch[0] if len(batch) == 1 else None


def _what(p: Optional[Piece]) -> str:
    if p is None:
        return "a batch"
    return f"line {p.seq} of live file {p.origin}" if p.origin else f"{p.producer} seq {p.seq}"
