"""What the derived SQLite files (the search index, the topic catalog) share: each records its
schema version in a ``meta`` table, and a file of another version is emptied and made anew,
not migrated (what it holds is rebuilt from the files it is derived from)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Callable

SUFFIXES = ("", "-wal", "-shm", "-journal")  # a database file and SQLite's companions


def schema_version(conn: sqlite3.Connection) -> str | None:
    """The schema version ``conn``'s file was built at (None: no ``meta`` table or no row)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                        "name='meta'").fetchone():
        return None
    row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    return row[0] if row else None


def ensure_schema(conn: sqlite3.Connection, version: str, schema: str,
                  fill: Callable[[sqlite3.Connection], None] | None = None) -> None:
    """Make ``conn``'s file hold ``schema`` at ``version``: a file at another version (or a new
    one) has every view and table dropped, then ``schema``'s statements run, the version is
    recorded in ``meta`` and ``fill`` adds what else the new file starts with; all in one
    transaction, checked again inside it (another process may have made it first)."""
    if schema_version(conn) == version:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if schema_version(conn) != version:
            for kind in ("view", "table"):  # views first: they name tables
                # an FTS5 table's shadow tables (fts_*) go with it
                names = [r[0] for r in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type=? AND name NOT LIKE 'sqlite_%' "
                    "AND name NOT LIKE 'fts_%'", (kind,))]
                for name in names:
                    conn.execute(f'DROP {kind.upper()} IF EXISTS "{name}"')
            for statement in schema.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema', ?)", (version,))
            if fill is not None:
                fill(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def remove_files(path: Path | str) -> None:
    """Delete a database file and its companions (those that exist)."""
    for suffix in SUFFIXES:
        try:
            os.unlink(str(path) + suffix)
        except FileNotFoundError:
            pass
