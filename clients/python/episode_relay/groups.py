"""Groups of a run: ``GET {url}/v1/runs/{run}/groups`` and ``GET {url}/v1/runs/{run}/groups/{group}``.

A *group* is the rollouts of a run that share the reply head's ``group.id`` (GRPO's group; while
a rollout is live, its task key stands in). The list answers the run's numbers (``groups_total``,
``finished_groups``, ``zero_variance_groups``, ``zero_variance_share``, and per minute over the
last hour ``zero_variance_trend``) and a page of group
summaries (``mean_reward`` and ``std_reward`` of the trainer's reward — per rewarded trace the sum
of score × weight, the mean over those traces — its ``spread``, and per reward key ``mean``,
``std``, ``min``, ``max`` over the finished rollouts); one group answers its summary plus its
rollouts, best reward first, each with its ``advantage`` on the reward (GRPO's; ``raw``: the reward
less the group's mean; ``normalized``: that over the group's std, None when the std is 0) and its
``key_advantages`` per reward key.

The token's ``episodes`` patterns must cover the whole run (``*`` or ``RUN:*``), else the relay
refuses with 403.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Iterator, List, Optional, TypedDict, cast
from urllib.parse import quote

import httpx

from .transport import RelayError, auth_headers, check_base_url, check_relay_answer, error_from_answer, network_error

#: How the relay orders a run's groups: by reward spread (its default), size, or task.
GROUP_SORTS = ("spread", "size", "task")


class RewardStats(TypedDict):
    """One reward key over a group's finished rollouts (``std``: the population std)."""

    mean: float
    std: float
    min: float
    max: float


class GroupSummary(TypedDict):
    """A group: its rollouts counted by status and, per reward key, its statistics."""

    id: str
    task: Optional[str]
    size: int
    finished: int
    failed: int
    live: int
    #: The trainer's reward over the finished rollouts: mean and population std (None without one).
    mean_reward: Optional[float]
    std_reward: Optional[float]
    rewards: Dict[str, RewardStats]
    #: Max - min of the finished rollouts' reward.
    spread: Optional[float]


class ZeroVarianceTrend(TypedDict):
    """The last hour, per minute, oldest first (``start``: the first minute, ISO): groups that
    completed then, how many of them had zero variance, that share (None: none completed), and the
    run's share as it stood at the end of the minute (None: no group completed by then)."""

    start: str
    completed: List[int]
    zero_variance: List[int]
    share: List[Optional[float]]
    cumulative_share: List[Optional[float]]


class GroupsPage(TypedDict):
    """One page of a run's groups, with the run's numbers; ``cursor`` is None on the last page."""

    run: str
    groups_total: int
    finished_groups: int
    zero_variance_groups: int
    zero_variance_share: Optional[float]
    zero_variance_trend: ZeroVarianceTrend
    groups: List[GroupSummary]
    cursor: Optional[str]


class Advantage(TypedDict):
    """An advantage: ``raw`` = reward (or a key's score) - the group's mean; ``normalized`` = raw / std (None when std is 0)."""

    raw: float
    normalized: Optional[float]


class GroupRollout(TypedDict):
    """One rollout of a group (an episode of the run)."""

    id: str
    status: str
    rewards: Any
    #: Each trace's ``rewards`` (absent from an older relay's answers).
    trace_rewards: Optional[List[Any]]
    #: The trainer's reward: per rewarded trace the sum of score × weight, the mean over those traces.
    reward: Optional[float]
    #: GRPO's: on ``reward``, against the group's ``mean_reward`` and ``std_reward`` (None without a reward).
    advantage: Optional[Advantage]
    #: Per reward key, on the key's mean over the traces.
    key_advantages: Dict[str, Advantage]
    calls: int
    tokens: int
    stop_condition: Optional[str]
    #: Truncated as the trainer counts it (None: not counted yet).
    is_truncated: Optional[bool]
    #: The first trace's ``is_timeout``.
    is_timeout: bool
    #: Deprecated alias of ``is_timeout`` (not the trainer's truncation: that is ``is_truncated``); the relay
    #: drops it in its next release (docs/http-api.md).
    truncated: bool
    error: Optional[str]


class GroupDetail(GroupSummary):
    """A group with its rollouts, best reward first."""

    rollouts: List[GroupRollout]


def _segment(value: str, what: str) -> str:
    """``value`` escaped as one path segment; raises :class:`RelayError` (``bad_run`` /
    ``bad_group``, nothing sent) for ``""``, ``"."`` and ``".."``, which a URL cannot carry."""
    if not isinstance(value, str) or value in ("", ".", ".."):
        raise RelayError(f"{value!r} cannot name a {what} in a URL path", status=400, error=f"bad_{what}")
    return quote(value, safe="")


