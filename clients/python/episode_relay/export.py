"""A run into a notebook: a run's finished episodes, or a filtered or searched selection of them,
as a pandas DataFrame (one row per rollout or per branch), and written to JSONL (the exact
episodes) or Parquet (the rows), streaming and resumable.

Where the episodes come from:

- a selection by the list's filters (``kind``, ``env``, ``step``, ``policy_version``, ``task``,
  ``stop``, ``is_truncated``, ``is_timeout``, ``truncated``, ``errored``, ``rewards``, ``min_turns``, ``min_tokens``, ``flag``,
  ``flagged``): the run's bulk fetch ``GET /v1/runs/{run}/finished?row=1&<filters>``, one
  streamed answer giving each episode's index row beside its exact bytes, in the order the
  episodes finished, resumed by the cursor each element carries;
- a search (``q=``): ``GET /v1/runs/{run}/search?q=&status=finished&row=1&<filters>`` a page at a
  time (best match first), each result's episode read with ``GET /v1/episodes/{id}``; its
  position is the page's cursor and the place in the page.

Only one episode is held at a time (besides a writer's batch of rows); a dropped connection or a
relay's transient error is retried from the last position (``retries`` times), so no episode is
fetched twice into one output and none is skipped. The token travels in the ``Authorization``
header only, never in a URL, and never over plain http to a host that is not local.

pandas and pyarrow are optional: ``pip install 'episode-relay[export]'`` (pandas for
:func:`read_run`, pyarrow for :func:`export_parquet`); :func:`iter_rollouts`,
:func:`rollout_record`, :func:`branch_records` and :func:`export_jsonl` need neither.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Generator, Iterator, List, Mapping, Optional, Sequence, Tuple, TypeVar, Union
from urllib.parse import quote

import httpx
import msgpack

from .bulk import _More, _Splitter, follow_pages, run_path
from .episodes import RewardRanges, filter_params
from .groups import _segment
from .transport import MSGPACK, RelayError, auth_headers, check_base_url, check_relay_answer, error_from_answer, network_error

#: Columns of a rollout's row, in order (see :func:`rollout_record`).
ROLLOUT_COLUMNS = (
    "id", "run", "status", "kind", "env", "group", "task", "step", "policy_version", "staleness",
    "reward", "rewards", "metrics", "final_answer", "expected_answer", "turns", "calls", "traces", "branches",
    "input_tokens", "output_tokens", "tokens", "stop_condition", "is_truncated", "is_timeout", "error",
    "flags", "ended",
)
#: Columns of a branch's row (see :func:`branch_records`): the rollout's identity, then the branch's.
BRANCH_COLUMNS = (
    "id", "run", "kind", "env", "group", "task", "step", "policy_version", "reward",
    "trace", "branch", "leaf", "nodes", "tokens", "final_answer", "stop_condition", "is_truncated", "is_timeout",
)
#: Columns written as JSON text in files (dicts and lists: their keys vary from run to run).
JSON_COLUMNS = ("rewards", "metrics", "flags")

#: Search results asked per page.
SEARCH_PAGE = 100

T = TypeVar("T")


@dataclass(frozen=True)
class Rollout:
    """One exported episode: its id, the position after it (pass as ``cursor=`` to go on from
    there), its index row as the list shows it, and the episode's exact bytes (msgpack, as
    ``GET /v1/episodes/{id}`` answers)."""

    id: str
    cursor: str
    row: Dict[str, Any]
    episode: bytes

    def decoded(self) -> Dict[str, Any]:
        """The episode as Python objects (str and bytes distinct, int keys allowed)."""
        return msgpack.unpackb(self.episode, raw=False, strict_map_key=False)


# ---- the selection ----


def selection_params(
    *,
    kind: Optional[str] = None,
    env: Optional[str] = None,
    step: Union[None, int, Tuple[Optional[int], Optional[int]]] = None,
    policy_version: Optional[int] = None,
    task: Optional[str] = None,
    stop: Optional[str] = None,
    is_truncated: Optional[bool] = None,
    is_timeout: Optional[bool] = None,
    truncated: Optional[bool] = None,
    errored: Optional[bool] = None,
    rewards: Optional[RewardRanges] = None,
    min_turns: Optional[int] = None,
    min_tokens: Optional[int] = None,
    flag: Optional[str] = None,
    flagged: Optional[bool] = None,
) -> List[Tuple[str, str]]:
    """The list's filters as query parameters, in the relay's names (the relay's ``row-filter``):
    those of :func:`episode_relay.episodes.filter_params`, and the dispatch identity's ``kind``,
    ``env``, ``step`` (N, or ``(min, max)`` with None for an open end) and ``policy_version``, and
    the flags' ``flag`` (a rule's name) and ``flagged``. Raises :class:`RelayError` (400
    ``bad_filter``, nothing sent) on an obviously bad value."""
    params = filter_params(task=task, stop=stop, is_truncated=is_truncated, is_timeout=is_timeout, truncated=truncated, errored=errored, rewards=rewards, min_turns=min_turns, min_tokens=min_tokens)
    for name, value in (("kind", kind), ("env", env), ("flag", flag)):
        if value is not None:
            if not isinstance(value, str) or value == "":
                raise _bad(name, f"{name} must be a non-empty string (None: not filtered), got {value!r}")
            params.append((name, value))
    if step is not None:
        if isinstance(step, tuple):
            lo, hi = step
            for b in (lo, hi):
                if b is not None:
                    _whole("step", b)
            if lo is not None and hi is not None and lo > hi:
                raise _bad("step", f"step: min {lo} is above max {hi}")
            params.append(("step", f"{'' if lo is None else lo}..{'' if hi is None else hi}"))
        else:
            params.append(("step", str(_whole("step", step))))
    if policy_version is not None:
        params.append(("policy_version", str(_whole("policy_version", policy_version))))
    if flagged is not None:
        if not isinstance(flagged, bool):
            raise _bad("flagged", f"flagged must be True, False or None, got {flagged!r}")
        params.append(("flagged", "1" if flagged else "0"))
    return params


def _bad(field: str, message: str) -> RelayError:
    return RelayError(message, status=400, error="bad_filter", field=field)


def _whole(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(field, f"{field} must be a whole number >= 0, got {value!r}")
    return value


# ---- reading ----


def iter_rollouts(
    url: str,
    run: str,
    *,
    token: Optional[str] = None,
    q: Optional[str] = None,
    cursor: Optional[str] = None,
    retries: int = 5,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
    **filters: Any,
) -> Iterator[Rollout]:
    """Yield each finished episode of ``run`` in the selection as a :class:`Rollout`: with ``q``,
    the search's results that finished, best match first; else those passing the filters (keyword
    arguments of :func:`selection_params`), in the order they finished. ``cursor``: go on after
    the rollout that carried it (of the same selection and token; another is refused, 400
    ``bad_cursor``). A transient failure (network, timeout, 5xx) is retried from the last position
    up to ``retries`` times in a row; a refusal raises :class:`RelayError` at once."""
    base = check_base_url(url)
    _segment(run, "run")
    params = selection_params(**filters)
    own = client is None
    http = client if client is not None else httpx.Client(timeout=httpx.Timeout(timeout))
    source = _searched(http, base, run, token, q, params, timeout) if q is not None else _bulk(http, base, run, token, params, timeout)
    try:
        yield from _resuming(lambda at: ((r, r.cursor) for r in source(at)), cursor, retries)
    finally:
        if own:
            http.close()


def _resuming(source: Callable[[Optional[str]], Iterator[Tuple[T, str]]], cursor: Optional[str], retries: int) -> Iterator[T]:
    """What ``source(cursor)`` yields (each item with the position after it), started again from the
    last position after a transient failure (network, timeout, 5xx), up to ``retries`` times in a
    row with backoff; a refusal raises at once."""
    failures = 0
    while True:
        try:
            for item, position in source(cursor):
                failures = 0
                cursor = position
                yield item
            return
        except RelayError as e:
            if not e.retryable or failures >= retries:
                raise
            failures += 1
            time.sleep(min(0.2 * 2**failures, 5.0))


def _bulk(http: httpx.Client, base: str, run: str, token: Optional[str], params: List[Tuple[str, str]], timeout: float):
    target = base + run_path(run)
    headers = {**auth_headers(token, target), "accept": MSGPACK}
    what = f"GET run {run} finished episodes"

    def rollouts(chunks: Iterator[bytes]) -> "Generator[Rollout, None, Optional[str]]":
        splitter = _Splitter()
        more: Optional[str] = None
        for chunk in chunks:
            for element in splitter.feed(chunk):
                if isinstance(element, _More):
                    more = element.cursor
                    continue
                eid, cur, episode = element[0], element[1], element[2]
                row = splitter.last_row
                if not isinstance(row, dict):
                    raise RelayError(f"{what}: an element lacks its row (a relay without row=1?)", status=200, error="bad_answer")
                yield Rollout(eid, cur, row, episode)
        if splitter.pending():
            raise RelayError(f"{what}: the answer ended inside an element", status=None, error="truncated")  # a dropped answer: resumed from the last cursor
        return more

    def stream(cursor: Optional[str]) -> Iterator[Rollout]:
        return follow_pages(http, target, headers, [("row", "1"), *params], cursor, what, timeout, rollouts)

    return stream


def _searched(http: httpx.Client, base: str, run: str, token: Optional[str], q: str, params: List[Tuple[str, str]], timeout: float):
    if not isinstance(q, str) or not q.strip():
        raise RelayError("q must be a non-empty search query", status=400, error="bad_query", field="q")
    target = f"{base}/v1/runs/{_segment(run, 'run')}/search"
    what = f"GET run {run} search"

    def get(url: str, query: Any, accept: str) -> bytes:
        try:
            res = http.get(url, params=query, headers={**auth_headers(token, url), "accept": accept})
        except (httpx.HTTPError, OSError) as e:
            raise network_error(e, f"{what} ({url})", timeout) from e
        check_relay_answer(res, what)
        if res.status_code != 200:
            raise error_from_answer(res.status_code, res.content, what)
        return res.content

    def stream(cursor: Optional[str]) -> Iterator[Rollout]:
        page_cursor, skip = _search_position(cursor)
        while True:
            query = [("q", q), ("status", "finished"), ("row", "1"), ("limit", str(SEARCH_PAGE)), *params]
            if page_cursor:
                query.append(("cursor", page_cursor))
            page = json.loads(get(target, query, "application/json"))
            hits = page.get("episodes") if isinstance(page, dict) else None
            if not isinstance(hits, list):
                raise RelayError(f"{what}: the answer is not a page of results", status=200, error="bad_answer")
            for i, hit in enumerate(hits):
                if i < skip:
                    continue
                eid, row = hit.get("id"), hit.get("row")
                if not isinstance(eid, str) or not isinstance(row, dict):
                    raise RelayError(f"{what}: a result lacks its id or row (a relay without row=1?)", status=200, error="bad_answer")
                episode = get(f"{base}/v1/episodes/{quote(eid, safe='')}", None, MSGPACK)
                yield Rollout(eid, json.dumps([page_cursor, i + 1]), row, episode)
            following = page.get("cursor")
            if not following:
                return
            page_cursor, skip = following, 0

    return stream


def _search_position(cursor: Optional[str]) -> Tuple[Optional[str], int]:
    if not cursor:
        return None, 0
    try:
        page, n = json.loads(cursor)
        if (page is None or isinstance(page, str)) and isinstance(n, int) and n >= 0:
            return page, n
    except (ValueError, TypeError):
        pass
    raise RelayError(f"not a cursor of a search export: {cursor[:80]!r}", status=400, error="bad_cursor", field="cursor")


# ---- rows ----


def _trace_fields(t: Mapping[str, Any]) -> Tuple[List[Optional[int]], List[Mapping[str, Any]]]:
    nodes = t.get("nodes") or []
    parents = [n.get("parent") if isinstance(n, Mapping) else None for n in nodes]
    return parents, nodes


def _leaves(parents: Sequence[Optional[int]]) -> List[int]:
    """Nodes no node names as its parent: a branch (root to leaf) ends at each, in node order."""
    has_child = [False] * len(parents)
    for p in parents:
        if isinstance(p, int) and 0 <= p < len(parents):
            has_child[p] = True
    return [i for i, c in enumerate(has_child) if not c]


def _path(parents: Sequence[Optional[int]], leaf: int) -> List[int]:
    out, at, seen = [], leaf, set()
    while isinstance(at, int) and 0 <= at < len(parents) and at not in seen:
        seen.add(at)
        out.append(at)
        at = parents[at]  # type: ignore[assignment]
    return out[::-1]


def _text(content: Any) -> Optional[str]:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def _answer_on(nodes: Sequence[Mapping[str, Any]], path: Sequence[int]) -> Optional[str]:
    """The last assistant message's text on the path (None without one)."""
    for i in reversed(path):
        m = nodes[i].get("message") if isinstance(nodes[i], Mapping) else None
        if isinstance(m, Mapping) and m.get("role") == "assistant":
            text = _text(m.get("content"))
            if text is not None:
                return text
    return None


