"""``RelayMirror``: keep the worker's own transport primary and mirror each delta to a relay.

Upstream, a worker's ``DeltaStreamer`` sends each delta with ``send``, its transport to the env
client. ``RelayMirror(primary, forwarder)`` is such a ``send``: it awaits ``primary(delta)``
first, and only when that returned (the env client has the delta) hands the delta to the
:class:`~episode_relay.RelayForwarder`, which delivers it to the relay in the background, in
order, retrying. So:

- the relay gets exactly the deltas the primary acknowledged, in order: a lost ack on the primary
  means the relay never gets that delta, and gets the streamer's re-diff instead, like the env
  client does (no retraction is ever needed);
- a relay outage never blocks or fails the rollout: the forwarder buffers, retries and, past its
  limits, gives up on the relay (logged), never raising into the streamer.

Usage::

    forwarder = RelayForwarder(url, episode_id, token=token, dispatch=dispatch_info)  # dispatch: optional
    mirror = RelayMirror(send_to_env_client, forwarder)
    async with DeltaStreamer(traces, send=mirror) as streamer:
        ...
    forwarder.on_reply(reply)
    await forwarder.close(timeout=30)
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from .forwarder import RelayForwarder
from .wire import Document


class RelayMirror:
    """A ``send`` callable: the primary transport first, then the relay, in the background."""

    def __init__(self, primary: Callable[[Any], Awaitable[Any]], forwarder: RelayForwarder) -> None:
        self.primary = primary
        self.forwarder = forwarder

    async def __call__(self, delta: Document) -> Any:
        result = await self.primary(delta)  # raises as the primary does: the streamer re-diffs
        self.forwarder.on_delta(delta)  # never raises, never blocks
        return result
