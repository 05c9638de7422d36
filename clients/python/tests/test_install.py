"""The Python client's install line (README quickstart, docs/python.md): the package builds from the clone with its
pyproject.toml and imports from where pip put it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1]


def test_pip_installs_the_client_from_the_clone(tmp_path: Path) -> None:
    if subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True).returncode != 0:
        pytest.skip(f"{sys.executable} has no pip")
    # a copy: pip builds in the source folder, and the clone must stay clean
    source = tmp_path / "python"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("tests", "__pycache__", "build", "*.egg-info"))
    target = tmp_path / "site"
    # --no-deps --no-build-isolation: msgpack, httpx and setuptools are already here (no PyPI needed)
    r = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    check = subprocess.run(
        [sys.executable, "-c", "import episode_relay, sys; print(episode_relay.__file__); print(sorted(episode_relay.__all__)[:3])"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
    )
    assert check.returncode == 0, check.stderr
    assert check.stdout.splitlines()[0].startswith(str(target))
    # its subpackages come too: the prime-rl bridge runs from the install (README, docs/prime-rl.md)
    bridge = subprocess.run(
        [sys.executable, "-m", "episode_relay.prime_rl", "--help"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(target)},
        cwd=tmp_path,
    )
    assert bridge.returncode == 0, bridge.stderr
    assert "usage" in bridge.stdout.lower()
