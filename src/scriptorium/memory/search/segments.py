"""The FTS5 segments of the search index: where a write's postings go, and the pages merges free.

FTS5 stores postings in segments, each a b-tree of leaf pages holding terms in order, each
term followed by the documents that hold it (a rowid and positions each). A segment holds
its own copy of every term it has: a one-claim segment of its own costs about 300 bytes (25
terms: the claim's words, its file's path words and headings, its date; 11 to 13 bytes a
term), where the same claim costs about 110 merged into a segment that already holds most of
those terms. So a write's segment is merged at once into a small one that does: the tail.

- A build (the first write of an index) inserts its documents with FTS5's merges off, at
  FTS5's default page size, and when it holds ``OPTIMIZE_AFTER`` documents or more merges
  them into one segment, left at level ``LIFTED`` or above (``optimize`` places its output
  above every level it merged; a build it left lower is merged once more with one document,
  a few hundredths of a second at 10 MB). Its last ``TAIL_DOCUMENTS`` documents are written
  after it, as the first tail: a segment of one page of ``TAIL_PAGE`` bytes.
- A write's segment (written by a savepoint, inside the write's transaction) lands on level
  0, and FTS5 moves a one-page segment of the next level down beside it (its "promotion" of
  segments no bigger than the one just written); ``('merge', n)`` with ``usermerge`` 2 then
  merges the two into the next tail, n pages of output at most (n: the write's own pages,
  1 for a claim). A write rewrites the tail (at most ``TAIL_PAGE`` bytes), never the build.
- A tail that outgrows its page stays where it is and the next writes start another; FTS5
  merges such segments with each other, two of a level into one of the next, within the same
  budget per write (so, after some thousand small writes, into the build's segment too, a
  few pages a write).

The free pages beyond ``FREE_PAGES_KEPT`` that merges leave are given back after each write
(:func:`give_back`), so the file stays about the size of what it holds; a build's are given
back by a ``VACUUM`` (:func:`compact`). :func:`structure` reads the segments as FTS5
records them (for the tests and the benchmark).
"""

from __future__ import annotations

import logging
import sqlite3

from .rows import FTS_INSERT, Values

log = logging.getLogger(__name__)

OPTIMIZE_AFTER = 1000  # documents a build must hold to be merged into one FTS segment
BUILD_PAGE = 4050  # FTS5's default leaf page size (bytes), what a build's segment is made of
# A write's segment and the tail are leaves of this size: a tail under it is one page, which
# FTS5 moves down to the level of the next write's one-page segment and so merges with it.
TAIL_PAGE = 32768
LIFTED = 2  # the lowest level a build's segment may be left on
TAIL_DOCUMENTS = 48  # a build's last documents, kept out of its big segment: the first tail
# Free pages a write leaves in the file (what FTS5's merges freed) beyond this many are given
# back to the filesystem (incremental vacuum): the file stays about the size of what it holds
# without moving pages on every small write.
FREE_PAGES_KEPT = 16

_STRUCTURE_ROWID = 10  # the fts_data row FTS5 keeps its list of segments in
_STRUCTURE_V2 = b"\xff\x00\x00\x01"  # what newer FTS5 versions put after the cookie


def pause_merges(conn: sqlite3.Connection) -> None:
    """No automatic merges while a build inserts: its segments are merged once, at its end,
    at FTS5's default page size (the build's segment is read a small page at a time)."""
    conn.execute("INSERT INTO fts(fts, rank) VALUES ('automerge', 0)")
    conn.execute(f"INSERT INTO fts(fts, rank) VALUES ('pgsz', {BUILD_PAGE})")


def _flush(conn: sqlite3.Connection) -> None:
    """Make FTS5 write the documents it holds in memory as a segment now, not at COMMIT:
    FTS5 writes them out when a savepoint opens (it cannot roll its memory back to one)."""
    conn.execute("SAVEPOINT fts_flush")
    conn.execute("RELEASE fts_flush")


