"""The on-disk topic catalog keeps the last few summaries it read in the process, and never
answers from them once the file changed under it (another process's commit, its own change,
a rolled-back transaction)."""

from __future__ import annotations

import pytest

from scriptorium.memory import catalog_db
from scriptorium.memory.catalog_db import BlockSummary, CatalogDB, TopicSummary


def summary(path: str, sha: str, refs: tuple[str, ...]) -> TopicSummary:
    block = BlockSummary("b1", ("b1",), 3, (), tuple(f"../x#{r}" for r in refs), refs, False)
    return TopicSummary(path, sha, (1, 2, 3, 4), 5, (block,), "Title")


def put(db: CatalogDB, s: TopicSummary) -> None:
    with db.transaction():
        db.put(s, [s.path])


def test_a_summary_another_connection_replaced_is_read_again(tmp_path):
    ours, theirs = CatalogDB(tmp_path / "c.sqlite"), CatalogDB(tmp_path / "c.sqlite")
    put(ours, summary("topics/a.md", "v1", ("s1",)))
    assert ours.summary("topics/a.md").sha == "v1"
    assert ours.summary("topics/a.md") is ours.summary("topics/a.md")  # kept, not re-read
    put(theirs, summary("topics/a.md", "v2", ("s2",)))
    assert ours.summary("topics/a.md").blocks[0].refs == ("s2",)
    with theirs.transaction():
        theirs.drop("topics/a.md")
    assert ours.summary("topics/a.md") is None


def test_its_own_change_and_a_rolled_back_one_are_never_answered_from_the_kept_copy(tmp_path):
    db = CatalogDB(tmp_path / "c.sqlite")
    put(db, summary("topics/a.md", "v1", ("s1",)))
    assert db.summary("topics/a.md").sha == "v1"
    put(db, summary("topics/a.md", "v2", ("s2",)))
    assert db.summary("topics/a.md").sha == "v2"
    with db.transaction():
        db.touch("topics/a.md", (9, 9, 9, 9), 10)
    assert db.summary("topics/a.md").fp == (9, 9, 9, 9)
    with pytest.raises(RuntimeError), db.transaction():
        db.put(summary("topics/a.md", "v3", ("s3",)), ["topics/a.md"])
        assert db.summary("topics/a.md").sha == "v3"  # its own uncommitted write
        raise RuntimeError("the install failed")
    assert db.summary("topics/a.md").sha == "v2"


def test_the_kept_summaries_are_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(catalog_db, "RECENT_SUMMARIES", 4)
    db = CatalogDB(tmp_path / "c.sqlite")
    for n in range(10):
        put(db, summary(f"topics/t{n}.md", f"v{n}", (f"s{n}",)))
    assert [db.summary(f"topics/t{n}.md").sha for n in range(10)] == [f"v{n}" for n in range(10)]
    assert len(db._recent) == 4


class _RecordingConnection:
    """The catalog's connection with every SQL text it was asked to run recorded."""

    def __init__(self, conn):
        self._conn, self.texts = conn, set()

    def execute(self, sql, *args):
        self.texts.add(sql)
        return self._conn.execute(sql, *args)

    def executemany(self, sql, *args):
        self.texts.add(sql)
        return self._conn.executemany(sql, *args)

    def __getattr__(self, name):
        return getattr(self._conn, name)


def test_lists_of_any_length_run_as_the_same_statements(tmp_path):
    """sqlite caches one prepared statement per SQL text: an ``IN (?,?,…)`` per list length
    filled the cache with statements as the home grew. Every length shares one text now."""
    db = CatalogDB(tmp_path / "c.sqlite")
    recording = _RecordingConnection(db.conn)
    db.conn = recording

    def texts_after(lengths) -> set[str]:
        for n in lengths:
            ids = tuple(f"b{n}-{i}" for i in range(n))
            blocks = tuple(BlockSummary(b, (b,), 3, (), (), (f"s{b}",), False) for b in ids)
            for rel in ("topics/a.md", "topics/b.md"):  # the same ids twice: duplicates
                put(db, TopicSummary(rel, f"v{n}", (1, 2, 3, 4), 5, blocks, "T"))
            assert db.cited([f"s{b}" for b in ids] + ["nowhere"]) == {f"s{b}" for b in ids}
            with db.transaction():
                db.drop("topics/a.md")
                db.drop("topics/b.md")
        return set(recording.texts)

    few = texts_after([1, 2])
    assert texts_after(range(3, 40)) == few
