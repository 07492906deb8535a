"""A store that visits many sessions keeps a bounded number of them in memory (issue 12:
``write --all`` must not grow with the number of sessions): indexes, cached lines and locks
of the least recently used sessions are let go, and a session let go reads back the same.
Counted, never timed."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from scriptorium.sessions import SessionStore
from scriptorium.sessions import store as store_mod

MARK = "memory_written_scriptorium"


def make_session(root: Path, sid: str, n: int = 4) -> None:
    hist = root / sid / "history"
    hist.mkdir(parents=True)
    prev = "ROOT"
    for i in range(n):
        role = "user" if i % 2 == 0 else "llm"
        doc = {"id": f"{sid}n{i}", "created_at": 1.0 + i, "seq": i, "role": role, "name": "",
               "input": None, "output": f"turn {i}", "caller": "", "predecessor": prev,
               "reads": [], "metadata": {}}
        (hist / f"{i:08d}-{role[0]}-{sid}n{i}.json").write_text(json.dumps(doc))
        prev = f"{sid}n{i}"
    (root / sid / "meta.json").write_text(json.dumps({"id": sid, "head_id": prev}))


def test_visiting_many_sessions_keeps_a_bounded_number_in_memory(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 5)
    root = tmp_path / "sessions"
    for s in range(20):
        make_session(root, f"s{s}")
    store = SessionStore(root, git=False)
    for s in range(20):
        store.line(f"s{s}")
        store.merge_node_metadata_batch(f"s{s}", {f"s{s}n0": {MARK: "w-1"}})
    assert list(store._indexes) == [f"s{s}" for s in range(15, 20)]
    assert {sid for sid, _ in store._lines} <= set(store._indexes)
    assert len(store._tlocks) == len(store._flocks) == 5


def test_a_session_let_go_reads_back_what_it_held(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 2)
    root = tmp_path / "sessions"
    for s in range(4):
        make_session(root, f"s{s}")
    store = SessionStore(root, git=False)
    store.merge_node_metadata_batch("s0", {"s0n1": {MARK: "w-1"}})
    before = [n.to_json() for n in store.get_nodes("s0")]
    for s in (1, 2, 3):
        store.head(f"s{s}")
    assert "s0" not in store._indexes
    assert [n.to_json() for n in store.get_nodes("s0")] == before
    assert store.get_node("s0", "s0n1").metadata[MARK] == "w-1"


def test_a_lock_held_is_never_let_go(tmp_path, monkeypatch):
    monkeypatch.setattr(store_mod, "MAX_OPEN_SESSIONS", 1)
    root = tmp_path / "sessions"
    for s in range(3):
        make_session(root, f"s{s}")
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
