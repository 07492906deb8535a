"""Search on a PostgreSQL home: the same hits, filters and ranking as the SQLite BM25 index,
kept current by the install hook, against a real server (fixture ``pg_url``). Topics are
written by the directory home's own writer and transactions, then indexed from its files."""

from __future__ import annotations

import shutil
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from scriptorium.errors import InvalidInput
from scriptorium.memory.search import search
from scriptorium.memory.search.pg_index import PgSearchIndex
from scriptorium.memory.search.pg_query import pg_search
from scriptorium.memory.search.pg_source import DirectorySource
from scriptorium.memory.workspace import Workspace
from scriptorium.postgres.connect import PgHome

from testkit import OPENPROGRAM_STATE

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from branch_support import SID, falcon  # noqa: E402
from search_support import (archive, open_ws, write_offsite,  # noqa: E402
                            write_paragraphs)

SPEAKERS = {"o1": ("u-ana", "Ana"), "o2": ("u-ana", "Ana"), "d1": ("u-bo", "Bo")}
QUERIES = ["offsite Lisbon", "production database PostgreSQL", "budget euros", "twelve people",
           "deploy Tuesday", "the team in May", "pgbouncer port", "flights booked"]


@pytest.fixture
def pg(pg_url):
    with PgHome.open(pg_url) as home:
        yield home


@pytest.fixture
def offsite(tmp_path: Path) -> Workspace:
    return write_offsite(open_ws(tmp_path / "memory"), SPEAKERS)


@pytest.fixture(scope="module")
def shared(pg_server_url, tmp_path_factory):
    """One written workspace and its PostgreSQL index, for the tests that only read them.
    Both indexes hold the sources from the start: each indexes them lazily, at its first
    query that asks for them, and BM25's document count and mean length count them, so the
    tests must not depend on which of them ran first."""
    from pgserver import home_url

    ws = write_offsite(open_ws(tmp_path_factory.mktemp("shared") / "memory"), SPEAKERS)
    with PgHome.open(home_url(pg_server_url)) as home:
        index = index_of(home, ws)
        assert_same(ws, index, "offsite", include_sources=True)
        yield ws, index


def index_of(pg: PgHome, ws: Workspace, **kw) -> PgSearchIndex:
    index = PgSearchIndex(pg, DirectorySource(ws), **kw)
    index.attach(ws)
    return index


def keys(hits) -> list[tuple]:
    """What a hit is and where it ranks: its identity, its text and its score."""
    return [(h.kind, h.path, h.line, h.claim, h.source_id, h.text, h.sources, h.dates,
             h.headings, h.trusted, h.speaker, round(h.score, 4)) for h in hits]


def assert_same(ws: Workspace, index: PgSearchIndex, query: str, **kw) -> None:
    assert keys(pg_search(index, query, **kw)) == keys(search(ws, query, **kw)), (query, kw)


# -- the same answers as the SQLite index ------------------------------------------------------


def test_every_query_finds_the_same_hits_in_the_same_order_with_the_same_bm25_score(shared):
    ws, index = shared
    for include_sources in (False, True):
        for query in QUERIES:
            assert_same(ws, index, query, top_k=10, include_sources=include_sources)


def test_the_ts_rank_cd_ranking_finds_what_bm25_finds_in_its_own_order(shared):
    ws, index = shared
    for query in QUERIES:
        for include_sources in (False, True):
            kw = dict(top_k=200, include_sources=include_sources)
            bm25 = pg_search(index, query, **kw)
            ts = pg_search(index, query, ranking="ts_rank_cd", **kw)
            assert ts, query
            assert sorted(k[:5] for k in keys(ts)) == sorted(k[:5] for k in keys(bm25)), query


FILTERS = [
    dict(path_prefix="projects"), dict(path_prefix="topics/infrastructure/production.md"),
    dict(path_prefix="sources", include_sources=True),
    dict(since="2026-05", until="2026-05"), dict(since="2026-06"), dict(until="2025"),
    dict(speaker="ana"), dict(speaker="Bo", include_sources=True), dict(speaker="user"),
    dict(since="2026-05-03", until="2026-05-03", include_sources=True),
]


def test_path_date_and_speaker_filters_keep_what_they_keep_on_the_sqlite_index(shared):
    ws, index = shared
    query = "offsite budget production deploys flights people"
    everything = pg_search(index, query, top_k=20, include_sources=True)
    for kw in FILTERS:
        hits = pg_search(index, query, top_k=10, **kw)
        assert hits and len(hits) < len(everything), kw  # each filter keeps some, not all
        assert_same(ws, index, query, top_k=10, **kw)


def test_the_reference_systems_written_memory_ranks_the_same(pg, tmp_path):
    home = shutil.copytree(OPENPROGRAM_STATE / "written", tmp_path / "written")
    ws = Workspace.open(home / "memory")
    index = index_of(pg, ws)
    for query in ["offsite Lisbon", "budget", "deploy tuesday", "the people", "database"]:
        for include_sources in (False, True):
            assert_same(ws, index, query, top_k=5, include_sources=include_sources)


