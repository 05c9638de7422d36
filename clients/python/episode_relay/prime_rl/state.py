"""The bridge's cursor file: what it has consumed of each file and where each trace went.

One JSON document, replaced atomically (written to ``FILE.tmp``, fsynced, renamed over ``FILE``,
directory fsynced), so a bridge killed at any instant restarts from a whole state. The state only
ever records what the relay acknowledged; what the relay acknowledged after the last save is sent
again after a restart, and the relay recognises it (same producer, same seq: a duplicate).
"""

from __future__ import annotations

import json
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any, Dict, List, Optional

FORMAT = 1


class State:
    """The bridge's state (see docs/prime-rl.md, "The cursor file").

    - ``files``: per live file (by trace id) being followed: ``episode``, ``gen`` (the file's
      generation: a file replaced under the same name is a new one), ``seq`` (records sent: the
      producer's seq), ``cursor`` (inode, offset, tail), ``refused`` (why it is no longer read).
    - ``episodes``: per episode not yet ended: ``dispatch`` (the identity the relay has, or will
      get with the next envelope), ``identified`` (the relay acknowledged it), ``traces`` (trace id
      → ``live``, ``gone``, ``discarded``, ``refused``), ``gone_since`` (wall clock when its last
      live file vanished), ``pending`` (its pending file is there).
    - ``ended``: the most recent ended episodes (episode → trace ids), so that annotations, which
      come after a rollout ended, find their episode.
    - ``stream``: the index cursor and the rows waiting to finish (their live files are still
      there); ``annotations``: an index cursor per producer; ``annotated``: per episode the
      relay's count of annotation records after the bridge's last post; ``posting``: written
      before a producer's records are posted (the producer, each episode's count before), so a
      bridge stopped before saving what the relay answered skips what the relay merged.
    - ``stats``: counts since the state was created.
    """

    def __init__(self, path: Optional[Path], data: Optional[Dict[str, Any]] = None) -> None:
        self.path = path
        d = data or {}
        self.files: Dict[str, Dict[str, Any]] = d.get("files", {})
        self.episodes: Dict[str, Dict[str, Any]] = d.get("episodes", {})
        self.ended: "OrderedDict[str, List[str]]" = OrderedDict(d.get("ended", []))
        self.stream: Dict[str, Any] = d.get("stream", {"index": None, "waiting": []})
        self.annotations: Dict[str, Any] = d.get("annotations", {})
        self.annotated: "OrderedDict[str, int]" = OrderedDict(d.get("annotated", []))
        self.posting: Optional[Dict[str, Any]] = d.get("posting")
        self.stats: Dict[str, int] = d.get("stats", {})
        self.identity: Dict[str, Any] = d.get("identity", {})
        """``output_dir`` and ``run`` the state belongs to."""
        self.traces: Dict[str, str] = {}
        """trace id → episode (derived from ``episodes`` and ``ended``)."""
        for ep, e in self.episodes.items():
            for t in e.get("traces", {}):
                self.traces[t] = ep
        for ep, ts in self.ended.items():
            for t in ts:
                self.traces.setdefault(t, ep)
        self.dirty = False

    @staticmethod
    def load(path: Optional[Path]) -> "State":
        if path is None or not path.exists():
            return State(path)
        with open(path, "r", encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"{path} is not a prime-rl bridge state file (format {FORMAT})")
        return State(path, data)

    def count(self, name: str, n: int = 1) -> None:
        if n:
            self.stats[name] = self.stats.get(name, 0) + n
            self.dirty = True

    def end(self, episode: str, keep: int, also: Optional[List[str]] = None) -> None:
        """``episode`` ended: it leaves ``episodes``; its traces (and ``also``'s) stay findable
        among the last ``keep`` ended episodes."""
        e = self.episodes.pop(episode, None)
        traces = list(dict.fromkeys([*(e or {}).get("traces", {}), *(also or [])]))
        for t in traces:
            self.traces[t] = episode
        known = self.ended.pop(episode, [])
        self.ended[episode] = list(dict.fromkeys([*known, *traces]))
        while len(self.ended) > keep:
            old, ts = self.ended.popitem(last=False)
            for t in ts:
                if self.traces.get(t) == old:
                    del self.traces[t]
        self.dirty = True

    def set_annotated(self, episode: str, version: int, keep: int) -> None:
        self.annotated.pop(episode, None)
        self.annotated[episode] = version
        while len(self.annotated) > keep:
            self.annotated.popitem(last=False)
        self.dirty = True

    def to_json(self) -> Dict[str, Any]:
        return {
            "format": FORMAT,
            "identity": self.identity,
            "files": self.files,
            "episodes": self.episodes,
            "ended": list(self.ended.items()),
            "stream": self.stream,
            "annotations": self.annotations,
            "annotated": list(self.annotated.items()),
            "posting": self.posting,
            "stats": self.stats,
        }

    def save(self) -> None:
        """Replace the file atomically (no-op without a path or without changes)."""
        if self.path is None or not self.dirty:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        data = json.dumps(self.to_json(), separators=(",", ":")).encode("utf-8")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        try:
            fd = os.open(self.path.parent, os.O_RDONLY)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.dirty = False
