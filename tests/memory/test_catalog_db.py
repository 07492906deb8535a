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
