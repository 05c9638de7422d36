"""A bridge from prime-rl's file monitor to an Episode Relay, with no patch to prime-rl.

Run it beside training::

    python -m episode_relay.prime_rl OUTPUT_DIR --relay http://127.0.0.1:8787 --state bridge.json

It follows ``OUTPUT_DIR/monitors/file/traces`` (live traces, pending rollouts, the finished
stream and the annotation streams) and streams each rollout to the relay as one episode,
``RUN:<dispatch id>``, exactly once and resumably. What the files cannot carry (routing rows,
NaN, bytes) and the other path, a caller of verifiers' ``EnvClient.run(..., on_delta=...)``
forwarding the raw deltas, are in docs/prime-rl.md.
"""

from .bridge import Bridge, Layout
from .formats import completion, live_delta, reply_of

__all__ = ["Bridge", "Layout", "completion", "live_delta", "reply_of"]
