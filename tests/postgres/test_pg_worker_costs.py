"""What a write step on a PostgreSQL home costs the other writers, and what it no longer does.

A step's archived frames commit with its install (one database transaction, one generation);
a step that installs nothing still archives its batch as it ends. Each install stores the
catalog summaries of the topic files it wrote, so another writer's mirror takes them instead
of parsing those files, and only for the exact version they describe."""

from __future__ import annotations

import pytest

from pgmemkit import Homes
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.writers.base import WriterAudit
from scriptorium.memory.writers.embedded import EmbeddedWriter


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
