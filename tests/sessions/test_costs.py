"""Cost follows the work (issue 12), asserted by counting work, never by timing it: an append
does the same file-system work at 10 and at 2,000 nodes and never re-lists ``history/``; a
cold open reads each node file once; a walk compares each id a bounded number of times; a
mark batch is one durable step; a turn's commit stages only the files that changed. And the
shortcuts never hide another writer: foreign appends and marks are still seen."""

from __future__ import annotations

import builtins
import gc
import json
import multiprocessing as mp
import os
from collections import Counter
from pathlib import Path

import pytest

from scriptorium import faults, fsbatch, fsutil
from scriptorium.config import load_settings
from scriptorium.gitrepo import GitRepo
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore, graph as graph_mod, index as index_mod
from scriptorium.sessions.index import SessionIndex
from scriptorium.sessions.node import Node

MARK = "memory_written_scriptorium"
WS = "w-0c01d000"
CTX = mp.get_context("fork")


def make_chain(root: Path, sid: str, n: int, marked_below: int = 0) -> None:
    """An n-node chain written straight to disk (the store's format), backdated an hour;
    the nodes before ``marked_below`` carry workspace WS's mark."""
    hist = root / sid / "history"
    hist.mkdir(parents=True)
    prev = "ROOT"
    for i in range(n):
        role = "user" if i % 2 == 0 else "llm"
        doc = {"id": f"n{i}", "created_at": 1.0 + i, "seq": i, "role": role, "name": "",
               "input": None, "output": f"turn {i}", "caller": "", "predecessor": prev,
               "reads": [], "metadata": {MARK: WS} if i < marked_below else {}}
        (hist / f"{i:08d}-{role[0]}-n{i}.json").write_text(json.dumps(doc))
        prev = f"n{i}"
    (root / sid / "meta.json").write_text(json.dumps({"id": sid, "head_id": prev}))
    past = os.stat(hist).st_mtime - 3600
    for p in [*hist.iterdir(), hist, root / sid / "meta.json"]:
        os.utime(p, (past, past))


@pytest.fixture
def steady_clock(monkeypatch):
    """Pin the index's clock an hour ahead: no fingerprint is 'racy', so the work a call
    does depends only on the algorithm, never on how fast this machine ran the test."""
    ahead = index_mod.time.time_ns() + 3600 * 10**9
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: ahead)


@pytest.fixture
def fs_calls(monkeypatch) -> Counter:
    """Count the file-system calls the process makes (directory listings, stats, opens)."""
    counts: Counter = Counter()
    history_fds: set[int] = set()  # descriptors opened on a history/ directory

    def is_history(target) -> bool:
        if isinstance(target, int):
            return target in history_fds
        return Path(target).name == "history"

    def counting(name, fn):
        def wrapper(*a, **kw):
            counts[name] += 1
            if name in ("scandir", "listdir") and a and is_history(a[0]):
                counts["history listings"] += 1
            out = fn(*a, **kw)
            if name == "open" and is_history(a[0]):
                history_fds.add(out)
            elif name == "close":
                history_fds.discard(a[0])
            return out
        return wrapper

    for name in ("scandir", "listdir", "stat", "lstat", "open", "fstat", "read", "close"):
        monkeypatch.setattr(os, name, counting(name, getattr(os, name)))
    monkeypatch.setattr(builtins, "open", counting("builtins.open", builtins.open))
    return counts


def _append_turns(store: SessionStore, sid: str, k: int, tag: str = "") -> None:
    for i in range(k):
        store.append_message(sid, {"id": f"{sid}{tag}-u{i}", "role": "user", "content": "q"})
        store.append_message(sid, {"id": f"{sid}{tag}-a{i}", "role": "assistant",
                                   "content": "a"})


