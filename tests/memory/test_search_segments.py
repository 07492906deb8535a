"""Where the search index puts a write's postings (segments.py): sizes and segment lists as
FTS5 records them, never time. Documents go straight into the index's FTS5 table here, as
the index's build and writes put them, without topics around them."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scriptorium.memory.search import segments
from scriptorium.memory.search.indexfile import open_index
from scriptorium.memory.search.rows import FTS_INSERT

WORDS = [f"w{n}" for n in range(40)] + ["kiln", "glaze", "fired", "lisbon", "alfama"]


def values(rowid: int, words: list[str]) -> tuple:
    return (rowid, " ".join(words), "topics notes", "2026-09-01", "")


def build(conn: sqlite3.Connection, docs: list[tuple], hold: int) -> None:
    """What SearchIndex does for a build: merges paused, all but the last ``hold`` inserted,
    then its end (optimize, lift, the tail)."""
    conn.execute("BEGIN IMMEDIATE")
    segments.pause_merges(conn)
    conn.executemany(FTS_INSERT, docs[:len(docs) - hold])
    segments.finish_writes(conn, building=True, documents=len(docs), held=docs[len(docs) - hold:])
    conn.execute("COMMIT")


def write(conn: sqlite3.Connection, docs: list[tuple]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(FTS_INSERT, docs)
    segments.finish_writes(conn, building=False, documents=len(docs), held=[])
    conn.execute("COMMIT")
    segments.give_back(conn)


def ranked(conn: sqlite3.Connection, query: str) -> list[tuple[int, float]]:
    return [(r[0], round(r[1], 9)) for r in conn.execute(
        "SELECT rowid, bm25(fts) FROM fts WHERE fts MATCH ? ORDER BY rank, rowid", (query,))]


def test_one_claim_writes_rewrite_the_tail_and_leave_the_builds_segment_as_it_is(tmp_path):
    conn = open_index(tmp_path / "search.sqlite")
    docs = [values(n, [WORDS[(n * k) % 45] for k in range(1, 12)]) for n in range(1, 3001)]
    build(conn, docs, segments.TAIL_DOCUMENTS)
    levels = segments.structure(conn)
    (big,) = [segment for level in levels[segments.LIFTED:] for segment in level]
    assert big[1] > 10 and all(not level for level in levels[1:segments.LIFTED])
    assert levels[0] == [(levels[0][0][0], 1)]  # the tail: one page
    for n in range(3001, 3041):
        write(conn, [values(n, ["kiln", "glaze", f"marker{n}", "fired"])])
        levels = segments.structure(conn)
        others = [segment for level in levels for segment in level if segment != big]
        assert big in levels[segments.LIFTED] or big in levels[segments.LIFTED + 1]
        assert [pages for _, pages in others] == [1]  # each write merged into the one tail
    assert [r for r, _ in ranked(conn, "marker3017")] == [3017]


@pytest.fixture
def small_pages(monkeypatch):
    """Pages and thresholds small enough that a few dozen documents fill several levels."""
    monkeypatch.setattr(segments, "OPTIMIZE_AFTER", 6)
    monkeypatch.setattr(segments, "BUILD_PAGE", 64)
    monkeypatch.setattr(segments, "TAIL_PAGE", 256)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=12), min_size=2,
                     max_size=60),
       build_share=st.floats(0.0, 1.0), hold=st.integers(0, 4),
       batch=st.integers(1, 5), queries=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_an_index_merged_write_by_write_answers_queries_as_one_built_at_once(
        small_pages, tmp_path_factory, docs, build_share, hold, batch, queries):
    """Whatever was built and whatever came in later writes (their segments merged into
    tails, tails into each other and into the build's segment), the index finds the same
    documents with the same BM25 scores as an index of the same documents built at once."""
    tmp: Path = tmp_path_factory.mktemp("segments")
    rows = [values(n, words) for n, words in enumerate(docs, start=1)]
    first = max(1, int(len(rows) * build_share))
    merged, at_once = open_index(tmp / "merged.sqlite"), open_index(tmp / "at-once.sqlite")
    build(merged, rows[:first], min(hold, first))
    for start in range(first, len(rows), batch):
        write(merged, rows[start:start + batch])
    build(at_once, rows, 0)
    for query in [*queries, " OR ".join(queries), " ".join(queries)]:
        assert ranked(merged, query) == ranked(at_once, query), query
    merged.close(), at_once.close()


def test_a_segment_list_it_cannot_read_leaves_writes_correct_only_bigger(tmp_path, monkeypatch):
    """A future FTS5 may record its segments in another form: the build is then not lifted
    and each write merges with a one-page budget, and every document is still found."""
    def unknown(conn):
        raise ValueError("FTS5 structure record lists another number of segments")

    monkeypatch.setattr(segments, "structure", unknown)
    conn = open_index(tmp_path / "search.sqlite")
    build(conn, [values(n, [WORDS[n % 45], "kiln"]) for n in range(1, 1201)],
          segments.TAIL_DOCUMENTS)
    for n in range(1201, 1211):
        write(conn, [values(n, ["teapot", f"marker{n}"])])
    assert len(ranked(conn, "kiln")) == 1200 and len(ranked(conn, "teapot")) == 10
    assert [r for r, _ in ranked(conn, "marker1205")] == [1205]
