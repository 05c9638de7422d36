"""A run's episodes, filtered: ``GET {url}/v1/runs/{run}/episodes``.

Filters (every one given must hold): ``status`` (``live``, ``finished``, ``failed``,
``finish_refused``), ``task`` (the first trace's task key), ``stop`` (its ``stop_condition``),
``is_truncated`` (truncated as the trainer counts it: a trace stopped at a framework limit, or
its last successful model call finished with ``length``; a row not yet counted matches neither
value), ``is_timeout`` (its first trace's ``is_timeout``; ``truncated``: the deprecated alias of
``is_timeout``, one release), ``errored`` (with an error: failed, finish refused, or an error
reported at finish), ``rewards`` (``{key: (min, max)}``, both ends inclusive, None for an open end;
an episode without a score for the key matches none), ``min_turns`` (turns as prime-rl counts
them: assistant nodes, all traces; a row whose turns are not counted matches none) and
``min_tokens`` (tokens, all traces). ``sort``: ``"updated"`` (newest first, the default) or
``"reward"`` (best first, episodes without a reward last).

A page may be short (fewer than ``limit`` episodes, even none) and still carry a cursor: the
relay's walk of the run's index stopped on its budget (1000 rows) before it found ``limit``
matches. :func:`list_episodes` follows the cursors until there is none; a caller of
:func:`fetch_episodes_page` must do the same. The token sees the episodes its ``episodes``
patterns cover.
"""

from __future__ import annotations

import math
import re
from numbers import Real
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, TypedDict, cast

import httpx

from .groups import _get_json, _segment
from .transport import RelayError, check_base_url

#: An episode's status in its run's index.
EPISODE_STATUSES = ("live", "finished", "failed", "finish_refused")
#: How the relay orders a run's episodes: newest updated first (its default), or best reward first.
EPISODE_SORTS = ("updated", "reward")

_CONTROL = re.compile(r"[\x00-\x1f]")

#: ``rewards`` as the filter takes it: per reward key, ``(min, max)`` with None for an open end.
RewardRanges = Mapping[str, Tuple[Optional[float], Optional[float]]]


class EpisodeEntry(TypedDict, total=False):
    """One episode as the run's index lists it (times as ISO strings; ``reward``: the trainer's —
    per trace with rewards the sum of score × weight, the mean over those traces — None without one;
    ``scores``: per reward key the mean of its score over the traces)."""

    id: str
    run: str
    status: str
    created: str
    updated: str
    ended: Optional[str]
    seq: int
    traces: int
    nodes: int
    calls: int
    tokens: int
    rewards: Any
    reward: Optional[float]
    scores: Dict[str, float]
    error: Optional[str]
    task: Optional[str]
    group: Optional[str]
    stop_condition: Optional[str]
    is_truncated: Optional[bool]
    is_timeout: bool
    #: Deprecated alias of ``is_timeout`` (not the trainer's truncation: that is ``is_truncated``); the relay
    #: drops it in its next release (docs/http-api.md).
    truncated: bool
    run_name: Optional[str]


class EpisodesPage(TypedDict):
    """One page: at most ``limit`` episodes (possibly fewer, even none, with a cursor: not the end),
    ``cursor`` (None on the last page) and ``searched`` (index rows the relay walked past)."""

    episodes: List[EpisodeEntry]
    cursor: Optional[str]
    searched: int


def _bad(field: str, message: str) -> RelayError:
    return RelayError(message, status=400, error="bad_filter", field=field)


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str) or value == "":
        raise _bad(name, f"{name} must be a non-empty string (None: not filtered), got {value!r}")
    return value


def _flag(name: str, value: Any) -> str:
    if not isinstance(value, bool):
        raise _bad(name, f"{name} must be True, False or None, got {value!r}")
    return "1" if value else "0"


