"""What is particular to memory on a PostgreSQL home: where the bytes live (rows stamped
with a generation, a revision row per install), one identity for concurrent first users, a
mirror that follows other writers, rows that may not name paths outside memory, homes in one
database that never see each other."""

from __future__ import annotations

import threading

import pytest

from pgmemkit import Homes
from pgserver import home_url
from scriptorium.errors import CorruptFile
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.citations import cited_sources
from scriptorium.memory.pg_workspace import PgWorkspace
from scriptorium.postgres.connect import PgHome
from testkit import RecordingWriter


@pytest.fixture
def homes(pg_url, tmp_path):
    h = Homes("postgres", tmp_path, pg_url)
    yield h
    h.close()


def write_one(mem, sid: str = "s", text: str = "Deploys happen on Tuesdays after 14:00 UTC."):
    mem.store.create_session(sid, title="Deploys")
    mem.store.append_message(sid, {"id": f"{sid}0", "role": "user", "content": text})
    result = mem.write_session(sid)
    assert result.failure is None
    return result


def rows(mem, sql: str, *args):
    with mem.workspace.pg.connection() as conn:
        return conn.execute(sql, args).fetchall()


def test_an_install_is_one_revision_row_with_the_topic_files_it_wrote(homes):
    mem = homes.open(trigger_tokens=1)
    step = write_one(mem).steps[0]
    ((rev, message, changed),) = rows(mem, "SELECT rev, message, changed_files "
                                           "FROM memory_revisions")
    assert changed == step.changed_files and "1 turn(s) of s" in message
    history = rows(mem, "SELECT path FROM memory_file_history WHERE rev = %s", rev)
    assert [p for (p,) in history] == step.changed_files
    files = dict(rows(mem, "SELECT path, version FROM memory_files"))
    assert files[step.changed_files[0]] == rev  # the topic carries the install's generation
    assert any(p.startswith("sources/openprogram/") for p in files)  # the archive too


def test_concurrent_first_users_agree_on_one_workspace_id(homes):
    opened = [homes.open() for _ in range(4)]
    ids: list[str] = []
    barrier = threading.Barrier(len(opened))

    def first_use(mem):
        barrier.wait()
        ids.append(mem.workspace_id)

    threads = [threading.Thread(target=first_use, args=(m,)) for m in opened]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(ids) == 4 and len(set(ids)) == 1


def test_a_long_lived_workspace_sees_another_writers_install_when_it_takes_the_lock(homes):
    reader = homes.open()
    assert reader.workspace.topic_paths() == []
    write_one(homes.open(trigger_tokens=1))
    with reader.workspace.lock():
        assert len(reader.workspace.topic_paths()) == 1
    assert reader.status()["revision"] == homes.open().status()["revision"]


def test_a_row_naming_a_path_outside_memory_is_refused_and_nothing_is_written(homes, tmp_path):
    mem = homes.open()
    with mem.workspace.pg.connection() as conn:
        conn.execute("UPDATE memory_state SET generation = generation + 1")
        conn.execute("INSERT INTO memory_files (path, content, version) VALUES "
                     "('../../escape.md', 'x', 1000)")
    with pytest.raises(CorruptFile):
        homes.open()
    assert not list(tmp_path.parent.rglob("escape.md"))


def test_two_homes_in_one_database_never_see_each_others_memory(homes, pg_server_url):
    write_one(homes.open(trigger_tokens=1))
    with PgHome.open(home_url(pg_server_url)) as other:
        ws = PgWorkspace.open_home(other)
        assert ws.topic_paths() == [] and ws.workspace_id != homes.open().workspace_id
        ws.close()


class InterleavingWriter(RecordingWriter):
    """The embedded writer that, the first time it runs, lets another writer install a
    topic of the same name first (as a writer of another session on another host would)."""

    def __init__(self, other) -> None:
        super().__init__()
        self.other = other

    def write(self, request):
        if len(self.calls) == 0:
            write_one(self.other, "t")
        return super().write(request)


