"""The PostgreSQL BM25 ranking read from postings with a candidate cut: the same top k as
the SQLite index whatever the cut depth (generated corpora), the cut taken when it is sure
and the full ranking when it is not, and postings that always match the documents."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scriptorium.memory.search import pg_query, search
from scriptorium.memory.search.index import SearchIndex
from scriptorium.memory.search.pg_index import PgSearchIndex
from scriptorium.memory.search.pg_query import ranked_rows
from scriptorium.memory.search.pg_source import DirectorySource
from scriptorium.memory.search.query import bm25_rows, make_filters, match_expression
from scriptorium.postgres.connect import PgHome

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from search_support import archive, open_ws, write_offsite, write_paragraphs  # noqa: E402

WORDS = ["alpha", "beta", "gamma", "delta", "running", "runs", "the", "café", "x1"]
TS = "2026-01-01T00:00:00+00:00"


@pytest.fixture
def pg(pg_url):
    with PgHome.open(pg_url) as home:
        yield home


def corpus(ws, claims: list[list[str]]) -> None:
    """``claims`` in two topics, each citing an archived turn holding the same words."""
    ids = archive(ws, [("p", f"n{i}", "user", " ".join(c), TS) for i, c in enumerate(claims)])
    half = (len(claims) + 1) // 2
    for rel, part in (("topics/a.md", range(half)), ("topics/b/c.md", range(half, len(claims)))):
        if part:
            write_paragraphs(ws, rel, [[(" ".join(claims[i]).capitalize() + ".", [ids[i]],
                                         "2026-01-01")] for i in part])


def ranking(rows) -> list[tuple]:
    return [(r["path"], r["line"], r["claim"], round(score, 6)) for r, score in rows]


def both(ws, index: PgSearchIndex, query: str, limit: int, sources: bool):
    filters = make_filters(path_prefix=None, since=None, until=None, speaker=None,
                           include_sources=sources)
    sqlite = bm25_rows(SearchIndex.of(ws), match_expression(query), filters, limit)
    return ranking(ranked_rows(index, query, filters, limit)), ranking(sqlite)


@settings(max_examples=10, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claims=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=6),
                       min_size=2, max_size=14),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3))
def test_any_cut_depth_gives_the_sqlite_top_k(pg, tmp_path_factory, monkeypatch, claims, query):
    ws = open_ws(tmp_path_factory.mktemp("cut") / "memory")
    corpus(ws, claims)
    index = PgSearchIndex(pg, DirectorySource(ws))
    index.rebuild(True)
    search(ws, "alpha", include_sources=True)  # the SQLite index holds the turns too
    for depth in (1, 2, 4):
        monkeypatch.setattr(pg_query, "candidate_depth", lambda limit, d=depth: d)
        for limit in (1, 3):
            for sources in (False, True):
                ours, theirs = both(ws, index, " ".join(query), limit, sources)
                assert ours == theirs, (depth, limit, sources)


def fetches(monkeypatch) -> list[int]:
    """Count the round trips of the ranking (one per ranking query)."""
    calls: list[int] = []
    real = pg_query._fetch

    def counted(*args, **kw):
        calls.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(pg_query, "_fetch", counted)
    return calls


def test_the_cut_answers_in_one_query_when_no_cut_document_can_rank_in(pg, tmp_path,
                                                                     monkeypatch):
    ws = open_ws(tmp_path / "memory")
    corpus(ws, [["alpha"] * n + ["beta"] * (8 - n) for n in range(1, 9)])  # distinct scores
    index = PgSearchIndex(pg, DirectorySource(ws))
    index.rebuild(False)
    monkeypatch.setattr(pg_query, "candidate_depth", lambda limit: 3)
    calls = fetches(monkeypatch)
    ours, theirs = both(ws, index, "alpha", 2, False)
    assert ours == theirs and len(ours) == 2 and len(calls) == 1


def test_a_tie_at_the_cut_ranks_every_match_and_still_agrees(pg, tmp_path, monkeypatch):
    ws = open_ws(tmp_path / "memory")
    corpus(ws, [["alpha", "beta"]] * 6 + [["alpha", "alpha", "beta"]])  # six equal scores
    index = PgSearchIndex(pg, DirectorySource(ws))
    index.rebuild(False)
    monkeypatch.setattr(pg_query, "candidate_depth", lambda limit: 3)
    calls = fetches(monkeypatch)
    ours, theirs = both(ws, index, "alpha", 3, False)
    assert ours == theirs and len(ours) == 3 and len(calls) == 2  # the cut was not sure


def postings(pg: PgHome) -> tuple[set[tuple], set[tuple]]:
    """The stored postings, and the postings the documents' tsvectors call for."""
    with pg.connection() as conn:
        stored = set(conn.execute("SELECT lexeme, doc, kind, a, b, c, len FROM search_terms"))
        derived = set(conn.execute(
            "SELECT u.lexeme, d.id, d.kind, "
            "(SELECT count(*) FROM unnest(u.weights) w WHERE w = 'A'), "
            "(SELECT count(*) FROM unnest(u.weights) w WHERE w = 'B'), "
            "(SELECT count(*) FROM unnest(u.weights) w WHERE w NOT IN ('A', 'B')), d.len "
            "FROM search_docs d CROSS JOIN LATERAL unnest(d.tsv) u"))
    return stored, derived


