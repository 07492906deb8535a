"""The session store refuses what it cannot keep faithfully (issue 11, items 7, 12, 13, 14).

Session ids that differ only by case, ids too long for a file name, text a node file cannot
hold, a history that is not a directory, a lock path that is a directory, a cross-session
spawn naming a missing session, and the reference's rewind-to-ROOT.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from storekit import stored

from scriptorium.errors import CorruptFile, InvalidInput
from scriptorium.sessions import SessionNotFound, SessionStore


@pytest.fixture
def store(any_store):
    """The refusals hold on both homes; the tests that break files use ``dir_store``."""
    return any_store


# -- item 7: one rule for session ids that differ only by case ---------------------------------


@pytest.mark.parametrize("first,second", [("Trip", "trip"), ("trip", "TRIP"),
                                          ("caf\u00e9", "cafe\u0301"), ("STRASSE", "stra\u00dfe")])
def test_a_session_id_colliding_by_case_or_normalisation_is_refused(store, first, second):
    store.create_session(first)
    with pytest.raises(InvalidInput, match="only by case"):
        store.create_session(second)
    if isinstance(store.root, Path):
        assert not (store.root / second).exists() or second == first
    assert [r["session_id"] for r in store.list_sessions()] == [first]
    assert store.create_session(first) == first  # the existing id itself is still idempotent


def test_a_session_id_too_long_for_one_file_name_is_refused(store):
    with pytest.raises(InvalidInput, match="bytes long"):
        store.create_session("s" * 300)
    with pytest.raises(InvalidInput, match="percent-encoded"):
        store.create_session("\u00e9" * 100)  # 200 bytes, 600 once archived by memory
    assert store.list_sessions() == []
    if isinstance(store.root, Path):
        assert not store.root.exists() or list(store.root.iterdir()) == []


# -- item 12: text a node file cannot hold is refused before anything is stored ----------------


@pytest.mark.parametrize("bad", ["nul \x00 inside", "lone \ud800 surrogate"])
def test_a_message_with_a_nul_or_a_lone_surrogate_is_refused_before_it_is_stored(store, bad):
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "fine"})
    before = stored(store)
    with pytest.raises(InvalidInput):
        store.append_message("s", {"id": "a1", "role": "assistant", "content": bad})
    with pytest.raises(InvalidInput):
        store.append_message("s", {"id": "a1", "role": "assistant",
                                   "content": [{"type": "text", "text": bad}]})
    with pytest.raises(InvalidInput):
        store.edit("s", "u1", bad)
    assert stored(store) == before


def test_a_history_that_is_a_plain_file_is_a_corrupt_file_error(dir_store):
    store = dir_store
    store.create_session("s")
    shutil.rmtree(store.root / "s" / "history")
    (store.root / "s" / "history").write_text("not a directory")
    fresh = SessionStore(store.root, git=False)
    with pytest.raises(CorruptFile, match="is not a directory"):
        fresh.get_branch("s")
    assert [r["session_id"] for r in fresh.list_sessions()] == ["s"]


def test_a_session_lock_that_is_a_directory_is_a_corrupt_file_error(dir_store):
    store = dir_store
    store.create_session("s")
    lock = store.root / "s" / ".session.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()
    fresh = SessionStore(store.root, git=False)
    with pytest.raises(CorruptFile, match=r"\.session\.lock is not a regular file"):
        fresh.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
    assert list((store.root / "s" / "history").iterdir()) == []


# -- item 13: a cross-session spawn must name a session that exists ----------------------------


def test_a_spawn_naming_an_unknown_caller_session_is_refused(store, chat):
    chat(store, "s", "u1", "a1")
    with pytest.raises(SessionNotFound, match="caller session nowhere"):
        store.spawn("s", "a1", "go", caller_session="nowhere")
    chat(store, "other", "o1", "o2")
    root = store.spawn("s", "o2", "go", caller_session="other")
    assert store.get_node("s", root).metadata["caller_session"] == "other"


# -- item 11: the identical retry of an add is a no-op; new content under an old id is refused --


def test_add_with_an_existing_id_and_different_text_is_refused(store, chat):
    chat(store, "s", "u1", "a1")
    again = store.add("s", {"id": "a1", "role": "assistant", "content": "text of a1"})
    assert (again.node_id, again.created, again.warnings) == ("a1", False, [])
    with pytest.raises(InvalidInput, match="already exists with a different text"):
        store.add("s", {"id": "a1", "role": "assistant", "content": "another reply"})
    with pytest.raises(InvalidInput, match="different role"):
        store.add("s", {"id": "a1", "role": "user", "content": "text of a1"})
    assert [n.id for n in store.get_nodes("s")] == ["u1", "a1"]


# -- item 14: rewinding to the first turn puts the head on the seeded ROOT node ----------------


def seed_root(store: SessionStore, sid: str) -> None:
    """What the reference's dispatcher writes before the first turn."""
    store.append_message(sid, {"id": "ROOT", "role": "user", "content": "", "caller": "",
                               "predecessor": None, "metadata": {"display": "root"}},
                         commit=False)