WORDS = ["alpha", "beta", "gamma", "delta", "running", "runs", "ran", "café", "cafe", "the",
         "naïve", "東京タワー", "2026", "x1"]


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(claims=st.lists(st.lists(st.sampled_from(WORDS), min_size=1, max_size=8),
                       min_size=1, max_size=6),
       query=st.lists(st.sampled_from(WORDS), min_size=1, max_size=4))
def test_bm25_scores_agree_with_sqlite_for_any_claims_and_query(pg, tmp_path_factory, claims,
                                                                  query):
    ws = open_ws(tmp_path_factory.mktemp("prop") / "memory")
    ids = archive(ws, [("p", f"n{i}", "user", " ".join(c), "2026-01-01T00:00:00+00:00")
                       for i, c in enumerate(claims)])
    write_paragraphs(ws, "topics/words.md", [[(" ".join(c).capitalize() + ".", [sid],
                                               "2026-01-01")]
                                             for c, sid in zip(claims, ids)])
    index = index_of(pg, ws)
    index.rebuild(False)
    assert_same(ws, index, " ".join(query), top_k=10)


def test_a_superseded_value_ranks_below_the_value_that_holds(pg, home):
    from scriptorium.config import load_settings
    from scriptorium.memory.writing import Memory

    mem = Memory(home, settings=load_settings(home))
    mem.store.create_session("s", title="Alerting")
    for i, (role, text) in enumerate([("user", "The alert threshold is 160 ms."),
                                      ("assistant", "The alert threshold is 160 ms, noted."),
                                      ("user", "Actually make it 150.")]):
        mem.store.append_message("s", {"id": f"n{i}", "role": role, "content": text})
    assert mem.write_session("s").failure is None
    index = index_of(pg, mem.workspace)
    hits = pg_search(index, "alert threshold 160", top_k=5)
    first_super = next(i for i, h in enumerate(hits) if "superseded" in h.text)
    holding = next(i for i, h in enumerate(hits) if "150" in h.text)
    assert holding < first_super
    assert keys(hits) == keys(search(mem.workspace, "alert threshold 160", top_k=5))


def test_a_reader_on_a_branch_gets_the_same_provenance_and_order(pg, home):
    mem = falcon(home)
    index = index_of(pg, mem.workspace)
    for head in (None, "a2", "a3"):
        for query in ("Falcon budget euros", "caterer Falcon dinner"):
            ours = pg_search(index, query, top_k=5, session=SID, head=head, store=mem.store)
            theirs = mem.search(query, top_k=5, session=SID, head=head)
            assert keys(ours) == keys(theirs)
            assert [h.provenance for h in ours] == [h.provenance for h in theirs]
    assert "160" in pg_search(index, "Falcon budget euros", session=SID, head="a2",
                              store=mem.store)[0].text


# -- kept current ------------------------------------------------------------------------------


def test_an_install_is_found_by_the_next_query_without_rereading_every_file(pg, offsite):
    index = index_of(pg, offsite)
    pg_search(index, "offsite")  # builds the index
    walks = index.walks
    [sid] = archive(offsite, [("offsite", "o9", "user", "The dinner is at Tasca Azul",
                               "2026-05-04T20:00:00+00:00")])
    write_paragraphs(offsite, "topics/projects/dinner.md",
                     [[("The team dinner is at Tasca Azul.", [sid], "2026-05-04")]])
    hits = pg_search(index, "Tasca Azul dinner")
    assert hits and hits[0].path == "topics/projects/dinner.md" and hits[0].sources == [sid]
    assert index.walks == walks  # the hook indexed it; the query trusted the install counter
    assert_same(offsite, index, "Tasca Azul dinner team", top_k=10)


def test_rewriting_a_topic_replaces_its_claims_and_keeps_the_rows_of_unchanged_ones(pg, offsite):
    index = index_of(pg, offsite)
    pg_search(index, "offsite")
    with pg.connection() as conn:
        before = dict(conn.execute("SELECT text, id FROM search_docs").fetchall())
    text = (offsite.root / "topics/infrastructure/production.md").read_text()
    from search_support import write_topic

    write_topic(offsite, "topics/infrastructure/production.md",
                text.replace("port 6432", "port 6543"), allowed=[])
    with pg.connection() as conn:
        after = dict(conn.execute("SELECT text, id FROM search_docs").fetchall())
    assert not any("6432" in t for t in after) and any("6543" in t for t in after)
    unchanged = [t for t in before if "6432" not in t]
    assert unchanged and all(after[t] == before[t] for t in unchanged)
    assert_same(offsite, index, "production port", top_k=10)