def test_an_append_does_the_same_file_work_at_10_and_at_2000_nodes(tmp_path, steady_clock,
                                                                     fs_calls):
    work = {}
    for sid, n in (("small", 10), ("big", 2000)):
        root = tmp_path / sid / "sessions"  # apart, so each has a head-move log of its own
        make_chain(root, sid, n)
        store = SessionStore(root, git=False)
        _append_turns(store, sid, 1, "first")  # the first write creates the lock file
        store.get_branch(sid)
        idx = store._index(sid)
        scans, parses = idx.scans, idx.parses
        fs_calls.clear()
        _append_turns(store, sid, 5)
        work[sid] = dict(fs_calls)
        assert idx.scans == scans and idx.parses == parses  # the index learned its own nodes
        assert work[sid].get("history listings", 0) == 0
    assert work["small"] == work["big"]
    assert [m["id"] for m in store.get_branch("big")][-2:] == ["big-u4", "big-a4"]


def test_own_appends_re_verify_history_once_per_sixteenth_of_its_size(tmp_path, steady_clock):
    root = tmp_path / "sessions"
    make_chain(root, "s", 1024)
    store = SessionStore(root, git=False)
    store.get_branch("s")
    idx = store._index("s")
    scans = idx.scans
    _append_turns(store, "s", 64)  # 128 appends; budget max(32, 1024 // 16) = 64 adoptions
    assert 1 <= idx.scans - scans <= 2


def test_a_cold_open_reads_each_node_file_once_and_lists_history_once(tmp_path, fs_calls):
    root = tmp_path / "sessions"
    make_chain(root, "s", 1500)
    store = SessionStore(root, git=False)
    fs_calls.clear()
    tail, first = store.branch_tail("s", stop=lambda m: m["id"] == "n1489")
    idx = store._index("s")
    assert [m["id"] for m in tail] == [f"n{i}" for i in range(1490, 1500)]
    assert first is not None and first["id"] == "n0"
    assert idx.scans == 1 and idx.parses == 1500 and fs_calls["history listings"] == 1
    opened = fs_calls["open"] + fs_calls["builtins.open"]
    assert 1500 <= opened <= 1500 + 5  # the node files, meta.json, the lock file


def test_a_cold_pending_reads_each_node_file_once_stats_none_and_orders_none_by_seq(
        tmp_path, fs_calls, monkeypatch):
    """Pending work on a session this process never read: one listing of ``history/``, one
    open and one read per node file and no stat of any (the fingerprint is the listed inode
    and the size read), a bounded number of other stats, and no sort of the nodes by seq (a
    walk back from the head needs none; the order is built when a read asks for it)."""
    home, n = tmp_path / "home", 1500
    make_chain(home / "sessions", "s", n, marked_below=n - 10)
    (home / "memory" / ".scriptorium").mkdir(parents=True)
    (home / "memory" / ".scriptorium" / "workspace-id").write_text(WS + "\n")
    mem = Memory(home, settings=load_settings(home),
                 store=SessionStore(home / "sessions", git=False))
    sort_keys = Counter()
    real_key = graph_mod._seq
    monkeypatch.setattr(graph_mod, "_seq", lambda node: (sort_keys.update(["seq"]),
                                                         real_key(node))[1])
    fs_calls.clear()
    pending = mem.pending("s")
    assert [r.node_id for r in pending] == [f"n{i}" for i in range(n - 10, n)]
    idx = mem.store._index("s")
    assert idx.scans == 1 and idx.parses == n and fs_calls["history listings"] == 1
    assert n <= fs_calls["open"] + fs_calls["builtins.open"] <= n + 10
    assert n <= fs_calls["read"] <= n + 10
    assert fs_calls["fstat"] + fs_calls["stat"] + fs_calls["lstat"] <= 20  # never per file
    assert sort_keys["seq"] == 0
    assert [m.id for m in mem.store.get_nodes("s")] == [f"n{i}" for i in range(n)]
    assert sort_keys["seq"] == n  # the first read that wants the order sorts, once


