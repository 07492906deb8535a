"""The search index's SQLite file: where it lives, its schema and how it is opened.

The file (``<runtime dir>/search.sqlite``) is derived data: a file at another schema version
is emptied and made anew (:func:`~scriptorium.sqlitefile.ensure_schema`), a symlink in its
place is replaced rather than written through, and an unreadable file is rebuilt by the
caller (:class:`~.index.SearchIndex`). How documents are stored in it is ``rows.py``; how
its FTS5 segments are merged and its free pages given back is ``segments.py``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
from pathlib import Path

from ...sqlitefile import SUFFIXES, ensure_schema, remove_files
from .rows import TABLES

log = logging.getLogger(__name__)

INDEX_FILE = "search.sqlite"
SCHEMA_VERSION = "9"  # 2: contentless FTS (text stored once, in docs); 3: claims carry the
# speakers of the turns they cite; 4: each path stored once per document (``file`` and
# ``logical`` computed), dates keyed by document without a rowid; 5: paths and headings
# stored once (a number per document, see rows.py), ``docs`` a view; 6: date ranges as
# numbers (rows.day_number), free pages given back (auto_vacuum incremental); 7: a file's
# documents listed as id ranges in its row (rows.id_ranges), no index on doc_rows(file); a
# document's kind a number, its dates, sources and speakers stored compactly (rows._stored),
# its first date range in its row (doc_dates holds the others); 8: a write's postings merged
# into a one-page tail segment at once, the build's segment above it (segments.py); 9: the
# files whose citations did not all resolve found by an index (files_unresolved), as no
# process keeps the files' rows

MMAP_SIZE = 256 << 20  # how much of the file a connection maps (see open_index)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
""" + TABLES + """
CREATE VIRTUAL TABLE IF NOT EXISTS fts USING fts5(
    body, context, dates, cjk, content='', tokenize='porter unicode61 remove_diacritics 2');
CREATE TABLE IF NOT EXISTS vectors(
    model TEXT NOT NULL, key TEXT NOT NULL, vec BLOB NOT NULL, PRIMARY KEY(model, key));
"""


def open_index(path: Path) -> sqlite3.Connection:
    """A connection to the index file at ``path`` (its directory made private if new), in
    autocommit mode (callers open their own transactions), at the current schema."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    if any(os.path.islink(str(path) + suffix) for suffix in SUFFIXES):
        # SQLite would write through it; the index is derived, so replace the link
        log.warning("search index %s is a symlink; replacing it with a new index", path)
        remove_files(path)
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None, check_same_thread=False)
    try:
        # Before the first table and before WAL mode (which makes an empty file no longer
        # new): pages freed by merges can then be given back (an index made without it gets
        # it at its build's VACUUM, see segments.compact).
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")  # derived data: WAL + NORMAL is enough
        conn.execute("PRAGMA cache_size=-16000")  # 16 MB: FTS merges and queries stay warm
        # Queries read rows scattered over the file: mapped, a row read is a memory read
        # (shared with other processes through the page cache), not a read() call each.
        conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
        conn.execute("PRAGMA journal_size_limit=1048576")  # the WAL shrinks back to 1 MB
        ensure_schema(conn, SCHEMA_VERSION, _SCHEMA)
        try:
            os.chmod(path, 0o600)
        except OSError:  # pragma: no cover - best effort on odd filesystems
            pass
    except BaseException:
        conn.close()
        raise
    return conn


def settle(conn: sqlite3.Connection) -> None:
    """Give back what ``conn`` gathered from the file: its page cache (``shrink_memory``)
    and the pages of its map, which stays off until :func:`map_for_queries` turns it on.

    Called between the sessions of a long write: the pages the updates touched pile up
    (up to the 16 MB cache and the whole file mapped), so the process's peak memory would
    follow the index's size, not one write. And the writes that follow read what they need
    into the page cache, a page each: through the map, each page a write reads brings in
    the 64 kB around it (the kernel's fault-around), so what one update holds grew with the
    file (0.1 MB an update at 400 sessions of a write --all, 0.3 MB at 1,900)."""
    conn.execute("PRAGMA shrink_memory")
    conn.execute("PRAGMA mmap_size=0")


def map_for_queries(conn: sqlite3.Connection) -> None:
    """Map the file again for the queries (after :func:`settle`; see :func:`open_index`)."""
    conn.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