def finish_writes(conn: sqlite3.Connection, *, building: bool, documents: int,
                  held: list[Values]) -> bool:
    """End a write transaction's FTS work; True when it merged a build into one segment (the
    caller then :func:`compact`s the file once committed, else it :func:`give_back`s).

    ``held``: the FTS values of the build's last documents, not inserted yet (``[]`` for a
    write): they become the tail. A write's segment is merged with the tail at once, a
    one-page budget (see the module docstring)."""
    if not building:
        _flush(conn)
        levels = _levels(conn)
        newest = levels[0][-1][1] if levels and levels[0] else 1
        conn.execute("INSERT INTO fts(fts, rank) VALUES ('merge', ?)", (max(1, newest),))
        return False
    built = documents >= OPTIMIZE_AFTER
    if built:
        conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
        while held and _lowest_level(conn) < LIFTED:
            # 'optimize' left the build's segment on a level the tail and the segments it
            # spills reach (on level 0 when the build fit in FTS5's memory at once): merged
            # with one more document it is placed above its levels (the build's segment
            # merged once more: 0.06 s CPU at 9.8 MB of topics).
            conn.execute(FTS_INSERT, held[0])
            held = held[1:]
            conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
    for name, value in (("pgsz", TAIL_PAGE), ("automerge", 0), ("usermerge", 2)):
        conn.execute(f"INSERT INTO fts(fts, rank) VALUES ('{name}', {value})")
    conn.executemany(FTS_INSERT, held)
    _flush(conn)
    return built


def _levels(conn: sqlite3.Connection) -> list[list[tuple[int, int]]] | None:
    """:func:`structure`, or None when this FTS5 records it in a form :func:`structure` does
    not know (a write then merges with a one-page budget, a build is not lifted: the index
    stays correct, only bigger)."""
    try:
        return structure(conn)
    except ValueError as exc:
        log.info("FTS5 segment list not read (%s)", exc)
        return None


def _lowest_level(conn: sqlite3.Connection) -> int:
    """The lowest level holding a segment (``LIFTED`` when there is none or it is unknown)."""
    levels = _levels(conn)
    return next((n for n, level in enumerate(levels or []) if level), LIFTED)


def compact(conn: sqlite3.Connection) -> None:
    """Give back the pages a build's merges freed (about the size of its FTS data): the
    file then holds what is in use. Best effort: a busy file is compacted by no one."""
    try:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")  # takes effect with the VACUUM
        conn.execute("VACUUM")
    except sqlite3.OperationalError as exc:
        log.info("search index not compacted after its build (%s)", exc)


def give_back(conn: sqlite3.Connection) -> None:
    """Give back the free pages beyond FREE_PAGES_KEPT that FTS5's merges left (an
    incremental merge of small segments frees what it copied; a level merge can free as
    much as the index holds). A no-op on a file made without auto_vacuum. Best effort: a
    busy file is left as it is."""
    try:
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        if free > FREE_PAGES_KEPT:
            # each step of the pragma frees one page, and execute() steps once: the script
            # interface runs it to the end
            conn.executescript(f"PRAGMA incremental_vacuum({free - FREE_PAGES_KEPT // 2});")
    except sqlite3.OperationalError as exc:
        log.info("search index free pages not given back (%s)", exc)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's varint at ``at``: (value, offset after it)."""
    value = 0
    for n in range(9):
        if at + n >= len(data):
            raise ValueError("FTS5 structure record ends inside a number")
        byte = data[at + n]
        if n == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + n + 1
    raise AssertionError("unreachable")  # pragma: no cover


def structure(conn: sqlite3.Connection) -> list[list[tuple[int, int]]]:
    """The FTS5 segments by level, as FTS5 records them: for each level (0: where a write's
    new segment goes), its segments as (segment id, leaf pages), oldest first. ValueError
    when the record is not one this reader knows."""
    found = conn.execute("SELECT block FROM fts_data WHERE id=?",
                         (_STRUCTURE_ROWID,)).fetchone()
    if found is None:
        return []
    data = bytes(found[0])
    at = 4  # the cookie
    v2 = data[at:at + 4] == _STRUCTURE_V2
    at += 4 if v2 else 0
    levels_n, at = _varint(data, at)
    segments_n, at = _varint(data, at)
    _, at = _varint(data, at)  # writes counter
    if v2:
        _, at = _varint(data, at)  # origin counter
    levels: list[list[tuple[int, int]]] = []
    for _level in range(levels_n):
        _, at = _varint(data, at)  # segments being merged
        count, at = _varint(data, at)
        segments = []
        for _segment in range(count):
            segid, at = _varint(data, at)
            first, at = _varint(data, at)
            last, at = _varint(data, at)
            if v2:
                for _extra in range(5):  # origins, tombstone pages and entries, entries
                    _, at = _varint(data, at)
            segments.append((segid, last - first + 1))
        levels.append(segments)
    if sum(map(len, levels)) != segments_n:
        raise ValueError("FTS5 structure record lists another number of segments")
    return levels
