"""The store (on nodes) and memory (on messages) classify turns by one set of predicates:
runtime notices, compaction summaries and spawn roots mean the same thing to both."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scriptorium.memory.records import is_record
from scriptorium.sessions.kinds import (SUMMARY_NAME, is_runtime, is_spawn_root,
                                        message_is_summary)
from scriptorium.sessions.node import Node
from testkit import examples

metadata = st.fixed_dictionaries({}, optional={
    "display": st.sampled_from(["runtime", "root", "normal"]),
    "source": st.sampled_from(["job_followup", "merge_turn", "agent_spawn", "user"]),
    "covers_ids": st.just(["a", "b"]),
    "compaction": st.booleans(),
    "spawn_branch_root": st.sampled_from([True, False]),
    "name": st.sampled_from([SUMMARY_NAME, "context/other", "x"]),
})
nodes = st.builds(
    Node, id=st.sampled_from(["n1", "summary_1", "x9"]),
    role=st.sampled_from(["llm", "code"]), name=st.sampled_from(["", SUMMARY_NAME, "gpt"]),
    output=st.sampled_from(["hello", ""]), metadata=metadata)


@settings(max_examples=examples(200), deadline=None)
@given(nodes)
def test_a_node_and_its_message_are_the_same_kind_of_turn(node):
    message = node.to_message("s")
    assert node.is_summary == message_is_summary(message)
    assert node.is_runtime == is_runtime(message)
    assert node.is_spawn_root == is_spawn_root(message)


def test_memory_never_records_what_the_store_calls_a_summary_or_runtime_turn():
    summary = Node(id="summary_7", role="llm", output="what was said", name="gpt")
    notice = Node(id="n2", role="llm", output="job done", metadata={"source": "merge_turn"})
    plain = Node(id="n3", role="llm", output="an answer")
    assert summary.is_summary and not is_record(summary.to_message("s"))
    assert notice.is_runtime and not is_record(notice.to_message("s"))
    assert is_record(plain.to_message("s"))
