"""What a writer's mirror of a PostgreSQL home holds: only what its jobs touched.

A write step pulls the topic summaries other writers stored, never the archive files of
their sessions: those stay in the database until something here reads one (then that one
file is fetched), so a job's cost does not grow with how many other workers archived.
The case-folding collision check of the archive answers from an index of every path the
database holds, so a path that collides with a file this mirror never fetched is still
refused. The summaries a worker takes instead of parsing commit in the install's own
database transaction, so no other worker ever sees a topic without its summary."""

from __future__ import annotations

import pytest

from pgmemkit import Homes
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.sources.archive import SourcePathCollision
from scriptorium.memory.sources.model import SourceRecord

VENUE = "The venue is the river hall; the budget is 50 thousand euros."


@pytest.fixture
def homes(pg_url, tmp_path):
    h = Homes("postgres", tmp_path, pg_url)
    yield h
    h.close()


def say(mem, sid: str, title: str, *texts: str) -> None:
    mem.store.create_session(sid, title=title)
    for k, text in enumerate(texts):
        mem.store.append_message(sid, {"id": f"{sid}-{k}", "role": "user", "content": text})


def mirror_archive(mem) -> list[str]:
    """The archive files the mirror holds (workspace-relative)."""
    root = mem.workspace.root
    return sorted(p.relative_to(root).as_posix() for p in (root / "sources").rglob("*.md"))


def archive_rows(mem) -> list[str]:
    with mem.workspace.pg.connection() as conn:
        return [r[0] for r in conn.execute("SELECT path FROM memory_files WHERE starts_with("
                                           "path, 'sources/') ORDER BY path").fetchall()]


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
    assert len(archive_rows(second)) == others + 1
    [own] = mirror_archive(second)  # its own session's file, none of the others'
    assert own in archive_rows(second) and own not in mirror_archive(first)
    assert second.workspace.fetched_archive == 0  # nothing it read was elsewhere
    # a reader outside a write step (verify) sees the whole archive: the mirror completes
    assert second.verify().ok
    assert mirror_archive(second) == archive_rows(second)


def test_a_frame_another_writer_archived_is_fetched_when_read_and_only_that_file(homes):
    first = homes.open(trigger_tokens=1)
    second = homes.open(trigger_tokens=1)
    for sid in ("a0", "a1"):
        say(first, sid, f"Venue {sid}", f"{VENUE} ({sid})")
        assert first.write_session(sid).failure is None
    say(second, "b", "Catering", "Lunch is vegetarian; the caterer confirms on Friday.")
    assert second.write_session("b").failure is None  # a step: the others' files noted only
    wanted = next(p for p in archive_rows(first) if p in mirror_archive(first)
                  and p.endswith("a0.md"))
    frame = first.workspace.sources.file_status(wanted).frames[0]
    ws = second.workspace
    assert wanted not in mirror_archive(second)
    before = ws.fetched_archive
    ws._local.step = True  # read as a write step reads (the step's lock is not needed here)
    try:
        assert ws.sources.lookup(frame.source_id).text == frame.text
    finally:
        ws._local.step = False
    assert ws.fetched_archive - before == 1
    assert wanted in mirror_archive(second)
    assert not any(p.endswith("a1.md") for p in mirror_archive(second))


def test_an_archive_path_colliding_with_a_file_the_mirror_never_fetched_is_refused(homes):
    first = homes.open(trigger_tokens=1)
    second = homes.open(trigger_tokens=1)
    say(first, "Mixed", "Venue", VENUE)
    assert first.write_session("Mixed").failure is None
    [theirs] = archive_rows(first)
    provider = theirs.split("/")[1]
    ws = second.workspace
    with ws.step_lock("mixed"):  # a write step: the other session's file is not pulled
        assert mirror_archive(second) == []
        with pytest.raises(SourcePathCollision):
            ws.sources.archive([SourceRecord(provider, "mixed", "m0", "user", "Lunch.")])
    assert archive_rows(second) == [theirs]  # nothing of the refused batch was archived


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


def test_a_mirror_just_opened_pulls_no_archive_file_and_a_walk_of_the_archive_pulls_all(homes):
    first = homes.open(trigger_tokens=1)
    for sid in ("a0", "a1", "a2"):
        say(first, sid, f"Venue {sid}", f"{VENUE} ({sid})")
        assert first.write_session(sid).failure is None
    late = homes.open(trigger_tokens=1)  # a replacement worker: opened after the writes
    assert mirror_archive(late) == [] and late.workspace.fetched_archive == 0
    frames = list(late.workspace.sources.iter_frames())  # status, verify: the whole archive
    assert sorted(f.source_id for f in frames) == sorted(
        f.source_id for f in first.workspace.sources.iter_frames())
    assert mirror_archive(late) == archive_rows(first) and late.workspace.fetched_archive == 3
