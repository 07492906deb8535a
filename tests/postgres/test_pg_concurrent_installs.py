"""What concurrent writers of one PostgreSQL home share, and what they no longer queue on.

An install ranks the blocks it creates in rows of their own (``memory_block_order``), never
by rewriting the one runtime-counters row every other install would also rewrite (and lock);
readers still see one counters file with the whole creation order. An older home's order
(kept in that row) survives the upgrade and later ranks continue after it. An install refused
because another writer's install moved its topic is redone, and the job says how often.

What a step costs the other writers: its archived frames commit with its install (one
database transaction, one generation), and a step that installs nothing still archives its
batch as it ends. Each install stores the catalog summaries of the topic files it wrote, so
another writer's mirror takes them instead of parsing those files, and only for the exact
version they describe; they commit in the install's own database transaction, so no other
worker ever sees a topic without its summary.

What a writer's mirror holds: only what its jobs touched. A write step never pulls the
archive files of other sessions: they stay in the database until something here reads one
(then that one file is fetched), so a job's cost does not grow with how many other workers
archived; a walk of the whole archive (status, a home copy) pulls them all. The archive's
case-folding collision check answers from an index of every path the database holds, so a
path that collides with a file this mirror never fetched is still refused."""

from __future__ import annotations

import pytest

from pgmemkit import Homes
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.pg_workspace import RUNTIME_FILE
from scriptorium.memory.sources.archive import SourcePathCollision
from scriptorium.memory.sources.model import SourceRecord
from scriptorium.memory.work import MemoryJobs
from scriptorium.memory.writers.base import WriterAudit
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.postgres.connect import PgHome
from scriptorium.postgres.jobs import Job


@pytest.fixture
def homes(pg_url, tmp_path):
    h = Homes("postgres", tmp_path, pg_url)
    yield h
    h.close()


def say(mem, sid: str, title: str, *texts: str) -> None:
    mem.store.create_session(sid, title=title)
    for k, text in enumerate(texts):
        mem.store.append_message(sid, {"id": f"{sid}-{k}", "role": "user", "content": text})


def rows(mem, sql: str, *args):
    with mem.workspace.pg.connection() as conn:
        return conn.execute(sql, args).fetchall()


def blocks_of(mem) -> set[str]:
    return {block.id for _, block in TopicCatalog.of(mem.workspace).refresh().blocks()}