def _num(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _weighted_scores(rewards: Any) -> List[Tuple[str, float, float]]:
    """A trace's ``(key, score, weight)``: ``{key: {score, weight}}`` entries (weight absent: 1), a bare number is ``reward``."""
    if _finite(rewards):
        return [("reward", float(rewards), 1.0)]
    out: List[Tuple[str, float, float]] = []
    if isinstance(rewards, Mapping):
        for k, v in rewards.items():
            if _finite(v):
                out.append((str(k), float(v), 1.0))
            elif isinstance(v, Mapping) and _finite(v.get("score")):
                w = v.get("weight")
                out.append((str(k), float(v["score"]), float(w) if _finite(w) else 1.0))
    return out


def trace_reward(rewards: Any) -> Optional[float]:
    """One trace's reward as the trainer counts it: the sum of score × weight (None without a score)."""
    s = _weighted_scores(rewards)
    return sum(score * weight for _, score, weight in s) if s else None


def episode_reward(trace_rewards: Sequence[Any]) -> Tuple[Optional[float], Dict[str, float]]:
    """An episode's reward as the trainer counts it (prime-rl ``summarize_episode``; the relay's
    ``src/protocol/registry/rewards.ts``): the mean of :func:`trace_reward` over the traces that have
    rewards (a reward-less trace is skipped), and per key the mean of its score over the traces that
    have it (keys sorted)."""
    total = 0.0
    rewarded = 0
    by_key: Dict[str, List[float]] = {}
    for r in trace_rewards:
        t = trace_reward(r)
        if t is None:
            continue
        total += t
        rewarded += 1
        for k, score, _ in _weighted_scores(r):
            by_key.setdefault(k, []).append(score)
    means = {k: sum(v) / len(v) for k, v in sorted(by_key.items())}
    return (total / rewarded if rewarded else None), means


def _expected_answer(episode: Mapping[str, Any], traces: Sequence[Mapping[str, Any]]) -> Any:
    """The task's answer: the episode's task (the reply head's), else the first trace's ``open.task`` that has one."""
    for task in [episode.get("task"), *(t.get("task") for t in traces)]:
        data = task.get("data") if isinstance(task, Mapping) else None
        answer = data.get("answer") if isinstance(data, Mapping) else None
        if answer is not None:
            return answer
    return None


def _role(node: Any) -> Optional[str]:
    message = node.get("message") if isinstance(node, Mapping) else None
    role = message.get("role") if isinstance(message, Mapping) else None
    return role if isinstance(role, str) else None


def rollout_record(row: Mapping[str, Any], episode: Mapping[str, Any]) -> Dict[str, Any]:
    """One rollout's row (:data:`ROLLOUT_COLUMNS`): its identity from its index row (kind, env,
    group, task, step, policy_version, staleness, status, error, flags), the rest counted from the
    exact episode: the reward and per key the mean score over the traces (:func:`episode_reward`,
    the trainer's), metrics (the first trace's), the final answer (the last assistant message of the
    first trace's last branch), the task's expected answer (the episode's task, else a trace's
    ``open.task``), turns (prime-rl's: assistant nodes, all traces), calls (model calls, all traces), traces, branches, input/output/total tokens
    (all traces), the first trace's stop condition, the trainer's truncation (any trace: :func:`trace_truncated`)
    and whether the first trace timed out."""
    traces = [t for t in (episode.get("traces") or []) if isinstance(t, Mapping)]
    first = traces[0] if traces else {}
    branches = 0
    final = None
    for i, t in enumerate(traces):
        parents, nodes = _trace_fields(t)
        leaves = _leaves(parents)
        branches += len(leaves)
        if i == 0 and leaves:
            final = _answer_on(nodes, _path(parents, leaves[-1]))
    expected = _expected_answer(episode, traces)
    reward, scores = episode_reward([t.get("rewards") for t in traces])
    metrics = first.get("metrics") if isinstance(first.get("metrics"), Mapping) else {}
    flags = row.get("flags") or []
    return {
        "id": row.get("id"),
        "run": row.get("run"),
        "status": row.get("status"),
        "kind": row.get("kind"),
        "env": row.get("env"),
        "group": row.get("group"),
        "task": row.get("task"),
        "step": row.get("step"),
        "policy_version": row.get("policy_version"),
        "staleness": row.get("staleness"),
        "reward": reward,
        "rewards": scores,
        "metrics": {str(k): (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v) for k, v in metrics.items()},
        "final_answer": final,
        "expected_answer": expected if isinstance(expected, str) else (None if expected is None else json.dumps(expected, default=str)),
        "turns": sum(1 for t in traces for n in (t.get("nodes") or []) if _role(n) == "assistant"),
        "calls": sum(len(t.get("calls") or []) for t in traces),
        "traces": len(traces),
        "branches": branches,
        "input_tokens": sum(_num(t.get("num_input_tokens")) for t in traces),
        "output_tokens": sum(_num(t.get("num_output_tokens")) for t in traces),
        "tokens": sum(_num(t.get("num_total_tokens")) for t in traces),
        "stop_condition": first.get("stop_condition"),
        # the trainer's truncation over every trace; the first trace's timeout by its name (no ``truncated``
        # column: the API's deprecated alias of ``is_timeout`` would read as the trainer's truncation)
        "is_truncated": any(trace_truncated(t) for t in traces),
        "is_timeout": bool(first.get("is_timeout")),
        "error": row.get("error"),
        "flags": [f.get("rule") for f in flags if isinstance(f, Mapping)],
        "ended": row.get("ended"),
    }


#: Stop conditions the trainer counts as truncated (prime-rl ``summarize_episode``; src/protocol/registry/truncation.ts).
TRUNCATING_STOPS = frozenset({"max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed"})


def trace_truncated(trace: Mapping[str, Any]) -> bool:
    """Whether a trace is truncated as the trainer counts it (verifiers ``Trace.is_truncated``): its stop
    condition is a framework limit, or its last successful model call (the last without an ``error``)
    finished with ``length``."""
    if trace.get("stop_condition") in TRUNCATING_STOPS:
        return True
    last = None
    for c in trace.get("calls") or []:
        if not isinstance(c, Mapping) or c.get("error") is not None:
            continue
        f = c.get("finish_reason")
        last = f if isinstance(f, str) else None
    return last == "length"


def branch_records(row: Mapping[str, Any], episode: Mapping[str, Any]) -> List[Dict[str, Any]]:
    """One row per branch (a sampled path from a trace's root to a leaf; :data:`BRANCH_COLUMNS`):
    the rollout's identity and reward, the trace, the branch's index in its trace, its leaf node,
    its nodes, its tokens (token ids on the path), its final answer (the path's last assistant
    message) and the trace's stop condition."""
    out: List[Dict[str, Any]] = []
    traces = [t for t in (episode.get("traces") or []) if isinstance(t, Mapping)]
    reward, _ = episode_reward([t.get("rewards") for t in traces])
    for t in traces:
        parents, nodes = _trace_fields(t)
        for b, leaf in enumerate(_leaves(parents)):
            path = _path(parents, leaf)
            out.append(
                {
                    "id": row.get("id"),
                    "run": row.get("run"),
                    "kind": row.get("kind"),
                    "env": row.get("env"),
                    "group": row.get("group"),
                    "task": row.get("task"),
                    "step": row.get("step"),
                    "policy_version": row.get("policy_version"),
                    "reward": reward,
                    "trace": t.get("id"),
                    "branch": b,
                    "leaf": leaf,
                    "nodes": len(path),
                    "tokens": sum(len(nodes[i].get("token_ids") or []) for i in path if isinstance(nodes[i], Mapping)),
                    "final_answer": _answer_on(nodes, path),
                    "stop_condition": t.get("stop_condition"),
                    "is_truncated": trace_truncated(t),
                    "is_timeout": bool(t.get("is_timeout")),
                }
            )
    return out


def records(rollout: Rollout, per: str = "rollout") -> List[Dict[str, Any]]:
    """The rows of one rollout: ``per="rollout"`` one, ``per="branch"`` one per branch."""
    if per not in ("rollout", "branch"):
        raise ValueError(f"per must be 'rollout' or 'branch', got {per!r}")
    episode = rollout.decoded()
    return [rollout_record(rollout.row, episode)] if per == "rollout" else branch_records(rollout.row, episode)


# ---- pandas ----


def _pandas() -> Any:
    try:
        import pandas
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("read_run needs pandas: pip install 'episode-relay[export]' (or pip install pandas)") from e
    return pandas


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("export_parquet needs pyarrow: pip install 'episode-relay[export]' (or pip install pyarrow)") from e
    return pyarrow


def _flat_scores(recs: List[Dict[str, Any]]) -> None:
    """``reward.<key>`` and ``metric.<key>`` columns beside the dicts (numbers only)."""
    for r in recs:
        for k, v in (r.get("rewards") or {}).items():
            r[f"reward.{k}"] = v
        for k, v in (r.get("metrics") or {}).items():
            r[f"metric.{k}"] = v if isinstance(v, float) else None


def read_run(url: str, run: str, *, per: str = "rollout", batch: int = 1000, **selection: Any) -> Any:
    """``run``'s finished episodes in the selection (the arguments of :func:`iter_rollouts`) as a
    pandas DataFrame, one row per rollout (:data:`ROLLOUT_COLUMNS`, plus ``reward.<key>`` and
    ``metric.<key>`` per rollout) or per branch (``per="branch"``: :data:`BRANCH_COLUMNS`). The
    episodes are decoded one at a time and the rows built ``batch`` at a time: memory is the
    DataFrame's. Needs pandas."""
    pd = _pandas()
    frames = []
    buf: List[Dict[str, Any]] = []
    columns = list(ROLLOUT_COLUMNS if per == "rollout" else BRANCH_COLUMNS)
    for rollout in iter_rollouts(url, run, **selection):
        buf.extend(records(rollout, per))
        if len(buf) >= batch:
            if per == "rollout":
                _flat_scores(buf)
            frames.append(pd.DataFrame.from_records(buf))
            buf = []
    if buf or not frames:
        if per == "rollout":
            _flat_scores(buf)
        frames.append(pd.DataFrame.from_records(buf, columns=None if buf else columns))
    df = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    return df


# ---- files ----

_CURSOR_AT_HEAD = re.compile(rb'^\{"id":("(?:[^"\\]|\\.)*"),"cursor":("(?:[^"\\]|\\.)*")')


def _last_line_cursor(path: Path) -> Optional[str]:
    """The cursor of the file's last complete line; a partial last line (an interrupted write) is cut off."""
    if not path.exists():
        return None
    with open(path, "r+b") as f:
        end = f.seek(0, os.SEEK_END)
        if end == 0:
            return None
        # find the last newline (the end of the last complete line)
        pos, tail_end = end, None
        while pos > 0 and tail_end is None:
            step = min(pos, 1 << 16)
            pos -= step
            f.seek(pos)
            chunk = f.read(step)
            i = chunk.rfind(b"\n")
            if i >= 0:
                tail_end = pos + i + 1
        if tail_end is None:
            f.truncate(0)
            return None
        if tail_end != end:
            f.truncate(tail_end)
        # the start of that line
        pos, start = tail_end - 1, 0
        while pos > 0:
            step = min(pos, 1 << 16)
            f.seek(pos - step)
            chunk = f.read(step)
            i = chunk.rfind(b"\n")
            if i >= 0:
                start = pos - step + i + 1
                break
            pos -= step
        f.seek(start)
        head = f.read(4096)
    m = _CURSOR_AT_HEAD.match(head)
    if not m:
        raise ValueError(f"{path}: its last line is not an export line ({head[:60]!r}); not resuming into it")
    return json.loads(m.group(2))


def export_jsonl(url: str, run: str, path: Union[str, os.PathLike], *, resume: bool = True, **selection: Any) -> int:
    """Write the selection's episodes to ``path``, one JSON line per episode:
    ``{"id", "cursor", "row", "episode"}`` with ``episode`` the relay's JSON view of the exact
    episode (as ``GET /v1/episodes/{id}`` answers with ``Accept: application/json``: every key in
    order, bytes and non-finite floats in its lossless form) and ``row`` its index row. Each line
    is written as it arrives (one episode in memory). ``resume``: if ``path`` holds lines of an
    earlier export of the same selection, go on after its last complete line (a partial one is
    cut off); else start afresh. Returns the lines written now.

    JSON rather than msgpack lines: the JSON view is the relay's own, so each line is the relay's
    bytes and the ``episode`` value is byte for byte what GET answers."""
    out = Path(path)
    cursor = _last_line_cursor(out) if resume else None
    if selection.get("cursor") is not None:
        raise TypeError("export_jsonl resumes from its file (resume=True); it takes no cursor")
    mode = "ab" if cursor is not None else "wb"
    n = 0
    with open(out, mode) as f:
        for line in _jsonl_lines(url, run, cursor=cursor, **selection):
            f.write(line)
            n += 1
            if n % 64 == 0:
                f.flush()
    return n


def _jsonl_lines(url: str, run: str, *, cursor: Optional[str], q: Optional[str] = None, token: Optional[str] = None, retries: int = 5, timeout: float = 30.0, client: Optional[httpx.Client] = None, **filters: Any) -> Iterator[bytes]:
    """Export lines, each ending in ``\\n``: the bulk fetch's NDJSON lines as the relay sent them
    (its continuations left out), or for a search a line made of the search's row and the
    episode's JSON view as GET answers it."""
    base = check_base_url(url)
    params = selection_params(**filters)
    own = client is None
    http = client if client is not None else httpx.Client(timeout=httpx.Timeout(timeout))
    def source(at: Optional[str]) -> Iterator[Tuple[bytes, str]]:
        return _search_lines(http, base, run, token, q, params, timeout, at) if q is not None else _bulk_lines(http, base, run, token, params, timeout, at)

    try:
        yield from _resuming(source, cursor, retries)
    finally:
        if own:
            http.close()

def _bulk_lines(http: httpx.Client, base: str, run: str, token: Optional[str], params: List[Tuple[str, str]], timeout: float, cursor: Optional[str]) -> Iterator[Tuple[bytes, str]]:
    target = base + run_path(run)
    headers = {**auth_headers(token, target), "accept": "application/x-ndjson"}
    what = f"GET run {run} finished episodes (NDJSON)"

    def lines(chunks: Iterator[bytes]) -> "Generator[Tuple[bytes, str], None, Optional[str]]":
        buf = bytearray()
        more: Optional[str] = None
        for chunk in chunks:
            buf += chunk
            while True:
                i = buf.find(b"\n")
                if i < 0:
                    break
                line = bytes(buf[: i + 1])
                del buf[: i + 1]
                m = _CURSOR_AT_HEAD.match(line)
                if m is None:
                    tail = json.loads(line)
                    if isinstance(tail, dict) and tail.get("more") is True and isinstance(tail.get("cursor"), str):
                        more = tail["cursor"]
                        continue
                    raise RelayError(f"{what}: a line is not an element ({line[:60]!r})", status=200, error="bad_answer")
                yield line, json.loads(m.group(2))
        if buf:
            raise RelayError(f"{what}: the answer ended inside a line", status=None, error="truncated")  # a dropped answer: resumed from the last cursor
        return more

    return follow_pages(http, target, headers, [("row", "1"), *params], cursor, what, timeout, lines)


def _search_lines(http: httpx.Client, base: str, run: str, token: Optional[str], q: Optional[str], params: List[Tuple[str, str]], timeout: float, cursor: Optional[str]) -> Iterator[Tuple[bytes, str]]:
    what = f"GET run {run} search"
    for r in _searched(http, base, run, token, q or "", params, timeout)(cursor):
        target = f"{base}/v1/episodes/{quote(r.id, safe='')}"
        try:
            res = http.get(target, headers={**auth_headers(token, target), "accept": "application/json"})
        except (httpx.HTTPError, OSError) as e:
            raise network_error(e, f"{what} ({target})", timeout) from e
        check_relay_answer(res, what)
        if res.status_code != 200:
            raise error_from_answer(res.status_code, res.content, what)
        head = f'{{"id":{json.dumps(r.id)},"cursor":{json.dumps(r.cursor)},"row":{json.dumps(r.row, separators=(",", ":"))},"episode":'.encode()
        yield head + res.content + b"}\n", r.cursor


_STATE = "_export.json"


def export_parquet(url: str, run: str, path: Union[str, os.PathLike], *, per: str = "rollout", batch: int = 1000, resume: bool = True, **selection: Any) -> int:
    """Write the selection's rows (one per rollout or per branch, as :func:`read_run` has them,
    dicts and lists as JSON text: :data:`JSON_COLUMNS`) to the directory ``path`` as Parquet, one
    file per ``batch`` rollouts (``part-00000.parquet``, ...): ``pandas.read_parquet(path)``
    reads them as one table. Memory: one batch. After each part ``_export.json`` records the
    parts written and the cursor after them; ``resume``: go on from there (parts past it, from an
    interrupted write, are removed), refusing a state of another selection. Returns the rollouts
    written now. Needs pyarrow."""
    pa = _pyarrow()
    import pyarrow.parquet as pq

    if per not in ("rollout", "branch"):
        raise ValueError(f"per must be 'rollout' or 'branch', got {per!r}")
    if selection.get("cursor") is not None:
        raise TypeError("export_parquet resumes from its directory's _export.json (resume=True); it takes no cursor")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    described = {"run": run, "per": per, "q": selection.get("q"), "filters": selection_params(**{k: v for k, v in selection.items() if k not in ("q", "token", "retries", "timeout", "client")})}
    state_path = out / _STATE
    state: Dict[str, Any] = {"selection": described, "parts": 0, "rollouts": 0, "cursor": None}
    if resume and state_path.exists():
        old = json.loads(state_path.read_text())
        if json.loads(json.dumps(old.get("selection"))) != json.loads(json.dumps(described)):
            raise ValueError(f"{out}: it holds an export of another selection ({old.get('selection')}); not resuming into it")
        state = old
    for p in out.glob("part-*.parquet"):
        m = re.match(r"part-(\d+)\.parquet$", p.name)
        if m and int(m.group(1)) >= state["parts"]:
            p.unlink()
    schema = _arrow_schema(pa, per)
    buf: List[Dict[str, Any]] = []
    count = 0
    written = 0
    cursor = state["cursor"]

    def flush() -> None:
        nonlocal buf, count, written
        table = pa.Table.from_pylist([_file_values(r) for r in buf], schema=schema)
        part = out / f"part-{state['parts']:05d}.parquet"
        tmp = part.with_suffix(".parquet.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, part)
        state.update(parts=state["parts"] + 1, rollouts=state["rollouts"] + count, cursor=cursor)
        tmp_state = state_path.with_suffix(".tmp")
        tmp_state.write_text(json.dumps(state))
        os.replace(tmp_state, state_path)
        written += count
        buf, count = [], 0

    for rollout in iter_rollouts(url, run, cursor=cursor, **selection):
        buf.extend(records(rollout, per))
        count += 1
        cursor = rollout.cursor
        if count >= batch:
            flush()
    if count:
        flush()
    if state["parts"] == 0:
        # an empty selection still gives a readable table
        pq.write_table(pa.Table.from_pylist([], schema=schema), out / "part-00000.parquet")
        state.update(parts=1)
        state_path.write_text(json.dumps(state))
    return written


def _file_values(r: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(r)
    for k in JSON_COLUMNS:
        if k in out:
            out[k] = json.dumps(out[k], allow_nan=True, default=str)
    return out


def _arrow_schema(pa: Any, per: str) -> Any:
    s, i, f, b = pa.string(), pa.int64(), pa.float64(), pa.bool_()
    if per == "rollout":
        types = {
            "id": s, "run": s, "status": s, "kind": s, "env": s, "group": s, "task": s, "step": i, "policy_version": i,
            "staleness": i, "reward": f, "rewards": s, "metrics": s, "final_answer": s, "expected_answer": s, "turns": i, "calls": i,
            "traces": i, "branches": i, "input_tokens": i, "output_tokens": i, "tokens": i, "stop_condition": s,
            "is_truncated": b, "is_timeout": b, "error": s, "flags": s, "ended": s,
        }
        return pa.schema([(c, types[c]) for c in ROLLOUT_COLUMNS])
    types = {
        "id": s, "run": s, "kind": s, "env": s, "group": s, "task": s, "step": i, "policy_version": i, "reward": f,
        "trace": s, "branch": i, "leaf": i, "nodes": i, "tokens": i, "final_answer": s, "stop_condition": s, "is_truncated": b,
        "is_timeout": b,
    }
    return pa.schema([(c, types[c]) for c in BRANCH_COLUMNS])

