"""The bridge's pure parts: a live line back to a wire delta, what a finished record adds to the
relay's copy of a trace, and reading growing files by offset (no relay needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from episode_relay.prime_rl.files import Chunks, follow
from episode_relay.prime_rl.formats import LineError, completion, episode_name, live_delta, reply_of, run_name
from helpers import packb


def test_a_live_line_becomes_the_wire_delta() -> None:
    """``links`` keys back to ints, ``dispatch`` popped, null kept, ints and floats apart, a
    ``b'...'`` string kept as the string prime-rl's fold reads, except as an ndarray's data."""
    line = (
        b'{"trace":"t","links":{"0":[{"node":1,"type":"reply"}],"12":[]},'
        b'"set":{"metrics":{"one":1,"one_f":1.0,"nan":null,"neg":-0.0},"info":{"blob":"b\'\\\\x18\\\\x00ok\'"}},'
        b'"nodes":[{"extra":{"__nd__":true,"dtype":"uint8","shape":[2],"data":"b\'\\\\x01\\\\xff\'"}}],'
        b'"dispatch":{"id":"d1","kind":"train"}}'
    )
    delta, dispatch = live_delta(line)
    assert dispatch == {"id": "d1", "kind": "train"}
    assert list(delta) == ["trace", "links", "set", "nodes"]
    assert delta["links"] == {0: [{"node": 1, "type": "reply"}], 12: []}
    m = delta["set"]["metrics"]
    assert type(m["one"]) is int and type(m["one_f"]) is float and m["nan"] is None and str(m["neg"]) == "-0.0"
    assert delta["set"]["info"]["blob"] == "b'\\x18\\x00ok'"
    assert delta["nodes"][0]["extra"]["data"] == b"\x01\xff"
    # packed as the worker packs: int keys, float64 floats, bin for the ndarray's bytes
    packed = packb(delta)
    assert b"\xcb" in packed and b"\xc4\x02\x01\xff" in packed


@pytest.mark.parametrize(
    "line, why",
    [(b"[1]", "JSON object"), (b'{"links":{}}', "str `trace`"), (b'{"trace":"t","links":{"x":[]}}', "node index"), (b'{"trace":', "not JSON")],
)
def test_lines_that_cannot_be_deltas(line: bytes, why: str) -> None:
    with pytest.raises(LineError, match=why):
        live_delta(line)


def test_names() -> None:
    assert run_name("/tmp/my run#1") == "-tmp-my-run-1"
    assert run_name("") == "prime-rl"
    assert episode_name("r", "0a1b") == "r:0a1b"
    assert episode_name("r", "not/ok") == "r:" + __import__("hashlib").sha1(b"not/ok").hexdigest()[:32]


def record_trace() -> dict:
    return {
        "version": 1, "id": "t", "verifiers": {"version": "1"}, "task": {"type": "T", "data": {}},
        "nodes": [{"semantic_parents": [{"node": 1, "type": "reply"}], "token_ids": [1]}, {"parent": 0, "semantic_parents": [], "token_ids": [2]}],
        "calls": [{"node": 1}],
        "rewards": {"r": {"score": 1.0, "weight": 1.0}},
        "info": {"x": 1, "kind": "train", "dispatch": {"step": 3, "time": 1.0}, "arrival": {"step": 4, "time": 2.0}},
        "timing": {"start": 1.0, "scoring": {"start": 2.0, "end": 3.0}},
    }  # fmt: skip


def test_completion_of_a_trace_the_relay_has_whole() -> None:
    """The live file carried everything (lists and timing as the record's): nothing is sent, the
    relay keeps the fold (None fields, unrounded floats and the arrival stamps stay as they are)."""
    rec = record_trace()
    have = {**rec, "nodes": [{"parent": None, **rec["nodes"][0]}, rec["nodes"][1]], "info": {"x": 1}, "pending": []}
    have["timing"] = {**rec["timing"], "agent": None}
    for f in ("payload", "errors"):
        have[f] = []
    assert completion(rec, have) == []


def test_completion_of_a_short_trace() -> None:
    """prime-rl retired the rollout before the last lines reached the file: the record's extra
    items, the links it shows on nodes the relay holds, the changed scalars (info without the
    arrival stamps)."""
    rec = record_trace()
    have = {"id": "t", "nodes": [{"parent": None, "semantic_parents": [], "token_ids": [1]}], "calls": [], "rewards": {}, "info": {"x": 1}, "timing": {"start": 1.0, "scoring": {"start": 2.0, "end": 0.0}}}
    [delta] = completion(rec, have)
    assert delta == {
        "trace": "t",
        "links": {0: [{"node": 1, "type": "reply"}]},
        "nodes": [rec["nodes"][1]],
        "calls": rec["calls"],
        "set": {"rewards": rec["rewards"], "timing": rec["timing"]},
    }


def test_completion_of_a_trace_the_relay_lacks_or_has_too_much_of() -> None:
    rec = record_trace()
    [fresh] = completion(rec, None)
    assert list(fresh) == ["trace", "open", "nodes", "calls", "set"]
    assert fresh["open"] == {k: rec[k] for k in ("version", "id", "verifiers", "task")}
    assert fresh["set"] == {"rewards": rec["rewards"], "info": {"x": 1}, "timing": rec["timing"]}
    have = {"id": "t", "nodes": rec["nodes"] * 2, "calls": rec["calls"]}
    discard, again = completion(rec, have)
    assert discard == {"trace": "t", "discard": True} and again == fresh


def test_the_reply_of_a_record() -> None:
    rec = {"id": "e", "env": {"id": "x"}, "ok": True, "errors": [], "traces": [{**record_trace(), "id": "a"}, {"id": "b", "nodes": [], "calls": []}]}
    assert reply_of(rec) == {
        "success": True, "error": None, "head": {"id": "e", "env": {"id": "x"}, "ok": True, "errors": []},
        "traces": [{"id": "a", "nodes": 2, "calls": 1}, {"id": "b", "nodes": 0, "calls": 0}],
    }  # fmt: skip


def test_following_a_growing_file(tmp_path: Path) -> None:
    """Whole lines only (a torn last line waits), blank lines skipped, a cursor that resumes, a
    file replaced under its name told apart from one that grew, and a byte limit."""
    p = tmp_path / "t.jsonl"
    p.write_bytes(b'{"a":1}\n\n{"b":')
    got = follow(p, None)
    assert got.status == "new" and got.lines == [b'{"a":1}'] and got.ends == [8]
    assert got.cursor is not None and got.cursor.offset == 9  # past the blank line too
    assert follow(p, got.cursor).lines == []  # the torn line waits
    with open(p, "ab") as f:
        f.write(b'2}\n\n{"c":3}\n')
    more = follow(p, got.cursor)
    assert more.status == "grown" and more.lines == [b'{"b":2}', b'{"c":3}'] and more.ends == [17, 26]
    assert follow(p, more.cursor).status == "same"
    assert follow(p, got.cursor, limit=17).lines == [b'{"b":2}']
    # prime-rl recreates the file (a relaunch reusing the name): another inode, or other bytes
    p.unlink()
    p.write_bytes(b'{"x":1}\n\n{"y":2}\n\n{"z":3}\n')
    assert follow(p, more.cursor).status == "replaced"
    same_inode = tmp_path / "u.jsonl"
    same_inode.write_bytes(b'{"a":1}\n')
    first = follow(same_inode, None)
    with open(same_inode, "r+b") as f:
        f.write(b'{"q":9}\n{"r":1}\n')
    assert follow(same_inode, first.cursor).status == "replaced"
    assert follow(tmp_path / "gone.jsonl", None).status == "gone"


def test_reading_a_record_by_offset(tmp_path: Path) -> None:
    """A plain chunk by seek; a sealed chunk (seekable zstd, offsets in decompressed bytes, many
    frames) through zstandard (Debian's python3-zstandard: run-tests.sh installs it)."""
    from prime_rl_run import seal

    lines = [b'{"n":%d,"pad":"%s"}' % (i, b"x" * (i % 90)) for i in range(3000)]
    data = b"".join(ln + b"\n" for ln in lines)
    offsets = [0]
    for ln in lines[:-1]:
        offsets.append(offsets[-1] + len(ln) + 1)
    d = tmp_path / "stream"
    d.mkdir()
    (d / "00000.jsonl").write_bytes(data)
    (d / "00001.jsonl").write_bytes(data)
    seal(d / "00001.jsonl")
    assert not (d / "00001.jsonl").exists()
    chunks = Chunks(d)
    for i in (0, 1, 1999, 2999):
        assert chunks.line_at(0, offsets[i]) == lines[i]
    for i in (5, 700, 701, 2999, 3):  # forward, then behind (the reader starts over)
        assert chunks.line_at(1, offsets[i]) == lines[i]
    with pytest.raises(FileNotFoundError):
        chunks.line_at(2, 0)
    chunks.close()


def test_where_prime_rl_writes(tmp_path: Path) -> None:
    """get_file_monitor_dir(output_dir) = output_dir/monitors/file; a verifiers Flow run (flow.json)
    keeps its live traces in output_dir/live."""
    from episode_relay.prime_rl import Layout

    layout = Layout(tmp_path)
    assert layout.live == tmp_path / "monitors" / "file" / "traces" / "live"
    assert layout.pending == layout.live / "pending" and layout.stream_index == tmp_path / "monitors" / "file" / "traces" / "stream.index.jsonl"
    (tmp_path / "flow.json").write_text("{}")
    assert layout.live == tmp_path / "live" and layout.pending == tmp_path / "live" / "pending"


def test_the_older_single_file_stream(tmp_path: Path) -> None:
    """The older monitor's one-file stream (traces/stream.jsonl, index rows without `chunk`)."""
    single = tmp_path / "stream.jsonl"
    single.write_bytes(b'{"id":"a"}\n{"id":"b"}\n')
    chunks = Chunks(tmp_path / "stream", single)
    assert chunks.line_at(None, 11) == b'{"id":"b"}' and chunks.line_at(None, 0) == b'{"id":"a"}'
    with pytest.raises(ValueError, match="newline"):
        single.write_bytes(b'{"id":"a"}\n{"id":')
        chunks.line_at(None, 11)
