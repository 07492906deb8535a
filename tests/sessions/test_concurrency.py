"""Real processes writing one session at once: no duplicate seq, no torn meta.json, no lost
node, no lost metadata patch, and foreign writes seen on the next read — on both homes (the
directory store's file lock, the PostgreSQL store's row lock)."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

from storekit import another_store, open_session_store

MARK = "memory_written_scriptorium"


def ctx(kind: str):
    """Fork for the directory home (fast); a PostgreSQL home's children start fresh (spawn),
    so no child inherits its parent's pooled connections."""
    return mp.get_context("fork" if kind == "directory" else "spawn")


def _appender(kind: str, root: str, tag: str, n: int, go) -> None:
    store = open_session_store(kind, root)  # the process's exit closes its connections
    go.wait()
    for i in range(n):
        role = "user" if i % 2 == 0 else "assistant"
        store.append_message("s1", {"id": f"{tag}{i}", "role": role, "content": f"{tag} {i}"})


def _meta_reader(root: str, stop, torn) -> None:
    path = Path(root) / "s1" / "meta.json"
    while not stop.is_set():
        try:
            json.loads(path.read_bytes())
        except FileNotFoundError:
            continue
        except ValueError:
            torn.value += 1


def _merger(kind: str, root: str, key: str, ids: list[str], rounds: int, go) -> None:
    store = open_session_store(kind, root)
    go.wait()
    for r in range(rounds):
        store.merge_node_metadata_batch("s1", {nid: {f"{key}{r}": True} for nid in ids})


def _rewinder(kind: str, root: str, target: str, go) -> None:
    store = open_session_store(kind, root)
    go.wait()
    store.rewind("s1", target)


def _run(procs) -> None:
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"{p.name} exited {p.exitcode}"


def test_two_processes_appending_at_once_lose_nothing_and_share_no_seq(any_store, home_kind,
                                                                       store_location):
    store = any_store
    store.create_session("s1")
    CTX = ctx(home_kind)
    go, stop = CTX.Event(), CTX.Event()
    torn = CTX.Value("i", 0)
    reader = None
    if home_kind == "directory":  # meta.json is replaced whole, never seen half-written
        reader = CTX.Process(target=_meta_reader, args=(store_location, stop, torn))
        reader.start()
    n = 40
    writers = [CTX.Process(target=_appender, args=(home_kind, store_location, tag, n, go),
                           name=tag) for tag in ("a", "b")]
    for p in writers:
        p.start()
    go.set()
    for p in writers:
        p.join(120)
        assert p.exitcode == 0
    stop.set()
    if reader is not None:
        reader.join(10)
    with another_store(home_kind, store_location) as fresh:
        nodes = fresh.get_nodes("s1")
    assert sorted(n.id for n in nodes) == sorted(f"{t}{i}" for t in "ab" for i in range(n))
    assert [n.seq for n in nodes] == list(range(2 * n))
    assert torn.value == 0
    # every append extended the head it saw under the lock: one chain through all 80 nodes
    assert store.get_meta("s1")["head_id"] == nodes[-1].id
    assert len(store.get_branch("s1")) == 2 * n
    if home_kind == "directory":
        meta = json.loads((store.root / "s1" / "meta.json").read_text())
        assert meta["head_id"] == nodes[-1].id
        assert len(list((store.root / "s1" / "history").iterdir())) == 2 * n


def test_two_processes_merging_into_the_same_nodes_lose_no_patch(any_store, home_kind,
                                                                  store_location, chat):
    store = any_store
    ids = chat(store, "s1", *[f"n{i}" for i in range(10)])
    CTX = ctx(home_kind)
    go = CTX.Event()
    rounds = 15
    procs = [CTX.Process(target=_merger,
                         args=(home_kind, store_location, key, ids, rounds, go))
             for key in ("x", "y")]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with another_store(home_kind, store_location) as fresh:
        nodes = fresh.get_nodes("s1")
    for node in nodes:
        want = {f"{k}{r}" for k in "xy" for r in range(rounds)}
        assert want <= set(node.metadata), node.id


def test_a_mark_racing_a_rewind_of_the_same_nodes_keeps_both(any_store, home_kind,
                                                             store_location, chat):
    store = any_store
    ids = chat(store, "s1", *[f"n{i}" for i in range(30)])
    CTX = ctx(home_kind)
    go = CTX.Event()
    procs = [CTX.Process(target=_merger, args=(home_kind, store_location, "m", ids[10:], 5, go)),
             CTX.Process(target=_rewinder, args=(home_kind, store_location, "n10", go))]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with another_store(home_kind, store_location) as fresh:
        for nid in ids[10:]:
            md = fresh.get_node("s1", nid).metadata
            assert md.get("rewound") is True and {f"m{r}" for r in range(5)} <= set(md), nid
        assert fresh.head("s1") == "n9"


def _holder(kind: str, root: str, conn) -> None:
    store = open_session_store(kind, root)
    conn.send([m.get(MARK) for m in store.get_branch("s1")])  # the session is now cached
    conn.recv()  # wait until the other process has marked
    conn.send([m.get(MARK) for m in store.get_branch("s1")])


def test_a_process_holding_the_session_sees_a_foreign_mark_on_its_next_read(any_store,
                                                                            home_kind,
                                                                            store_location,
                                                                            chat):
    store = any_store
    chat(store, "s1", "u1", "a1", "u2", "a2")
    parent, child = ctx(home_kind).Pipe()
    p = ctx(home_kind).Process(target=_holder, args=(home_kind, store_location, child))
    p.start()
    assert parent.recv() == [None] * 4
    store.merge_node_metadata_batch("s1", {"u1": {MARK: "w-1"}, "a1": {MARK: "w-1"}})
    parent.send("go")
    assert parent.recv() == ["w-1", "w-1", None, None]
    p.join(30)
    assert p.exitcode == 0


def _merge_forever(kind: str, root: str, ids: list[str], ready) -> None:
    store = open_session_store(kind, root)
    r = 0
    while True:
        store.merge_node_metadata_batch("s1", {nid: {"round": r, "pad": "x" * (r % 97)}
                                               for nid in ids})
        r += 1
        if r == 3:
            ready.set()


def test_a_merge_killed_midway_leaves_every_node_whole_and_the_lock_free(any_store, home_kind,
                                                                         store_location, chat):
    import os
    import signal
    import time

    store = any_store
    ids = chat(store, "s1", *[f"n{i}" for i in range(40)])
    CTX = ctx(home_kind)
    for delay in (0.0, 0.013, 0.031):
        ready = CTX.Event()
        p = CTX.Process(target=_merge_forever, args=(home_kind, store_location, ids, ready))
        p.start()
        assert ready.wait(60)
        time.sleep(delay)  # land the kill at a different point of a batch
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        with another_store(home_kind, store_location) as fresh:
            nodes = fresh.get_nodes("s1")  # every node parses: no torn node
            assert [n.id for n in nodes] == ids
            rounds = {n.metadata["round"] for n in nodes}
            for n in nodes:
                assert n.output == f"text of {n.id}" and isinstance(n.metadata["round"], int)
                assert n.metadata["pad"] == "x" * (n.metadata["round"] % 97)
            if home_kind == "postgres":  # one transaction per batch: all nodes of one round
                assert len(rounds) == 1
            # the dead process's lock (flock / row lock) died with it: a write goes through
            fresh.merge_node_metadata_batch("s1", {"n0": {"after": True}})
            assert fresh.get_node("s1", "n0").metadata["after"] is True
