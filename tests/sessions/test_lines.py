"""Conversation lines: which nodes a reader at a tip counts as said on its line, where another
branch leaves it, and that the cached answer stays right as the session changes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scriptorium.sessions import Node, NodeNotFound, SessionNotFound, SessionStore
from scriptorium.sessions.errors import BrokenChain, InvalidInput
from test_properties import OPS, apply, pick


def naive_line(nodes: list[Node], tip: str) -> set[str]:
    """The definition of a line, recomputed from raw nodes with no index or cache."""
    by_id = {n.id: n for n in nodes}
    ancestors: set[str] = set()
    members: set[str] = set()
    starts = [tip]
    while starts:
        cur: str | None = starts.pop()
        while cur is not None and cur not in ancestors:
            node = by_id[cur]
            ancestors.add(cur)
            if not node.is_root and not node.rewound:
                members.add(cur)
                if node.is_summary:
                    members.update(c for c in node.metadata.get("covers_ids", [])
                                   if c in by_id and not by_id[c].rewound)
            pred = node.predecessor
            if pred == "ROOT":
                cur = "ROOT" if "ROOT" in by_id and cur != "ROOT" else None
            elif pred:
                cur = pred
            else:
                if node.is_spawn_root and node.caller not in ("", "ROOT") \
                        and node.caller in by_id:
                    starts.append(node.caller)
                cur = None
    grown = True
    while grown:  # sub-agent branches spawned from the line, with everything below them
        grown = False
        for n in nodes:
            if n.id in members or n.rewound:
                continue
            spawned_here = n.is_spawn_root and n.conversational and n.id not in ancestors and (
                n.caller in members or n.predecessor in members)
            below_spawn = (n.predecessor in members and n.predecessor not in ancestors
                           and not _in_ancestor_covers(by_id, ancestors, n.predecessor))
            if spawned_here or below_spawn:
                members.add(n.id)
                grown = True
    return members


def _in_ancestor_covers(by_id: dict[str, Node], ancestors: set[str], node_id: str) -> bool:
    return any(node_id in by_id[a].metadata.get("covers_ids", []) for a in ancestors
               if by_id[a].is_summary)


def _chat(store: SessionStore, *turns: tuple[str, str, str | None]) -> None:
    for node_id, role, after in turns:
        msg = {"id": node_id, "role": role, "content": f"text of {node_id}"}
        if after:
            msg["predecessor"] = after
        store.append_message("s", msg)


@pytest.fixture
def store(any_store):
    """The line tests on a ``store`` run on both homes."""
    return any_store


@pytest.fixture
def forked(store: SessionStore) -> SessionStore:
    """u1 a1 u2 a2 (trunk), u2 edited as u2e → a2e (head), a sub-agent spawned from a2e."""
    store.create_session("s")
    _chat(store, ("u1", "user", None), ("a1", "assistant", None), ("u2", "user", None),
          ("a2", "assistant", None))
    store.edit("s", "u2", "changed", node_id="u2e")
    _chat(store, ("a2e", "assistant", None))
    store.spawn("s", "a2e", "go find", node_id="sub")
    _chat(store, ("sub1", "assistant", "sub"))
    return store


def test_the_line_of_a_tip_is_its_ancestors_plus_the_sub_agents_spawned_from_them(forked):
    assert forked.line("s").nodes == {"u1", "a1", "u2e", "a2e", "sub", "sub1"}
    assert forked.line("s", "a2").nodes == {"u1", "a1", "u2", "a2"}


def test_a_sub_agents_line_continues_at_the_node_that_spawned_it(forked):
    assert forked.line("s", "sub1").nodes == {"u1", "a1", "u2e", "a2e", "sub", "sub1"}


def test_a_node_off_the_line_names_its_fork_point_and_what_opened_its_branch(forked):
    off = forked.divergences("s", "a2", ["a2e", "sub1", "u1"])
    assert set(off) == {"a2e", "sub1"}  # u1 is on the line: no divergence
    assert (off["a2e"].fork_point, off["a2e"].opening, off["a2e"].kind, off["a2e"].of) == \
        ("a1", "u2e", "edit", "u2")
    head_view = forked.divergences("s", None, ["a2"])["a2"]
    assert (head_view.fork_point, head_view.kind, head_view.of) == ("a1", "edited", "u2e")


def test_a_retried_reply_is_another_branch_at_its_users_turn(forked):
    forked.retry("s", "a2e", "again", node_id="a2r")
    off = forked.divergences("s", "a2r", ["a2e"])["a2e"]
    assert (off.fork_point, off.kind, off.of) == ("u2e", "retried", "a2r")
    assert forked.divergences("s", "a2e", ["a2r"])["a2r"].kind == "retry"


def test_a_summary_on_the_line_brings_the_turns_it_covers(store):
    store.create_session("s")
    _chat(store, ("u1", "user", None), ("a1", "assistant", None), ("u2", "user", None),
          ("a2", "assistant", None))
    summary = store.compact("s", ["u1", "a1"], "they talked", node_id="summary_x")
    _chat(store, ("u9", "user", summary))
    assert store.line("s", "u9").nodes == {"summary_x", "u1", "a1", "u9"}
    assert "summary_x" not in store.line("s", "a2").nodes  # a sibling, not an ancestor


def test_rewound_turns_are_off_every_line(forked):
    forked.rewind("s", "u2e")
    assert forked.line("s", "a1").nodes == {"u1", "a1"}
    assert forked.divergences("s", "a1", ["a2e"])["a2e"].kind == "rewound"


def test_unknown_session_or_tip_is_not_found(forked):
    with pytest.raises(SessionNotFound):
        forked.line("nope")
    with pytest.raises(NodeNotFound):
        forked.line("s", "zz")


def test_a_damaged_chain_is_an_error_not_a_short_line(forked, damage):
    damage(forked, "s", "a1", predecessor="gone")
    with pytest.raises(BrokenChain):
        forked.line("s", "a2")


def test_the_line_is_cached_and_a_mark_does_not_invalidate_it(forked):
    first = forked.line("s")
    assert forked.line("s") is first
    forked.merge_node_metadata_batch("s", {"u1": {"memory_written_scriptorium": "w-1"}})
    assert forked.line("s") is first
    _chat(forked, ("u3", "user", None))
    assert forked.line("s", "u3") is not first and "u3" in forked.line("s", "u3")


def _sub_turn(store: SessionStore, k: int) -> None:
    """Continue a sub-agent's branch (appending below a spawn root or its last turn)."""
    nodes = store.get_nodes("s")
    spawned = [n.id for n in nodes if n.is_spawn_root and not n.rewound]
    if spawned:
        tips = [t["tip"] for t in store.list_branches("s")]
        below = [t for t in tips if store.line("s", t).nodes & set(spawned)] or spawned
        store.append_message("s", {"role": "assistant", "content": f"sub {k}",
                                   "predecessor": pick(below, k)})


