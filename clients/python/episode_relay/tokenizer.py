"""The model's tokenizer, shipped once per run so the relay's pages can decode token ids.

``tokenizer=`` (on :class:`~episode_relay.RelaySink`, :class:`~episode_relay.RelayForwarder` and the
prime-rl bridge) is a local ``tokenizer.json`` (or a folder holding one), or a model name such as
``Qwen/Qwen3-4B`` looked up in the local Hugging Face cache. Nothing is ever downloaded: a model
that is not in the cache is an error naming where it was looked for.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union
from urllib.parse import quote

import httpx

from .transport import auth_headers, check_base_url, check_relay_answer, error_from_answer, network_error, parse_ack

logger = logging.getLogger("episode_relay")

TokenizerSource = Union[str, "os.PathLike[str]"]


def hub_cache() -> Path:
    """The Hugging Face hub cache: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def find_tokenizer(source: TokenizerSource) -> Path:
    """The ``tokenizer.json`` that ``source`` names: the file itself, a folder's ``tokenizer.json``,
    or a model's in the hub cache (the snapshot ``refs/main`` points at, else the newest one).
    Raises :class:`FileNotFoundError` saying where it looked."""
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        if (path / "tokenizer.json").is_file():
            return path / "tokenizer.json"
        raise FileNotFoundError(f"{path} holds no tokenizer.json")
    name = str(source)
    if name.count("/") != 1 or name.startswith(("/", ".", "~")):
        raise FileNotFoundError(f"tokenizer {name!r}: no such file, and not a model name like ORG/NAME")
    model = hub_cache() / ("models--" + name.replace("/", "--"))
    snapshots = model / "snapshots"
    ref = model / "refs" / "main"
    if ref.is_file():
        pinned = snapshots / ref.read_text().strip() / "tokenizer.json"
        if pinned.is_file():
            return pinned
    found = sorted(snapshots.glob("*/tokenizer.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    if found:
        return found[0]
    raise FileNotFoundError(
        f"tokenizer {name!r}: no {snapshots}/*/tokenizer.json in the local Hugging Face cache "
        "(HF_HUB_CACHE / HF_HOME; nothing is downloaded: fetch the model once, or pass the file's path)"
    )


def run_of(episode_id: str) -> str:
    """An episode's run: its id up to the last ``:`` (``~`` for ids without one)."""
    head, sep, _ = episode_id.rpartition(":")
    return head if sep else "~"


def read_tokenizer(source: TokenizerSource) -> Tuple[Path, bytes]:
    """Where ``source`` is and its bytes (read at once: a wrong name fails where it was given)."""
    path = find_tokenizer(source)
    return path, path.read_bytes()


async def put_tokenizer(
    url: str,
    run: str,
    data: bytes,
    token: Optional[str] = None,
    *,
    client: Optional[httpx.AsyncClient] = None,
    timeout: float = 60.0,
) -> Dict[str, Any]:
    """``PUT /v1/runs/{run}/tokenizer``: the relay's answer ``{ok, run, bytes, sha256, changed}``
    (``changed`` false: it kept these bytes already); :class:`~episode_relay.RelayError` on a refusal."""
    base = check_base_url(url).rstrip("/")
    target = f"{base}/v1/runs/{quote(run, safe='')}/tokenizer"
    what = f"PUT {target}"
    headers = {**auth_headers(token, base), "content-type": "application/json"}
    own = client is None
    c = client if client is not None else httpx.AsyncClient(timeout=httpx.Timeout(timeout))
    try:
        r = await c.put(target, content=data, headers=headers)
    except (httpx.HTTPError, OSError) as e:
        raise network_error(e, what, timeout) from e
    finally:
        if own:
            await c.aclose()
    check_relay_answer(r, what)
    if r.status_code != 200:
        raise error_from_answer(r.status_code, r.content, what)
    return parse_ack(r.content, what)


# (relay, run, sha256) shipped by this process: a run's many sinks send it once
_shipped: Dict[Tuple[str, str, str], "asyncio.Future[bool]"] = {}


class TokenizerShipment:
    """A sink's or forwarder's ``tokenizer=``: read when given, sent before the first delta of
    the first sink of its run in this process. A refused or failed upload is logged, never raised:
    the rollout's deltas matter more than its pages' decoded text (the pages then show ids)."""

    def __init__(self, source: TokenizerSource, url: str, run: str, token: Optional[str]) -> None:
        self.path, self.data = read_tokenizer(source)
        self.url = check_base_url(url).rstrip("/")
        self.run = run
        self.token = token
        self.key = (self.url, self.run, hashlib.sha256(self.data).hexdigest())

    async def ship(self, client: Optional[httpx.AsyncClient] = None) -> bool:
        """Upload once per (relay, run, bytes) in this process; True when the relay holds it."""
        pending = _shipped.get(self.key)
        if pending is not None and pending.done():
            return bool(pending.result())
        loop = asyncio.get_running_loop()
        if pending is None or pending.get_loop() is not loop:
            pending = _shipped[self.key] = loop.create_future()
            try:
                answer = await put_tokenizer(self.url, self.run, self.data, self.token, client=client)
                logger.info("run %s: tokenizer %s %s", self.run, self.path, "sent" if answer.get("changed") else "already kept")
                pending.set_result(True)
            except Exception as e:
                why = f"{e.error}: {e}" if getattr(e, "error", None) else str(e)
                logger.error("run %s: the tokenizer %s was not sent: %s (pages show token ids)", self.run, self.path, why)
                del _shipped[self.key]  # the next sink of the run tries again
                pending.set_result(False)
        return bool(await asyncio.shield(pending))
