"""merge_node_metadata_batch (the written-marker path) and the incremental index refresh."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.sessions import NodeNotFound, SessionStore, index as index_mod

MARK = "memory_written_scriptorium"


def snapshot(sdir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(sdir)): p.read_bytes() for p in sorted(sdir.rglob("*"))
            if p.is_file() and p.name != ".session.lock"}


def age_session(sdir: Path, seconds: float = 3600) -> None:
    """Backdate every file so fingerprints are no longer 'racy' (as in a long-lived session)."""
    past = os.stat(sdir).st_mtime - seconds
    for p in [*sdir.rglob("*"), sdir / "history"]:
        os.utime(p, (past, past), follow_symlinks=False)


def test_a_merge_changes_only_the_named_nodes_metadata(written):
    sdir = written.root / "offsite"
    before = snapshot(sdir)
    meta_stat = os.stat(sdir / "meta.json")
    written.merge_node_metadata_batch("offsite", {"o4-edit": {MARK: "w-1"}, "o5-edit": {MARK: "w-1"}})
    after = snapshot(sdir)
    changed = {k for k in after if before.get(k) != after[k]}
    assert changed == {"history/0009-u-o4-edit.json", "history/0010-l-o5-edit.json"}
    assert set(after) == set(before)  # no new file (the lock file aside)
    assert os.stat(sdir / "meta.json").st_mtime_ns == meta_stat.st_mtime_ns
    node = written.get_node("offsite", "o5-edit")
    assert node.metadata[MARK] == "w-1" and node.output == "Got it: vegetarian menus for Dana."


def test_a_merge_keeps_the_other_metadata_keys_and_top_level_fields(written):
    written.merge_node_metadata_batch("offsite", {"o6-notice": {MARK: "w-2"}})
    node = written.get_node("offsite", "o6-notice")
    assert node.metadata == {"display": "runtime", "source": "job_followup", MARK: "w-2"}
    assert node.predecessor == "o5-edit" and node.seq == 14


def test_a_merge_does_not_move_updated_at_or_the_head(written):
    meta = written.get_meta("offsite")
    written.merge_node_metadata_batch("offsite", {"o0": {MARK: "w-9"}})
    after = written.get_meta("offsite")
    assert after["updated_at"] == meta["updated_at"] and after["head_id"] == meta["head_id"]


def test_a_merge_naming_an_unknown_node_writes_nothing(written):
    sdir = written.root / "offsite"
    before = snapshot(sdir)
    with pytest.raises(NodeNotFound, match="ghost"):
        written.merge_node_metadata_batch("offsite", {"o4": {MARK: "w"}, "ghost": {MARK: "w"}})
    assert snapshot(sdir) == before


def test_a_merge_with_a_bad_patch_writes_nothing(written):
    sdir = written.root / "offsite"
    before = snapshot(sdir)
    with pytest.raises(InvalidInput):
        written.merge_node_metadata_batch("offsite", {"o4": {MARK: "w"}, "o5": "not a dict"})
    assert snapshot(sdir) == before


def test_another_store_holding_the_session_sees_the_merge_on_its_next_read(written_home):
    a = SessionStore.from_home(written_home)
    b = SessionStore.from_home(written_home)
    assert MARK not in b.get_branch("offsite")[4]
    a.merge_node_metadata_batch("offsite", {"o4-edit": {MARK: "w-5"}})
    assert b.get_branch("offsite")[4][MARK] == "w-5"


def test_refresh_after_a_foreign_mark_reparses_only_the_marked_files(home, chat, monkeypatch):
    store = SessionStore.from_home(home, git=False)
    chat(store, "s1", *[f"n{i}" for i in range(60)])
    age_session(store.root / "s1")
    # and read it an hour later: a cold open trusts only files whose inode changed (ctime,
    # which utime cannot backdate) before it read them
    ahead = index_mod.time.time_ns() + 3600 * 10**9
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: ahead)
    holder = SessionStore.from_home(home, git=False)
    holder.get_branch("s1")
    idx = holder._index("s1")
    parses = idx.parses
    holder.get_branch("s1")
    assert idx.parses == parses  # nothing changed: no file is read again
    marker = SessionStore.from_home(home, git=False)
    marker.merge_node_metadata_batch("s1", {f"n{i}": {MARK: "w-3"} for i in range(20, 40)})
    branch = holder.get_branch("s1")
    assert idx.parses - parses == 20
    assert [m["id"] for m in branch if m.get(MARK)] == [f"n{i}" for i in range(20, 40)]


def test_a_merge_does_not_hide_a_foreign_append_from_the_merging_store(home, chat):
    a = SessionStore.from_home(home, git=False)
    b = SessionStore.from_home(home, git=False)
    chat(a, "s1", "u1", "a1")
    a.get_branch("s1")
    b.append_message("s1", {"id": "u2", "role": "user", "content": "from b"})
    a.merge_node_metadata_batch("s1", {"u1": {MARK: "w"}})
    assert [m["id"] for m in a.get_branch("s1")] == ["u1", "a1", "u2"]


def test_a_same_tick_same_size_rewrite_is_still_seen(home, chat):
    # A rewrite that leaves every fingerprint equal (in-place, same size, mtimes restored)
    # is exactly what a coarse clock can produce; a recent mtime is never trusted.
    store = SessionStore.from_home(home, git=False)
    chat(store, "s1", "u1", "a1")
    store.merge_node_metadata_batch("s1", {"u1": {MARK: "w-aaaa"}})
    hist = store.root / "s1" / "history"
    path = hist / "00000000-u-u1.json"
    future = os.stat(path).st_mtime_ns + 10**12  # "now" for a clock we cannot see past
    for p in (path, hist):
        os.utime(p, ns=(future, future))
    holder = SessionStore.from_home(home, git=False)
    assert holder.get_node("s1", "u1").metadata[MARK] == "w-aaaa"
    ino = os.stat(path).st_ino
    path.write_bytes(path.read_bytes().replace(b"w-aaaa", b"w-bbbb"))  # same inode, same size
    for p in (path, hist):
        os.utime(p, ns=(future, future))
    assert os.stat(path).st_ino == ino
    assert holder.get_node("s1", "u1").metadata[MARK] == "w-bbbb"


def test_get_meta_returns_a_copy(any_store, chat):
    store = any_store
    chat(store, "s1", "u1")
    meta = store.get_meta("s1")
    meta["head_id"] = "changed"
    meta["branches"]["x"] = 1
    assert store.get_meta("s1")["head_id"] == "u1" and store.get_meta("s1")["branches"] == {}


def test_a_none_value_in_a_patch_removes_that_key_and_keeps_the_rest(any_store):
    store = any_store
    store.create_session("s")
    store.append_message("s", {"id": "m0", "role": "user", "content": "hi", "keep": 1})
    store.merge_node_metadata_batch("s", {"m0": {"memory_written_scriptorium": "w-00000001"}})
    store.merge_node_metadata_batch("s", {"m0": {"memory_written_scriptorium": None}})
    assert store.get_node("s", "m0").metadata == {"keep": 1}
