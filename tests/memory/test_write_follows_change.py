"""A write's work follows what it changes, not the size of the topic it changes (issue 12):
the catalog rows it writes and the archive files the search index re-reads are counted, and
each shortcut is checked against the whole-file path it replaces (same rows)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from hypothesis import given, settings, strategies as st

from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.catalog_db import BlockSummary, CatalogDB, TopicSummary
from scriptorium.memory.search import SearchIndex, rebuild, search
from scriptorium.memory.search.rows import ROW_COLUMNS
from scriptorium.memory.sources.archive import SourceArchive
from scriptorium.memory.topics import Parser
from scriptorium.memory.workspace import Workspace

from search_support import archive, open_ws, render
from testkit import examples
from topic_parse_reference import ReferenceParser

TS = "2026-08-01T10:00:00+00:00"
LONG = 40  # paragraphs of the long topic, each citing its own archived turn in its own file


def long_topic(tmp_path: Path) -> tuple[Workspace, str, list[str]]:
    """A workspace whose topics/long.md holds LONG paragraphs, each citing a turn of its own
    session (its own archive file), and turns archived for two more paragraphs."""
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [(f"s{i}", f"n{i}", "user", f"kiln turn {i}", TS) for i in range(LONG + 2)])
    rel = "topics/long.md"
    with ws.begin(allowed_sources=ids[:LONG]) as tx:
        (tx.stage / rel).write_text(render([[(f"Firing {i} reached cone {i % 9}.", [ids[i]],
                                              "2026-08-01")] for i in range(LONG)]))
        tx.commit("seed a long topic")
    search(ws, "kiln")  # the index holds the topic
    return ws, rel, ids


def add_paragraph(ws: Workspace, rel: str, text: str, ref: str, *, first: bool = False) -> None:
    """Add a paragraph citing ``ref`` at the end of the topic (or before its first one)."""
    with ws.begin(allowed_sources=[ref]) as tx:
        path = tx.stage / rel
        body = path.read_text()
        new = f"{text}[^e9]\n\n[^e9]: Time: `2026-08-02`; Sources: [t]({ref})\n"
        if first:
            head, sep, rest = body.partition("\n\n")
            path.write_text(f"{head}{sep}{new}\n{rest}")
        else:
            path.write_text(body + "\n" + new)
        tx.commit("test: add a paragraph")


def catalog_rows(db: sqlite3.Connection) -> dict[str, list[tuple]]:
    """Every row of the catalog's tables keyed by path (ids and links without their rowid)."""
    out = {}
    for table in ("files", "blocks", "ids", "dups", "cites", "targets", "names", "links"):
        out[table] = sorted(db.execute(f"SELECT * FROM {table}").fetchall(), key=repr)
    out["links in order"] = db.execute("SELECT * FROM links ORDER BY path, rowid").fetchall()
    return out


def test_a_paragraph_added_to_a_long_topic_writes_only_its_own_catalog_rows(tmp_path):
    """The catalog rewrote every row of the topic (its blocks, ids, cited sources and
    footnote targets) for each write; now it writes the new paragraph's rows and the file's
    own row: the same handful whatever the topic's length."""
    ws, rel, ids = long_topic(tmp_path)
    catalog = TopicCatalog.of(ws)
    conn = catalog.db.conn
    before = conn.total_changes
    add_paragraph(ws, rel, "The saggar cracked.", ids[LONG])
    written = conn.total_changes - before
    assert written <= 12, written  # files, log, 1 block, 1 id, 1 cite, 1 target (+ margin)
    fresh = CatalogDB(None)
    with fresh.transaction():
        summary = catalog.summary(rel)
        fresh.put(summary, ["stem:long"], lambda t: catalog.db.one(
            "SELECT akey FROM targets WHERE path=? AND target=?", (rel, t))[0])
    assert catalog_rows(fresh.conn)["blocks"] == catalog_rows(conn)["blocks"]


def test_a_paragraph_added_above_a_long_topic_moves_the_others_lines_only(tmp_path):
    """A paragraph added above the others moves each of them down: their block and id rows
    follow (the whole-file put wrote about eight rows a paragraph), the rows of what they
    cite are left alone, and the catalog answers what a parse of the file answers."""
    ws, rel, ids = long_topic(tmp_path)
    catalog = TopicCatalog.of(ws)
    conn = catalog.db.conn
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    before = conn.total_changes
    add_paragraph(ws, rel, "The saggar cracked.", ids[LONG], first=True)
    conn.set_trace_callback(None)
    assert conn.total_changes - before <= 3 * LONG + 16
    footnotes = [s for s in statements if s.startswith(("INSERT", "DELETE", "UPDATE"))
                 and (" targets" in s or " cites" in s)]
    assert len(footnotes) <= 2, footnotes  # the new paragraph's source and footnote
    held = catalog.summary(rel)
    catalog.close()
    (Path(catalog.saved_path)).unlink()  # derived: a new catalog parses every file again
    TopicCatalog._instances.clear()
    assert TopicCatalog.of(ws).refresh().summary(rel).blocks == held.blocks


