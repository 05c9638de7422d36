"""A run into a notebook (episode_relay.export) against a real relay: the DataFrame equals, row for
row, a recount from the exact episodes (each read back with GET) and the run's list; the filters
and a search select what the list and the search select; JSONL lines carry the exact episodes (the
relay's JSON view, as GET answers it); an interrupted export resumed from its file has every
episode once, no gap and no duplicate; the token never travels in a URL."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from pathlib import Path
from typing import Any, Dict, List

import httpx
import pytest

from conftest import Relay
from episode_relay import RelayError, announce_dispatch, export_jsonl, export_parquet, iter_rollouts, read_run, rollout_record
from episode_relay import export as export_module
from helpers import load_case, unpackb
from test_reward import trainer_reward

pd = pytest.importorskip("pandas")

#: (case, kind, step) per rollout, finished in this order; chat_basic and tool_calls_pending repeat
PLAN = [
    ("chat_basic", "train", 1), ("tool_calls_pending", "train", 1), ("multi_trace_links", "eval", 1),
    ("odd_values", "train", 2), ("large_routing", "train", 2), ("chat_basic", "eval", 2),
    ("tool_calls_pending", "train", 3), ("chat_basic", "train", 3), ("odd_values", "eval", 3),
    ("tool_calls_pending", "train", 4), ("chat_basic", "train", 4), ("multi_trace_links", "train", 4),
]


def auth(relay: Relay) -> Dict[str, str]:
    return {"authorization": f"Bearer {relay.token}"}


def post(relay: Relay, path: str, body: bytes) -> None:
    r = httpx.post(relay.url + path, content=body, headers={**auth(relay), "content-type": "application/msgpack"}, timeout=60)
    assert r.status_code == 200, r.text


def listed(relay: Relay, run: str) -> List[Dict[str, Any]]:
    r = httpx.get(f"{relay.url}/v1/runs/{run}/episodes", params={"status": "finished", "limit": "500"}, headers=auth(relay), timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["episodes"]


@pytest.fixture(scope="module")
def run(relay: Relay) -> str:
    name = f"py-export-{uuid.uuid4().hex[:8]}"
    for i, (case_name, kind, step) in enumerate(PLAN):
        eid = f"{name}:r{i:02d}"
        identity = {"id": uuid.uuid4().hex, "kind": kind, "env": "gsm8k", "group": f"g{step}", "task": f"idx={i % 3}", "policy_version": step - 1, "step": step, "started": 1764644000.0 + i}
        asyncio.run(announce_dispatch(relay.url, eid, identity, token=relay.token))
        case = load_case(case_name)
        for frame in case.frames:
            post(relay, f"/v1/episodes/{eid}/deltas", frame)
        post(relay, f"/v1/episodes/{eid}/reply", case.reply)
    deadline = time.monotonic() + 30
    while len(listed(relay, name)) < len(PLAN) or any(e.get("kind") is None for e in listed(relay, name)):
        assert time.monotonic() < deadline, "the run's index never listed every rollout with its identity"
        time.sleep(0.1)
    return name


def get_episode(relay: Relay, eid: str, accept: str = "application/msgpack") -> bytes:
    r = httpx.get(f"{relay.url}/v1/episodes/{eid}", headers={**auth(relay), "accept": accept}, timeout=60)
    assert r.status_code == 200, r.text
    return r.content


#: prime-rl's stop conditions that truncate (src/protocol/registry/truncation.ts, docs/training.md)
LIMITS = ("max_turns", "max_input_tokens", "max_output_tokens", "max_total_tokens", "compaction_failed")


def recount(relay: Relay, run: str, keep=lambda e: True) -> List[Dict[str, Any]]:
    """Each finished rollout counted afresh from its exact episode (GET) and its listed row."""
    out = []
    for e in sorted(listed(relay, run), key=lambda e: e["id"]):
        if not keep(e):
            continue
        ep = unpackb(get_episode(relay, e["id"]))
        traces = ep["traces"]
        t0 = traces[0]
        reward, scores = trainer_reward([t.get("rewards") for t in traces])
        out.append(
            {
                "id": e["id"], "kind": e["kind"], "step": e["step"], "group": e["group"], "policy_version": e["policy_version"],
                "task": e["task"], "reward": reward,
                "rewards": scores,
                # prime-rl's turns: assistant nodes, all traces; the calls by their own name
                "turns": sum(1 for t in traces for n in t["nodes"] if (n.get("message") or {}).get("role") == "assistant"),
                "calls": sum(len(t["calls"]) for t in traces),
                "tokens": sum(t["num_total_tokens"] for t in traces),
                "output_tokens": sum(t["num_output_tokens"] for t in traces),
                "stop_condition": t0["stop_condition"],
                # the trainer's truncation, any trace: a framework limit, or the last call without an error cut at "length"
                "is_truncated": any(
                    t.get("stop_condition") in LIMITS
                    or ([c.get("finish_reason") for c in t["calls"] if c.get("error") is None] or [None])[-1] == "length"
                    for t in traces
                ),
                "is_timeout": bool(t0["is_timeout"]),
                "traces": len(traces),
                "branches": sum(sum(1 for i in range(len(t["nodes"])) if all(n["parent"] != i for n in t["nodes"])) for t in traces),
            }
        )
    return out


def frame_rows(df: Any) -> List[Dict[str, Any]]:
    cols = ["id", "kind", "step", "group", "policy_version", "task", "reward", "rewards", "turns", "calls", "tokens", "output_tokens", "stop_condition", "is_truncated", "is_timeout", "traces", "branches"]
    rows = df.sort_values("id")[cols].to_dict("records")
    for r in rows:
        for c in ("step", "policy_version", "turns", "calls", "tokens", "output_tokens", "traces", "branches"):
            r[c] = int(r[c])
        for c in ("is_truncated", "is_timeout"):
            r[c] = bool(r[c])
        r["reward"] = None if pd.isna(r["reward"]) else r["reward"]
    return rows


def same(a: Any, b: Any) -> bool:
    """Equal, NaN equal to NaN (a difference is printed)."""
    ja = [json.dumps(x, sort_keys=True, default=str) for x in a]
    jb = [json.dumps(x, sort_keys=True, default=str) for x in b]
    for x, y in zip(ja, jb):
        if x != y:
            print("got     ", x)
            print("expected", y)
    return ja == jb


def test_read_run_equals_a_recount_from_the_exact_episodes(relay: Relay, run: str) -> None:
    df = read_run(relay.url, run, token=relay.token, batch=5)
    assert len(df) == len(PLAN) and df["id"].is_unique
    assert same(frame_rows(df), recount(relay, run))
    # the timeout by its name only: no `truncated` column (the API's deprecated alias of is_timeout) beside is_truncated
    assert "truncated" not in df.columns and {"is_truncated", "is_timeout"} <= set(df.columns)
    # the reward is the trainer's, the relay's row says the same
    rows = {e["id"]: e for e in listed(relay, run)}
    for r in frame_rows(df):
        assert r["reward"] == rows[r["id"]]["reward"], r["id"]
    assert df.loc[df["id"] == f"{run}:r00", "reward"].iloc[0] == 1.125  # chat_basic: 1 × 1 + 0.5 × 0.25
    # the final answer: the last assistant message of the first trace's last branch, and the task's answer
    tool = df[df["id"] == f"{run}:r01"].iloc[0]
    assert tool["expected_answer"] == "42"
    assert isinstance(tool["final_answer"], str) and tool["final_answer"]
    # per-key columns beside the dicts
    assert set(df[df["id"] == f"{run}:r00"].iloc[0][["reward.correct", "reward.format"]]) == {1.0, 0.5}
    assert df.loc[df["id"] == f"{run}:r00", "metric.num_turns"].iloc[0] == 3.0


def test_per_branch_rows(relay: Relay, run: str) -> None:
    df = read_run(relay.url, run, token=relay.token, per="branch")
    by_rollout = df.groupby("id").size().to_dict()
    expected = {r["id"]: r["branches"] for r in recount(relay, run)}
    assert by_rollout == expected
    assert set(df["kind"]) == {"train", "eval"} and (df["nodes"] >= 1).all()
    assert "truncated" not in df.columns and {"is_truncated", "is_timeout"} <= set(df.columns)


def test_filters_select_what_the_list_selects(relay: Relay, run: str) -> None:
    def ids(**f: Any) -> List[str]:
        return sorted(read_run(relay.url, run, token=relay.token, **f)["id"])

    rows = listed(relay, run)
    assert ids(kind="eval") == sorted(e["id"] for e in rows if e["kind"] == "eval")
    assert ids(step=(2, 3)) == sorted(e["id"] for e in rows if 2 <= e["step"] <= 3)
    assert ids(step=4, kind="train") == sorted(e["id"] for e in rows if e["step"] == 4 and e["kind"] == "train")
    assert ids(policy_version=0) == sorted(e["id"] for e in rows if e["policy_version"] == 0)
    assert ids(stop="max_turns", is_timeout=True) == sorted(e["id"] for e in rows if e["stop_condition"] == "max_turns" and e["is_timeout"])
    assert ids(rewards={"correct": (1, None)}) == sorted(f"{run}:r{i:02d}" for i, p in enumerate(PLAN) if p[0] in ("chat_basic", "tool_calls_pending"))
    assert ids(kind="nope") == []
    empty = read_run(relay.url, run, token=relay.token, kind="nope")
    assert list(empty.columns)[:3] == ["id", "run", "status"] and "truncated" not in empty.columns
    with pytest.raises(RelayError) as e:
        read_run(relay.url, run, token=relay.token, step=(3, 1))
    assert e.value.field == "step"


def searched(relay: Relay, run: str, **params: str) -> List[str]:
    r = httpx.get(f"{relay.url}/v1/runs/{run}/search", params={"q": "calculator", "status": "finished", "limit": "500", **params}, headers=auth(relay), timeout=30)
    assert r.status_code == 200, r.text
    return [e["id"] for e in r.json()["episodes"]]


def test_a_search_selection(relay: Relay, run: str) -> None:
    # every rollout's text is searchable once its index has it (fed in the background)
    deadline = time.monotonic() + 20
    while len(searched(relay, run)) < sum(1 for p in PLAN if p[0] == "tool_calls_pending") and time.monotonic() < deadline:
        time.sleep(0.2)
    expected = searched(relay, run, kind="train")
    assert f"{run}:r01" in expected and f"{run}:r02" not in expected  # a tool_calls_pending, not an eval one
    got = [r.id for r in iter_rollouts(relay.url, run, token=relay.token, q="calculator", kind="train")]
    assert got == expected  # in the search's order, best first
    expected = sorted(expected)
    df = read_run(relay.url, run, token=relay.token, q="calculator", kind="train")
    assert same(frame_rows(df), recount(relay, run, lambda e: e["id"] in expected))
    # resumed from each position: the rest, in the same order
    all_ = list(iter_rollouts(relay.url, run, token=relay.token, q="calculator"))
    for i, r in enumerate(all_):
        assert [x.id for x in iter_rollouts(relay.url, run, token=relay.token, q="calculator", cursor=r.cursor)] == [x.id for x in all_[i + 1 :]]


def test_jsonl_holds_the_exact_episodes(relay: Relay, run: str, tmp_path: Path) -> None:
    out = tmp_path / "run.jsonl"
    assert export_jsonl(relay.url, run, out, token=relay.token) == len(PLAN)
    lines = out.read_bytes().splitlines()
    assert len(lines) == len(PLAN)
    for line in lines:
        obj = json.loads(line)
        assert list(obj) == ["id", "cursor", "row", "episode"] and obj["row"]["id"] == obj["id"]
        # the episode's value is byte for byte the JSON view GET answers
        view = get_episode(relay, obj["id"], "application/json")
        assert line.endswith(b',"episode":' + view + b"}"), obj["id"]
    # a search's lines have the same shape and bytes
    sout = tmp_path / "search.jsonl"
    n = export_jsonl(relay.url, run, sout, token=relay.token, q="calculator")
    assert n == len(searched(relay, run))
    for line in sout.read_bytes().splitlines():
        obj = json.loads(line)
        assert line.endswith(b',"episode":' + get_episode(relay, obj["id"], "application/json") + b"}")


class Interrupt(Exception):
    pass


def test_jsonl_resumes_after_an_interruption_without_duplicates_or_gaps(relay: Relay, run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "resumed.jsonl"
    whole = tmp_path / "whole.jsonl"
    export_jsonl(relay.url, run, whole, token=relay.token, kind="train")
    real = export_module._bulk_lines
    for stop_after in (1, 4, 7):

        def interrupted(*a: Any, **k: Any):
            for i, item in enumerate(real(*a, **k)):
                if i == stop_after:
                    raise Interrupt()
                yield item

        monkeypatch.setattr(export_module, "_bulk_lines", interrupted)
        with pytest.raises(Interrupt):
            export_jsonl(relay.url, run, out, token=relay.token, kind="train")
        monkeypatch.setattr(export_module, "_bulk_lines", real)
        # a half-written last line, as a killed process leaves it
        with open(out, "ab") as f:
            f.write(b'{"id":"half')
        export_jsonl(relay.url, run, out, token=relay.token, kind="train")
        assert out.read_bytes() == whole.read_bytes(), f"stopped after {stop_after}"
        out.unlink()


def test_a_dropped_answer_is_retried_from_the_last_cursor(relay: Relay, run: str) -> None:
    """A connection that breaks mid-answer (a real proxy that cuts it after some bytes): the
    export goes on from the last cursor, every rollout once."""
    cuts = {"left": 2}

    class Cutting(httpx.BaseTransport):
        def __init__(self) -> None:
            self.inner = httpx.HTTPTransport()
            self.urls: List[str] = []

        def handle_request(self, request: httpx.Request) -> httpx.Response:
            self.urls.append(str(request.url))
            res = self.inner.handle_request(request)
            if cuts["left"] <= 0 or not request.url.path.endswith("/finished"):
                return res
            cuts["left"] -= 1
            body = res.read()
            return httpx.Response(res.status_code, headers=res.headers, content=body[: len(body) // 2])

    transport = Cutting()
    with httpx.Client(transport=transport, timeout=30) as c:
        got = [r.id for r in iter_rollouts(relay.url, run, token=relay.token, client=c)]
    assert sorted(got) == sorted(e["id"] for e in listed(relay, run)) and len(set(got)) == len(got)
    assert cuts["left"] == 0 and sum(u.endswith("finished?row=1") or "/finished?" in u for u in transport.urls) >= 3
    assert all(relay.token not in u for u in transport.urls)


def test_parquet_round_trip_and_resume(relay: Relay, run: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "run.parquet"
    real = export_module.iter_rollouts

    def interrupted(*a: Any, **k: Any):
        for i, r in enumerate(real(*a, **k)):
            if i == 7:
                raise Interrupt()
            yield r

    monkeypatch.setattr(export_module, "iter_rollouts", interrupted)
    with pytest.raises(Interrupt):
        export_parquet(relay.url, run, out, token=relay.token, batch=3)
    monkeypatch.setattr(export_module, "iter_rollouts", real)
    export_parquet(relay.url, run, out, token=relay.token, batch=3)
    df = pd.read_parquet(out)
    assert sorted(df["id"]) == sorted(e["id"] for e in listed(relay, run))
    df["rewards"] = df["rewards"].map(json.loads)
    assert same(frame_rows(df), recount(relay, run))


def test_rollout_record_of_a_golden_episode() -> None:
    case = load_case("multi_trace_links")
    rec = rollout_record({"id": "r:1", "kind": "train"}, unpackb(case.episode))
    assert rec["traces"] == 3 and rec["kind"] == "train" and rec["rewards"] == {"task": 1.0} and rec["reward"] == 1.0


def test_expected_answer_from_the_traces_task_when_the_episode_has_none() -> None:
    ep = unpackb(load_case("chat_basic").episode)
    answer = ep["traces"][0]["task"]["data"].get("answer")
    assert answer is not None
    ep["task"] = {"key": "k"}  # a reply head naming its task without the data
    assert rollout_record({"id": "r:1"}, ep)["expected_answer"] == (answer if isinstance(answer, str) else json.dumps(answer, default=str))


def test_without_pandas_or_pyarrow_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now raises ImportError
    with pytest.raises(ImportError, match=r"export_parquet needs pyarrow: pip install 'episode-relay\[export\]'"):
        export_parquet("http://127.0.0.1:1", "r", tmp_path / "x")
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"read_run needs pandas: pip install 'episode-relay\[export\]'"):
        read_run("http://127.0.0.1:1", "r")
