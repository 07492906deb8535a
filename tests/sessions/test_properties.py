"""Property: any sequence of appends, retries, edits, rewinds, spawns, compactions, head moves,
runtime notices and marks leaves a structurally sound session (on both homes)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit import examples

from scriptorium.sessions import SessionStore

OPS = ["user", "assistant", "retry", "edit", "rewind", "spawn", "compact", "head", "notice",
       "tool", "mark", "reopen"]

op_lists = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 10_000),
                              st.integers(1, 4)), min_size=3, max_size=30)


def pick(seq, k):
    return seq[k % len(seq)] if seq else None


def apply(store: SessionStore, op: str, k: int, width: int, sid: str = "s") -> None:
    nodes = store.get_nodes(sid)
    head = store.head(sid)
    chain = [m["id"] for m in store.get_branch(sid)] if head else []
    if op == "user":
        store.append_message(sid, {"role": "user", "content": f"u{k}"})
    elif op == "assistant":
        store.append_message(sid, {"role": "assistant", "content": f"a{k}"})
    elif op == "retry":
        replies = [n.id for n in nodes if n.role == "llm" and not n.is_summary]
        if replies:
            store.retry(sid, pick(replies, k), f"r{k}")
    elif op == "edit":
        users = [n.id for n in nodes if n.role == "user" and not n.is_runtime]
        if users:
            store.edit(sid, pick(users, k), f"e{k}")
    elif op == "rewind":
        if chain:
            store.rewind(sid, pick(chain, k))
    elif op == "spawn":
        convs = [n.id for n in nodes if n.conversational and not n.is_summary]
        if convs:
            store.spawn(sid, pick(convs, k), f"s{k}", register_head=bool(k % 2))
    elif op == "compact":
        turns = [m["id"] for m in store.get_branch(sid)] if head else []
        raw = {n.id: n for n in nodes}
        turns = [t for t in turns if raw[t].chain_level and not raw[t].is_runtime]
        if turns:
            start = k % len(turns)
            seg = [turns[start]]
            for t in turns[start + 1: start + width]:
                if raw[t].predecessor != seg[-1]:
                    break
                seg.append(t)
            store.compact(sid, seg, f"c{k}")
    elif op == "head":
        movable = [n.id for n in nodes if not n.is_summary]
        if movable:
            store.set_head(sid, pick(movable, k))
    elif op == "notice":
        store.append_message(sid, {"role": "user", "content": "[done]", "display": "runtime",
                                   "source": "job_followup"})
    elif op == "tool":
        if head and not store.get_node(sid, head).is_summary:
            store.append_message(sid, {"role": "tool", "content": {"k": k}, "caller": head})
    elif op == "mark":
        if chain:
            store.merge_node_metadata_batch(sid, {c: {"memory_written_scriptorium": "w"}
                                                  for c in chain[: width]})


def check(store: SessionStore, sid: str = "s") -> None:
    nodes = store.get_nodes(sid)
    assert [n.seq for n in nodes] == list(range(len(nodes))), "seqs unique and dense"
    by_id = {n.id: n for n in nodes}
    assert len(by_id) == len(nodes)
    head = store.head(sid)
    if head is not None:
        assert head in by_id and not by_id[head].is_summary
        branch = store.get_branch(sid)
        if not by_id[head].rewound and not by_id[head].is_root:
            assert branch[-1]["id"] == head
        assert all(not m.get("rewound") for m in branch)
    rows = store.list_branches(sid)
    assert sum(r["head"] for r in rows) == (1 if head is not None else 0)
    for r in rows:
        store.get_branch(sid, r["tip"])  # every tip walks without error
        if r["head"]:
            continue
        n = by_id[r["tip"]]
        assert n.conversational and not n.is_summary and not n.is_runtime and not n.rewound


@pytest.mark.slow
@settings(max_examples=examples(120), deadline=None)
@given(op_lists)
def test_any_sequence_of_operations_keeps_the_session_sound(ops):
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "sessions"
        store = SessionStore(root, git=False)
        store.create_session("s")
        for op, k, width in ops:
            if op == "reopen":
                store = SessionStore(root, git=False)  # a cold cache must agree
            else:
                apply(store, op, k, width)
            check(store)
        warm = [(n.id, n.seq, n.metadata) for n in store.get_nodes("s")]
        cold = SessionStore(root, git=False)
        assert [(n.id, n.seq, n.metadata) for n in cold.get_nodes("s")] == warm
        assert cold.list_branches("s") == store.list_branches("s")


_PG_HOMES: dict[str, str] = {}  # one home per server for the examples of the test below


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None)
@given(ops=op_lists)
def test_any_sequence_of_operations_keeps_a_postgresql_session_sound(pg_server_url, ops):
    """The same property on a PostgreSQL home: one home for the test, a new session per
    example; "reopen" is a new store (cold cache) on the same connection pool."""
    import uuid

    from pgserver import home_url

    from scriptorium.sessions.pg_store import PgSessionStore

    url = _PG_HOMES.setdefault(pg_server_url, home_url(pg_server_url))
    first = store = PgSessionStore.open(url)
    try:
        sid = "p" + uuid.uuid4().hex[:10]
        store.create_session(sid)
        for op, k, width in ops:
            if op == "reopen":
                store = PgSessionStore(first.pg)  # a cold cache must agree
            else:
                apply(store, op, k, width, sid)
            check(store, sid)
        warm = [(n.id, n.seq, n.metadata) for n in store.get_nodes(sid)]
        cold = PgSessionStore(first.pg)
        assert [(n.id, n.seq, n.metadata) for n in cold.get_nodes(sid)] == warm
        assert cold.list_branches(sid) == store.list_branches(sid)
    finally:
        first.close()
