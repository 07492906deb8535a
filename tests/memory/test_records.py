"""records / unwritten / first_batch: the bookkeeping read of the written-marker design."""

from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from testkit import examples

from scriptorium.errors import InvalidInput
from scriptorium.memory.records import MARK_KEY, first_batch, records, unwritten

WS = "w-0000aaaa"


def msg(node_id, role="user", content="hello there", **meta):
    return {"id": node_id, "role": role, "content": content, "timestamp": 1_700_000_000.0,
            **meta}


def ids(recs):
    return [r.node_id for r in recs]


def test_runtime_turns_tool_rows_summaries_and_blank_turns_are_not_records():
    branch = [
        msg("u1"), msg("a1", "assistant"),
        msg("t1", "tool", '{"x": 1}'),
        msg("n1", "user", "[sub-agent finished]", display="runtime", source="job_followup"),
        msg("m1", "user", "merge these", source="merge_turn"),
        msg("s1", "assistant", "[Previous conversation summary]", covers_ids=["u1"]),
        msg("e1", "user", "   \n "),
        msg("r0", "user", "", display="root"),
        msg("u2", "user", [{"type": "text", "text": "block"}, {"type": "image"}]),
    ]
    recs = records("s", branch)
    assert ids(recs) == ["u1", "a1", "u2"]
    assert [r.ordinal for r in recs] == [0, 1, 8]
    assert recs[2].content == "block"


def test_a_recorded_turn_without_an_id_is_an_error_never_an_invented_id():
    with pytest.raises(InvalidInput, match="no id"):
        records("s", [{"role": "user", "content": "hi"}])


def test_the_source_id_names_provider_session_and_node():
    (rec,) = records("offsite", [msg("o4")])
    assert rec.source_id == "openprogram/offsite/o4"


def test_unwritten_is_the_trailing_run_after_the_last_mark_of_this_workspace():
    branch = [msg("m1", **{MARK_KEY: WS}), msg("m2", **{MARK_KEY: WS}), msg("m3"), msg("m4")]
    assert ids(unwritten(records("s", branch), WS)) == ["m3", "m4"]


def test_a_mark_naming_another_workspace_is_no_mark():
    branch = [msg("m1", **{MARK_KEY: "w-deadbeef"}), msg("m2")]
    assert ids(unwritten(records("s", branch), WS)) == ["m1", "m2"]


def test_a_branch_without_any_mark_is_owed_in_full():
    branch = [msg(f"m{i}") for i in range(5)]
    assert ids(unwritten(records("s", branch), WS)) == [f"m{i}" for i in range(5)]


def test_a_branch_forked_at_m3_is_offered_in_full_where_the_old_cursor_offered_0_and_2():
    trunk = [msg(f"m{i}", **{MARK_KEY: WS}) for i in range(10)]  # written through m9
    five = trunk[:4] + [msg(f"b{i}") for i in range(5)]
    eleven = trunk[:4] + [msg(f"c{i}") for i in range(11)]
    assert len(unwritten(records("s", five), WS)) == 5
    assert len(unwritten(records("s", eleven), WS)) == 11


def test_runtime_turns_are_stepped_over_by_the_walk():
    branch = [msg("m1", **{MARK_KEY: WS}),
              msg("n1", display="runtime", source="job_followup"), msg("m2")]
    assert ids(unwritten(records("s", branch), WS)) == ["m2"]


def test_the_first_batch_takes_the_oldest_turns_that_reach_the_threshold():
    recs = records("s", [msg(f"m{i}", content="one two six ten") for i in range(4)])
    assert all(r.tokens == 4 for r in recs)
    assert ids(first_batch(recs, 8)) == ["m0", "m1"]
    assert ids(first_batch(recs, 9)) == ["m0", "m1", "m2"]
    assert ids(first_batch(recs, 10_000)) == ["m0", "m1", "m2", "m3"]


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(st.booleans(), max_size=30), st.integers(1, 50))
def test_writing_oldest_batches_keeps_marks_a_prefix_and_ends_with_nothing_owed(marks, threshold):
    """Property: starting from any prefix-marked branch, repeatedly marking the first batch
    leaves the marks a prefix and eventually owes nothing."""
    n_marked = len(marks) and marks.index(False) if False in marks else len(marks)
    branch = [msg(f"m{i}", content="w " * (i % 7 + 1), **({MARK_KEY: WS} if i < n_marked else {}))
              for i in range(len(marks))]
    for _ in range(len(branch) + 1):
        pending = unwritten(records("s", branch), WS)
        if not pending:
            break
        for rec in first_batch(pending, threshold):
            branch[rec.ordinal] = {**branch[rec.ordinal], MARK_KEY: WS}
        flags = [m.get(MARK_KEY) == WS for m in branch]
        assert flags == sorted(flags, reverse=True)  # marks form a prefix
    assert unwritten(records("s", branch), WS) == []
