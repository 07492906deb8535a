"""get_branch: a pure predecessor walk to a legal terminus; list_branches: live tips.
The tests on a `store` run on both homes; the `written` ones read the reference fixture."""

from __future__ import annotations

import json

import pytest

from scriptorium.errors import CorruptFile
from scriptorium.sessions import BrokenChain, NodeNotFound


@pytest.fixture
def store(any_store):
    """These behaviours hold on both homes: each test runs on a directory and a PostgreSQL
    home."""
    return any_store

# What the reference system computes on the `written` fixture (its README).
WRITTEN_BRANCHES = {
    "o7-empty": ["o0", "o1", "o2", "o3", "o4-edit", "o5-edit", "o6-notice", "o7-empty"],
    "o5-edit": ["o0", "o1", "o2", "o3", "o4-edit", "o5-edit"],
    "sub-1": ["sub-root", "sub-1"],
    "o3-retry": ["o0", "o1", "o2", "o3-retry"],
    "o7": ["o0", "o1", "o2", "o3", "o4", "o5", "o6", "o7"],
}


@pytest.mark.parametrize("tip", sorted(WRITTEN_BRANCHES))
def test_each_branch_of_the_written_fixture_walks_as_the_reference_computes(written, tip):
    assert [m["id"] for m in written.get_branch("offsite", tip)] == WRITTEN_BRANCHES[tip]


def test_the_default_branch_is_the_head_branch(written):
    assert [m["id"] for m in written.get_branch("offsite")] == WRITTEN_BRANCHES["o7-empty"]


def test_marks_and_other_metadata_are_spread_onto_the_message_dicts(written):
    msgs = {m["id"]: m for m in written.get_branch("offsite")}
    assert msgs["o0"]["memory_written_scriptorium"] == "w-5eed0001"
    assert "memory_written_scriptorium" not in msgs["o4-edit"]
    assert msgs["o6-notice"]["display"] == "runtime"
    assert msgs["o6-notice"]["source"] == "job_followup"


def test_a_summary_is_never_spliced_into_a_branch(written):
    ids = [m["id"] for m in written.get_branch("offsite", "o7")]
    assert "summary_0001" not in ids and ids[:4] == ["o0", "o1", "o2", "o3"]


def test_the_written_fixture_tips_are_the_live_branches(written):
    rows = written.list_branches("offsite")
    assert {r["tip"] for r in rows} == {"o7-empty", "o7", "o3-retry", "sub-1"}
    assert [r["tip"] for r in rows if r["head"]] == ["o7-empty"]
    assert all(r["archived"] is False for r in rows)
    assert rows[0]["tip"] == "o7-empty"


def test_root_and_rewound_nodes_are_dropped_but_walked_through(store):
    store.create_session("s1")
    store.append_message("s1", {"id": "ROOT", "role": "user", "content": "",
                                "predecessor": None, "display": "root"})
    assert store.head("s1") is None  # seeding the root does not move the head
    store.append_message("s1", {"id": "u1", "role": "user", "content": "a",
                                "predecessor": "ROOT"})
    store.append_message("s1", {"id": "a1", "role": "assistant", "content": "b"})
    store.append_message("s1", {"id": "u2", "role": "user", "content": "c"})
    store.merge_node_metadata_batch("s1", {"a1": {"rewound": True}})
    assert [m["id"] for m in store.get_branch("s1")] == ["u1", "u2"]
    assert "ROOT" not in [r["tip"] for r in store.list_branches("s1")]


def test_a_dangling_predecessor_is_a_broken_chain_naming_session_and_node(store, chat, damage):
    chat(store, "s1", "u1", "a1", "u2")
    damage(store, "s1", "a1", delete=True)
    with pytest.raises(BrokenChain, match=r"s1.*u2.*a1") as info:
        store.get_branch("s1")
    assert isinstance(info.value, CorruptFile) and "\n" not in str(info.value)


def test_a_predecessor_cycle_is_a_broken_chain(store, chat, damage):
    chat(store, "s1", "u1", "a1")
    damage(store, "s1", "u1", predecessor="a1")
    with pytest.raises(BrokenChain, match="cycle"):
        store.get_branch("s1")


def test_a_turn_with_no_predecessor_that_is_not_a_legal_start_is_a_broken_chain(store, chat,
                                                                               damage):
    chat(store, "s1", "u1", "a1", "u2")
    damage(store, "s1", "u2", predecessor=None)
    with pytest.raises(BrokenChain, match="u2"):
        store.get_branch("s1")


def test_an_unknown_head_is_not_found(store, chat):
    chat(store, "s1", "u1")
    with pytest.raises(NodeNotFound, match="zz"):
        store.get_branch("s1", "zz")


def test_an_empty_session_has_an_empty_branch_and_no_tips(store):
    store.create_session("s1")
    assert store.get_branch("s1") == [] and store.list_branches("s1") == []


def test_runtime_notices_tool_rows_and_summaries_are_never_tips(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    store.append_message("s1", {"id": "t", "role": "tool", "content": "x", "caller": "a2"})
    store.append_message("s1", {"id": "n", "role": "user", "content": "[done]",
                                "display": "runtime", "source": "job_followup"})
    store.compact("s1", ["u1", "a1"], "short", node_id="summary_abc")
    store.set_head("s1", "a2")  # the head row is listed whatever it is; move it off the notice
    tips = {r["tip"] for r in store.list_branches("s1")}
    assert "t" not in tips and "n" not in tips and "summary_abc" not in tips
    # a line continued only by a runtime notice is still a line: its tip stays listed
    assert "a2" in tips


def test_a_line_continued_through_a_runtime_notice_is_one_branch(store, chat):
    chat(store, "s1", "u1", "a1")
    store.append_message("s1", {"id": "n", "role": "user", "content": "[done]",
                                "display": "runtime", "source": "merge_turn"})
    store.append_message("s1", {"id": "u2", "role": "user", "content": "next"})
    assert [r["tip"] for r in store.list_branches("s1")] == ["u2"]


def test_a_rewound_tip_is_not_listed(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    store.retry("s1", "a2", "other answer", node_id="a2b")
    store.set_head("s1", "a2")
    store.rewind("s1", "u2")
    tips = {r["tip"] for r in store.list_branches("s1")}
    assert "a2" not in tips and "a2b" in tips and "a1" in tips


def test_the_head_is_listed_even_on_an_inner_node(store, chat):
    chat(store, "s1", "u1", "a1", "u2", "a2")
    store.set_head("s1", "a1")
    rows = store.list_branches("s1")
    assert [(r["tip"], r["head"]) for r in rows] == [("a1", True), ("a2", False)]


def test_branch_names_and_archive_flags_come_from_meta(written):
    meta_path = written.root / "offsite" / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["branches"] = {"o7": {"name": "allergy line", "archived": True}, "o3-retry": "cheap"}
    meta_path.write_text(json.dumps(meta))
    rows = {r["tip"]: r for r in written.list_branches("offsite")}
    assert rows["o7"]["archived"] is True and rows["o7"]["name"] == "allergy line"
    assert rows["o3-retry"]["name"] == "cheap" and rows["o3-retry"]["archived"] is False