def test_an_install_ranks_its_blocks_in_rows_of_their_own_not_in_the_counters_row(homes):
    mem = homes.open(trigger_tokens=1)
    say(mem, "a", "Venue", "The venue is the river hall; the budget is 50 thousand euros.")
    assert mem.write_session("a").failure is None
    before = rows(mem, "SELECT version FROM memory_files WHERE path = %s", RUNTIME_FILE)
    say(mem, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    assert mem.write_session("b").failure is None
    # the second install created blocks, yet the shared counters row was not written again
    assert rows(mem, "SELECT version FROM memory_files WHERE path = %s", RUNTIME_FILE) == before
    ranked = dict(rows(mem, "SELECT block_id, rank FROM memory_block_order"))
    reader = homes.open()
    assert blocks_of(reader) <= set(ranked)
    assert len(set(ranked.values())) == len(ranked)
    assert reader.workspace.load_runtime().creation_order == ranked  # one file for readers
    assert reader.verify().ok


def test_an_older_homes_creation_order_survives_the_upgrade_and_ranks_continue_after_it(
        homes, pg_url):
    mem = homes.open(trigger_tokens=1)
    state = mem.workspace.load_runtime()
    state.creation_order = {"0a0a0a0a": 0, "0b0b0b0b": 7}
    mem.workspace.save_runtime(state)
    with PgHome.open(pg_url) as pg, pg.connection() as conn:  # as a home made before step 2
        conn.execute("DROP TABLE memory_block_order; DROP SEQUENCE memory_block_rank;"
                     " DROP TABLE memory_topic_summaries;"
                     " UPDATE schema_version SET version = 1 WHERE component = 'work'")
    upgraded = homes.open(trigger_tokens=1)  # opening migrates
    say(upgraded, "s", "Venue", "The venue is the river hall; the budget is 50 thousand euros.")
    assert upgraded.write_session("s").failure is None
    order = homes.open().workspace.load_runtime().creation_order
    assert order["0a0a0a0a"] == 0 and order["0b0b0b0b"] == 7
    created = blocks_of(upgraded)
    assert created and all(order[b] > 7 for b in created)
    assert len(set(order.values())) == len(order)


class LetsAnotherInstallFirst(EmbeddedWriter):
    """The embedded writer, except that after its first run another writer installs into
    the same topic before this one commits (what a concurrent worker does at any moment)."""

    def __init__(self, first) -> None:
        super().__init__()
        self.first = first

    def write(self, request):
        audit = super().write(request)
        first, self.first = self.first, None
        if first is not None:
            first()
        return audit


def test_an_install_whose_topic_moved_is_redone_and_the_job_counts_the_redo(homes):
    other = homes.open(trigger_tokens=1)
    say(other, "b", "Venue", "The caterer confirms the vegetarian lunch on Friday.")
    mem = homes.open(LetsAnotherInstallFirst(lambda: other.write_session("b")),
                     trigger_tokens=1)
    say(mem, "a", "Venue", "The venue is the river hall; the budget is 50 thousand euros.")
    with mem.workspace.pg.connection() as conn:
        seq = conn.execute("SELECT last_seq FROM work_queue WHERE session_id = 'a'").fetchone()[0]
    outcome = MemoryJobs(mem)(Job("a", int(seq), boundary=True))
    assert outcome.failure is None
    assert outcome.detail["redos"] == 1  # refused once (CONCURRENT_UPDATE), then redone
    assert sorted(outcome.detail["marked"]) == ["a-0"]
    reader = homes.open()
    assert reader.pending("a") == [] and reader.pending("b") == []
    assert len(reader.workspace.topic_paths()) == 1  # both sessions' claims, one topic
    assert reader.verify().ok


def test_a_write_step_on_a_database_home_never_waits_for_the_disk_for_its_mirror(
        homes, tmp_path, monkeypatch):
    import os

    from pgmemkit import Homes as Both

    synced: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    text = "The venue is the river hall; the budget is 50 thousand euros."
    directory = Both("directory", tmp_path / "d").open(trigger_tokens=1)
    say(directory, "s", "Venue", text)
    synced.clear()
    assert directory.write_session("s").failure is None
    assert synced  # the directory home's files are memory itself: flushed to disk
    mem = homes.open(trigger_tokens=1)
    say(mem, "s", "Venue", text)
    synced.clear()
    assert mem.write_session("s").failure is None
    assert synced == []  # the mirror is a cache of the database: nothing to flush
    assert homes.open().pending("s") == []


def generation(mem) -> int:
    return rows(mem, "SELECT generation FROM memory_state")[0][0]


def test_a_write_step_archives_and_installs_in_one_database_transaction(homes):
    mem = homes.open(trigger_tokens=1)
    say(mem, "a", "Venue", "The venue is the river hall; the budget is 50 thousand euros.")
    before = generation(mem)
    assert mem.write_session("a").failure is None
    [(rev,)] = rows(mem, "SELECT rev FROM memory_revisions")
    assert generation(mem) == before + 1 == rev
    # the batch's frames carry the install's own generation: they committed together
    versions = {v for (v,) in rows(mem, "SELECT version FROM memory_files WHERE "
                                        "starts_with(path, 'sources/')")}
    assert versions == {rev}


class WritesNothing(EmbeddedWriter):
    def write(self, request):
        return WriterAudit(self.name, summary="nothing worth keeping")


def test_a_step_that_installs_nothing_still_archives_its_batch(homes):
    mem = homes.open(WritesNothing(), trigger_tokens=1)
    say(mem, "a", "Venue", "The venue is the river hall; the budget is 50 thousand euros.")
    result = mem.write_session("a")
    assert result.failure is not None  # WRITER_NO_PROGRESS: nothing installed, nothing marked
    assert rows(mem, "SELECT count(*) FROM memory_revisions") == [(0,)]
    archived = rows(mem, "SELECT content FROM memory_files WHERE starts_with(path, 'sources/')")
    assert archived and any(b"river hall" in bytes(c) for (c,) in archived)


def test_another_writers_topics_reach_a_mirror_as_stored_summaries_not_parses(homes):
    first = homes.open(trigger_tokens=1)
    second = homes.open(trigger_tokens=1)  # opened first: everything below reaches it later
    say(first, "a", "Venue", "The venue is the river hall; the budget is 50 thousand euros.")
    assert first.write_session("a").failure is None
    say(second, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    assert second.write_session("b").failure is None
    [path] = [p for p in TopicCatalog.of(first.workspace).paths()]
    theirs = TopicCatalog.of(second.workspace)
    assert theirs.shared == 1 and theirs.parses == 0
    mine = TopicCatalog.of(first.workspace).refresh()
    assert theirs.summary(path).blocks == mine.summary(path).blocks
    assert theirs.summary(path).sha == mine.summary(path).sha
    # a version no install summarised (here: the same bytes, stored again by hand) is parsed
    with second.workspace.pg.connection() as conn:
        g = conn.execute("UPDATE memory_state SET generation = generation + 1 "
                         "RETURNING generation").fetchone()[0]
        conn.execute("UPDATE memory_files SET version = %s WHERE path = %s", (g, path))
    second.workspace.refresh()
    assert theirs.refresh().parses == 1 and theirs.shared == 1
    assert theirs.summary(path).blocks == mine.summary(path).blocks
    assert second.verify().ok


VENUE = "The venue is the river hall; the budget is 50 thousand euros."


def mirror_files(mem, top: str) -> list[str]:
    """The files under ``top`` ("sources", "topics") the mirror holds (workspace-relative)."""
    root = mem.workspace.root
    return sorted(p.relative_to(root).as_posix() for p in (root / top).rglob("*.md"))


def db_files(mem, top: str, *, live_only: bool = False) -> list[str]:
    """The files under ``top`` the database holds (``live_only``: not deleted ones)."""
    live = " AND content IS NOT NULL" if live_only else ""
    with mem.workspace.pg.connection() as conn:
        return [r[0] for r in conn.execute("SELECT path FROM memory_files WHERE starts_with("
                                           f"path, %s){live} ORDER BY path",
                                           (top + "/",)).fetchall()]


@pytest.mark.parametrize("others", [1, 4])
def test_a_write_step_fetches_only_its_own_sessions_archive_however_many_others_wrote(
        homes, others):
    first = homes.open(trigger_tokens=1)
    second = homes.open(trigger_tokens=1)  # its mirror is older than everything below
    for k in range(others):
        say(first, f"a{k}", f"Venue {k}", f"{VENUE} Hall {k}.")
        assert first.write_session(f"a{k}").failure is None
    say(second, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    assert second.write_session("b").failure is None
    # the topics of the others arrived as summaries; their archive files did not
    assert TopicCatalog.of(second.workspace).shared == others
    assert len(db_files(second, "sources")) == others + 1
    [own] = mirror_files(second, "sources")  # its own session's file, none of the others'
    assert own in db_files(second, "sources") and own not in mirror_files(first, "sources")
    assert second.workspace.fetched_archive == 0  # nothing it read was elsewhere
    # a reader outside a write step (verify) sees the whole archive: the mirror completes
    assert second.verify().ok
    assert mirror_files(second, "sources") == db_files(second, "sources")


def test_a_frame_another_writer_archived_is_fetched_when_read_and_only_that_file(homes):
    first = homes.open(trigger_tokens=1)
    second = homes.open(trigger_tokens=1)
    for sid in ("a0", "a1"):
        say(first, sid, f"Venue {sid}", f"{VENUE} ({sid})")
        assert first.write_session(sid).failure is None
    say(second, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    assert second.write_session("b").failure is None  # a step: the others' files noted only
    wanted = next(p for p in db_files(first, "sources") if p in mirror_files(first, "sources")
                  and p.endswith("a0.md"))
    frame = first.workspace.sources.file_status(wanted).frames[0]
    ws = second.workspace
    assert wanted not in mirror_files(second, "sources")
    before = ws.fetched_archive
    ws._local.step = True  # read as a write step reads (the step's lock is not needed here)
    try:
        assert ws.sources.lookup(frame.source_id).text == frame.text
    finally:
        ws._local.step = False
    assert ws.fetched_archive - before == 1
    assert wanted in mirror_files(second, "sources")
    assert not any(p.endswith("a1.md") for p in mirror_files(second, "sources"))


def test_an_archive_path_colliding_with_a_file_the_mirror_never_fetched_is_refused(homes):
    first = homes.open(trigger_tokens=1)
    second = homes.open(trigger_tokens=1)
    say(first, "Mixed", "Venue", VENUE)
    assert first.write_session("Mixed").failure is None
    [theirs] = db_files(first, "sources")
    provider = theirs.split("/")[1]
    ws = second.workspace
    with ws.step_lock("mixed"):  # a write step: the other session's file is not pulled
        assert mirror_files(second, "sources") == []
        with pytest.raises(SourcePathCollision):
            ws.sources.archive([SourceRecord(provider, "mixed", "m0", "user", "Lunch.")])
    assert db_files(second, "sources") == [theirs]  # nothing of the refused batch was archived


def test_an_install_stores_its_topic_summaries_in_its_own_database_transaction(homes):
    mem = homes.open(trigger_tokens=1)
    seen: list[dict[str, int]] = []

    def look(ws, writes, conn) -> None:  # runs inside the install's transaction
        topics = [rel for rel in writes if rel.startswith("topics/")]
        if topics:
            seen.append(dict(conn.execute(
                "SELECT path, version FROM memory_topic_summaries WHERE path = ANY(%s)",
                (topics,)).fetchall()))

    mem.workspace.add_transaction_hook(look)
    say(mem, "a", "Venue", VENUE)
    assert mem.write_session("a").failure is None
    with mem.workspace.pg.connection() as conn:
        files = dict(conn.execute("SELECT path, version FROM memory_files WHERE "
                                  "starts_with(path, 'topics/')").fetchall())
    assert seen == [files] and files


def test_an_install_summarises_each_topic_it_writes_once_for_the_database_and_the_catalog(
        homes, monkeypatch):
    """The summary stored with the install (for the other workers) is the one this worker's
    catalog learns: the topic's blocks are not summarised (their footnotes resolved) twice."""
    from scriptorium.memory import catalog as catalog_mod, pg_catalog as pg_catalog_mod

    mem = homes.open(trigger_tokens=1)
    TopicCatalog.of(mem.workspace).refresh()
    summarised: list[str] = []
    for module in (catalog_mod, pg_catalog_mod):
        def counting(doc, *args, _real=module.summarize, **kw):
            summarised.append(doc.path)
            return _real(doc, *args, **kw)

        monkeypatch.setattr(module, "summarize", counting)
    say(mem, "a", "Venue", VENUE)
    assert mem.write_session("a").failure is None
    with mem.workspace.pg.connection() as conn:
        stored = [r[0] for r in conn.execute("SELECT path FROM memory_topic_summaries")]
    assert stored and sorted(summarised) == sorted(stored)
    learnt = TopicCatalog.of(mem.workspace).summary(stored[0])
    assert learnt is not None and learnt.fp != (0, 0, 0, 0)  # with its mirror file's fingerprint


def test_a_mirror_just_opened_pulls_no_archive_file_and_a_walk_of_the_archive_pulls_all(homes):
    first = homes.open(trigger_tokens=1)
    for sid in ("a0", "a1", "a2"):
        say(first, sid, f"Venue {sid}", f"{VENUE} ({sid})")
        assert first.write_session(sid).failure is None
    late = homes.open(trigger_tokens=1)  # a replacement worker: opened after the writes
    assert mirror_files(late, "sources") == [] and late.workspace.fetched_archive == 0
    frames = list(late.workspace.sources.iter_frames())  # status, verify: the whole archive
    assert sorted(f.source_id for f in frames) == sorted(
        f.source_id for f in first.workspace.sources.iter_frames())
    assert mirror_files(late, "sources") == db_files(first, "sources")
    assert late.workspace.fetched_archive == 3