def test_a_history_swapped_for_a_symlink_during_a_cold_scan_is_never_followed(
        tmp_path, monkeypatch):
    """A cold scan lists and opens node files through one descriptor of ``history/``: a
    directory put in its place mid-scan (here a symlink to files elsewhere) is never read."""
    root = tmp_path / "sessions"
    make_chain(root, "s", 40)
    hist = root / "s" / "history"
    outside = tmp_path / "outside"
    outside.mkdir()
    for f in hist.iterdir():
        doc = json.loads(f.read_bytes())
        (outside / f.name).write_text(json.dumps(dict(doc, output="planted")))
    real_read = index_mod.read_listed
    swapped = []

    def read_then_swap(*args, **kw):
        got = real_read(*args, **kw)
        if not swapped:
            os.rename(hist, hist.with_name("history.old"))
            hist.symlink_to(outside)
            swapped.append(True)
        return got

    monkeypatch.setattr(index_mod, "read_listed", read_then_swap)
    nodes = SessionStore(root, git=False).get_nodes("s")
    assert swapped and len(nodes) == 40
    assert [n.output for n in nodes] == [f"turn {i}" for i in range(40)]


@pytest.mark.skipif(gc.get_freeze_count() > 0, reason="the program froze objects itself")
def test_a_cold_open_hands_its_nodes_to_the_oldest_gc_generation_without_a_pass(tmp_path):
    """The nodes a cold open makes stay alive: the collector's young generations must not
    walk each of them once more just to find them alive (that pass was a twentieth of a
    cold pending's time)."""
    root = tmp_path / "sessions"
    make_chain(root, "s", 300)
    store = SessionStore(root, git=False)
    gc.collect()
    store.get_branch("s")
    idx = store._index("s")
    garbage = [[] for _ in range(5 * gc.get_threshold()[0])]  # a young pass is due now
    del garbage
    oldest = {id(o) for o in gc.get_objects(generation=2)}
    assert all(id(node) in oldest for node in idx.nodes.values())


class CountingId(str):
    """A node id that counts how often it is compared for equality."""

    compared = 0

    def __eq__(self, other):
        CountingId.compared += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_branch_root_walk_compares_each_id_a_bounded_number_of_times(tmp_path):
    idx = SessionIndex("s", tmp_path / "s")
    n = 3000
    for i in range(n):
        node = Node(id=CountingId(f"n{i}"), seq=i, role="user" if i % 2 == 0 else "llm",
                    predecessor=CountingId(f"n{i - 1}") if i else "ROOT")
        idx._put(f"{i:08d}-x-n{i}.json", (i, 0, 0), node)
    CountingId.compared = 0
    assert idx.branch_root(f"n{n - 1}") == "n0"
    assert CountingId.compared <= 8 * n  # a list membership test per step would be ~n²/2


def _record_durability(monkeypatch, events: list[str]) -> None:
    """Log, in order, every step of fsbatch that makes something durable or visible."""
    real_replace, real_fsync = os.replace, os.fsync
    monkeypatch.setattr(os, "replace",
                        lambda a, b: (events.append("rename"), real_replace(a, b))[1])
    monkeypatch.setattr(os, "fsync", lambda fd: (events.append("fsync"), real_fsync(fd))[1])

    def fsync_dir(path: Path) -> None:
        events.append(f"fsync-dir {path}")
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        real_fsync(fd)
        os.close(fd)

    monkeypatch.setattr(fsbatch, "fsync_dir", fsync_dir)
    if fsbatch._SYNCFS is not None:
        real_syncfs = fsbatch._SYNCFS
        monkeypatch.setattr(fsbatch, "_SYNCFS",
                            lambda fd: (events.append("syncfs"), real_syncfs(fd))[1])


