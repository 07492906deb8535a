"""How the PostgreSQL search index is built: in bulk, with a fixed number of statements
whatever the number of documents (one COPY of the documents, one of the files, one
statement stemming and posting them all, the GIN index and the postings' key built once
afterwards), in tables that write no WAL; a server crash empties them and the next query
builds the index again, in bulk, with the same answers."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from scriptorium.memory.search.pg_index import PgSearchIndex
from scriptorium.memory.search.pg_query import pg_search
from scriptorium.memory.search.pg_source import DirectorySource
from scriptorium.postgres.connect import PgHome

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from search_support import archive, open_ws, write_offsite, write_paragraphs  # noqa: E402

INDEX_TABLES = ("search_docs", "search_files", "search_state", "search_terms")
TS = "2026-03-01T09:00:00+00:00"


@pytest.fixture
def pg(pg_url):
    with PgHome.open(pg_url) as home:
        yield home


def sent_statements(pg: PgHome, index: PgSearchIndex, trace: Path) -> list[str]:
    """The statements a rebuild sent the server (simple queries and extended-protocol
    executions, as libpq's trace of the connection shows them)."""
    from psycopg.pq import Trace

    with pg.connection() as conn, trace.open("w") as out:
        conn.pgconn.trace(out.fileno())
        conn.pgconn.set_trace_flags(Trace.SUPPRESS_TIMESTAMPS | Trace.REGRESS_MODE)
        try:
            index.rebuild(conn=conn)
        finally:
            conn.pgconn.untrace()
    sent, parsed = [], ""
    for line in trace.read_text().splitlines():
        fields = line.split("\t")
        if fields[0] != "F" or len(fields) < 4:
            continue
        if fields[2] == "Parse":
            parsed = fields[3].split('"')[3]
        elif fields[2] in ("Query", "Bind"):
            sent.append(fields[3].split('"')[1] if fields[2] == "Query" else parsed)
    return sent


def more_claims(ws, n: int) -> None:
    ids = archive(ws, [("more", f"m{i}", "user", f"Room {i} seats {i + 3} people", TS)
                       for i in range(n)])
    write_paragraphs(ws, "topics/rooms.md", [[(f"Room {i} seats {i + 3} people.", [ids[i]],
                                               "2026-03-01")] for i in range(n)])


def test_a_build_sends_a_fixed_set_of_statements_whatever_the_number_of_documents(
        pg, pg_server_url, tmp_path):
    from pgserver import home_url

    small = write_offsite(open_ws(tmp_path / "small"))
    large = write_offsite(open_ws(tmp_path / "large"))
    more_claims(large, 40)
    with PgHome.open(home_url(pg_server_url)) as other:
        sent = {name: sent_statements(home, PgSearchIndex(home, DirectorySource(ws)),
                                      tmp_path / f"{name}.trace")
                for name, home, ws in (("small", pg, small), ("large", other, large))}
        assert PgSearchIndex(other, DirectorySource(large)).count() == 5 + 40
    assert sent["small"] == sent["large"]  # nothing per document, per file or per posting
    statements = sent["large"]

    def count(start: str) -> int:
        return sum(s.startswith(start) for s in statements)

    assert count("COPY search_build") == 1  # every document, in one COPY
    assert count("COPY search_files") == 1
    assert count("WITH fb AS") == 1  # stemmed and posted in one statement
    assert count("CREATE INDEX search_docs_tsv") == 1  # the GIN index, once
    assert count("ALTER TABLE search_terms ADD") == 1  # the postings' key, once
    assert count("INSERT INTO search_docs") == count("INSERT INTO search_terms") == 0

def test_the_derived_index_writes_no_wal_and_the_embedding_cache_does(pg):
    with pg.connection() as conn:
        kinds = dict(conn.execute(
            "SELECT relname, relpersistence FROM pg_class WHERE relkind = 'r' AND "
            "relnamespace = current_schema()::regnamespace AND relname LIKE 'search%'"))
    assert kinds == {**{t: "u" for t in INDEX_TABLES}, "search_vectors": "p"}


def _hits(index: PgSearchIndex, query: str) -> list[tuple]:
    return [(h.path, h.line, h.claim, h.text, round(h.score, 6))
            for h in pg_search(index, query, include_sources=True)]


@pytest.fixture
def counted(monkeypatch) -> dict[str, int]:
    """How often the index was built in bulk and re-indexed file by file."""
    calls = {"rebuild": 0, "reindex": 0}
    rebuild, reindex = PgSearchIndex.rebuild, PgSearchIndex._reindex

    def counted_rebuild(self, *a, **kw):
        calls["rebuild"] += 1
        return rebuild(self, *a, **kw)

    def counted_reindex(self, *a, **kw):
        calls["reindex"] += 1
        return reindex(self, *a, **kw)

    monkeypatch.setattr(PgSearchIndex, "rebuild", counted_rebuild)
    monkeypatch.setattr(PgSearchIndex, "_reindex", counted_reindex)
    return calls


def test_a_first_query_keeps_what_the_install_hook_indexed_and_builds_nothing(pg, tmp_path,
                                                                             counted):
    ws = open_ws(tmp_path / "memory")
    index = PgSearchIndex(pg, DirectorySource(ws))
    index.attach(ws)
    write_offsite(ws)  # each install indexes its topics
    hooked = counted["reindex"]
    assert hooked and index.count("claim") == 5
    assert _hits(index, "offsite Lisbon budget")
    assert counted["rebuild"] == 0  # compared fingerprints, kept the hook's rows


def test_a_server_crash_empties_the_index_and_the_next_query_builds_it_again_in_bulk(
        tmp_path, counted):
    from pgserver import PgServer, home_url

    server = PgServer()
    try:
        url = home_url(server.start())
    except RuntimeError as exc:
        if os.environ.get("CI") == "true":
            raise
        pytest.skip(f"no PostgreSQL server: {exc}")
    try:
        ws = write_offsite(open_ws(tmp_path / "memory"))
        with PgHome.open(url) as pg:
            before = _hits(PgSearchIndex(pg, DirectorySource(ws)), "offsite Lisbon budget")
        assert before and counted == {"rebuild": 1, "reindex": 0}  # a new home: in bulk
        server.crash_restart()
        with PgHome.open(url) as pg:
            index = PgSearchIndex(pg, DirectorySource(ws))
            with pg.connection() as conn:  # what crash recovery left of the index: nothing
                assert [conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                        for t in INDEX_TABLES] == [0, 0, 0, 0]
            assert _hits(index, "offsite Lisbon budget") == before
            assert index.count() == 5 + 5
        assert counted == {"rebuild": 2, "reindex": 0}  # built again in bulk, not file by file
    finally:
        server.stop()