def _count(name: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _bad(name, f"{name} must be a whole number >= 0 (None: not filtered), got {value!r}")
    return str(value)


def _bound(key: str, value: Any) -> str:
    """A range's end as the relay reads it: "" for None (open), else a finite number."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, Real):
        raise _bad("reward", f"rewards[{key!r}]: the bounds must be numbers or None, got {value!r}")
    try:
        x = float(value)
    except OverflowError:
        x = math.inf
    if not math.isfinite(x):
        raise _bad("reward", f"rewards[{key!r}]: the bounds must be finite numbers (None for an open end), got {value!r}")
    return repr(x)


def _reward_params(rewards: Any) -> List[Tuple[str, str]]:
    if not isinstance(rewards, Mapping):
        raise _bad("reward", f"rewards must be a dict of reward key -> (min, max), got {type(rewards).__name__}")
    out: List[Tuple[str, str]] = []
    for key, rng in rewards.items():
        if not isinstance(key, str) or key == "" or _CONTROL.search(key):
            raise _bad("reward", f"rewards: a reward key must be a non-empty string without control characters, got {key!r}")
        if isinstance(rng, (str, bytes)) or not isinstance(rng, Sequence) or len(rng) != 2:
            raise _bad("reward", f"rewards[{key!r}] must be (min, max), None for an open end, got {rng!r}")
        lo, hi = _bound(key, rng[0]), _bound(key, rng[1])
        if lo and hi and float(lo) > float(hi):
            raise _bad("reward", f"rewards[{key!r}]: min {rng[0]!r} is above max {rng[1]!r}")
        out.append(("reward", f"{key}:{lo}..{hi}"))
    return out


def filter_params(
    *,
    status: Optional[str] = None,
    task: Optional[str] = None,
    stop: Optional[str] = None,
    is_truncated: Optional[bool] = None,
    is_timeout: Optional[bool] = None,
    truncated: Optional[bool] = None,
    errored: Optional[bool] = None,
    rewards: Optional[RewardRanges] = None,
    min_turns: Optional[int] = None,
    min_tokens: Optional[int] = None,
    sort: Optional[str] = None,
    limit: Optional[int] = None,
) -> List[Tuple[str, str]]:
    """The query parameters of a listing, in the relay's names (``reward`` repeated per key).

    Raises :class:`RelayError` (``status=400``, nothing sent) for an obviously bad argument, with
    ``error`` and ``field`` as the relay would answer: ``bad_status`` / ``status``, ``bad_sort`` /
    ``sort``, ``bad_limit`` / ``limit``, and ``bad_filter`` with the parameter (``task``,
    ``stop``, ``is_truncated``, ``is_timeout``, ``truncated``, ``errored``, ``reward``, ``min_turns``, ``min_tokens``). The
    relay's own limits (at most 4 reward ranges, 256 characters for a task) are its to refuse.
    """
    params: List[Tuple[str, str]] = []
    if status is not None:
        if status not in EPISODE_STATUSES:
            raise RelayError(f"status must be one of {', '.join(EPISODE_STATUSES)}, got {status!r}", status=400, error="bad_status", field="status")
        params.append(("status", status))
    if task is not None:
        params.append(("task", _text("task", task)))
    if stop is not None:
        params.append(("stop", _text("stop", stop)))
    if is_truncated is not None:
        params.append(("is_truncated", _flag("is_truncated", is_truncated)))
    if is_timeout is not None:
        params.append(("is_timeout", _flag("is_timeout", is_timeout)))
    if truncated is not None:  # deprecated alias of is_timeout, one release (the relay refuses the two disagreeing)
        params.append(("truncated", _flag("truncated", truncated)))
    if errored is not None:
        params.append(("errored", _flag("errored", errored)))
    if rewards is not None:
        params.extend(_reward_params(rewards))
    if min_turns is not None:
        params.append(("min_turns", _count("min_turns", min_turns)))
    if min_tokens is not None:
        params.append(("min_tokens", _count("min_tokens", min_tokens)))
    if sort is not None:
        if sort not in EPISODE_SORTS:
            raise RelayError(f"sort must be one of {', '.join(EPISODE_SORTS)}, got {sort!r}", status=400, error="bad_sort", field="sort")
        params.append(("sort", sort))
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise RelayError(f"limit must be a whole number >= 1 (the relay answers at most 500), got {limit!r}", status=400, error="bad_limit", field="limit")
        params.append(("limit", str(limit)))
    return params


def fetch_episodes_page(
    url: str,
    run: str,
    *,
    status: Optional[str] = None,
    task: Optional[str] = None,
    stop: Optional[str] = None,
    is_truncated: Optional[bool] = None,
    is_timeout: Optional[bool] = None,
    truncated: Optional[bool] = None,
    errored: Optional[bool] = None,
    rewards: Optional[RewardRanges] = None,
    min_turns: Optional[int] = None,
    min_tokens: Optional[int] = None,
    sort: str = "updated",
    limit: Optional[int] = None,
    cursor: Optional[str] = None,
    token: Optional[str] = None,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> EpisodesPage:
    """One page of ``run``'s episodes that pass every filter given (see the module), in the order of
    ``sort``. ``limit``: episodes per page (the relay's default 50, at most 500). ``cursor``: the
    previous page's. The page may be short, even empty, with a cursor: keep following it until it
    is None (:func:`list_episodes` does). ``client``: a ``httpx.Client`` to use (default: one of
    its own, closed at the end).

    Raises :class:`RelayError`: an obviously bad argument before anything is sent (see
    :func:`filter_params`), a refusal (4xx, ``status``, ``error`` and ``field`` from the relay:
    401 without a valid token, 400 ``bad_filter`` with the parameter as ``field``), a server
    error, a network error or timeout, or an answer that is not a page.
    """
    base = check_base_url(url)
    target = f"{base}/v1/runs/{_segment(run, 'run')}/episodes"
    params = filter_params(
        status=status,
        task=task,
        stop=stop,
        is_truncated=is_truncated,
        is_timeout=is_timeout,
        truncated=truncated,
        errored=errored,
        rewards=rewards,
        min_turns=min_turns,
        min_tokens=min_tokens,
        sort=None if sort == "updated" else sort,
        limit=limit,
    )
    if cursor:
        params.append(("cursor", cursor))
    what = f"GET run {run} episodes"
    page = _get_json(target, what, cast(Any, params) or None, token, timeout, client)
    if not isinstance(page, dict) or not isinstance(page.get("episodes"), list) or not (page.get("cursor") is None or isinstance(page.get("cursor"), str)):
        raise RelayError(f"{what}: the answer is not a page of episodes {{episodes: [...], cursor}}", status=200, error="bad_answer")
    searched = page.get("searched")
    return {"episodes": page["episodes"], "cursor": page["cursor"], "searched": searched if isinstance(searched, int) else 0}


def list_episodes(
    url: str,
    run: str,
    *,
    status: Optional[str] = None,
    task: Optional[str] = None,
    stop: Optional[str] = None,
    is_truncated: Optional[bool] = None,
    is_timeout: Optional[bool] = None,
    truncated: Optional[bool] = None,
    errored: Optional[bool] = None,
    rewards: Optional[RewardRanges] = None,
    min_turns: Optional[int] = None,
    min_tokens: Optional[int] = None,
    sort: str = "updated",
    limit: Optional[int] = None,
    token: Optional[str] = None,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> Iterator[EpisodeEntry]:
    """Yield every episode of ``run`` that passes every filter given (see the module), in the order
    of ``sort``, page after page, following the cursors to the end: a short or empty page with a
    cursor is not the end (a rare filter may take several pages whose walk found no match).

    The arguments are checked at the call, before anything is sent (:func:`filter_params`);
    otherwise raises as :func:`fetch_episodes_page` does, when the pages are read.
    """
    filter_params(
        status=status,
        task=task,
        stop=stop,
        is_truncated=is_truncated,
        is_timeout=is_timeout,
        truncated=truncated,
        errored=errored,
        rewards=rewards,
        min_turns=min_turns,
        min_tokens=min_tokens,
        sort=sort,
        limit=limit,
    )
    check_base_url(url)
    _segment(run, "run")
    args: Dict[str, Any] = dict(
        status=status,
        task=task,
        stop=stop,
        is_truncated=is_truncated,
        is_timeout=is_timeout,
        truncated=truncated,
        errored=errored,
        rewards=rewards,
        min_turns=min_turns,
        min_tokens=min_tokens,
        sort=sort,
        limit=limit,
        token=token,
        timeout=timeout,
    )
    return _pages(url, run, args, client)


def _pages(url: str, run: str, args: Dict[str, Any], client: Optional[httpx.Client]) -> Iterator[EpisodeEntry]:
    own = client is None
    http = client if client is not None else httpx.Client(timeout=httpx.Timeout(args["timeout"]))
    cursor: Optional[str] = None
    try:
        while True:
            page = fetch_episodes_page(url, run, cursor=cursor, client=http, **args)
            yield from page["episodes"]
            following = page["cursor"]
            if following is None:
                return
            if following == cursor:
                raise RelayError(f"GET run {run} episodes: the relay answered the same cursor again", status=200, error="bad_answer")
            cursor = following
    finally:
        if own:
            http.close()
