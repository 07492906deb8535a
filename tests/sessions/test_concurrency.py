"""Real processes writing one session at once: no duplicate seq, no torn meta.json, no lost
node, no lost metadata patch, and foreign writes seen on the next read."""

from __future__ import annotations

import json
import multiprocessing as mp
from pathlib import Path

from scriptorium.sessions import SessionStore

CTX = mp.get_context("fork")
MARK = "memory_written_scriptorium"


def _appender(root: str, tag: str, n: int, go) -> None:
    store = SessionStore(Path(root), git=False)
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


def _merger(root: str, key: str, ids: list[str], rounds: int, go) -> None:
    store = SessionStore(Path(root), git=False)
    go.wait()
    for r in range(rounds):
        store.merge_node_metadata_batch("s1", {nid: {f"{key}{r}": True} for nid in ids})


def _rewinder(root: str, target: str, go) -> None:
    store = SessionStore(Path(root), git=False)
    go.wait()
    store.rewind("s1", target)


def _run(procs) -> None:
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0, f"{p.name} exited {p.exitcode}"


def test_two_processes_appending_at_once_lose_nothing_and_share_no_seq(home):
    store = SessionStore.from_home(home, git=False)
    store.create_session("s1")
    go, stop = CTX.Event(), CTX.Event()
    torn = CTX.Value("i", 0)
    reader = CTX.Process(target=_meta_reader, args=(str(store.root), stop, torn))
    reader.start()
    n = 40
    writers = [CTX.Process(target=_appender, args=(str(store.root), tag, n, go), name=tag)
               for tag in ("a", "b")]
    for p in writers:
        p.start()
    go.set()
    for p in writers:
        p.join(60)
        assert p.exitcode == 0
    stop.set()
    reader.join(10)
    nodes = SessionStore(store.root, git=False).get_nodes("s1")
    assert sorted(n.id for n in nodes) == sorted(f"{t}{i}" for t in "ab" for i in range(n))
    assert [n.seq for n in nodes] == list(range(2 * n))
    assert torn.value == 0
    meta = json.loads((store.root / "s1" / "meta.json").read_text())
    # every append extended the head it saw under the lock: one chain through all 80 nodes
    assert meta["head_id"] == nodes[-1].id
    assert len(store.get_branch("s1")) == 2 * n
    assert len(list((store.root / "s1" / "history").iterdir())) == 2 * n


def test_two_processes_merging_into_the_same_nodes_lose_no_patch(home, chat):
    store = SessionStore.from_home(home, git=False)
    ids = chat(store, "s1", *[f"n{i}" for i in range(10)])
    go = CTX.Event()
    rounds = 15
    procs = [CTX.Process(target=_merger, args=(str(store.root), key, ids, rounds, go))
             for key in ("x", "y")]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    for node in SessionStore(store.root, git=False).get_nodes("s1"):
        want = {f"{k}{r}" for k in "xy" for r in range(rounds)}
        assert want <= set(node.metadata), node.id


def test_a_mark_racing_a_rewind_of_the_same_nodes_keeps_both(home, chat):
    store = SessionStore.from_home(home, git=False)
    ids = chat(store, "s1", *[f"n{i}" for i in range(30)])
    go = CTX.Event()
    procs = [CTX.Process(target=_merger, args=(str(store.root), "m", ids[10:], 5, go)),
             CTX.Process(target=_rewinder, args=(str(store.root), "n10", go))]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    fresh = SessionStore(store.root, git=False)
    for nid in ids[10:]:
        md = fresh.get_node("s1", nid).metadata
        assert md.get("rewound") is True and {f"m{r}" for r in range(5)} <= set(md), nid
    assert fresh.head("s1") == "n9"


def _holder(root: str, conn) -> None:
    store = SessionStore(Path(root), git=False)
    conn.send([m.get(MARK) for m in store.get_branch("s1")])  # the session is now cached
    conn.recv()  # wait until the other process has marked
    conn.send([m.get(MARK) for m in store.get_branch("s1")])


def test_a_process_holding_the_session_sees_a_foreign_mark_on_its_next_read(home, chat):
    store = SessionStore.from_home(home, git=False)
    chat(store, "s1", "u1", "a1", "u2", "a2")
    parent, child = CTX.Pipe()
    p = CTX.Process(target=_holder, args=(str(store.root), child))
    p.start()
    assert parent.recv() == [None] * 4
    store.merge_node_metadata_batch("s1", {"u1": {MARK: "w-1"}, "a1": {MARK: "w-1"}})
    parent.send("go")
    assert parent.recv() == ["w-1", "w-1", None, None]
    p.join(10)
    assert p.exitcode == 0


def _merge_forever(root: str, ids: list[str], ready) -> None:
    store = SessionStore(Path(root), git=False)
    r = 0
    while True:
        store.merge_node_metadata_batch("s1", {nid: {"round": r, "pad": "x" * (r % 97)}
                                               for nid in ids})
        r += 1
        if r == 3:
            ready.set()


def test_a_merge_killed_midway_leaves_every_node_whole_and_the_lock_free(home, chat):
    import os
    import signal
    import time

    store = SessionStore.from_home(home, git=False)
    ids = chat(store, "s1", *[f"n{i}" for i in range(40)])
    for delay in (0.0, 0.013, 0.031):
        ready = CTX.Event()
        p = CTX.Process(target=_merge_forever, args=(str(store.root), ids, ready))
        p.start()
        assert ready.wait(30)
        time.sleep(delay)  # land the kill at a different point of a batch
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        fresh = SessionStore(store.root, git=False)
        nodes = fresh.get_nodes("s1")  # every file parses: no torn node
        assert [n.id for n in nodes] == ids
        for n in nodes:
            assert n.output == f"text of {n.id}" and isinstance(n.metadata["round"], int)
            assert n.metadata["pad"] == "x" * (n.metadata["round"] % 97)
        # the dead process's flock died with it: a new write goes through at once
        fresh.merge_node_metadata_batch("s1", {"n0": {"after": True}})
        assert fresh.get_node("s1", "n0").metadata["after"] is True
