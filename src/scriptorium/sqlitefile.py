"""What the derived SQLite files (the search index, the topic catalog) share: each records its
schema version in a ``meta`` table, and a file of another version is rebuilt, not migrated."""

from __future__ import annotations

import sqlite3


def schema_version(conn: sqlite3.Connection) -> str | None:
    """The schema version ``conn``'s file was built at (None: no ``meta`` table or no row)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND "
                        "name='meta'").fetchone():
        return None
    row = conn.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
    return row[0] if row else None