def test_postings_follow_every_insert_rewrite_and_removal_of_documents(pg, tmp_path):
    ws = write_offsite(open_ws(tmp_path / "memory"))
    index = PgSearchIndex(pg, DirectorySource(ws))
    index.attach(ws)
    index.rebuild(True)
    stored, derived = postings(pg)
    assert stored == derived and len(stored) > 50
    ids = archive(ws, [("s", "n9", "user", "Porto has trains", TS)])
    write_paragraphs(ws, "topics/new.md", [[("Porto has trains.", ids, "2026-05-09")]])
    offsite = Path(ws.root) / "topics/projects/lisbon-offsite.md"
    offsite.write_text(offsite.read_text().replace("Lisbon", "Porto"))  # a hand edit
    (Path(ws.root) / "topics/infrastructure/production.md").unlink()
    index.refresh(("topic", "source"))
    stored2, derived2 = postings(pg)
    assert stored2 == derived2 and stored2 != stored
    with pg.connection() as conn:
        assert not conn.execute("SELECT 1 FROM search_docs WHERE path LIKE '%production%'"
                                ).fetchall()
    assert [h.text for h in pg_query.pg_search(index, "porto trains")][0] == "Porto has trains."


def test_homes_sharing_a_database_never_wait_on_each_others_file_locks(pg_server_url,
                                                                      tmp_path):
    from pgserver import home_url

    ws = write_offsite(open_ws(tmp_path / "memory"))
    rel = "topics/infrastructure/production.md"
    with PgHome.open(home_url(pg_server_url)) as one, PgHome.open(home_url(pg_server_url)) as two:
        first, second = (PgSearchIndex(h, DirectorySource(ws)) for h in (one, two))
        done = threading.Event()
        with one.connection() as conn:
            first.update([rel], conn=conn)  # holds the file's lock until this block ends
            worker = threading.Thread(target=lambda: (second.update([rel]), done.set()))
            worker.start()
            assert done.wait(120), "the other home waited on this home's lock"
        worker.join()


def test_a_home_indexed_before_postings_existed_gets_them_on_upgrade(pg_url, tmp_path):
    ws = write_offsite(open_ws(tmp_path / "memory"))
    with PgHome.open(pg_url) as pg:
        index = PgSearchIndex(pg, DirectorySource(ws))
        index.rebuild(True)
        before = [(h.path, h.line, h.claim, h.score) for h in
                  pg_query.pg_search(index, "offsite budget people", include_sources=True)]
        stored, _ = postings(pg)
        with pg.connection() as conn:  # back to the search schema of the release before
            conn.execute("DROP TABLE search_terms, search_vectors")
            conn.execute("UPDATE schema_version SET version = 1 WHERE component = 'search'")
    with PgHome.open(pg_url) as pg:  # opening upgrades the schema
        assert postings(pg)[0] == stored
        index = PgSearchIndex(pg, DirectorySource(ws))
        assert [(h.path, h.line, h.claim, h.score) for h in pg_query.pg_search(
            index, "offsite budget people", include_sources=True)] == before
