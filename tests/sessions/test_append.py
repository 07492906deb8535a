"""append_message: idempotence, the append invariant, head advance, the activity clock (on
both homes)."""

from __future__ import annotations

import json

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.sessions import AppendRefused, SessionNotFound


@pytest.fixture
def store(any_store):
    """These behaviours hold on both homes: each test runs on a directory and a PostgreSQL
    home."""
    return any_store


def test_appending_the_same_id_twice_stores_one_node(store, chat):
    chat(store, "s1", "u1", "a1")
    updated = store.get_meta("s1")["updated_at"]
    again = store.append_message("s1", {"id": "a1", "role": "assistant", "content": "other"})
    assert again == "a1"
    assert [n.id for n in store.get_nodes("s1")] == ["u1", "a1"]
    assert store.get_node("s1", "a1").output == "text of a1"
    assert store.get_meta("s1")["updated_at"] == updated


def test_a_message_without_an_id_gets_twelve_hex_characters(store):
    store.create_session("s1")
    nid = store.append_message("s1", {"role": "user", "content": "hi"})
    assert len(nid) == 12 and int(nid, 16) >= 0


def test_the_first_turn_follows_root_and_later_turns_follow_the_head(store):
    store.create_session("s1")
    u1 = store.append_message("s1", {"id": "u1", "role": "user", "content": "a"})
    a1 = store.append_message("s1", {"id": "a1", "role": "assistant", "content": "b"})
    assert store.get_node("s1", u1).predecessor == "ROOT"
    assert store.get_node("s1", a1).predecessor == "u1"
    assert store.head("s1") == "a1"


def test_a_turn_without_a_predecessor_is_refused_after_the_first_turn(store, chat):
    store.create_session("s1")
    first = store.append_message("s1", {"id": "u1", "role": "user", "content": "a",
                                        "predecessor": None})
    assert first == "u1"
    with pytest.raises(AppendRefused, match="u2"):
        store.append_message("s1", {"id": "u2", "role": "user", "content": "b",
                                    "predecessor": None})
    assert "u2" not in {n.id for n in store.get_nodes("s1")}


@pytest.mark.parametrize("extra", [
    {"metadata": {"spawn_branch_root": True}, "caller": "u1"},
    {"metadata": {"source": "agent_spawn"}},
    {"metadata": {"covers_ids": []}},
    {"metadata": {"display": "root"}},
    {"input": "answer to a question"},
])
def test_spawn_roots_summaries_roots_and_answers_need_no_predecessor(store, chat, extra):
    chat(store, "s1", "u1", "a1")
    msg = {"id": "x", "role": "user", "content": "c", "predecessor": None, **extra}
    assert store.append_message("s1", msg) == "x"


def test_tool_rows_are_never_checked_by_the_invariant(store, chat):
    chat(store, "s1", "u1", "a1")
    nid = store.append_message("s1", {"id": "t", "role": "tool", "content": "r",
                                      "caller": "a1"})
    node = store.get_node("s1", nid)
    assert node.role == "code" and node.predecessor is None and node.caller == "a1"
    assert store.head("s1") == "a1"


def test_a_predecessor_that_does_not_exist_is_refused(store, chat):
    chat(store, "s1", "u1")
    with pytest.raises(AppendRefused, match="ghost"):
        store.append_message("s1", {"id": "a1", "role": "assistant", "content": "x",
                                    "predecessor": "ghost"})
    assert [n.id for n in store.get_nodes("s1")] == ["u1"]


def test_a_caller_that_does_not_exist_is_refused_unless_it_lives_in_another_session(store, chat):
    chat(store, "s1", "u1", "a1")
    with pytest.raises(AppendRefused, match="nobody"):
        store.append_message("s1", {"id": "t", "role": "tool", "content": "x",
                                    "caller": "nobody"})
    ok = store.append_message("s1", {"id": "r", "role": "user", "content": "x",
                                     "caller": "far", "predecessor": None,
                                     "metadata": {"caller_session": "other",
                                                  "spawn_branch_root": True}})
    assert ok == "r"


def test_the_head_advances_only_when_the_new_node_extends_it(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    side = store.append_message("s1", {"id": "a1b", "role": "assistant", "content": "alt",
                                       "predecessor": "u1"})
    assert store.head("s1") == "a2"
    store.append_message("s1", {"id": "sub", "role": "user", "content": "x", "caller": "a2",
                                "predecessor": None, "spawn_branch_root": True})
    assert store.head("s1") == "a2"
    store.append_message("s1", {"id": "u3", "role": "user", "content": "go on"})
    assert store.head("s1") == "u3" and store.get_node("s1", "u3").predecessor == "a2"
    assert side == "a1b"


def test_every_append_bumps_updated_at_even_off_the_head(store, chat):
    chat(store, "s1", "u1", "a1")
    seen = [store.get_meta("s1")["updated_at"]]
    store.append_message("s1", {"id": "alt", "role": "assistant", "content": "x",
                                "predecessor": "u1"})
    seen.append(store.get_meta("s1")["updated_at"])
    store.append_message("s1", {"id": "t", "role": "tool", "content": "x", "caller": "a1"})
    seen.append(store.get_meta("s1")["updated_at"])
    assert seen == sorted(seen) and len(set(seen)) == 3


def test_unknown_message_keys_become_metadata_and_come_back_spread(store):
    store.create_session("s1")
    store.append_message("s1", {"id": "u1", "role": "user", "content": "hi", "source": "web",
                                "metadata": {"speaker": "ana", "predecessor": "junk"}})
    node = store.get_node("s1", "u1")
    assert node.metadata == {"source": "web", "speaker": "ana"}
    msg = store.get_branch("s1")[0]
    assert msg["source"] == "web" and msg["speaker"] == "ana" and msg["predecessor"] == "ROOT"


def test_message_dicts_project_roles_content_and_names(store, chat):
    chat(store, "s1", "u1")
    store.append_message("s1", {"id": "a1", "role": "assistant", "content": "r",
                                "name": "model-x", "created_at": 5.0})
    store.append_message("s1", {"id": "t1", "role": "tool", "content": {"n": 3},
                                "caller": "a1", "name": "lookup", "input": {"q": 1},
                                "tool_call_id": "c9"})
    msgs = {n.id: n.to_message("s1") for n in store.get_nodes("s1")}
    assert msgs["u1"]["role"] == "user" and msgs["u1"]["session_id"] == "s1"
    a = msgs["a1"]
    assert (a["role"], a["token_model"], a["timestamp"], a["content"]) == (
        "assistant", "model-x", 5.0, "r")
    t = msgs["t1"]
    assert t["role"] == "tool" and t["function"] == "lookup" and json.loads(t["content"]) == {"n": 3}
    assert json.loads(t["extra"])["tool_use"]["tool_call_id"] == "c9"
    assert t["predecessor"] == "" and t["caller"] == "a1"


def test_appending_to_a_missing_session_is_not_found(store):
    with pytest.raises(SessionNotFound, match="nope"):
        store.append_message("nope", {"role": "user", "content": "x"})
    assert not store.exists("nope")
    assert [r["session_id"] for r in store.list_sessions()] == []


def test_a_bad_role_is_refused(store):
    store.create_session("s1")
    with pytest.raises(InvalidInput, match="role"):
        store.append_message("s1", {"role": "wizard", "content": "x"})
    assert store.get_nodes("s1") == []