@pytest.mark.parametrize("syncfs", [False, True], ids=["fsyncs-together", "syncfs"])
def test_a_mark_batch_makes_every_new_file_durable_in_one_step_before_the_first_rename(
        tmp_path, monkeypatch, chat, syncfs):
    if syncfs and fsbatch._SYNCFS is None:
        pytest.skip("no syncfs(2) here (Linux >= 5.8)")
    monkeypatch.setattr(fsbatch, "USE_SYNCFS", syncfs)  # opted in by SCRIPTORIUM_SYNCFS=1
    store = SessionStore(tmp_path / "sessions", git=False)
    ids = chat(store, "s", *[f"n{i}" for i in range(20)])
    events: list[str] = []
    _record_durability(monkeypatch, events)
    store.merge_node_metadata_batch("s", {nid: {MARK: "w-1"} for nid in ids})
    # the fsyncs issued together (or one syncfs) before the first rename, then the renames,
    # then one fsync of the one directory
    durable = ["syncfs"] if syncfs else ["fsync"] * 20
    assert events == (durable + ["rename"] * 20
                      + [f"fsync-dir {store.root / 's' / 'history'}"])
    assert all(n[MARK] == "w-1" for n in store.get_branch("s"))


def test_a_mark_batch_leaves_only_the_node_files_and_every_one_is_whole_json(
        tmp_path, monkeypatch, chat):
    store = SessionStore(tmp_path / "sessions", git=False)
    ids = chat(store, "s", *[f"n{i}" for i in range(12)])
    hist = store.root / "s" / "history"
    names = sorted(os.listdir(hist))
    seen: list[list[str]] = []

    def check(step: str) -> None:  # at every rename: each node file parses, with all its keys
        if step == "mark-renamed":
            for name in names:
                raw = json.loads((hist / name).read_bytes())
                assert {"id", "seq", "output", "metadata"} <= set(raw)
            seen.append(sorted(n for n in os.listdir(hist) if not n.startswith(".")))

    monkeypatch.setattr(faults, "HOOK", check)
    store.merge_node_metadata_batch("s", {nid: {MARK: "w-1"} for nid in ids})
    assert seen == [names] * 12
    assert sorted(os.listdir(hist)) == names  # no temp file or old copy left behind
    assert [m[MARK] for m in SessionStore(store.root, git=False).get_branch("s")] == ["w-1"] * 12


def test_a_crash_after_staging_leaves_every_node_old_and_the_next_write_sweeps_the_temps(
        tmp_path, monkeypatch, chat):
    store = SessionStore(tmp_path / "sessions", git=False)
    ids = chat(store, "s", *[f"n{i}" for i in range(6)])
    hist = store.root / "s" / "history"
    before = {p.name: p.read_bytes() for p in hist.iterdir()}

    def crash(step):
        if step == "mark-staged":
            raise KeyboardInterrupt("simulated crash")

    monkeypatch.setattr(faults, "HOOK", crash)
    with pytest.raises(KeyboardInterrupt):
        store.merge_node_metadata_batch("s", {nid: {MARK: "w-1"} for nid in ids})
    monkeypatch.setattr(faults, "HOOK", None)
    assert {p.name: p.read_bytes() for p in hist.iterdir()} == before
    fresh = SessionStore(store.root, git=False)
    assert all(MARK not in m for m in fresh.get_branch("s"))


def _mark_until_staged(root: str, ids: list[str]) -> None:
    os.environ["SCRIPTORIUM_FAULT"] = "mark-staged"
    SessionStore(Path(root), git=False).merge_node_metadata_batch(
        "s", {nid: {MARK: "w-1"} for nid in ids})


