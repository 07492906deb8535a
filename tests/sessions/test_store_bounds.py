"""A store that visits many sessions keeps a bounded number of them in memory (issue 12:
``write --all`` must not grow with the number of sessions): indexes, cached lines and locks
of the least recently used sessions are let go, and a session let go reads back the same.
Counted, never timed."""

from __future__ import annotations

import os
import sys
import threading

from scriptorium.sessions import SessionStore
from scriptorium.sessions import store as store_mod

from test_costs import make_chain

MARK = "memory_written_scriptorium"


def test_visiting_many_sessions_keeps_a_bounded_number_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 5)
    root = tmp_path / "sessions"
    for s in range(20):
        make_chain(root, f"s{s}", 4)
    store = SessionStore(root, git=False)
    for s in range(20):
        store.line(f"s{s}")
        store.merge_node_metadata_batch(f"s{s}", {"n0": {MARK: "w-1"}})
    assert list(store._indexes) == [f"s{s}" for s in range(15, 20)]
    assert {sid for sid, _ in store._lines} <= set(store._indexes)
    assert len(store._tlocks) == len(store._flocks) == 5


def test_a_session_let_go_reads_back_what_it_held(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 2)
    root = tmp_path / "sessions"
    for s in range(4):
        make_chain(root, f"s{s}", 4)
    store = SessionStore(root, git=False)
    store.merge_node_metadata_batch("s0", {"n1": {MARK: "w-1"}})
    before = [n.to_json() for n in store.get_nodes("s0")]
    for s in (1, 2, 3):
        store.head(f"s{s}")
    assert "s0" not in store._indexes
    assert [n.to_json() for n in store.get_nodes("s0")] == before
    assert store.get_node("s0", "n1").metadata[MARK] == "w-1"


def test_a_lock_held_is_never_let_go(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 1)
    root = tmp_path / "sessions"
    for s in range(3):
        make_chain(root, f"s{s}", 4)
    store = SessionStore(root, git=False)
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with store._locked("s0"):
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)
    try:
        store.head("s1")
        store.head("s2")
        assert "s0" in store._tlocks  # its file lock is held: kept whatever the bound
    finally:
        release.set()
        thread.join()


def test_marking_a_batch_interns_no_node_file_name(tmp_path, monkeypatch):
    """CPython 3.11's pathlib interns every part of a path it builds: a ``Path`` per node
    marked put one more name into the interpreter's string table, whose resizes (a whole
    new table, held beside the old for a moment) then came the sooner the more turns a
    long write marked."""
    root = tmp_path / "sessions"
    make_chain(root, "s", 40)
    store = SessionStore(root, git=False)
    store.line("s")
    names = set(os.listdir(root / "s" / "history"))
    interned: list[str] = []
    real = sys.intern
    monkeypatch.setattr(sys, "intern", lambda text: interned.append(text) or real(text))
    store.merge_node_metadata_batch("s", {f"n{i}": {MARK: "w-1"} for i in range(40)})
    assert not names & set(interned)
    monkeypatch.undo()
    assert [n[MARK] for n in SessionStore(root, git=False).get_branch("s")] == ["w-1"] * 40