def test_a_failed_hook_never_fails_the_install_and_the_next_query_catches_up(pg, offsite,
                                                                            monkeypatch):
    index = index_of(pg, offsite)
    pg_search(index, "offsite")
    source = index.source

    def broken(rel):
        raise OSError("disk went away")

    monkeypatch.setattr(source, "documents", broken)
    [sid] = archive(offsite, [("offsite", "o8", "user", "Coaches leave at nine",
                               "2026-05-05T09:00:00+00:00")])
    result = write_paragraphs(offsite, "topics/projects/coaches.md",
                              [[("Coaches leave the hotel at nine.", [sid], "2026-05-05")]])
    assert result.changed_files == ["topics/projects/coaches.md"]
    monkeypatch.undo()
    walks = index.walks
    hits = pg_search(index, "coaches hotel")
    assert hits and hits[0].path == "topics/projects/coaches.md"
    assert index.walks == walks + 1  # the install counter was ahead: it compared fingerprints


def test_concurrent_updates_of_one_file_leave_it_indexed_once(pg, offsite):
    index = index_of(pg, offsite)
    index.rebuild(False)
    rel = "topics/projects/lisbon-offsite.md"
    errors: list[BaseException] = []

    def worker():
        try:
            for _ in range(5):
                index.update([rel])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    with pg.connection() as conn:
        counts = conn.execute("SELECT count(*), count(DISTINCT (line, claim)) FROM search_docs "
                              "WHERE file = %s", (rel,)).fetchone()
    assert counts[0] == counts[1] == 3


def test_an_index_built_with_another_configuration_is_rebuilt_by_the_next_query(pg, offsite):
    simple = index_of(pg, offsite, config="simple")
    assert pg_search(simple, "offsites") == []  # 'simple' does not stem: offsites != offsite
    assert simple.state()["config"] == "simple"
    stemmed = PgSearchIndex(pg, DirectorySource(offsite))
    hits = pg_search(stemmed, "offsites")
    assert hits and stemmed.state()["config"] == "scriptorium_stem"


def _rows(pg) -> tuple[list, list]:
    """Every document (its id too) and every posting, as stored."""
    with pg.connection() as conn:
        docs = conn.execute("SELECT id - min(id) OVER (), file, path, line, claim, text, "
                            "superseded, ranges::text, len, tsv::text FROM search_docs "
                            "ORDER BY id").fetchall()
        terms = conn.execute("SELECT t.lexeme, d.path, d.line, d.claim, t.kind, t.a, t.b, t.c, "
                             "t.len FROM search_terms t JOIN search_docs d ON d.id = t.doc "
                             "ORDER BY 1, 2, 3, 4").fetchall()
    return docs, terms


def test_a_rebuild_indexes_every_claim_and_turn_of_the_home(pg, offsite):
    index = index_of(pg, offsite)
    index.refresh(("topic", "source"))  # file by file, as writes index them
    by_update = _rows(pg)
    assert index.rebuild(True) == 5 + 5  # in bulk (COPY, stemmed and posted in the server)
    assert _rows(pg) == by_update  # the same rows, in the same order
    assert index.count("claim") == 5 and index.count("source") == 5
    assert index.rebuild() == 10  # sources were indexed before: still are


# -- refused -----------------------------------------------------------------------------------


def test_bad_arguments_are_refused_with_one_line_naming_the_problem(shared):
    _, index = shared
    for kw, words in [
        (dict(path_prefix="../etc"), "'..'"), (dict(since="2026-13"), "--since"),
        (dict(method="cosine"), "method"), (dict(top_k=0), "top_k"),
        (dict(head="a1"), "--session"), (dict(session="s"), "session store"),
    ]:
        with pytest.raises(InvalidInput) as err:
            pg_search(index, "offsite", **kw)
        assert words in str(err.value) and "\n" not in str(err.value), kw


# -- the seam a PostgreSQL workspace plugs into --------------------------------------------------


def test_a_workspace_carrying_a_pg_index_is_searched_and_kept_current_through_the_search_package(
        pg, tmp_path):
    from scriptorium.memory.search import attach, rebuild

    ws = Workspace.open(tmp_path / "memory")
    ws.pg_search_index = PgSearchIndex(pg, DirectorySource(ws))
    attach(ws)  # the install hook hands the workspace to its PostgreSQL index
    write_offsite(ws)
    assert search(ws, "pgbouncer")[0].path == "topics/infrastructure/production.md"
    walks = ws.pg_search_index.walks  # the first query indexed the topics
    [sid] = archive(ws, [("offsite", "o7", "user", "Lunch is at noon",
                          "2026-05-04T12:00:00+00:00")])
    write_paragraphs(ws, "topics/projects/lunch.md", [[("Lunch is at noon.", [sid],
                                                        "2026-05-04")]])
    assert search(ws, "lunch")[0].path == "topics/projects/lunch.md"
    assert ws.pg_search_index.walks == walks  # the hook kept it current
    assert rebuild(ws, True) == 12 and search(ws, "Tuesdays", include_sources=True)
    assert not (ws.runtime_dir / "search.sqlite").exists()  # never touched the SQLite index
