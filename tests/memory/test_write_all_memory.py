"""What a ``write --all`` holds between sessions does not grow with the sessions written
(issue 12: its peak RSS must not grow with the home). Asserted by what is held, never by
timing or by RSS: Python memory the archive keeps (tracemalloc, after a collection), the
pages the search index's connection keeps cached or mapped (SQLite's own allocator and the
kernel's map of the file), and the path parts an archive read leaves in CPython's
interned-string table. ``test_write_all_bounds.py`` counts live objects of our types."""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import tracemalloc
from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.memory.search import SearchIndex
from scriptorium.memory.sources import SourceArchive, SourceRecord
from scriptorium.memory.sources import archive as archive_mod
from scriptorium.memory.writing import Memory
from test_write_all_bounds import make_home

SOURCES = str(Path(archive_mod.__file__).parent)


def _archive_held() -> int:
    """Blocks of traced Python memory allocated with a frame in memory/sources/."""
    gc.collect()
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(True, SOURCES + "/*", all_frames=True)])
    return sum(s.count for s in snap.statistics("filename"))


def _record(thread: str, n: int) -> SourceRecord:
    return SourceRecord(provider="openprogram", thread=thread, message=f"{thread}t{n}",
                        content=f"turn {n}: the kiln fires at eight", role="user",
                        timestamp="2026-08-09T20:15:06+08:00")


def test_archiving_thread_after_thread_leaves_the_archive_holding_no_more_python_memory(
        tmp_path, monkeypatch):
    """As a write --all does, each "session" archives a new thread's turns, looks them up,
    links and resolves them, then commits (which empties ``written``): once the bounded
    caches are full, nothing made for a thread may stay (b72f057 kept every thread's
    percent-encoded name, three blocks a thread)."""
    monkeypatch.setattr(archive_mod, "MAX_CACHED_FILES", 2)
    archive = SourceArchive(tmp_path / "memory")

    def session(thread: str) -> None:
        records = [_record(thread, n) for n in range(3)]
        assert len(archive.archive(records)) == 3
        archive.written.clear()  # what the workspace's commit does
        for rec in records:
            link = archive.canonical_link("topics/t.md", rec.source_id)
            assert link and archive.resolve_target("topics/t.md", link) == rec.source_id

    tracemalloc.start(4)
    try:
        for k in range(20):
            session(f"s{k}")
        first = _archive_held()
        for k in range(20, 120):
            session(f"s{k}")
        last = _archive_held()
    finally:
        tracemalloc.stop()
    assert last - first < 30, f"the archive holds {first} blocks after 20 threads, {last} " \
                              f"after 120"


def _sqlite_library() -> ctypes.CDLL:
    """The SQLite library the sqlite3 module uses, already loaded in this process (opening it
    by name again gives the same instance, whose allocator counts every connection)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        if "libsqlite3" in line:
            lib = ctypes.CDLL(line.split()[-1])
            lib.sqlite3_memory_used.restype = ctypes.c_int64
            return lib
    pytest.skip("sqlite3 is linked statically here: its allocator cannot be read")


def _mapped_kb(path: Path) -> int:
    """Resident kB of this process's maps of the file at ``path`` (/proc/self/smaps; by its
    whole path: an earlier test in this process may keep another home's index mapped)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's first line
            inside = line.endswith(" " + os.path.realpath(path))
        elif inside and head[0] == "Rss:":
            total += int(head[1])
    return total


def test_between_sessions_the_search_index_keeps_no_page_cached_or_mapped(home):
    """After each session of a write --all, the index connection has nothing left to give
    back: asking it to drop its page cache frees no memory, and no page of the index file
    is resident through its map (b72f057 kept every page an update touched, up to a 16 MB
    cache and the whole file mapped, so the write's memory grew with the index)."""
    lib = _sqlite_library()
    make_home(home, 4)
    mem = Memory.open(home, settings=load_settings(home))
    index = SearchIndex.of(mem.workspace)
    given_back = []
    for result in mem.write_each(force=True):
        assert result.failure is None and result.marked, result.failure
        conn = index.connection()
        before = lib.sqlite3_memory_used()
        conn.execute("PRAGMA shrink_memory")
        given_back.append(before - lib.sqlite3_memory_used())
        assert _mapped_kb(index.path) == 0
    assert max(given_back) < 4096, f"bytes an index cache shrink gave back: {given_back}"


