"""The pending walk stops at the last mark, and agrees with the full-branch definition."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from testkit import examples

from scriptorium.config import load_settings
from scriptorium.memory.records import MARK_KEY, records, unwritten
from scriptorium.memory.writing import Memory
from scriptorium.memory.workspace import Workspace
from scriptorium.sessions import SessionStore

OPS = st.lists(st.tuples(st.sampled_from(["user", "assistant", "fork", "spawn", "notice",
                                          "tool", "blank", "retry", "edit", "rewind"]),
                         st.integers(0, 10_000)), min_size=1, max_size=25)


def build(store: SessionStore, ops) -> None:
    store.create_session("s")
    n = 0
    for op, pick in ops:
        n += 1
        nodes = [x for x in store.get_nodes("s")]
        turns = [x for x in nodes if x.role in ("user", "llm") and not x.metadata.get("rewound")]
        target = turns[pick % len(turns)] if turns else None
        name = f"n{n}"
        if op in ("user", "assistant") or target is None:
            store.append_message("s", {"id": name, "role": "user" if op != "assistant"
                                       else "assistant", "content": f"turn {name} words"})
        elif op == "fork":
            store.append_after("s", target.id, {"id": name, "role": "user",
                                                "content": f"fork {name}"})
        elif op == "spawn":
            store.spawn("s", target.id, f"task {name}", node_id=name)
            store.append_after("s", name, {"id": f"{name}r", "role": "assistant",
                                           "content": f"report {name}"})
        elif op == "notice":
            store.append_message("s", {"id": name, "role": "user", "content": "[done]",
                                       "display": "runtime", "source": "job_followup"})
        elif op == "tool":
            store.append_message("s", {"id": name, "role": "tool", "content": "{}",
                                       "caller": target.id})
        elif op == "blank":
            store.append_message("s", {"id": name, "role": "user", "content": "   "})
        elif op == "retry" and target.role == "llm" and target.predecessor \
                and not target.is_runtime:
            store.retry("s", target.id, f"again {name}", node_id=name)
        elif op == "edit" and target.role == "user" and not target.is_runtime:
            store.edit("s", target.id, f"edited {name}", node_id=name)
        elif op == "rewind" and store.head("s"):
            chain = [m["id"] for m in store.get_branch("s") if m["role"] == "user"]
            if chain:
                store.rewind("s", chain[pick % len(chain)])


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.sets(st.integers(0, 60)))
def test_the_lazy_pending_walk_equals_unwritten_over_the_whole_branch(ops, marked):
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store = SessionStore(home / "sessions", git=False)
        build(store, ops)
        mem = Memory(home, settings=load_settings(home), store=store,
                     workspace=Workspace.open(home / "memory", create=False))  # no git: fast
        ws = mem.workspace_id
        ids = [n.id for n in store.get_nodes("s")]
        patches = {ids[i]: {MARK_KEY: ws if i % 3 else "w-0000ffff"}
                   for i in marked if i < len(ids)}
        if patches:
            store.merge_node_metadata_batch("s", patches)
        for row in store.list_branches("s"):
            eager = unwritten(records("s", store.get_branch("s", row["tip"])), ws)
            lazy = mem.pending("s", row["tip"])
            assert [(r.node_id, r.origin, r.mark) for r in lazy] == \
                [(r.node_id, r.origin, r.mark) for r in eager]


@pytest.mark.slow
def test_the_pending_walk_reads_only_the_backlog_on_a_long_session(tmp_path):
    store = SessionStore(tmp_path / "sessions", git=False)
    store.create_session("s")
    prev = "ROOT"
    for i in range(600):
        store.append_message("s", {"id": f"m{i}", "role": "user" if i % 2 == 0 else "assistant",
                                   "content": f"turn {i}", "predecessor": prev})
        prev = f"m{i}"
    mem = Memory(tmp_path, settings=load_settings(tmp_path), store=store)
    store.merge_node_metadata_batch("s", {f"m{i}": {MARK_KEY: mem.workspace_id}
                                          for i in range(585, 590)})
    converted = []
    from scriptorium.sessions import node as node_mod

    original = node_mod.Node.to_message

    def counting(self, sid):
        converted.append(self.id)
        return original(self, sid)

    node_mod.Node.to_message = counting
    try:
        pending = mem.pending("s")
    finally:
        node_mod.Node.to_message = original
    assert [r.node_id for r in pending] == [f"m{i}" for i in range(590, 600)]
    assert len(converted) <= 12  # the 10-turn backlog, the stop turn and the branch root