def test_an_install_whose_topic_moved_meanwhile_is_written_again_on_a_fresh_stage(homes):
    other = homes.open(trigger_tokens=1)
    writer = InterleavingWriter(other)
    mem = homes.open(writer, trigger_tokens=1)
    result = write_one(mem, "s", "Deploys happen on Tuesdays after review.")
    assert len(writer.calls) == 2, "the stale install should have been written again"
    assert result.steps[0].marked == ["s0"]
    reader = homes.open()
    (path,) = reader.workspace.topic_paths()  # both sessions' claims, in one topic
    assert cited_sources(reader.workspace) == {"openprogram/s/s0", "openprogram/t/t0"}
    assert reader.verify().ok


def test_writers_of_different_sessions_install_at_once_and_lose_nothing(homes):
    sessions = [f"s{i}" for i in range(4)]
    opened = [homes.open(trigger_tokens=1) for _ in sessions]
    for mem, sid in zip(opened, sessions):
        mem.store.create_session(sid, title=f"Topic {sid}")
        for k in range(3):
            mem.store.append_message(sid, {"id": f"{sid}-{k}", "role": "user",
                                           "content": f"Fact {k} of {sid}: value {k}."})
    failures: list = []
    barrier = threading.Barrier(len(opened))

    def run(mem, sid):
        barrier.wait()
        failures.append(mem.write_session(sid).failure)

    threads = [threading.Thread(target=run, args=pair) for pair in zip(opened, sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert failures == [None] * len(sessions)
    reader = homes.open()
    every = {f"openprogram/{sid}/{sid}-{k}" for sid in sessions for k in range(3)}
    assert cited_sources(reader.workspace) == every
    order = reader.workspace.load_runtime().creation_order  # merged, not overwritten:
    blocks = {block.id for _, block in TopicCatalog.of(reader.workspace).refresh().blocks()}
    assert blocks <= set(order) and len(set(order.values())) == len(order)
    assert reader.verify().ok


def test_a_transaction_hook_runs_inside_the_write_and_a_failing_one_undoes_it(homes):
    mem = homes.open(trigger_tokens=1)
    seen: list[list[str]] = []

    def index(ws, writes, conn):  # a derived table kept in step (what search does)
        seen.append(sorted(writes))
        assert conn.execute("SELECT count(*) FROM memory_files WHERE path = ANY(%s)",
                            (sorted(writes),)).fetchone()[0] == len(writes)

    mem.workspace.add_transaction_hook(index)
    write_one(mem)
    assert any(p.startswith("sources/") for p in seen[0])      # the archive
    assert any(p.startswith("topics/") for p in seen[-1])      # the install
    broken = homes.open(trigger_tokens=1)

    def fail(ws, writes, conn):
        if any(p.startswith("topics/") for p in writes):
            raise RuntimeError("index unavailable")

    broken.workspace.add_transaction_hook(fail)
    broken.store.append_message("s", {"id": "s1", "role": "user", "content": "More deploys."})
    before = rows(broken, "SELECT count(*) FROM memory_revisions")
    assert broken.write_session("s").failure is not None
    assert rows(broken, "SELECT count(*) FROM memory_revisions") == before
    assert [r.node_id for r in broken.pending("s")] == ["s1"]


def test_the_mirror_a_killed_process_left_is_removed_by_the_next_opener(homes):
    import os
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    left = Path(tempfile.mkdtemp(prefix=f"scriptorium-pg-{dead}-"))
    (left / "memory").mkdir()
    mine = Path(tempfile.mkdtemp(prefix=f"scriptorium-pg-{os.getpid()}-"))
    try:
        mem = homes.open()
        assert not left.exists() and mine.exists()
        assert mem.workspace.root.parent.name.startswith(f"scriptorium-pg-{os.getpid()}-")
    finally:
        mine.rmdir()
