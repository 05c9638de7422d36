"""``tokenizer=``: the file or the model name looked up in the local Hugging Face cache (never the
network), shipped to the relay once per run by the sink, the forwarder and the prime-rl bridge."""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path
from typing import List

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayForwarder, RelaySink
from episode_relay.prime_rl.bridge import Bridge
from episode_relay.tokenizer import find_tokenizer, hub_cache, run_of
from helpers import load_case, mint_token, unpackb

TOKENIZER = Path(__file__).resolve().parents[3] / "test" / "fixtures" / "tokenizer" / "tokenizer.json"


def fake_cache(root: Path, model: str, snapshots: List[str], main: str | None) -> Path:
    """A hub cache laid out as huggingface_hub writes it: models--ORG--NAME/{refs/main, snapshots/<rev>/}."""
    base = root / ("models--" + model.replace("/", "--"))
    for rev in snapshots:
        (base / "snapshots" / rev).mkdir(parents=True)
        (base / "snapshots" / rev / "tokenizer.json").write_text(f'{{"model": {{}}, "rev": "{rev}"}}')
    if main is not None:
        (base / "refs").mkdir()
        (base / "refs" / "main").write_text(main + "\n")
    return base


def test_the_cache_is_found_as_huggingface_hub_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HOME", raising=False)
    assert hub_cache() == tmp_path / "home" / ".cache" / "huggingface" / "hub"
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hub_cache() == tmp_path / "hf" / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hubcache"))
    assert hub_cache() == tmp_path / "hubcache"


def test_a_model_name_reads_the_snapshot_refs_main_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    base = fake_cache(tmp_path, "Org/Model-1B", ["aaa", "bbb"], main="aaa")
    assert find_tokenizer("Org/Model-1B") == base / "snapshots" / "aaa" / "tokenizer.json"
    # no refs/main (a cache copied by hand): the newest snapshot
    other = fake_cache(tmp_path, "Org/Other", ["old", "new"], main=None)
    (other / "snapshots" / "old" / "tokenizer.json").touch()
    import os

    os.utime(other / "snapshots" / "new" / "tokenizer.json", (1e9, 2e9))
    os.utime(other / "snapshots" / "old" / "tokenizer.json", (1e9, 1e9))
    assert find_tokenizer("Org/Other") == other / "snapshots" / "new" / "tokenizer.json"
    # a path, a folder, and HF_HOME's hub when HF_HUB_CACHE is unset
    assert find_tokenizer(TOKENIZER) == TOKENIZER
    assert find_tokenizer(TOKENIZER.parent) == TOKENIZER
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    fake_cache(tmp_path / "home" / "hub", "Org/Model-1B", ["ccc"], main="ccc")
    assert find_tokenizer("Org/Model-1B") == tmp_path / "home" / "hub" / "models--Org--Model-1B" / "snapshots" / "ccc" / "tokenizer.json"


def test_a_model_not_in_the_cache_is_an_error_never_a_download(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="nothing is downloaded"):
        find_tokenizer("Org/Absent")
    with pytest.raises(FileNotFoundError, match="not a model name"):
        find_tokenizer(str(tmp_path / "no-such.json"))
    with pytest.raises(FileNotFoundError, match="no tokenizer.json"):
        find_tokenizer(tmp_path)
    # the sink says so where it is made, before any rollout is sent
    with pytest.raises(FileNotFoundError, match="Org/Absent"):
        RelaySink("http://127.0.0.1:9", "r:e", tokenizer="Org/Absent")
    assert run_of("a:b:c") == "a:b" and run_of("solo") == "~"


def fetch_tokenizer(relay: Relay, run: str) -> httpx.Response:
    return httpx.get(f"{relay.url}/v1/runs/{run}/tokenizer", headers={"authorization": f"Bearer {mint_token(relay.secret, 'watcher', [f'{run}:*'])}"})


def test_sinks_of_a_run_ship_the_cached_tokenizer_once(relay: Relay, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two sinks of one run with ``tokenizer="ORG/NAME"`` (in the cache): the relay holds the
    file's exact bytes after the first delta, and the second sink sends no second PUT."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snap = fake_cache(tmp_path, "Tiny/BPE", ["rev1"], main="rev1") / "snapshots" / "rev1" / "tokenizer.json"
    snap.write_bytes(TOKENIZER.read_bytes())
    run = f"tk{uuid.uuid4().hex[:10]}"
    assert fetch_tokenizer(relay, run).status_code == 404
    frames = [unpackb(f) for f in load_case("chat_basic").frames]
    puts: List[str] = []

    async def record(request: httpx.Request) -> None:
        if request.url.path.endswith("/tokenizer"):
            puts.append(request.method)

    async def main() -> None:
        async with httpx.AsyncClient(timeout=30, event_hooks={"request": [record]}) as client:
            for ep in ("a", "b"):
                sink = RelaySink(relay.url, f"{run}:{ep}", token=relay.token, client=client, tokenizer="Tiny/BPE")
                await sink.send(frames[0])
                await sink.close()

    asyncio.run(main())
    assert puts == ["PUT"]
    got = fetch_tokenizer(relay, run)
    assert got.status_code == 200 and got.content == TOKENIZER.read_bytes()


def test_a_refused_upload_is_logged_and_the_deltas_go_on(relay: Relay, caplog: pytest.LogCaptureFixture) -> None:
    """A producer token for one episode may not set the run's tokenizer (403): the sink logs it
    and delivers the rollout all the same."""
    run = f"tk{uuid.uuid4().hex[:10]}"
    token = mint_token(relay.secret, "producer", [f"{run}:only"])
    frames = [unpackb(f) for f in load_case("chat_basic").frames]

    async def main() -> None:
        async with RelaySink(relay.url, f"{run}:only", token=token, tokenizer=TOKENIZER) as sink:
            ack = await sink.send(frames[0])
            assert ack["ok"] is True

    with caplog.at_level(logging.ERROR, logger="episode_relay"):
        asyncio.run(main())
    assert any("tokenizer" in r.getMessage() and "forbidden" in r.getMessage() for r in caplog.records), caplog.text
    assert fetch_tokenizer(relay, run).status_code == 404


def test_the_forwarder_ships_it_before_its_first_delta(relay: Relay) -> None:
    run = f"tk{uuid.uuid4().hex[:10]}"
    frames = [unpackb(f) for f in load_case("chat_basic").frames]

    async def main() -> None:
        fwd = RelayForwarder(relay.url, f"{run}:f", token=relay.token, tokenizer=str(TOKENIZER))
        fwd.on_delta(frames[0])
        await fwd.drain(timeout=30)
        assert fwd.delivered == 1
        await fwd.close()

    asyncio.run(main())
    got = fetch_tokenizer(relay, run)
    assert got.status_code == 200 and got.content == TOKENIZER.read_bytes()


def test_the_bridge_ships_it_when_it_starts(relay: Relay, tmp_path: Path) -> None:
    run = f"tk{uuid.uuid4().hex[:10]}"
    out = tmp_path / "output"
    out.mkdir()
    bridge = Bridge(out, relay.url, run=run, token=relay.token, tokenizer=TOKENIZER)
    asyncio.run(bridge.run(once=True))
    got = fetch_tokenizer(relay, run)
    assert got.status_code == 200 and got.content == TOKENIZER.read_bytes()
