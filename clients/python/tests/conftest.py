"""Test fixtures: a real relay (the project's launcher, `node scripts/relay.mjs`) for the whole session,
and the golden cases."""

from __future__ import annotations

import os
import random
import secrets
import signal
import socket
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import httpx
import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # the package from source, even without pytest's `pythonpath`
sys.path.insert(0, str(HERE))

from helpers import FIXTURES, PUBLIC_CASES, mint_token  # noqa: E402

ROOT = HERE.parents[2]  # tests -> python -> clients -> repository root


def free_port() -> int:
    """A free port below the kernel's ephemeral range (32768-60999), as tools/free-port.ts draws them: a
    relay restarted on its port meanwhile never finds it taken by another process's outgoing connection."""
    for _ in range(100):
        port = random.randint(20000, 32767)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port on 127.0.0.1 between 20000 and 32767 after 100 draws")


def group_members(pgid: int) -> List[str]:
    """`pid comm` of every live process in process group `pgid`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses
        rest = stat[stat.rindex(")") + 2 :].split()
        if rest[0] != "Z" and int(rest[2]) == pgid:
            out.append(f"{entry.name} {stat[stat.index('(') + 1 : stat.rindex(')')]}")
    return out


def workerd_on_port(port: int) -> List[str]:
    """workerd processes (in any group) serving `port`."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if "workerd" in cmd and f"127.0.0.1:{port}" in cmd:
            out.append(f"{entry.name} {cmd[:120]}")
    return out


@dataclass
class Relay:
    url: str
    port: int
    log: Path
    secret: str
    token: str
    """A producer token for every episode (sent as a bearer token; ignored when auth is off)."""


@pytest.fixture(scope="session")
def relay(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Relay]:
    """The relay on a free port with its own state directory; stopped at the end, checking that
    nothing of its process group and no workerd on its port is left behind."""
    external = os.environ.get("EPISODE_RELAY_URL")
    if external:  # an already running relay (for debugging), with its RELAY_SECRET if any
        secret = os.environ.get("RELAY_SECRET", "")
        yield Relay(external.rstrip("/"), 0, Path(os.devnull), secret, mint_token(secret or "unused", "producer", ["*"]))
        return
    _need_node_modules()
    port = free_port()
    base = tmp_path_factory.mktemp("relay")
    state = base / "state"
    log = base / "relay.log"
    # auth on, with a secret of our own: the clients send real HS256 bearer tokens
    secret = secrets.token_urlsafe(32)
    proc = _spawn(port, state, log, secret)
    url = f"http://127.0.0.1:{port}"
    try:
        _await_health(proc, url, log)
        yield Relay(url, port, log, secret, mint_token(secret, "producer", ["*"]))
    finally:
        _stop(proc, port)


def _need_node_modules() -> None:
    if not (ROOT / "node_modules" / "wrangler").is_dir():
        pytest.fail("node_modules/wrangler is missing: run `npm install` (or clients/python/run-tests.sh) first")


def _spawn(port: int, state: Path, log: Path, secret: str) -> subprocess.Popen:
    """The launcher (`node scripts/relay.mjs`, as `npm start` runs it) on `port` with its state in
    `state` and auth on with `secret`, its output appended to `log`."""
    env = {**os.environ, "PORT": str(port), "RELAY_SECRET": secret, "NO_COLOR": "1"}
    with open(log, "ab") as log_file:
        return subprocess.Popen(
            ["node", str(ROOT / "scripts" / "relay.mjs"), "--persist-to", str(state)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: the launcher, its watchdog and workerd
        )


def _await_health(proc: subprocess.Popen, url: str, log: Path) -> None:
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            pytest.fail(f"the relay exited with {proc.returncode}:\n{log.read_text(errors='replace')[-4000:]}")
        try:
            if httpx.get(f"{url}/v1/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            pytest.fail(f"the relay did not answer /v1/health within 120 s:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.2)


class RestartableRelay(Relay):
    """A relay of one test's own that it can stop and start again: the same port, state and
    secret, as a deploy or a crash leaves it."""

    proc: Optional[subprocess.Popen] = None
    state: Path = Path(os.devnull)

    def start(self) -> None:
        assert self.proc is None, "already running"
        self.proc = _spawn(self.port, self.state, self.log, self.secret)
        _await_health(self.proc, self.url, self.log)

    def stop(self) -> None:
        if self.proc is not None:
            proc, self.proc = self.proc, None
            _stop(proc, self.port)


@pytest.fixture
def restartable_relay(tmp_path: Path) -> Iterator[RestartableRelay]:
    """A relay started for one test (not the session's: stopping that would fail the others)."""
    if os.environ.get("EPISODE_RELAY_URL"):
        pytest.skip("a test that restarts its relay needs one of its own (EPISODE_RELAY_URL is set)")
    _need_node_modules()
    port = free_port()
    secret = secrets.token_urlsafe(32)
    relay = RestartableRelay(f"http://127.0.0.1:{port}", port, tmp_path / "relay.log", secret, mint_token(secret, "producer", ["*"]))
    relay.state = tmp_path / "state"
    try:
        relay.start()
        yield relay
    finally:
        relay.stop()


def _stop(proc: subprocess.Popen, port: int) -> None:
    """SIGTERM to the launcher, as Ctrl-C or a service manager stops it (it stops what it started);
    the whole group is killed only if something is left after that."""
    pgid = proc.pid  # start_new_session: the group is led by the launcher's pid
    for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        try:
            if sig == signal.SIGTERM:
                os.kill(proc.pid, sig)
            else:
                os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            proc.poll()
            if proc.returncode is not None and not group_members(pgid) and not workerd_on_port(port):
                break
            time.sleep(0.1)
        else:
            continue
        break
    proc.poll()
    left = group_members(pgid) + workerd_on_port(port)
    assert not left, f"processes left after stopping the relay: {left}"


_OWN_BUNDLE_DIR: Optional[str] = None


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _OWN_BUNDLE_DIR:
        shutil.rmtree(_OWN_BUNDLE_DIR, ignore_errors=True)


def pytest_sessionstart(session: pytest.Session) -> None:
    """A checkout without its golden fixtures stops here, once, instead of failing every test. Every
    relay of the session runs one Worker bundle: the run's (`npm test` names RELAY_BUNDLE_DIR,
    scripts/worker-bundle.mjs), else one made by the session's first relay."""
    global _OWN_BUNDLE_DIR
    if not os.environ.get("RELAY_BUNDLE_DIR"):
        _OWN_BUNDLE_DIR = tempfile.mkdtemp(prefix="episode-relay-shared-bundle-")
        os.environ["RELAY_BUNDLE_DIR"] = _OWN_BUNDLE_DIR
    missing = [n for n in PUBLIC_CASES if not (FIXTURES / f"{n}.msgpack").is_file()]
    if missing:
        pytest.exit(
            f"golden fixtures missing from {FIXTURES}: {', '.join(missing)}; "
            "restore them with `git checkout -- test/fixtures/golden`",
            returncode=1,
        )