def test_archive_reads_and_writes_intern_no_part_of_their_paths(tmp_path, monkeypatch):
    """pathlib interns every part of every path it makes: an archive that made a ``Path``
    per read or write put each session's file name in CPython's interned-string table,
    whose resizes (a megabyte each in a big process) came back every few hundred sessions."""
    interned: list[str] = []
    real = sys.intern

    def spy(text: str) -> str:
        interned.append(text)
        return real(text)

    root = tmp_path / "memory"
    archive = SourceArchive(root)
    record = SourceRecord(provider="openprogram", thread="thread-7", message="m1",
                          content="the kiln fires at eight", role="user",
                          timestamp="2026-08-09T20:15:06+08:00")
    monkeypatch.setattr(sys, "intern", spy)
    assert archive.archive([record]) == ["openprogram/thread-7/m1"]
    archive._cache.clear()  # the next lookup reads the file again
    assert archive.lookup("openprogram/thread-7/m1") is not None
    assert archive.canonical_link("topics/t.md", "openprogram/thread-7/m1")
    monkeypatch.setattr(sys, "intern", real)
    assert [t for t in interned if "thread-7" in t] == []


def test_the_catalog_and_the_search_index_read_a_topic_again_interning_no_part_of_its_path(
        home, monkeypatch):
    """As the archive: each time the catalog or the index read a topic through a ``Path``,
    its file name went into the interned-string table again (it had died in between), four
    new entries of about nine a session in a long write."""
    from scriptorium.memory.catalog import TopicCatalog

    make_home(home, 1)
    mem = Memory.open(home, settings=load_settings(home))
    assert all(r.failure is None for r in mem.write_each(force=True))
    [rel] = [p for p in TopicCatalog.of(mem.workspace).paths()]
    topic = mem.workspace.root / rel
    topic.write_text(topic.read_text() + "\nA line added by hand.\n")  # both must read it
    name = rel.rsplit("/", 1)[1]
    interned: list[str] = []
    real = sys.intern
    catalog, index = TopicCatalog.of(mem.workspace), SearchIndex.of(mem.workspace)
    parses = catalog.parses
    monkeypatch.setattr(sys, "intern", lambda text: interned.append(text) or real(text))
    catalog.refresh()
    assert index.update([rel]) == 1
    monkeypatch.setattr(sys, "intern", real)
    assert name not in interned
    assert catalog.parses == parses + 1 and not index.is_stale()  # both read the new text


def test_a_write_all_interns_no_topic_name_only_each_transaction_directory_name(
        home, monkeypatch):
    """Each new interned string takes a slot of CPython's table until it is rebuilt, and
    a topic name dies with the last ``Path`` holding it: the stage, the install, the
    commit plan and the embedded writer each joined the topic's name through a ``Path``,
    five new slots a session (the table's rebuild, +0.8 MB, came at about 1,030 sessions
    of a write --all). What is left is the one unique name of each transaction's stage
    directory, which ``tx.stage`` carries (a stale stage path must lead nowhere)."""
    make_home(home, 6)  # three titles: later sessions extend the topics the first made
    mem = Memory.open(home, settings=load_settings(home))
    interned: list[str] = []
    real = sys.intern
    monkeypatch.setattr(sys, "intern", lambda text: interned.append(text) or real(text))
    results = list(mem.write_each(force=True))
    monkeypatch.setattr(sys, "intern", real)
    assert len(results) == 6 and all(r.failure is None and r.marked for r in results)
    names = {p.name for p in (mem.workspace.root / "topics").rglob("*.md")}
    assert len(names) == 3
    assert names.isdisjoint(interned)
    assert not [t for t in interned if t.endswith(".md")]
    assert len({t for t in interned if t.startswith("tx-")}) <= len(results)


def test_a_write_all_updates_the_index_unmapped_after_its_first_session_and_a_query_maps_it(
        home, monkeypatch):
    """Through its map, each page an update reads brings the 64 kB around it into the
    process, so what an update held grew with the index file; after the first session
    settles, the updates of a write --all read a page at a time (the map stays off), and
    the next query maps the file again and finds what the writes wrote. The heap gives its
    free pages back after every session, after a full collection every COLLECT_EVERY."""
    from scriptorium import heap
    from scriptorium.memory.search import indexfile, search

    given: list[bool] = []  # whether each give-back ran a full collection
    real = heap.give_back
    monkeypatch.setattr(heap, "COLLECT_EVERY", 2)
    monkeypatch.setattr(heap, "give_back", lambda *, collect=False: given.append(collect)
                        or real(collect=collect))
    make_home(home, 3)
    mem = Memory.open(home, settings=load_settings(home))
    index = SearchIndex.of(mem.workspace)
    maps: list[int] = []  # the map each update ran with
    update = index.update
    monkeypatch.setattr(index, "update", lambda *a, **k: maps.append(
        index.connection().execute("PRAGMA mmap_size").fetchone()[0]) or update(*a, **k))
    for result in mem.write_each(force=True):
        assert result.failure is None and result.marked, result.failure
        assert _mapped_kb(index.path) == 0
    assert len(maps) >= 3 and maps[-2:] == [0, 0] and 0 not in maps[:1]
    assert given == [False, True, False]  # a full collection every COLLECT_EVERY sessions
    hits = search(mem.workspace, "kiln", top_k=3)
    assert hits and all(h.path.startswith("topics/") for h in hits)
    assert index.connection().execute("PRAGMA mmap_size").fetchone()[0] == indexfile.MMAP_SIZE
