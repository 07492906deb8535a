"""Helpers for the importer tests that run on both kinds of home (import as
``from importkit import …``): memory over a store's home, lost bookkeeping, node rewrites."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from scriptorium.memory.writing import Memory


def memory_of(store, home: Path, writer=None) -> Memory:
    """Memory over the home ``store`` belongs to (close it: a PostgreSQL home's own pool)."""
    pg = getattr(store, "pg", None)
    if pg is None:
        return Memory(home, store=store, writer=writer)
    return Memory.open(pg.target.url, writer=writer)


def forget(store, home: Path, *tables: str) -> None:
    """Drop import bookkeeping rows, as a crash before they were committed would have
    (tables by their directory-home names: files, pos, preds, kids, names, extra)."""
    pg = getattr(store, "pg", None)
    if pg is None:
        db = sqlite3.connect(home / "imports" / "state.sqlite")
        with db:
            for table in tables:
                db.execute(f"DELETE FROM {table}")
        db.close()
        return
    with pg.connection() as conn:
        for table in tables:
            conn.execute(f"DELETE FROM import_{table}")


def node_versions(store, sid: str) -> dict[str, object]:
    """Something that changes whenever a stored node is written again: a node file's inode
    and mtime, or a node row's transaction id (``xmin``)."""
    pg = getattr(store, "pg", None)
    if pg is None:
        hist = store.root / sid / "history"
        return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in hist.iterdir()}
    with pg.connection() as conn:
        rows = conn.execute("SELECT id, xmin::text FROM nodes WHERE session_id = %s",
                            (sid,)).fetchall()
    return dict(rows)
