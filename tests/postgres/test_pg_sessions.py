"""What the PostgreSQL session store adds to the shared behaviour (tests/sessions run on both
homes): head moves as rows and NOTIFY in the write's transaction, a write that fails leaves
nothing (not even in the store's cache), bulk appends in one transaction, and the refusals
that are particular to a home with no git history."""

from __future__ import annotations

import json

import pytest

from scriptorium.errors import InvalidInput
from scriptorium.sessions import AppendRefused, HeadRefused, Node, NodeNotFound
from scriptorium.sessions.pg_store import PgSessionStore


@pytest.fixture
def store(pg_url):
    s = PgSessionStore.open(pg_url)
    yield s
    s.close()


def _moves(store: PgSessionStore) -> list[tuple[str, str | None, str | None]]:
    with store.pg.connection() as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT session_id, old_head, new_head FROM head_moves ORDER BY seq")]


def test_every_head_move_is_a_row_and_a_notification_as_subscribers_hear_it(store):
    heard: list[tuple[str, str | None, str | None]] = []
    store.subscribe(lambda sid, old, new: heard.append((sid, old, new)))
    listener = store.pg.dedicated()
    try:
        listener.execute(f"LISTEN {store.channel}")
        store.create_session("s")
        store.append_message("s", {"id": "u1", "role": "user", "content": "Plan the offsite."})
        store.append_message("s", {"id": "a1", "role": "assistant", "content": "Lisbon."})
        store.retry("s", "a1", "Porto.", node_id="a1r")
        store.set_head("s", "a1")
        store.rewind("s", "a1")
        told = [json.loads(n.payload) for n in listener.notifies(timeout=5, stop_after=5)]
    finally:
        listener.close()
    assert heard == [("s", None, "u1"), ("s", "u1", "a1"), ("s", "a1", "a1r"),
                     ("s", "a1r", "a1"), ("s", "a1", "u1")]
    assert _moves(store) == heard
    assert [(t["session_id"], t["old"], t["new"]) for t in told] == heard
    assert [t["seq"] for t in told] == sorted({t["seq"] for t in told})


def test_a_refused_write_leaves_no_row_no_move_and_nothing_in_the_cache(store):
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
    with pytest.raises(AppendRefused):
        store.append_message("s", {"id": "u2", "role": "user", "content": "x",
                                   "predecessor": "ghost"})
    with pytest.raises(HeadRefused):
        store.set_head("s", store.compact("s", ["u1"], "said hi"))
    nodes = store.get_nodes("s")
    assert nodes[0].id == "u1" and len(nodes) == 2 and nodes[1].is_summary  # the compaction
    assert _moves(store) == [("s", None, "u1")] and store.head("s") == "u1"


def test_a_bulk_batch_is_one_transaction_all_or_nothing(store, pg_url):
    store.create_session("s")
    other = PgSessionStore.open(pg_url)
    try:
        with store.bulk("s") as bulk:
            for i in range(3):
                bulk.append(Node(id=f"n{i}", role="user" if i % 2 == 0 else "llm",
                                 output=f"t{i}", predecessor=f"n{i - 1}" if i else "ROOT"))
            bulk.set_head("n2")
            bulk.update_meta(title="imported", head_id="ignored")
            assert other.get_nodes("s") == []  # nothing is visible before the commit
        assert [n.id for n in other.get_nodes("s")] == ["n0", "n1", "n2"]
        assert other.head("s") == "n2" and other.get_meta("s")["title"] == "imported"
        with pytest.raises(AppendRefused, match="ghost"):
            with store.bulk("s") as bulk:
                bulk.append(Node(id="n3", role="user", output="x", predecessor="n2"))
                bulk.append(Node(id="n4", role="llm", output="y", predecessor="ghost"))
        assert [n.id for n in other.get_nodes("s")] == ["n0", "n1", "n2"]
        assert [n.id for n in store.get_nodes("s")] == ["n0", "n1", "n2"]  # cache dropped
        with store.bulk("s") as bulk:
            assert bulk.has("n2") and not bulk.append(Node(id="n2", role="llm", output="z"))
            with pytest.raises(NodeNotFound):
                bulk.set_head("nope")
    finally:
        other.close()
    assert _moves(store) == [("s", None, "n2")]


