"""Opening memory on either kind of home, for the suite that runs on both.

``Homes`` hands out :class:`Memory` objects for one home: a directory home, or a PostgreSQL
home (sessions in the PostgreSQL session store, memory in its tables). Every ``open`` is a
fresh process-like view: its own connections, mirror and locks, as another process would
have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory


class Homes:
    """Memory on one home of the given ``kind`` ("directory" or "postgres")."""

    def __init__(self, kind: str, tmp_path: Path, pg_url: str | None = None) -> None:
        self.kind = kind
        self.dir = tmp_path / "home"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.url = pg_url
        self.opened: list[Memory] = []

    def open(self, writer: Any = None, **settings: Any) -> Memory:
        if self.kind == "directory":
            mem = Memory(self.dir, settings=load_settings(self.dir, settings), writer=writer)
        else:
            mem = Memory.open(self.url, settings=load_settings(self.url, settings), writer=writer)
        self.opened.append(mem)
        return mem

    def close(self) -> None:
        for mem in self.opened:
            mem.close()
