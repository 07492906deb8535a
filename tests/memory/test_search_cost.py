"""What a search costs follows the work: a query does not look at every topic file when no
install happened, a write pays the periodic check for hand edits, a build is one bulk write,
and BM25 ranks the best raw matches instead of every match, with the same answer."""

from __future__ import annotations

import gc
import os
import random
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit import examples

from scriptorium.memory.search import SearchIndex, search
from scriptorium.memory.search import index as index_mod
from scriptorium.memory.search import indexfile as indexfile_mod
from scriptorium.memory.search import segments as segments_mod
from scriptorium.memory.search import query as query_mod
from scriptorium.memory.topics import SUPERSEDED_MARK
from scriptorium.memory.workspace import Workspace

from search_support import archive, open_ws, render, write_paragraphs

TS = "2026-08-01T10:00:00+00:00"
WORDS = ["kiln", "glaze", "clay", "wheel", "fire", "slip", "bisque", "oxide", "pot", "cone",
         "saggar", "wedge"]


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    return open_ws(tmp_path / "memory")


def count_scandirs(monkeypatch) -> list:
    calls: list = []
    real = os.scandir
    monkeypatch.setattr(index_mod.os, "scandir", lambda p: calls.append(p) or real(p))
    return calls


def hand_written(ws: Workspace, files: int = 3) -> None:
    """Topics copied in by hand: the workspace never had an install (no install counter)."""
    for n in range(files):
        path = ws.root / f"topics/t{n}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render([[(f"Kiln firing number {n}.", [f"openprogram/s/n{n}"],
                                  "2026-08-01")]]).replace("[^e1]", f"[^e{n}]").replace(
            f"number {n}.[^e{n}]", f"number {n}.[^e{n}] ^0000000{n}"), encoding="utf-8")


def test_a_workspace_never_written_through_a_transaction_is_not_walked_by_every_query(
        ws, monkeypatch):
    hand_written(ws)
    assert ws.generation() is None
    index = SearchIndex.of(ws)
    assert len(search(ws, "kiln", top_k=10)) == 3
    walks = index.walks
    scans = count_scandirs(monkeypatch)
    assert len(search(ws, "kiln firing", top_k=10)) == 3
    assert index.walks == walks and scans == []
    # ... and a hand edit is still found at the next periodic full check
    path = ws.root / "topics/t0.md"
    path.write_text(path.read_text().replace("Kiln firing", "Furnace roaring"))
    later = index_mod.time.time_ns() + index_mod.FULL_CHECK_NS + 1
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: later)
    assert [h.text for h in search(ws, "furnace")] == ["Furnace roaring number 0."]
    assert index.walks == walks + 1


def test_a_write_pays_the_due_full_check_and_the_query_after_it_walks_nothing(ws, monkeypatch):
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(3)])
    write_paragraphs(ws, "topics/a.md", [[("The kiln is hot.", [ids[0]], "2026-08-01")]])
    index = SearchIndex.of(ws)
    search(ws, "kiln")
    walks = index.walks
    hand = ws.root / "topics/hand.md"  # a hand edit the next full check must find
    hand.write_text(render([[("The furnace roars.", ["openprogram/s/n1"], "2026-08-01")]])
                    .replace("roars.[^e1]", "roars.[^e1] ^0badc0de"))
    later = index_mod.time.time_ns() + index_mod.FULL_CHECK_NS + 1
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: later)
    write_paragraphs(ws, "topics/b.md", [[("The glaze is blue.", [ids[2]], "2026-08-01")]])
    assert index.walks == walks + 1  # inside the write's install
    scans = count_scandirs(monkeypatch)
    assert {h.text for h in search(ws, "furnace glaze", top_k=5)} == {
        "The furnace roars.", "The glaze is blue."}
    assert index.walks == walks + 1 and scans == []


def test_a_process_that_only_writes_never_walks_the_topics_for_queries_it_does_not_make(
        ws, monkeypatch):
    ids = archive(ws, [("s", "n0", "user", "turn", TS)])
    index = SearchIndex.of(ws)
    later = index_mod.time.time_ns() + index_mod.FULL_CHECK_NS + 1
    monkeypatch.setattr(index_mod.time, "time_ns", lambda: later)
    for n in range(2):
        write_paragraphs(ws, f"topics/w{n}.md", [[(f"Fact {n}.", ids, "2026-08-01")]])
    assert index.walks == 0


