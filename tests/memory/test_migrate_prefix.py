"""The continuous archived prefix: what migration may mark on the real DAG paths."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from testkit import examples

from scriptorium.memory.migrate import safe_prefix
from scriptorium.memory.records import records, unwritten
from scriptorium.sessions import SessionStore

from upgrade_support import chain


def store_at(tmp_path) -> SessionStore:
    return SessionStore(tmp_path / "sessions", git=False)


def test_a_fully_archived_trunk_is_marked_whole(tmp_path):
    store = store_at(tmp_path)
    chain(store, "s", ["m1", "m2", "m3"])
    assert safe_prefix(store, "s", ["m1", "m2", "m3"]) == (["m1", "m2", "m3"], [])


def test_the_first_gap_stops_the_path(tmp_path):
    store = store_at(tmp_path)
    chain(store, "s", ["m1", "m2", "m3", "m4"])
    assert safe_prefix(store, "s", ["m1", "m3", "m4"]) == (["m1"], [])


def test_a_path_whose_first_record_is_unarchived_marks_nothing(tmp_path):
    store = store_at(tmp_path)
    chain(store, "s", ["m1", "m2"])
    assert safe_prefix(store, "s", ["m2"]) == ([], [])


def test_an_archived_branch_tip_after_an_unarchived_middle_is_not_marked(tmp_path):
    store = store_at(tmp_path)
    chain(store, "s", ["m1", "m2", "m3", "m4", "m5"])
    chain(store, "s", ["b1", "b2", "b3"], after="m3")
    nodes, unknown = safe_prefix(store, "s", ["m1", "m2", "m3", "b3"])
    assert nodes == ["m1", "m2", "m3"] and unknown == []


def test_prefixes_of_several_branches_are_united(tmp_path):
    store = store_at(tmp_path)
    chain(store, "s", ["m1", "m2", "m3"])
    chain(store, "s", ["b1", "b2"], after="m1")
    nodes, _ = safe_prefix(store, "s", ["m1", "m2", "b1", "b2"])
    assert sorted(nodes) == ["b1", "b2", "m1", "m2"]


def test_empty_and_runtime_rows_are_neither_gaps_nor_marked(tmp_path):
    store = store_at(tmp_path)
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "plan the trip"})
    store.append_message("s", {"id": "e1", "role": "assistant", "content": "   "})
    store.append_message("s", {"id": "r1", "role": "user", "content": "[job done]",
                               "display": "runtime", "source": "job_followup"})
    store.append_message("s", {"id": "a1", "role": "assistant", "content": "booked"})
    store.append_message("s", {"id": "u2", "role": "user", "content": "thanks"})
    # the archive even names the filtered rows: they still get no mark
    nodes, _ = safe_prefix(store, "s", ["u1", "e1", "r1", "a1"])
    assert nodes == ["u1", "a1"]


def test_tool_rows_are_neither_gaps_nor_marked(tmp_path):
    store = store_at(tmp_path)
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "how many menus?"})
    store.append_message("s", {"id": "t1", "role": "tool", "content": '{"menus": 3}'})
    store.append_message("s", {"id": "a1", "role": "assistant", "content": "three menus"})
    assert [m["id"] for m in store.get_branch("s", "a1")] == ["u1", "t1", "a1"]
    assert safe_prefix(store, "s", ["u1", "a1"])[0] == ["u1", "a1"]
    assert safe_prefix(store, "s", ["u1", "t1", "a1"])[0] == ["u1", "a1"]


def test_candidates_naming_unknown_nodes_are_reported_not_fatal(tmp_path):
    store = store_at(tmp_path)
    chain(store, "s", ["m1", "m2"])
    assert safe_prefix(store, "s", ["m1", "ghost", "m2"]) == (["m1", "m2"], ["ghost"])


# -- the safety property ---------------------------------------------------------------------


@st.composite
def dags(draw):
    """A session built from forks: each new turn continues some earlier turn."""
    size = draw(st.integers(min_value=1, max_value=10))
    parents = [None] + [draw(st.integers(min_value=0, max_value=k - 1)) for k in range(1, size)]
    archived = draw(st.lists(st.booleans(), min_size=size, max_size=size))
    return parents, archived


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(data=dags())
def test_migration_never_hides_an_unarchived_turn(tmp_path_factory, data):
    """After marking the safe prefix, every unarchived turn on every path is still pending,
    every mark is an archived turn, and the marks form a prefix of every path."""
    parents, archived = data
    store = SessionStore(tmp_path_factory.mktemp("s") / "sessions", git=False)
    store.create_session("s")
    names = [f"n{k}" for k in range(len(parents))]
    for k, parent in enumerate(parents):
        msg = {"id": names[k], "role": "user" if k % 2 == 0 else "assistant",
               "content": f"turn {k}"}
        if parent is None:
            store.append_message("s", msg)
        else:
            store.append_after("s", names[parent], msg)
    present = set(names)
    cands = [n for k, n in enumerate(names) if archived[k] and n in present]
    nodes, unknown = safe_prefix(store, "s", cands)
    assert unknown == [] and set(nodes) <= set(cands)
    ws = "w-00000001"
    if nodes:
        store.merge_node_metadata_batch("s", {n: {"memory_written_scriptorium": ws}
                                              for n in nodes})
    for tip in present:
        recs = records("s", store.get_branch("s", tip))
        pending = {r.node_id for r in unwritten(recs, ws)}
        for r in recs:
            if r.node_id not in cands:
                assert r.node_id in pending, f"unarchived {r.node_id} hidden on path to {tip}"
        flags = [r.marked_for(ws) for r in recs]
        assert flags == sorted(flags, reverse=True), f"marks are not a prefix on {tip}"