def test_a_mark_moves_neither_the_activity_clock_nor_the_head(store):
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
    meta = store.get_meta("s")
    store.merge_node_metadata_batch("s", {"u1": {"memory_written_scriptorium": "w-1"}})
    assert store.get_meta("s") == meta
    assert store.get_node("s", "u1").metadata == {"memory_written_scriptorium": "w-1"}
    assert _moves(store) == [("s", None, "u1")]


def test_there_is_no_git_history_on_a_postgresql_home(store):
    store.create_session("s")
    with pytest.raises(InvalidInput, match="no per-turn git history") as info:
        store.git_log("s")
    assert "\n" not in str(info.value)
    assert store.commit_turn("s", "import") is None and store.git is False


def test_two_homes_in_one_database_hold_separate_sessions(pg_server_url):
    from pgserver import home_url

    a = PgSessionStore.open(home_url(pg_server_url))
    b = PgSessionStore.open(home_url(pg_server_url))
    try:
        a.create_session("same")
        a.append_message("same", {"id": "u1", "role": "user", "content": "only in a"})
        b.create_session("same")
        assert b.get_nodes("same") == [] and a.channel != b.channel
    finally:
        a.close()
        b.close()


def test_another_store_follows_the_moves_in_order_and_is_woken_by_notify(store, pg_url):
    follower = PgSessionStore.open(pg_url)
    waker = follower.events.waker()
    try:
        reader = follower.events.reader(follower.events.last_seq())
        assert reader.poll() == [] and waker.notified
        store.create_session("s")
        store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
        waker.wait(60)  # ends on the NOTIFY, long before the timeout
        store.set_head("s", None)
        moves = reader.poll()
        assert [(m.session_id, m.old, m.new) for m in moves] == [("s", None, "u1"),
                                                                  ("s", "u1", None)]
        assert [m.seq for m in moves] == [moves[0].seq, moves[0].seq + 1] and reader.complete
        assert reader.poll() == []
    finally:
        waker.close()
        follower.close()


def _append_many(url: str, sid: str, n: int) -> None:
    s = PgSessionStore.open(url)
    s.create_session(sid)
    for i in range(n):
        s.append_message(sid, {"id": f"{sid}-{i}", "role": "user" if i % 2 == 0 else "assistant",
                               "content": "x"})
    s.close()


def test_a_reader_polling_while_two_processes_move_heads_sees_each_move_once_in_order(store,
                                                                                     pg_url):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    reader = store.events.reader(0)
    procs = [ctx.Process(target=_append_many, args=(pg_url, sid, 30)) for sid in ("a", "b")]
    for p in procs:
        p.start()
    seen = []
    while any(p.is_alive() for p in procs):
        seen += reader.poll()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    seen += reader.poll()
    assert [m.seq for m in seen] == list(range(1, 61)) and reader.complete
    for sid in ("a", "b"):
        news = [m.new for m in seen if m.session_id == sid]
        assert news == [f"{sid}-{i}" for i in range(30)]


def test_a_write_waiting_too_long_for_the_session_is_busy_and_changes_nothing(store, pg_url):
    from scriptorium.errors import ConcurrentUpdate

    store.create_session("s")
    holder = store.pg.dedicated(autocommit=False)  # another writer, mid-transaction
    try:
        holder.execute("SELECT 1 FROM sessions WHERE id = 's' FOR UPDATE")
        store.lock_timeout = 0.05
        with pytest.raises(ConcurrentUpdate, match="busy") as info:
            store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
        assert info.value.exit_code == 5 and "\n" not in str(info.value)
    finally:
        holder.close()
    assert store.get_nodes("s") == []
    store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})  # lock freed
    assert store.head("s") == "u1"


def test_what_json_cannot_hold_is_refused_in_one_line_and_nothing_is_stored(store):
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
    for call in (lambda: store.append_message("s", {"id": "a1", "role": "assistant",
                                                    "content": "x", "score": float("nan")}),
                 lambda: store.merge_node_metadata_batch("s", {"u1": {"w": float("inf")}}),
                 lambda: store.create_session("t", budget=float("nan"))):
        with pytest.raises(InvalidInput, match="NaN or Infinity") as info:
            call()
        assert "\n" not in str(info.value)
    assert [n.id for n in store.get_nodes("s")] == ["u1"]
    assert store.get_node("s", "u1").metadata == {} and not store.exists("t")


