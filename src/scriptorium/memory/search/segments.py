"""The FTS5 segments of the search index: when they are merged, and the pages merges free.

FTS5 stores its postings in segments, each a b-tree of leaf pages holding terms in order,
each term followed by the documents that hold it (a rowid and positions each). A build (the
first write of an index) inserts every document with FTS5's automatic merges off and, when
it holds more than ``OPTIMIZE_AFTER`` documents, merges its segments into one
(:func:`finish_writes`); the pages that merge freed are given back by a ``VACUUM``
(:func:`compact`). Every later write adds one small segment, which FTS5 merges with others
of its level four at a time (``AUTOMERGE``, its default), a few pages a write; the free
pages beyond ``FREE_PAGES_KEPT`` that these merges leave are given back after each write
(:func:`give_back`), so the file stays about the size of what it holds.

What a one-claim write costs (issue 12, measured by benchmarks/bench_disk_growth.py): its
segment holds its own copy of each of the claim's terms (about 25: its words, its file's
path words and headings, its date), 11 to 13 bytes a term (the term, its first rowid, its
positions, its place in the page index), about 300 bytes, where the same claim costs about
130 once merged into a segment that already holds those terms. Sharing them means
rewriting a segment that holds them: after a build that is the build's segment, the whole
index, and FTS5's levels give no way to merge a small segment into a bounded part of it.
:func:`structure` reads the segments as FTS5 records them, for the tests and the benchmark.
"""

from __future__ import annotations

import logging
import sqlite3

log = logging.getLogger(__name__)

OPTIMIZE_AFTER = 1000  # documents a build must hold to be merged into one FTS segment
# Free pages a write leaves in the file (what FTS5's merges freed) beyond this many are given
# back to the filesystem (incremental vacuum): the file stays about the size of what it holds
# without moving pages on every small write.
FREE_PAGES_KEPT = 16
AUTOMERGE = 4  # FTS5's own default: small writes' segments are merged four at a time

_STRUCTURE_ROWID = 10  # the fts_data row FTS5 keeps its list of segments in
_STRUCTURE_V2 = b"\xff\x00\x00\x01"  # what newer FTS5 versions put after the cookie


def pause_merges(conn: sqlite3.Connection) -> None:
    """No automatic merges while a build inserts: its segments are merged once, at its end."""
    conn.execute("INSERT INTO fts(fts, rank) VALUES ('automerge', 0)")


def finish_writes(conn: sqlite3.Connection, *, building: bool, documents: int) -> bool:
    """End a write transaction's FTS work; True when it merged a build into one segment (the
    caller then :func:`compact`s the file once committed, else it :func:`give_back`s).

    A build's segments are merged into one (left among the small writes' segments, the next
    merge of those would copy the whole index inside some small write); later writes merge
    their small segments as FTS5 does by default."""
    built = building and documents >= OPTIMIZE_AFTER
    if built:
        conn.execute("INSERT INTO fts(fts) VALUES ('optimize')")
    if building:
        conn.execute(f"INSERT INTO fts(fts, rank) VALUES ('automerge', {AUTOMERGE})")
    return built


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
