"""Opening memory on either kind of home, for the suite that runs on both.

``Homes`` hands out :class:`Memory` objects for one home: a directory home, or a PostgreSQL
home (its workspace in the database; its sessions in the PostgreSQL session store when this
scriptorium has one, else in a directory store beside the test, so the memory side can be
tested on its own). Every ``open`` is a fresh process-like view: its own mirror and lock
connection, as another process would have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore


def pg_session_store_available() -> bool:
    try:
        import scriptorium.sessions.pg_store  # noqa: F401
    except ImportError:
        return False
    return True


class Homes:
    """Memory on one home of the given ``kind`` ("directory" or "postgres")."""

    def __init__(self, kind: str, tmp_path: Path, pg_url: str | None = None) -> None:
        self.kind = kind
        self.dir = tmp_path / "home"
        self.dir.mkdir(exist_ok=True)
        self.url = pg_url
        self.opened: list[Memory] = []

    def open(self, writer: Any = None, **settings: Any) -> Memory:
        if self.kind == "directory":
            mem = Memory(self.dir, settings=load_settings(self.dir, settings), writer=writer)
        elif pg_session_store_available():
            mem = Memory.open(self.url, settings=load_settings(self.url, settings), writer=writer)
        else:
            from scriptorium.memory.pg_workspace import PgWorkspace
            from scriptorium.postgres.connect import PgHome

            pg = PgHome.open(self.url)
            try:
                workspace = PgWorkspace.open_home(pg)
            except BaseException:
                pg.close()
                raise
            mem = Memory(self.dir, settings=load_settings(self.url, settings), writer=writer,
                         store=SessionStore(self.dir / "sessions"), workspace=workspace)
        self.opened.append(mem)
        return mem

    def close(self) -> None:
        for mem in self.opened:
            pg = getattr(mem.workspace, "pg", None)
            if pg is not None:
                mem.workspace.close()
                pg.close()