def test_a_process_killed_at_mark_staged_changes_no_node_and_its_temps_are_swept(tmp_path,
                                                                                chat):
    store = SessionStore(tmp_path / "sessions", git=False)
    ids = chat(store, "s", *[f"n{i}" for i in range(8)])
    hist = store.root / "s" / "history"
    before = {p.name: p.read_bytes() for p in hist.iterdir()}
    p = CTX.Process(target=_mark_until_staged, args=(str(store.root), ids))
    p.start()
    p.join(30)
    assert p.exitcode == -9  # SIGKILLed at the step
    temps = [n for n in os.listdir(hist) if n.endswith(".tmp")]
    assert len(temps) == 8  # all staged and durable, none renamed
    assert {n: (hist / n).read_bytes() for n in before} == before
    fresh = SessionStore(store.root, git=False)
    fresh.merge_node_metadata_batch("s", {ids[0]: {MARK: "w-2"}})
    assert len([n for n in os.listdir(hist) if n.endswith(".tmp")]) == 8  # may be live
    past = os.stat(hist).st_mtime - 120  # a minute on: surely a dead writer's
    for name in temps:
        os.utime(hist / name, (past, past))
    fresh = SessionStore(store.root, git=False)  # a restarted process: its scan finds them
    fresh.merge_node_metadata_batch("s", {ids[1]: {MARK: "w-2"}})
    assert sorted(os.listdir(hist)) == sorted(before)
    assert [m.get(MARK) for m in fresh.get_branch("s")] == ["w-2", "w-2"] + [None] * 6


def test_another_store_of_ours_is_seen_even_when_the_directory_mtime_cannot_tell(home, chat):
    a = SessionStore.from_home(home, git=False)
    chat(a, "s1", "u1", "a1")
    a.get_branch("s1")
    hist = a.root / "s1" / "history"
    st = os.stat(hist)
    b = SessionStore.from_home(home, git=False)
    b.merge_node_metadata_batch("s1", {"u1": {MARK: "w-7"}})
    os.utime(hist, ns=(st.st_atime_ns, st.st_mtime_ns))  # as if in the same clock tick
    assert a.get_branch("s1")[0][MARK] == "w-7"  # the generation token told


def test_a_reference_writer_append_is_seen_through_its_meta_rewrite(home, chat, steady_clock):
    a = SessionStore.from_home(home, git=False)
    chat(a, "s1", "u1", "a1")
    a.get_branch("s1")
    sdir = a.root / "s1"
    st = os.stat(sdir / "history")
    node = {"id": "r1", "created_at": 9.0, "seq": 2, "role": "user", "name": "", "input": None,
            "output": "from the reference store", "caller": "", "predecessor": "a1",
            "reads": [], "metadata": {}}
    (sdir / "history" / "0002-u-r1.json").write_text(json.dumps(node))  # no lock, no token
    os.utime(sdir / "history", ns=(st.st_atime_ns, st.st_mtime_ns))
    meta = json.loads((sdir / "meta.json").read_text())
    fsutil.atomic_write_json(sdir / "meta.json", dict(meta, head_id="r1"))
    assert [m["id"] for m in a.get_branch("s1")] == ["u1", "a1", "r1"]