def _after_summary(store: SessionStore, k: int) -> None:
    """Go on from a compaction summary (a head moved onto the summary's own line)."""
    summaries = [n.id for n in store.get_nodes("s") if n.is_summary]
    if summaries:
        store.append_message("s", {"role": "user", "content": f"on {k}",
                                   "predecessor": pick(summaries, k)})


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([*OPS, "sub", "sub", "resume"]), st.integers(0, 10_000),
                          st.integers(1, 4)), min_size=3, max_size=20))
def test_cached_lines_equal_a_naive_recomputation_after_any_operations(ops):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sessions"
        writer = SessionStore(root, git=False)
        reader = SessionStore(root, git=False)  # another process's cache, kept across steps
        writer.create_session("s")
        for op, k, width in ops:
            if op == "sub":
                _sub_turn(writer, k)
            elif op == "resume":
                _after_summary(writer, k)
            elif op != "reopen":
                try:
                    apply(writer, op, k, width)
                except InvalidInput:  # refused before any write (e.g. compacting a summary
                    pass              # on a line resumed after one): nothing changed

            nodes = writer.get_nodes("s")
            wanted = [t["tip"] for t in writer.list_branches("s")]
            wanted += [pick([n.id for n in nodes], k)] if nodes else []
            for tip in wanted:
                expected = naive_line(nodes, tip)
                assert set(reader.line("s", tip).nodes) == expected, (op, tip)
                assert set(writer.line("s", tip).nodes) == expected, (op, tip)