def test_a_warm_query_resolves_no_path_and_workspaces_of_one_root_share_its_index(
        ws, tmp_path, monkeypatch):
    ids = archive(ws, [("s", "n0", "user", "turn", TS)])
    write_paragraphs(ws, "topics/a.md", [[("The kiln is hot.", ids, "2026-08-01")]])
    assert [h.text for h in search(ws, "kiln")] == ["The kiln is hot."]
    resolved: list = []
    real = os.path.realpath
    monkeypatch.setattr(index_mod.os.path, "realpath",
                        lambda p, *a, **k: resolved.append(p) or real(p, *a, **k))
    assert [h.text for h in search(ws, "kiln")] == ["The kiln is hot."]
    assert resolved == []  # its paths were resolved once, by the first query
    (tmp_path / "link").symlink_to(ws.root)
    other = Workspace.open(tmp_path / "link")
    assert SearchIndex.of(other) is SearchIndex.of(ws)
    assert len(resolved) == 2  # the new workspace object's root and runtime dir, once


def test_the_index_keeps_no_row_per_topic_file_in_the_process(ws):
    """A file's row is read from the index file when it is needed and let go: kept, they
    were one per topic (0.66 kB each) in every process that wrote or queried memory, and
    all read again whenever another process had written."""
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(30)])
    for n in range(30):
        write_paragraphs(ws, f"topics/t{n}.md", [[(f"Kiln {n} fired.", [ids[n]], "2026-08-01")]])
    assert len(search(ws, "kiln", top_k=50)) == 30
    SearchIndex.of(ws).update(["topics/t3.md"])
    gc.collect()
    assert not [o for o in gc.get_objects() if type(o) is index_mod.FileRow]
    assert SearchIndex.of(ws).count() == 30 and not SearchIndex.of(ws).is_stale()


def test_a_build_writes_every_document_in_one_transaction(ws):
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(6)])
    for n in range(6):
        write_paragraphs(ws, f"topics/area/t{n}.md",
                         [[(f"Kiln {n} fired {w}.", [ids[n]], "2026-08-01")] for w in WORDS[:4]])
    index = SearchIndex.of(ws)
    index.discard()
    commits: list[str] = []
    index.connection().set_trace_callback(
        lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
    index.refresh()
    assert len(commits) == 1 and index.count() == 24


def _collections_during(action) -> int:
    """How many passes of the cyclic collector ran while ``action()`` did."""
    passes: list[int] = []
    hook = lambda phase, info: passes.append(info["generation"]) if phase == "start" else None
    gc.callbacks.append(hook)
    try:
        action()
    finally:
        gc.callbacks.remove(hook)
    return len(passes)


@pytest.mark.skipif(gc.get_freeze_count() > 0, reason="the program froze objects itself")
def test_a_build_runs_no_pass_of_the_cycle_collector_and_leaves_it_as_it_found_it(ws):
    """A build's documents are many objects and no cycles: the collector's passes only
    re-walked the growing heap (a tenth of a 9.8 MB build's CPU)."""
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(8)])
    for n in range(8):
        write_paragraphs(ws, f"topics/t{n}.md",
                         [[(f"Kiln {n} fired {w} {k}.", [ids[n]], "2026-08-01")]
                          for k in range(15) for w in WORDS[:4]])
    index = SearchIndex.of(ws)
    index.discard()
    gc.collect()
    assert gc.get_count()[0] < gc.get_threshold()[0]
    assert _collections_during(index.refresh) == 0
    assert index.count() == 8 * 60 and gc.isenabled() and gc.get_freeze_count() == 0
    index.discard()
    gc.disable()  # a program that turned the collector off keeps it off
    try:
        index.refresh()
        assert not gc.isenabled()
    finally:
        gc.enable()


# -- ranking the best raw matches gives the answer of ranking every match ----------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Workspace:
    """Many claims over a small vocabulary (so words match many claims), some superseded,
    spread over folders and dates; sources archived so they can be searched too."""
    rnd = random.Random(5)
    ws = open_ws(tmp_path_factory.mktemp("corpus") / "memory")
    ids = archive(ws, [("s", f"n{i}", rnd.choice(["user", "assistant"]),
                        " ".join(rnd.choices(WORDS, k=5)), TS) for i in range(40)])
    for f in range(4):
        paragraphs = []
        for p in range(12):
            words = " ".join(rnd.choices(WORDS, k=rnd.randint(2, 7))).capitalize()
            if rnd.random() < 0.3:
                words += f" {SUPERSEDED_MARK}: now {rnd.choice(WORDS)})"
            paragraphs.append([(words + ".", [ids[(f * 12 + p) % 40]],
                                f"2026-0{1 + p % 9}-1{p % 9}")])
        write_paragraphs(ws, f"topics/{'ab'[f % 2]}/t{f}.md", paragraphs)
    search(ws, "kiln", include_sources=True)  # index the sources too
    return ws