def test_a_foreign_file_hidden_in_an_own_writes_tick_is_found_within_the_budget(
        home, chat, steady_clock):
    a = SessionStore.from_home(home, git=False)
    chat(a, "s1", "u1", "a1")
    sdir = a.root / "s1"
    node = {"id": "x1", "created_at": 9.0, "seq": 500, "role": "user", "name": "",
            "input": None, "output": "side", "caller": "", "predecessor": None, "reads": [],
            "metadata": {"spawn_branch_root": True}}
    st = os.stat(sdir / "history")
    (sdir / "history" / "00000500-u-x1.json").write_text(json.dumps(node))
    os.utime(sdir / "history", ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(Exception):
        a.get_node("s1", "x1")  # hidden: nothing this process can see changed
    _append_turns(a, "s1", index_mod.MIN_UNVERIFIED // 2 + 1)
    assert a.get_node("s1", "x1").output == "side"
    assert a.get_nodes("s1")[-1].seq > 500  # and no seq was handed out twice


def test_a_turn_commit_stages_only_what_changed_and_takes_along_foreign_marks(home, chat,
                                                                             monkeypatch):
    a = SessionStore.from_home(home)
    chat(a, "s1", "u1", "a1", "u2", "a2")  # the first commit of this process: add -A
    calls: list[list[str]] = []
    real_run = GitRepo._run
    monkeypatch.setattr(GitRepo, "_run",
                        lambda self, args, check=True: (calls.append(list(args)),
                                                        real_run(self, args, check))[1])
    SessionStore.from_home(home, git=False).merge_node_metadata_batch("s1", {"u1": {MARK: "w"}})
    chat(a, "s1", "u3", "a3")
    adds = [c for c in calls if "update-index" in c]
    assert len(adds) == 1
    staged = adds[0][adds[0].index("--") + 1:]
    assert sorted(staged) == ["history/00000000-u-u1.json", "history/00000004-u-u3.json",
                              "history/00000005-l-a3.json", "meta.json"]
    assert not any(c[:1] == ["commit"] for c in calls)  # plumbing: no stat of every file
    sdir = a.root / "s1"
    shown = GitRepo(sdir)._run(["show", "HEAD:history/00000000-u-u1.json"]).stdout
    assert json.loads(shown)["metadata"][MARK] == "w"
    assert GitRepo(sdir)._run(["status", "--porcelain"]).stdout == ""


def test_a_foreign_file_landing_while_we_hold_the_lock_is_not_adopted_as_ours(home, chat,
                                                                             monkeypatch):
    a = SessionStore.from_home(home, git=False)
    chat(a, "s1", "u1", "a1")
    hist = a.root / "s1" / "history"
    real_check = SessionStore._check_invariant

    def check_then_a_foreign_write(idx, sid, node):  # after our refresh, before our write
        doc = {"id": "r1", "created_at": 9.0, "seq": 90, "role": "user", "name": "",
               "input": None, "output": "side", "caller": "", "predecessor": None,
               "reads": [], "metadata": {"spawn_branch_root": True}}
        (hist / "00000090-u-r1.json").write_text(json.dumps(doc))  # no lock, no token
        real_check(idx, sid, node)

    monkeypatch.setattr(SessionStore, "_check_invariant", staticmethod(check_then_a_foreign_write))
    a.append_message("s1", {"id": "u2", "role": "user", "content": "q"})
    monkeypatch.setattr(SessionStore, "_check_invariant", staticmethod(real_check))
    assert a.get_node("s1", "r1").output == "side"  # the next read re-listed history/


def test_a_mark_never_records_the_index_as_synced(tmp_path, steady_clock, chat):
    store = SessionStore(tmp_path / "sessions", git=False)
    ids = chat(store, "s", *[f"n{i}" for i in range(6)])
    idx = store._index("s")
    store.get_branch("s")
    scans = idx.scans
    store.append_message("s", {"id": "n6", "role": "user", "content": "q"})
    store.get_branch("s")
    assert idx.scans == scans  # an append adopts its own write
    store.merge_node_metadata_batch("s", {ids[0]: {MARK: "w-1"}})
    store.get_branch("s")
    assert idx.scans == scans + 1  # DESIGN §3: after a mark the next read re-lists history/
    assert idx.parses == 0  # and it re-parses nothing this process wrote itself
    assert store.get_node("s", ids[0]).metadata[MARK] == "w-1"


def test_a_bulk_append_by_another_store_is_seen_even_when_the_mtime_cannot_tell(home, chat):
    a = SessionStore.from_home(home, git=False)
    chat(a, "s1", "u1", "a1")
    a.append_message("s1", {"id": "u2", "role": "user", "content": "q"})  # adopts its write
    hist = a.root / "s1" / "history"
    st = os.stat(hist)
    b = SessionStore.from_home(home, git=False)
    with b.bulk("s1") as bulk:
        bulk.append(Node(id="b1", created_at=5.0, role="llm", output="bulk", predecessor="u2"))
    os.utime(hist, ns=(st.st_atime_ns, st.st_mtime_ns))  # as if in the same clock tick
    os.utime(a.root / "s1" / "meta.json", ns=(st.st_atime_ns, st.st_mtime_ns))
    assert a.get_node("s1", "b1").output == "bulk"  # token and meta.json both tell