def groups_path(run: str, group: Optional[str] = None) -> str:
    """``/v1/runs/{run}/groups[/{group}]`` with the names escaped."""
    path = f"/v1/runs/{_segment(run, 'run')}/groups"
    return path if group is None else f"{path}/{_segment(group, 'group')}"


def _get_json(target: str, what: str, params: Optional[Dict[str, str]], token: Optional[str], timeout: float, client: Optional[httpx.Client]) -> Any:
    """GET ``target``: the parsed JSON of a 200 answer; :class:`RelayError` on anything else."""
    own = client is None
    http = client if client is not None else httpx.Client(timeout=httpx.Timeout(timeout))
    headers = {**auth_headers(token, target), "accept": "application/json"}
    try:
        res = http.get(target, params=params, headers=headers)
    except (httpx.HTTPError, OSError) as e:
        raise network_error(e, f"{what} ({target})", timeout) from e
    finally:
        if own:
            http.close()
    check_relay_answer(res, what)
    if res.status_code != 200:
        raise error_from_answer(res.status_code, res.content, what)
    try:
        return json.loads(res.content.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise RelayError(f"{what}: the relay answered 200 with a body that is not JSON ({e})", status=200, error="bad_answer") from e


def fetch_groups_page(
    url: str,
    run: str,
    token: Optional[str] = None,
    sort: Optional[str] = None,
    limit: Optional[int] = None,
    cursor: Optional[str] = None,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> GroupsPage:
    """One page of ``run``'s groups with the run's numbers (``groups_total``, ``finished_groups``,
    ``zero_variance_groups``, ``zero_variance_share``), as the relay answers it.

    ``sort``: ``"spread"`` (the relay's default), ``"size"`` or ``"task"``. ``limit``: groups per
    page (the relay's default 50, at most 500). ``cursor``: the previous page's. ``token``: its
    ``episodes`` patterns must cover the whole run. ``client``: a ``httpx.Client`` to use
    (default: one of its own, closed at the end).

    Raises :class:`RelayError`: a refusal (4xx, ``status`` and ``error`` from the relay: 401
    without a valid token, 403 for one that does not cover the whole run, 400 for a bad
    parameter), a server error, a network error or timeout, or an answer that is not a page.
    """
    base = check_base_url(url)
    target = base + groups_path(run)
    params: Dict[str, str] = {}
    if sort is not None:
        params["sort"] = sort
    if limit is not None:
        params["limit"] = str(limit)
    if cursor:
        params["cursor"] = cursor
    what = f"GET run {run} groups"
    page = _get_json(target, what, params or None, token, timeout, client)
    if not isinstance(page, dict) or not isinstance(page.get("groups"), list) or not (page.get("cursor") is None or isinstance(page.get("cursor"), str)):
        raise RelayError(f"{what}: the answer is not a page of groups {{groups: [...], cursor}}", status=200, error="bad_answer")
    return cast(GroupsPage, page)


def fetch_groups(
    url: str,
    run: str,
    token: Optional[str] = None,
    sort: Optional[str] = None,
    limit: Optional[int] = None,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> Iterator[GroupSummary]:
    """Yield every group of ``run`` in the relay's order for ``sort``, page after page (following
    the cursors). The run's numbers come with each page: :func:`fetch_groups_page`. Raises as
    :func:`fetch_groups_page` does.
    """
    own = client is None
    http = client if client is not None else httpx.Client(timeout=httpx.Timeout(timeout))
    cursor: Optional[str] = None
    try:
        while True:
            page = fetch_groups_page(url, run, token=token, sort=sort, limit=limit, cursor=cursor, timeout=timeout, client=http)
            yield from page["groups"]
            following = page["cursor"]
            if following is None:
                return
            if following == cursor:
                raise RelayError(f"GET run {run} groups: the relay answered the same cursor again", status=200, error="bad_answer")
            cursor = following
    finally:
        if own:
            http.close()


def fetch_group(
    url: str,
    run: str,
    group: str,
    token: Optional[str] = None,
    timeout: float = 30.0,
    client: Optional[httpx.Client] = None,
) -> GroupDetail:
    """One group of ``run`` (its id as the relay lists it, e.g. the reply head's ``group.id``): its
    summary plus ``rollouts``, best reward first, each with ``advantage`` per reward key.

    Raises :class:`RelayError`: ``status=404``, ``error="not_found"`` for a group the run does not
    have; otherwise as :func:`fetch_groups_page`.
    """
    base = check_base_url(url)
    target = base + groups_path(run, group)
    what = f"GET run {run} group {group}"
    detail = _get_json(target, what, None, token, timeout, client)
    if not isinstance(detail, dict) or not isinstance(detail.get("id"), str) or not isinstance(detail.get("rollouts"), list):
        raise RelayError(f"{what}: the answer is not a group {{id, ..., rollouts: [...]}}", status=200, error="bad_answer")
    return cast(GroupDetail, detail)
