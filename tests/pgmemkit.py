"""Opening memory on either kind of home, for the suite that runs on both.

``Homes`` hands out :class:`Memory` objects for one home: a directory home, or a PostgreSQL
home (sessions in the PostgreSQL session store, memory in its tables). Every ``open`` is a
fresh process-like view: its own connections, mirror and locks, as another process would
have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from scriptorium.config import load_settings
from scriptorium.memory.writing import Memory
from scriptorium.sessions import SessionStore
from testkit import Cli


class Homes:
    """Memory on one home of the given ``kind`` ("directory" or "postgres")."""

    def __init__(self, kind: str, tmp_path: Path, pg_url: str | None = None) -> None:
        self.kind = kind
        self.dir = tmp_path / "home"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.url = pg_url if kind == "postgres" else None
        self.opened: list[Memory] = []

    @property
    def location(self) -> str:
        """What a user names the home by: its directory, or its URL."""
        return str(self.dir) if self.url is None else self.url

    def open(self, writer: Any = None, *, clock: Callable[[], float] | None = None,
             **settings: Any) -> Memory:
        """Memory on this home with ``settings`` over the defaults (the directory home's
        sessions without per-turn git commits, as the memory tests have always used)."""
        if self.kind == "directory":
            mem = Memory(self.dir, settings=load_settings(self.dir, settings), writer=writer,
                         store=SessionStore(self.dir / "sessions", git=False))
        else:
            mem = Memory.open(self.url, settings=load_settings(self.url, settings), writer=writer)
        if clock is not None:
            mem.clock = clock
        self.opened.append(mem)
        return mem

    def cli(self) -> Cli:
        """The CLI on this home (``--home DIR`` or ``--home URL``)."""
        return Cli(self.location)

    def close(self) -> None:
        for mem in self.opened:
            mem.close()


def new_homes(kind: str, where: Path, request: Any) -> Homes:
    """An empty home of ``kind`` for a test (files under ``where``; for PostgreSQL a fresh
    schema in the test server, which ``request`` fixture ``pg_server_url`` gives)."""
    url = None
    if kind == "postgres":
        from pgserver import home_url

        url = home_url(request.getfixturevalue("pg_server_url"))
    return Homes(kind, where, url)