@settings(max_examples=examples(60), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=3),
       top_k=st.integers(1, 6), sources=st.booleans(), depth=st.integers(1, 12))
def test_ranking_the_best_raw_matches_answers_as_ranking_every_match(
        corpus, monkeypatch, words, top_k, sources, depth):
    monkeypatch.setattr(query_mod, "CANDIDATE_FACTOR", 1)
    monkeypatch.setattr(query_mod, "CANDIDATE_MIN", depth)  # few candidates: pruning matters
    index = SearchIndex.of(corpus)
    filters, match = query_mod.check_arguments(" ".join(words), top_k=top_k,
                                               include_sources=sources)
    everything = query_mod._ranked(index, match, filters, top_k, None)
    assert query_mod.bm25_rows(index, match, filters, top_k) == everything


def test_a_build_merges_its_segments_and_gives_back_the_pages_they_left(ws, monkeypatch,
                                                                        tmp_path):
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(4)])
    for n in range(4):
        write_paragraphs(ws, f"topics/t{n}.md",
                         [[(f"Kiln {n} fired {w}.", [ids[n]], "2026-08-01")] for w in WORDS])
    before = [h.to_dict() for h in search(ws, "kiln glaze fired", top_k=20)]
    monkeypatch.setattr(segments_mod, "OPTIMIZE_AFTER", 10)  # this build counts as a large one
    # ... and FTS5 writes it in many segments, as it does a large one (1 MB of terms each)
    monkeypatch.setattr(indexfile_mod, "_SCHEMA", indexfile_mod._SCHEMA +
                        "INSERT INTO fts(fts, rank) VALUES ('hashsize', 512);")
    index = SearchIndex.of(ws)
    assert index.rebuild() == 48
    conn = index.connection()
    assert conn.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert [h.to_dict() for h in search(ws, "kiln glaze fired", top_k=20)] == before
    write_paragraphs(ws, "topics/t9.md", [[("The teapot cracked.", [ids[0]], "2026-08-01")]])
    assert [h.text for h in search(ws, "teapot")] == ["The teapot cracked."]


def test_a_files_path_and_headings_are_stored_once_however_many_claims_repeat_them(ws):
    """A claim's row holds its text and a number for its file and for its headings: writing
    more claims under the same long path and headings adds their text, not those again."""
    ids = archive(ws, [("s", f"n{i}", "user", f"turn {i}", TS) for i in range(40)])
    rel = "topics/" + "a-rather-long-folder-name/" * 4 + "and-a-long-topic-name.md"
    heading = "A heading long enough to matter " * 4
    write_paragraphs(ws, rel, [[(f"Kiln firing {i}.", [ids[i]], "2026-08-01")]
                               for i in range(40)], heading=heading.strip(),
                     sections=["Glazes and their long section title " * 3] + [""] * 39)
    index = SearchIndex.of(ws)
    hits = search(ws, "kiln firing", top_k=40)
    assert len(hits) == 40 and {h.path for h in hits} == {rel}
    assert {tuple(h.headings) for h in hits} == {
        (heading.strip(), ("Glazes and their long section title " * 3).strip())}
    assert index.rows("SELECT count(*) AS n FROM files")[0]["n"] == 1
    assert index.rows("SELECT count(*) AS n FROM heading_sets")[0]["n"] == 1
    stored = index.rows("SELECT sum(pgsize - unused) AS b FROM dbstat WHERE name='doc_rows'")
    text = sum(len(h.text) for h in hits)
    # per claim: its text, its dates and source id (JSON), and small numbers; the path and
    # headings (over 300 characters) would be 40 times 300 more
    assert stored[0]["b"] < text + 40 * 80


def test_an_index_of_the_layout_before_shared_paths_is_replaced(ws):
    """An index file written by schema 4 (``docs`` a table, not a view) is rebuilt."""
    ids = archive(ws, [("s", "n0", "user", "turn 0", TS)])
    write_paragraphs(ws, "topics/a.md", [[("The kiln is hot.", [ids[0]], "2026-08-01")]])
    SearchIndex.of(ws).discard()
    old = sqlite3.connect(ws.runtime_dir / "search.sqlite")
    old.executescript("CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                      "INSERT INTO meta VALUES ('schema', '4');"
                      "CREATE TABLE docs(id INTEGER PRIMARY KEY, path TEXT, text TEXT);"
                      "CREATE INDEX docs_path ON docs(path);"
                      "CREATE TABLE files(path TEXT PRIMARY KEY, kind TEXT);")
    old.close()
    assert [h.text for h in search(ws, "kiln")] == ["The kiln is hot."]
    assert SearchIndex.of(ws).rows("SELECT type FROM sqlite_master WHERE name='docs'") == \
        [{"type": "view"}]
