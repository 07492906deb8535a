"""Helpers for tests that run on either kind of home: what a session store holds, and
damage done to it from outside the API."""

from __future__ import annotations

import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

HOME_KINDS = ("directory", "postgres")


def open_session_store(kind: str, where: str):
    """A session store of ``kind`` at ``where`` (a sessions directory, or a home URL); for the
    PostgreSQL kind the caller closes it. A second call with the same ``where`` is another
    process's view of the same home."""
    if kind == "directory":
        from scriptorium.sessions import SessionStore

        return SessionStore(Path(where), git=False)
    from scriptorium.sessions.pg_store import PgSessionStore

    return PgSessionStore.open(where)


@contextmanager
def another_store(kind: str, where: str) -> Iterator[Any]:
    """Another process's view of the same home (closed at the end of the block)."""
    store = open_session_store(kind, where)
    try:
        yield store
    finally:
        if kind != "directory":
            store.close()


def damage(store, sid: str, node_id: str, *, delete: bool = False, **fields) -> None:
    """Damage one stored node from outside the API (a hand edit, a bad copy): set top-level
    ``fields`` of its JSON, or delete it. The directory store's file is replaced by rename; the
    PostgreSQL store's row is rewritten with a new session rev (a deleted row is forgotten by
    this store's cache too), so the next read of either sees the damage."""
    if isinstance(store.root, Path):
        path = next((store.root / sid / "history").glob(f"*-{node_id}.json"))
        if delete:
            path.unlink()
            return
        doc = json.loads(path.read_text())
        doc.update(fields)
        tmp = path.with_name(".damage.tmp")
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
        return
    from psycopg.types.json import Jsonb

    with store.pg.connection() as conn:
        rev = conn.execute("UPDATE sessions SET rev = rev + 1 WHERE id = %s RETURNING rev",
                           (sid,)).fetchone()[0]
        if delete:
            conn.execute("DELETE FROM nodes WHERE session_id = %s AND id = %s", (sid, node_id))
        else:
            body = conn.execute("SELECT body FROM nodes WHERE session_id = %s AND id = %s",
                                (sid, node_id)).fetchone()[0]
            body.update(fields)
            conn.execute("UPDATE nodes SET body = %s, rev = %s WHERE session_id = %s AND id = %s",
                         (Jsonb(body), rev, sid, node_id))
    if delete:
        store._forget(sid)


def stored(store) -> dict:
    """Everything a store holds, to compare before/after a refused call: the files under a
    directory store (its lock files aside), the rows of a PostgreSQL store."""
    if isinstance(store.root, Path):
        root = store.root
        if not root.exists():
            return {}
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
                if p.is_file() and p.name != ".session.lock"}
    with store.pg.connection() as conn:
        return {"sessions": conn.execute("SELECT * FROM sessions ORDER BY id").fetchall(),
                "nodes": conn.execute("SELECT * FROM nodes ORDER BY session_id, seq").fetchall(),
                "moves": conn.execute("SELECT * FROM head_moves ORDER BY seq").fetchall()}