def test_rewinding_to_the_first_turn_puts_the_head_on_the_seeded_root(store):
    store.create_session("s")
    seed_root(store, "s")
    assert store.head("s") is None  # seeding never moves the head
    for nid, role in (("u1", "user"), ("a1", "assistant"), ("u2", "user")):
        store.append_message("s", {"id": nid, "role": role, "content": f"text of {nid}"})
    assert store.get_node("s", "u1").predecessor == "ROOT"
    out = store.rewind("s", "u1")
    assert out["new_head_id"] == "ROOT" and store.head("s") == "ROOT"
    assert store.get_branch("s") == [] and store.list_branches("s") == []
    nxt = store.append_message("s", {"id": "u1b", "role": "user", "content": "start over"})
    assert store.head("s") == nxt and store.get_node("s", nxt).predecessor == "ROOT"
    assert [m["id"] for m in store.get_branch("s")] == ["u1b"]


def test_a_session_without_a_root_node_still_rewinds_to_no_head(store, chat):
    chat(store, "s", "u1", "a1")
    assert store.rewind("s", "u1")["new_head_id"] is None


def test_a_reference_session_rewound_to_root_without_a_root_node_reads_as_empty(written):
    meta_path = written.root / "deploy" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["head_id"] = "ROOT"  # what the reference writes for a first-turn rewind
    meta_path.write_text(json.dumps(meta))
    for f in (written.root / "deploy" / "history").iterdir():
        node = json.loads(f.read_text())
        node["metadata"]["rewound"] = True
        f.write_text(json.dumps(node))
    assert written.head("deploy") == "ROOT"
    assert written.get_branch("deploy") == [] and written.list_branches("deploy") == []
    written.append_message("deploy", {"id": "d9", "role": "user", "content": "again"},
                           commit=False)
    assert [m["id"] for m in written.get_branch("deploy")] == ["d9"]


def test_retry_edit_spawn_and_compact_with_an_existing_id_and_other_text_are_refused(store, chat):
    chat(store, "s", "u1", "a1")
    assert store.retry("s", "a1", "again", node_id="r1") == "r1"
    assert store.retry("s", "a1", "again", node_id="r1") == "r1"  # the identical retry
    attempts = [lambda: store.retry("s", "a1", "other", node_id="r1"),
                lambda: store.edit("s", "u1", "other", node_id="a1"),
                lambda: store.spawn("s", "a1", "other", node_id="u1"),
                lambda: store.compact("s", ["u1", "a1"], "other", node_id="r1")]
    for attempt in attempts:
        with pytest.raises(InvalidInput, match="already exists with a different"):
            attempt()
    assert [n.id for n in store.get_nodes("s")] == ["u1", "a1", "r1"]


def test_an_add_whose_meta_write_hits_a_full_disk_stores_nothing(dir_store, monkeypatch):
    """The node file is written first; when meta.json then cannot be written (ENOSPC), the
    add fails and takes its node back, so its retry with the same id stores it once."""
    import errno

    from scriptorium.sessions import store as store_mod

    dir_store.create_session("s")
    dir_store.append_message("s", {"id": "u1", "role": "user", "content": "first"})
    real = store_mod.SessionStore._write_meta

    def full(self, idx, meta):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(store_mod.SessionStore, "_write_meta", full)
    with pytest.raises(OSError):
        dir_store.append_message("s", {"id": "a1", "role": "assistant", "content": "lost?"})
    assert [n.id for n in dir_store.get_nodes("s")] == ["u1"]
    monkeypatch.setattr(store_mod.SessionStore, "_write_meta", real)
    dir_store.append_message("s", {"id": "a1", "role": "assistant", "content": "retry"})
    assert [n.id for n in dir_store.get_nodes("s")] == ["u1", "a1"]
    assert dir_store.get_meta("s")["head_id"] == "a1"
