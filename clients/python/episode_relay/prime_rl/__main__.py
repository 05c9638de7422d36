"""``python -m episode_relay.prime_rl OUTPUT_DIR --relay URL [...]``: see docs/prime-rl.md."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import List, Optional

from ..transport import RelayError
from .bridge import Bridge

# The counts the exit line always carries (docs/prime-rl.md); others appear once they happened.
REPORTED = ("lines", "applied", "duplicates", "finished", "annotations", "retries", "refused")


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m episode_relay.prime_rl",
        description="Follow a prime-rl run's file monitor (OUTPUT_DIR/monitors/file/traces) into an Episode Relay: "
        "one episode per rollout (RUN:<dispatch id>), exactly once, resumable from --state.",
    )
    p.add_argument("output_dir", metavar="OUTPUT_DIR", type=Path, help="the run's output_dir (what prime-rl's orchestrator writes under)")
    p.add_argument("--relay", required=True, metavar="URL", help="the relay's base URL, e.g. http://127.0.0.1:8787")
    p.add_argument("--run", metavar="NAME", help="the relay run the episodes go to (default: OUTPUT_DIR's name)")
    p.add_argument("--token", metavar="T", default=os.environ.get("RELAY_TOKEN"), help="a producer token for RUN:* (default: $RELAY_TOKEN)")
    p.add_argument("--state", metavar="FILE", type=Path, help="the cursor file: a restarted bridge resumes from it (default: none)")
    p.add_argument("--once", action="store_true", help="bridge what is there now, then exit")
    p.add_argument("--poll", metavar="SECONDS", type=float, default=1.0, help="seconds between passes (default 1)")
    p.add_argument("--finish-grace", metavar="SECONDS", type=float, default=5.0, help="how long a finished record waits for its live files to go (default 5)")
    p.add_argument(
        "--orphan-after", metavar="SECONDS", type=float, default=300.0, help="fail an episode whose live files are gone and that no record finished after this long (default 300)"
    )
    p.add_argument(
        "--tokenizer", metavar="PATH|ORG/NAME", help="the model's tokenizer.json, or a model name in the local Hugging Face cache: sent once, so pages decode token ids"
    )
    talk = p.add_mutually_exclusive_group()
    talk.add_argument("-q", "--quiet", action="store_true", help="warnings and errors only")
    talk.add_argument("-v", "--verbose", action="store_true", help="a DEBUG line per HTTP request too")
    return p.parse_args(argv)


#: Libraries that log a line per HTTP request at INFO (httpx 0.24 and later: "HTTP Request: POST ..."); the
#: bridge's own request lines (DEBUG, ``episode_relay.prime_rl.http``) stand in for them with --verbose.
PER_REQUEST_LOGGERS = ("httpx", "httpcore")


def configure_logging(quiet: bool = False, verbose: bool = False) -> None:
    """The bridge's own lines at INFO (its start, a ``progress:`` line per pass that moved something, at most
    every 10 s), warnings and errors; ``quiet``: warnings and errors only; ``verbose``: its DEBUG lines too,
    a line per HTTP request (thousands an hour on a busy run: never by default)."""
    level = logging.WARNING if quiet else logging.INFO
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(message)s", stream=sys.stderr)
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    logging.getLogger("episode_relay.prime_rl").setLevel(logging.DEBUG if verbose else level)


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    configure_logging(quiet=args.quiet, verbose=args.verbose)
    try:
        bridge = Bridge(
            args.output_dir,
            args.relay,
            run=args.run,
            token=args.token,
            state=args.state,
            poll=args.poll,
            finish_grace=args.finish_grace,
            orphan_after=args.orphan_after,
            tokenizer=args.tokenizer,
        )
    except (RelayError, ValueError, OSError) as e:
        print(f"episode_relay.prime_rl: {e}", file=sys.stderr)
        return 2
    logging.getLogger("episode_relay.prime_rl").info(
        "bridging %s into %s as run %s%s", bridge.layout.output_dir, bridge.url, bridge.run_name, f" (state {args.state})" if args.state else ""
    )

    async def run() -> int:
        task = asyncio.ensure_future(bridge.run(once=args.once))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, task.cancel)  # the state keeps only what the relay acknowledged
        try:
            stats = await task
        except asyncio.CancelledError:
            stats = dict(bridge.state.stats)
        # the counts the docs name are there even at 0 (a run with nothing to bridge yet says so)
        print(json.dumps({**{k: 0 for k in REPORTED}, **stats}, sort_keys=True))
        return 0

    return asyncio.run(run())


if __name__ == "__main__":
    sys.exit(main())