def test_a_home_damaged_by_hand_is_one_corrupt_file_line_not_a_traceback(store):
    from scriptorium.errors import CorruptFile

    store.create_session("s")
    with store.pg.connection() as conn:
        conn.execute("DROP TABLE nodes")
    fresh = PgSessionStore(store.pg)
    with pytest.raises(CorruptFile, match="nodes") as info:
        fresh.get_nodes("s")
    assert "\n" not in str(info.value) and info.value.exit_code == 4
    with pytest.raises(CorruptFile):
        fresh.append_message("s", {"id": "u1", "role": "user", "content": "hi"})


def test_a_refused_write_keeps_the_cache_and_a_rolled_back_one_drops_it(store):
    store.create_session("s")
    store.append_message("s", {"id": "u1", "role": "user", "content": "hi"})
    cached = store._indexes["s"]
    with pytest.raises(InvalidInput):
        store.append_message("s", {"id": "x", "role": "wizard", "content": "?"})
    assert store._indexes["s"] is cached  # nothing was written: no reload of the session
    with pytest.raises(AppendRefused):
        with store.bulk("s") as bulk:
            bulk.append(Node(id="a1", role="llm", output="ok", predecessor="u1"))
            bulk.append(Node(id="a2", role="llm", output="no", predecessor="ghost"))
    assert "s" not in store._indexes  # a1 was in the graph, not in the database
    assert [n.id for n in store.get_nodes("s")] == ["u1"]


def test_visiting_many_sessions_keeps_a_bounded_number_in_memory_and_reads_them_back(
        store, monkeypatch):
    from scriptorium.sessions import pg_store

    monkeypatch.setattr(pg_store, "MAX_OPEN_SESSIONS", 3)
    for s in range(8):
        store.create_session(f"s{s}")
        for i in range(3):
            store.append_message(f"s{s}", {"id": f"n{i}", "role": "user", "content": f"t{i}"})
    before = {f"s{s}": [n.to_json() for n in store.get_nodes(f"s{s}")] for s in range(8)}
    for s in range(8):
        store.line(f"s{s}")
        store.merge_node_metadata_batch(f"s{s}", {"n0": {"memory_written_scriptorium": "w-1"}})
    assert list(store._indexes) == ["s5", "s6", "s7"]
    assert {sid for sid, _ in store._lines} <= set(store._indexes)
    again = {f"s{s}": [n.to_json() for n in store.get_nodes(f"s{s}")] for s in range(8)}
    for sid, nodes in before.items():  # a session let go reads back the same (and its mark)
        assert [{**n, "metadata": {k: v for k, v in n["metadata"].items()
                                   if k != "memory_written_scriptorium"}}
                for n in again[sid]] == nodes
        assert again[sid][0]["metadata"]["memory_written_scriptorium"] == "w-1"


def test_visiting_many_sessions_keeps_no_thread_lock_nobody_holds(store):
    for s in range(40):
        store.create_session(f"s{s}")
        store.append_message(f"s{s}", {"id": "n0", "role": "user", "content": "t"})
        store.merge_node_metadata_batch(f"s{s}", {"n0": {"memory_written_scriptorium": "w-1"}})
        store.line(f"s{s}")
    assert len(store._tlocks) == 0  # 40 sessions written and read: none kept


def test_a_held_thread_lock_is_kept_and_still_excludes_other_threads(store):
    import threading

    store.create_session("s0")
    held, release = threading.Event(), threading.Event()
    appended: list[str] = []

    def hold() -> None:
        with store._tlock("s0"):
            held.set()
            release.wait(30)

    def append() -> None:
        store.append_message("s0", {"id": "late", "role": "user", "content": "t"})
        appended.append("late")

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(30)
    writer = threading.Thread(target=append)
    try:
        for s in range(1, 10):  # other sessions come and go meanwhile
            store.create_session(f"s{s}")
        assert list(store._tlocks) == ["s0"]
        assert not store._tlock("s0").acquire(blocking=False)  # the same lock, still held
        writer.start()
        writer.join(0.2)
        assert appended == []  # still waiting for the holder
    finally:
        release.set()
        holder.join()
        writer.join(30)
    assert appended == ["late"] and len(store._tlocks) == 0