def index_rows(ws: Workspace) -> list[tuple]:
    index = SearchIndex.of(ws)
    return sorted(tuple(r.values()) for r in index.rows(f"SELECT {ROW_COLUMNS} FROM docs"))


def test_a_paragraph_added_to_a_long_topic_reads_only_the_archive_file_it_cites(tmp_path,
                                                                                monkeypatch):
    """Re-indexing the topic resolved every claim again, parsing the archive file of every
    session the topic cites; now the claims the write did not change keep what their rows
    say of the turns they cite, and only the new claim's archive file is read. The index
    holds what a rebuild from the files holds."""
    ws, rel, ids = long_topic(tmp_path)
    read: list[str] = []
    real = SourceArchive.file_status

    def counting(self, path, *a, **k):
        read.append(str(path))
        return real(self, path, *a, **k)

    monkeypatch.setattr(SourceArchive, "file_status", counting)
    add_paragraph(ws, rel, "The saggar cracked.", ids[LONG], first=True)
    assert len(set(read)) <= 1, sorted(set(read))
    monkeypatch.undo()
    after = index_rows(ws)
    assert any("The saggar cracked." in row for row in after)
    rebuild(ws)
    assert index_rows(ws) == after


# -- the catalog's row-by-row put leaves the rows a first put leaves -------------------------

_IDS = st.sampled_from(["a1", "b2", "c3", "d4", "e5"])
_TARGETS = st.sampled_from(["../s/_v2/x.md#source-1", "../s/_v2/x.md#source-2",
                            "../s/_v2/y.md#source-3", "openprogram/s/n"])


@st.composite
def summaries(draw, path: str = "topics/t.md") -> TopicSummary:
    blocks = []
    line = 3
    for _ in range(draw(st.integers(0, 5))):
        ids = tuple(dict.fromkeys(draw(st.lists(_IDS, min_size=1, max_size=2))))
        targets = tuple(draw(st.lists(_TARGETS, max_size=3)))
        at = tuple(draw(st.sampled_from([None, "r1", "r2"])) for _ in targets)
        links = tuple(draw(st.lists(st.tuples(st.just("topics/u.md"), _IDS), max_size=1)))
        refs = tuple(dict.fromkeys(r for r in at if r is not None))
        line += draw(st.integers(1, 4))
        blocks.append(BlockSummary(ids[-1], ids, line, links, targets, refs, None in at, at))
    return TopicSummary(path, draw(st.sampled_from(["s1", "s2"])), (1, 2, 3, 4), 5,
                        tuple(blocks), draw(st.sampled_from(["", "T"])),
                        draw(st.booleans()))


def _akey(target: str) -> str | None:
    return target.partition("#")[0] or None


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(summaries(), min_size=1, max_size=4), summaries("topics/u.md"))
def test_putting_summaries_row_by_row_leaves_the_rows_of_one_put(sequence, other):
    """Whatever summaries a file had before, putting its last one leaves every table as
    putting that one alone into a catalog that never held the file (beside another file
    that may share ids: the duplicates follow)."""
    changed, once = CatalogDB(None), CatalogDB(None)
    with once.transaction():
        once.put(other, ["stem:u"], _akey)
    with changed.transaction():
        changed.put(other, ["stem:u"], _akey)
    for summary in sequence:
        with changed.transaction():
            changed.put(summary, [f"title:{summary.title}"], _akey)
    with once.transaction():
        once.put(sequence[-1], [f"title:{sequence[-1].title}"], _akey)
    assert catalog_rows(changed.conn) == catalog_rows(once.conn)
    assert changed.summary("topics/t.md") == once.summary("topics/t.md")


# -- a canonical definition line is read at once, as the full rules read it ------------------

_PIECES = st.sampled_from(["e-1a2b3c4d5e", "e1", "x y", "2026-08-01", "2026-13-01", "undated",
                           " ", "", "label", " padded ", "a(b)c", "../s/_v2/x.md#source-1",
                           "openprogram/s/n", "[", "]", ",", "`"])


@settings(max_examples=examples(200), deadline=None)
@given(_PIECES, _PIECES, _PIECES, _PIECES)
def test_a_canonical_definition_is_read_as_the_full_rules_read_it(fid, when, label, target):
    line = f"[^{fid}]: Time: `{when}`; Sources: [{label}]({target})"
    fast, full = Parser("topics/t.md"), ReferenceParser("topics/t.md")
    assert fast.definition(line, 7) == full.definition(line, 7)
    assert [str(p) for p in fast.problems] == [str(p) for p in full.problems]
