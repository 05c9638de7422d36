"""Episode Relay client: feed an Episode Relay from verifiers' episode stream.

- :class:`RelaySink`: the ``send`` callable of ``verifiers``' ``DeltaStreamer`` (worker side):
  exactly-once delivery through the producer envelope, returns only after the relay's durable
  write, raises on any failure so the streamer re-diffs.
- :class:`RelayForwarder`: for a process that receives deltas (the env client's delta
  callback): non-blocking ``on_delta`` / ``on_reply``, ordered background delivery with
  same-seq retries and a bounded buffer.
- :func:`announce_dispatch`: a rollout the trainer dispatched, shown as pending until its first
  trace streams (``RelaySink`` and ``RelayForwarder`` take the same identity as ``dispatch=``).
- :func:`post_annotations` / :func:`fetch_annotations`: the trainer's per-token annotations
  (prime-rl's records), merged per trace by the relay.
- :class:`RelayMirror`: a ``send`` that keeps the worker's own transport primary and mirrors
  each delta it acknowledged to the relay through a forwarder.
- :func:`fetch_run`: the finished episodes of a run, streamed, each as the exact bytes the
  relay serves (resumable by cursor).
- :func:`fetch_groups` / :func:`fetch_groups_page` / :func:`fetch_group`: a run's groups (the
  rollouts sharing the reply head's ``group.id``), the zero-variance share, and one group's
  rollouts with their advantages.
- :func:`list_episodes` / :func:`fetch_episodes_page`: a run's episodes filtered by status, task,
  stop condition, truncated, errored, reward ranges, turns and tokens (following the cursors).
- :func:`read_run` / :func:`export_jsonl` / :func:`export_parquet` / :func:`iter_rollouts`: a run,
  or a filtered or searched selection of it, into a pandas DataFrame (one row per rollout or per
  branch), or written to JSONL (the exact episodes) or Parquet, streaming and resumable (pandas
  and pyarrow: the optional ``export`` extra).
- :func:`watch_episode` / :func:`watch_run`: an episode live (its updates applied to a reference
  :class:`EpisodeAssembly`, resumed after drops and relay restarts, ``await finished()`` the
  episode's bytes) and a run's rows live; ``watch_episode_sync`` / ``watch_run_sync`` for
  notebooks (websockets: the optional ``ws`` extra).
"""

from .bulk import fetch_run
from .export import BRANCH_COLUMNS, ROLLOUT_COLUMNS, Rollout, branch_records, episode_reward, export_jsonl, export_parquet, iter_rollouts, read_run, rollout_record, selection_params, trace_reward
from .episodes import EpisodeEntry, EpisodesPage, fetch_episodes_page, list_episodes
from .forwarder import RelayForwarder
from .groups import GroupDetail, GroupRollout, GroupsPage, GroupSummary, ZeroVarianceTrend, fetch_group, fetch_groups, fetch_groups_page
from .mirror import RelayMirror
from .producer import Outgoing, ProducerCursor
from .sink import RelaySink, announce_dispatch, fetch_annotations, post_annotations
from .transport import DeltaChannel, FinishMismatch, HttpChannel, RelayError, RelayHttp, WebSocketChannel
from .wire import LIST_FIELDS, pack, unpack
from .assembly import DeltaError, EpisodeAssembly
from .watch import EpisodeWatch, RunUpdate, RunWatch, SyncEpisodeWatch, SyncRunWatch, WatchUpdate, watch_episode, watch_episode_sync, watch_run, watch_run_sync

__all__ = [
    "RelaySink",
    "announce_dispatch",
    "post_annotations",
    "fetch_annotations",
    "RelayForwarder",
    "RelayMirror",
    "fetch_run",
    "read_run",
    "export_jsonl",
    "export_parquet",
    "iter_rollouts",
    "Rollout",
    "rollout_record",
    "branch_records",
    "episode_reward",
    "trace_reward",
    "selection_params",
    "ROLLOUT_COLUMNS",
    "BRANCH_COLUMNS",
    "fetch_groups",
    "fetch_groups_page",
    "fetch_group",
    "GroupsPage",
    "GroupSummary",
    "GroupDetail",
    "GroupRollout",
    "ZeroVarianceTrend",
    "list_episodes",
    "fetch_episodes_page",
    "EpisodeEntry",
    "EpisodesPage",
    "RelayError",
    "FinishMismatch",
    "DeltaChannel",
    "HttpChannel",
    "WebSocketChannel",
    "RelayHttp",
    "ProducerCursor",
    "Outgoing",
    "watch_episode",
    "watch_run",
    "watch_episode_sync",
    "watch_run_sync",
    "EpisodeWatch",
    "RunWatch",
    "SyncEpisodeWatch",
    "SyncRunWatch",
    "WatchUpdate",
    "RunUpdate",
    "EpisodeAssembly",
    "DeltaError",
    "LIST_FIELDS",
    "pack",
    "unpack",
]

__version__ = "0.1.0"
