"""On-disk layout and node schema (DESIGN §3), and reading what the reference system wrote."""

from __future__ import annotations

import json
import os
from pathlib import Path

from scriptorium.sessions import SessionStore
from scriptorium.sessions.node import NODE_FIELDS


def test_a_node_is_one_file_named_by_eight_digit_seq_role_letter_and_id(store, chat):
    chat(store, "s1", "u1", "a1")
    store.append_message("s1", {"id": "t1", "role": "tool", "content": {"ok": 1},
                                "caller": "a1"})
    names = sorted(p.name for p in (store.root / "s1" / "history").iterdir())
    assert names == ["00000000-u-u1.json", "00000001-l-a1.json", "00000002-c-t1.json"]


def test_a_node_file_holds_exactly_the_reference_schema(store, chat):
    chat(store, "s1", "u1", "a1")
    raw = json.loads((store.root / "s1" / "history" / "00000001-l-a1.json").read_text())
    assert tuple(raw) == NODE_FIELDS
    assert raw["role"] == "llm" and raw["predecessor"] == "u1" and raw["seq"] == 1
    assert raw["output"] == "text of a1" and raw["caller"] == "" and raw["reads"] == []


def test_meta_json_is_compact_and_holds_the_session_scalars(store, chat):
    store.create_session("s1", title="Trip", channel="web")
    chat(store, "s1", "u1")
    text = (store.root / "s1" / "meta.json").read_text()
    meta = json.loads(text)
    assert "\n" not in text and ", " not in text
    assert meta["id"] == "s1" and meta["title"] == "Trip" and meta["channel"] == "web"
    assert meta["head_id"] == "u1" and meta["branches"] == {}
    assert meta["created_at"] <= meta["updated_at"]


def test_files_are_private_and_the_lock_is_ignored_by_git(store, chat):
    chat(store, "s1", "u1")
    node = next((store.root / "s1" / "history").iterdir())
    assert node.stat().st_mode & 0o777 == 0o600
    ignore = (store.root / "s1" / ".gitignore").read_text().split()
    assert ".session.lock" in ignore and "large_nodes/" in ignore and "file_backups/" in ignore


def test_a_session_with_four_digit_history_names_reads_in_seq_order(written):
    nodes = written.get_nodes("offsite")
    assert [n.seq for n in nodes] == list(range(17))
    assert nodes[0].id == "o0" and nodes[-1].id == "summary_0001"


def test_a_reference_session_opens_without_git_and_without_a_root_node(written):
    sdir = written.root / "offsite"
    assert not (sdir / ".git").exists()
    assert "ROOT" not in {n.id for n in written.get_nodes("offsite")}
    assert [m["id"] for m in written.get_branch("offsite")][0] == "o0"
    assert not (sdir / ".git").exists(), "reading must not initialise git"


def test_appending_to_a_four_digit_session_continues_the_seq(written):
    nid = written.append_message("offsite", {"id": "o8", "role": "assistant",
                                             "content": "noted"})
    node = written.get_node("offsite", nid)
    assert node.seq == 17 and node.predecessor == "o7-empty"
    assert (written.root / "offsite" / "history" / "00000017-l-o8.json").exists()
    assert [n.seq for n in written.get_nodes("offsite")] == list(range(18))


def _write_node(hist: Path, seq: int, pred: str | None, width: int = 8) -> str:
    nid = f"n{seq}"
    role = "user" if seq % 2 == 0 else "llm"
    doc = {"id": nid, "created_at": 1.0, "seq": seq, "role": role, "name": "", "input": None,
           "output": f"turn {seq}", "caller": "", "predecessor": pred, "reads": [],
           "metadata": {}}
    name = f"{seq:0{width}d}-{role[0]}-{nid}.json"
    (hist / name).write_text(json.dumps(doc))
    return nid


def test_a_session_of_more_than_ten_thousand_nodes_reads_in_seq_order(home):
    # Written with the reference's 4-digit names: past 9999 the name order is not the seq
    # order ("10000-" sorts before "1002-"), so only a parsed-seq sort gets this right.
    sdir = home / "sessions" / "big"
    hist = sdir / "history"
    hist.mkdir(parents=True)
    pred = "ROOT"
    n = 10_050
    for seq in range(n):
        pred = _write_node(hist, seq, pred, width=4)
    (sdir / "meta.json").write_text(json.dumps({"id": "big", "head_id": pred}))
    by_name = [int(x.split("-")[0]) for x in sorted(os.listdir(hist))]
    assert by_name != sorted(by_name)  # the file names alone would misorder it
    store = SessionStore.from_home(home, git=False)
    assert [x.seq for x in store.get_nodes("big")] == list(range(n))
    branch = store.get_branch("big")
    assert [m["seq"] for m in branch] == list(range(n))
    nid = store.append_message("big", {"id": "next", "role": "user", "content": "more"})
    assert store.get_node("big", nid).seq == n


def test_a_history_only_session_without_meta_opens_with_defaults(home, chat):
    store = SessionStore.from_home(home, git=False)
    chat(store, "s1", "u1", "a1")
    (store.root / "s1" / "meta.json").unlink()
    fresh = SessionStore.from_home(home, git=False)
    assert fresh.exists("s1")
    assert fresh.get_meta("s1")["id"] == "s1" and fresh.head("s1") is None
    assert [n.id for n in fresh.get_nodes("s1")] == ["u1", "a1"]
    assert [m["id"] for m in fresh.get_branch("s1", "a1")] == ["u1", "a1"]
    assert {r["session_id"] for r in fresh.list_sessions()} == {"s1"}
