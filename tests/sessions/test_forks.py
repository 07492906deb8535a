"""Forks and head moves: retry, edit, set_head + events, rewind, spawn, compaction (on both
homes)."""

from __future__ import annotations

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.sessions import HeadRefused, NodeNotFound


@pytest.fixture
def store(any_store):
    """These behaviours hold on both homes: each test runs on a directory and a PostgreSQL
    home."""
    return any_store


def ids(msgs):
    return [m["id"] for m in msgs]


def test_a_retry_is_a_new_sibling_of_the_reply_and_becomes_the_head(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    nid = store.retry("s1", "a2", "better answer", node_id="a2b")
    node = store.get_node("s1", nid)
    assert node.predecessor == "u2" and node.role == "llm"
    assert node.metadata["forked_from"] == "a2"
    assert store.head("s1") == "a2b"
    assert ids(store.get_branch("s1")) == ["u1", "a1", "u2", "a2b"]
    assert ids(store.get_branch("s1", "a2")) == ["u1", "a1", "u2", "a2"]


def test_a_retry_of_a_user_message_is_refused(store, chat):
    chat(store, "s1", "u1", "a1")
    with pytest.raises(InvalidInput, match="u1"):
        store.retry("s1", "u1", "x")


def test_an_edit_of_an_earlier_message_forks_beside_it(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2", "u3", "a3")
    nid = store.edit("s1", "u2", "asked differently", node_id="u2e")
    node = store.get_node("s1", nid)
    assert node.predecessor == "a1" and node.metadata["edit_of"] == "u2"
    assert store.head("s1") == "u2e"
    assert ids(store.get_branch("s1")) == ["u1", "a1", "u2e"]
    assert {r["tip"] for r in store.list_branches("s1")} == {"u2e", "a3"}


def test_an_edit_of_the_first_turn_forks_at_root(store, chat):
    chat(store, "s1", "u1", "a1")
    nid = store.edit("s1", "u1", "start over", node_id="u1e")
    assert store.get_node("s1", nid).predecessor == "ROOT"
    assert ids(store.get_branch("s1")) == ["u1e"]
    store.append_message("s1", {"id": "a1e", "role": "assistant", "content": "ok"})
    assert ids(store.get_branch("s1")) == ["u1e", "a1e"]
    assert {r["tip"] for r in store.list_branches("s1")} == {"a1e", "a1"}


def test_set_head_tells_subscribers_the_old_and_new_head(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    seen = []
    unsubscribe = store.subscribe(lambda sid, old, new: seen.append((sid, old, new)))
    store.set_head("s1", "a1")
    store.set_head("s1", "a1")  # no move, no event
    store.append_message("s1", {"id": "u2b", "role": "user", "content": "x"})  # extends
    store.retry("s1", "a2", "y", node_id="a2b")
    unsubscribe()
    store.set_head("s1", "a2")
    assert seen == [("s1", "a2", "a1"), ("s1", "a1", "u2b"), ("s1", "u2b", "a2b")]


def test_set_head_refuses_a_summary_and_an_unknown_node(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    sid = store.compact("s1", ["u1", "a1"], "they said hi")
    with pytest.raises(HeadRefused, match=sid):
        store.set_head("s1", sid)
    with pytest.raises(NodeNotFound):
        store.set_head("s1", "ghost")
    assert store.head("s1") == "a2"


def test_a_head_move_does_not_change_updated_at(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    before = store.get_meta("s1")["updated_at"]
    store.set_head("s1", "u1")
    store.set_head("s1", None)
    assert store.get_meta("s1")["updated_at"] == before and store.head("s1") is None


def test_rewind_retires_the_active_segment_and_its_subcalls(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2", "u3", "a3")
    store.append_message("s1", {"id": "t2", "role": "tool", "content": "x", "caller": "a2"})
    store.spawn("s1", "a2", "go research", node_id="sub")
    store.append_message("s1", {"id": "sub-a", "role": "assistant", "content": "found",
                                "predecessor": "sub"})
    side = store.retry("s1", "a1", "other", node_id="a1b")
    store.set_head("s1", "a3")
    before = store.get_meta("s1")["updated_at"]
    result = store.rewind("s1", "u2")
    assert result["new_head_id"] == "a1" and store.head("s1") == "a1"
    assert set(result["nodes_rewound"]) == {"u2", "a2", "u3", "a3", "t2", "sub", "sub-a"}
    assert store.get_node("s1", "a3").metadata["rewound"] is True
    assert "rewound_at" in store.get_node("s1", "t2").metadata
    assert not store.get_node("s1", side).rewound  # forks by predecessor are left alone
    assert ids(store.get_branch("s1", "a3")) == ["u1", "a1"]
    assert store.get_meta("s1")["updated_at"] == before
    store.append_message("s1", {"id": "u2n", "role": "user", "content": "again"})
    assert ids(store.get_branch("s1")) == ["u1", "a1", "u2n"]


def test_rewind_to_the_first_turn_leaves_no_head(store, chat):
    chat(store, "s1", "u1", "a1")
    assert store.rewind("s1", "u1")["new_head_id"] is None
    assert store.head("s1") is None and store.get_branch("s1") == []
    store.append_message("s1", {"id": "u1n", "role": "user", "content": "fresh"})
    assert store.get_node("s1", "u1n").predecessor == "ROOT"
    assert ids(store.get_branch("s1")) == ["u1n"]


def test_rewind_to_a_node_off_the_active_chain_is_refused(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    store.retry("s1", "a2", "alt", node_id="a2b")
    with pytest.raises(InvalidInput, match="active chain"):
        store.rewind("s1", "a2")
    assert not store.get_node("s1", "a2").rewound


def test_a_same_session_spawn_is_a_root_hung_on_its_caller_and_keeps_the_head(store, chat):
    chat(store, "s1", "u1", "a1")
    nid = store.spawn("s1", "a1", "look this up", node_id="sub")
    node = store.get_node("s1", nid)
    assert (node.role, node.predecessor, node.caller) == ("user", None, "a1")
    assert node.metadata["spawn_branch_root"] is True and node.metadata["source"] == "agent_spawn"
    assert store.head("s1") == "a1"
    store.append_message("s1", {"id": "sub-a", "role": "assistant", "content": "done",
                                "predecessor": "sub"})
    assert store.head("s1") == "a1"
    assert ids(store.get_branch("s1", "sub-a")) == ["sub", "sub-a"]
    assert {r["tip"] for r in store.list_branches("s1")} == {"a1", "sub-a"}


def test_a_spawn_with_an_unknown_caller_is_refused(store, chat):
    chat(store, "s1", "u1", "a1")
    with pytest.raises(NodeNotFound, match="ghost"):
        store.spawn("s1", "ghost", "x")


def test_a_cross_session_spawn_names_a_caller_in_another_session(store, chat):
    chat(store, "parent", "p1", "p2")
    store.create_session("child")
    nid = store.spawn("child", "p2", "work on this", caller_session="parent",
                      register_head=True)
    node = store.get_node("child", nid)
    assert node.caller == "p2" and node.metadata["caller_session"] == "parent"
    assert store.head("child") == nid
    store.append_message("child", {"id": "c1", "role": "assistant", "content": "ok"})
    assert ids(store.get_branch("child")) == [nid, "c1"]
    assert [r["tip"] for r in store.list_branches("child")] == ["c1"]
    assert ids(store.get_branch("parent")) == ["p1", "p2"]


def test_a_compaction_summary_is_a_sibling_of_the_first_covered_turn(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2", "u3", "a3")
    before = store.head("s1")
    nid = store.compact("s1", ["u2", "a2"], "the middle")
    node = store.get_node("s1", nid)
    assert nid.startswith("summary_") and len(nid) == len("summary_") + 10
    assert node.predecessor == "a1" and node.role == "llm" and node.name == "context/summary"
    md = node.metadata
    assert md["covers_ids"] == ["u2", "a2"] and md["compaction"] is True
    assert md["source"] == "compaction" and md["type"] == "compactionSummary"
    assert store.head("s1") == before
    assert ids(store.get_branch("s1")) == ["u1", "a1", "u2", "a2", "u3", "a3"]


def test_a_compaction_must_cover_an_existing_contiguous_segment(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    with pytest.raises(InvalidInput, match="contiguous"):
        store.compact("s1", ["u1", "u2"], "gap")
    with pytest.raises(NodeNotFound):
        store.compact("s1", ["u1", "nope"], "x")
    with pytest.raises(InvalidInput):
        store.compact("s1", [], "x")
    assert all(not n.is_summary for n in store.get_nodes("s1"))
