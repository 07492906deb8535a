"""branch_tail: the newest part of a branch, read from the tip back to a stop (on both homes)."""

from __future__ import annotations

import pytest



@pytest.fixture
def chat(any_store):
    """Six turns in session ``s``, on either home."""
    store = any_store
    store.create_session("s")
    for i in range(6):
        store.append_message("s", {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                                   "content": f"turn {i}"})
    return store


def test_the_tail_is_what_follows_the_newest_stop_oldest_first(chat):
    tail, root = chat.branch_tail("s", stop=lambda m: m["id"] == "m2")
    assert [m["id"] for m in tail] == ["m3", "m4", "m5"] and root["id"] == "m0"


def test_without_a_stop_the_tail_is_the_whole_branch(chat):
    tail, _ = chat.branch_tail("s", stop=lambda m: False)
    assert [m["id"] for m in tail] == [m["id"] for m in chat.get_branch("s")]


def test_the_tail_of_a_spawned_branch_names_its_spawn_root(chat):
    chat.spawn("s", "m3", "sub task", node_id="sub")
    chat.append_after("s", "sub", {"id": "sub1", "role": "assistant", "content": "done"})
    tail, root = chat.branch_tail("s", "sub1", stop=lambda m: m["id"] == "sub")
    assert [m["id"] for m in tail] == ["sub1"]
    assert root["id"] == "sub" and root["spawn_branch_root"] is True


def test_rewound_turns_are_dropped_from_the_tail_like_from_the_branch(chat):
    chat.rewind("s", "m4")
    tail, _ = chat.branch_tail("s", stop=lambda m: False)
    assert [m["id"] for m in tail] == ["m0", "m1", "m2", "m3"]


def test_an_empty_session_has_no_tail(any_store):
    store = any_store
    store.create_session("e")
    assert store.branch_tail("e", stop=lambda m: True) == ([], None)


def test_branch_roots_stay_right_after_a_fork_and_a_new_append(chat):
    chat.append_after("s", "m1", {"id": "f2", "role": "user", "content": "fork"})
    with chat._reading("s") as idx:
        assert idx.branch_root("f2") == "m0" and idx.branch_root("m5") == "m0"
    chat.spawn("s", "f2", "task", node_id="sp")
    with chat._reading("s") as idx:
        assert idx.branch_root("sp") == "sp" and idx.branch_root("m5") == "m0"
