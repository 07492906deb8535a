"""The PostgreSQL index fed from a PostgreSQL workspace's rows (``memory_files`` /
``memory_state``, the memory component's tables), updated inside the install's own database
transaction. The install here does what the PostgreSQL workspace's install does (one
transaction: the generation moves, the file rows are written) plus the one call it makes
to the index; the topics are the directory home's writer's output."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from scriptorium.memory.search import search
from scriptorium.memory.search.pg_index import PgSearchIndex
from scriptorium.memory.search.pg_query import pg_search
from scriptorium.memory.search.pg_source import PgFilesSource
from scriptorium.postgres.connect import PgHome

from test_pg_search import QUERIES, keys

from search_support import (archive, open_ws, write_offsite,  # noqa: E402  (path: test_pg_search)
                            write_paragraphs)

# The memory component's tables as the PostgreSQL workspace defines them; created here only
# when this build's migrations do not (IF NOT EXISTS: with them, nothing happens).
MEMORY_TABLES = """
CREATE TABLE IF NOT EXISTS memory_state (
    one boolean PRIMARY KEY DEFAULT true CHECK (one), generation bigint NOT NULL);
INSERT INTO memory_state (one, generation) VALUES (true, 0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS memory_files (
    path text PRIMARY KEY, content bytea, version bigint NOT NULL);
"""


@pytest.fixture
def home(pg_url, tmp_path):
    """A PostgreSQL home whose memory rows hold what the directory writer wrote; its index."""
    with PgHome.open(pg_url) as pg:
        with pg.connection() as conn:
            conn.execute(MEMORY_TABLES)
        files = write_offsite(open_ws(tmp_path / "memory"))
        workspace = SimpleNamespace(pg=pg, sources=files.sources)
        index = PgSearchIndex(pg, PgFilesSource(workspace))
        install(index, workspace, {rel: (files.root / rel).read_bytes()
                                   for rel in _memory_files(files.root)})
        yield SimpleNamespace(pg=pg, files=files, workspace=workspace, index=index)


def _memory_files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for top in ("topics", "sources")
                  for p in (root / top).rglob("*.md"))


def written(files: Any, rel: str, text: str, sources: list[str], when: str) -> bytes:
    """A topic as the directory home's transaction installs it (block ids and all)."""
    write_paragraphs(files, rel, [[(text, sources, when)]])
    return (files.root / rel).read_bytes()


def install(index: PgSearchIndex, workspace: Any, writes: dict[str, bytes | None], *,
            fail: bool = False) -> None:
    """One write as the PostgreSQL workspace makes it (generation, rows), then its
    transaction hooks: the index's."""
    with workspace.pg.connection() as conn:
        with conn.transaction():
            generation = conn.execute("UPDATE memory_state SET generation = generation + 1 "
                                      "RETURNING generation").fetchone()[0]
            conn.cursor().executemany(
                "INSERT INTO memory_files (path, content, version) VALUES (%s, %s, %s) ON "
                "CONFLICT (path) DO UPDATE SET content = EXCLUDED.content, version = "
                "EXCLUDED.version", [(rel, data, generation) for rel, data in writes.items()])
            index.transaction_hook(workspace, writes, conn)
            if fail:
                raise RuntimeError("the install failed after indexing")


def test_rows_of_a_pg_workspace_rank_as_the_sqlite_index_ranks_the_same_files(home):
    for include_sources in (False, True):
        for query in QUERIES:
            kw = dict(top_k=10, include_sources=include_sources)
            assert keys(pg_search(home.index, query, **kw)) == \
                keys(search(home.files, query, **kw)), query


def test_an_install_indexes_its_rows_in_its_own_transaction(home):
    pg_search(home.index, "offsite")
    walks = home.index.walks
    [sid] = archive(home.files, [("offsite", "o9", "user", "The dinner is at Tasca Azul",
                                  "2026-05-04T20:00:00+00:00")])
    topic = written(home.files, "topics/projects/dinner.md", "The team dinner is at Tasca Azul.",
                    [sid], "2026-05-04")
    install(home.index, home.workspace, {"topics/projects/dinner.md": topic})
    hits = pg_search(home.index, "Tasca Azul dinner")
    assert hits[0].path == "topics/projects/dinner.md" and hits[0].sources == [sid]
    assert home.index.walks == walks  # indexed with the rows: the query had nothing to do


def test_a_failed_install_leaves_no_trace_in_the_index(home):
    pg_search(home.index, "offsite")
    walks = home.index.walks
    [sid] = archive(home.files, [("offsite", "o8", "user", "Coaches leave at nine",
                                  "2026-05-05T09:00:00+00:00")])
    topic = written(home.files, "topics/projects/coaches.md", "Coaches leave the hotel at nine.",
                    [sid], "2026-05-05")
    with pytest.raises(RuntimeError):
        install(home.index, home.workspace, {"topics/projects/coaches.md": topic}, fail=True)
    assert pg_search(home.index, "coaches hotel") == []
    assert home.index.walks == walks  # index and memory rolled back together: still current


def test_rows_installed_without_the_index_are_found_by_the_next_query(home):
    pg_search(home.index, "offsite")
    walks = home.index.walks
    [sid] = archive(home.files, [("offsite", "o8", "user", "Coaches leave at nine",
                                  "2026-05-05T09:00:00+00:00")])
    topic = written(home.files, "topics/projects/coaches.md", "Coaches leave the hotel at nine.",
                    [sid], "2026-05-05")
    deleted = "topics/infrastructure/production.md"
    with home.pg.connection() as conn:  # an install that did not call the index
        generation = conn.execute("UPDATE memory_state SET generation = generation + 1 "
                                  "RETURNING generation").fetchone()[0]
        conn.execute("INSERT INTO memory_files VALUES (%s, %s, %s)",
                     ("topics/projects/coaches.md", topic, generation))
        conn.execute("UPDATE memory_files SET content = NULL, version = %s WHERE path = %s",
                     (generation, deleted))
    assert pg_search(home.index, "coaches hotel")[0].path == "topics/projects/coaches.md"
    assert pg_search(home.index, "pgbouncer production") == []  # the deleted topic is gone
    assert home.index.walks == walks + 1
