"""Copying the import ledger between homes (``scriptorium home copy``), either way.

Without it, the first import after a copy re-reads every source file and adds nothing (every
node is already there). With it, the copied home knows what was read, so that import reads
only what is new.

What moves: every session's graph state (tree positions, chain predecessors, child turns,
names, format state), then the source-file rows. A directory home is one machine, so its
file rows become this host's rows in a PostgreSQL home; from a PostgreSQL home only this
host's file rows come down (another host's paths name files on that host). "This host" is
:func:`~scriptorium.postgres.host.host_name`.

Safe to stop and run again: the copy runs after every session's nodes are in DST, and it is
one transaction that replaces DST's ledger with SRC's. A copy stopped before it leaves DST
with no file rows, so the next import re-reads and finds what is stored; a copy run again
writes the same rows; a copy killed inside that transaction (fault point
``home-copy-ledger``, after each table) leaves DST's earlier ledger whole.
:func:`ledger_digest` compares two ledgers without holding either in memory (an order-free
sum of row hashes), for the copy's final check.
"""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ..faults import fault_point
from ..postgres.host import host_name
from .ledger_sqlite import open_state_db, state_path

if TYPE_CHECKING:  # pragma: no cover - the postgres extra is optional
    from ..postgres.connect import PgHome

# the tables by their directory-home names, the session state first: the file rows (which
# say what was read) arrive last
TABLES = ("pos", "preds", "kids", "names", "extra", "files")
_COLUMNS = {
    "pos": ("sid", "id", "anchor", "side"),
    "preds": ("sid", "id", "pred"),
    "kids": ("sid", "id"),
    "names": ("sid", "space", "key", "value"),
    "extra": ("sid", "data"),
    "files": ("kind", "path", "size", "mtime_ns", "inode", "offset", "lines", "head",
              "session_id", "parse"),
}
CHUNK = 2000  # rows per round trip, and what is held in memory at once


def _norm(table: str, row: Iterable[Any]) -> tuple[Any, ...]:
    """One row as both homes can hold it: a boolean as a bool, no NUL in text (PostgreSQL
    text holds none; the ledger keeps U+FFFD there)."""
    out = []
    for i, value in enumerate(row):
        if table == "pos" and i == 3:
            value = bool(value)
        elif isinstance(value, str) and "\x00" in value:
            value = value.replace("\x00", "\ufffd")
        out.append(value)
    return tuple(out)


class SqliteTables:
    """The ledger of a directory home (``home/imports/state.sqlite``); reading a home that
    never imported creates nothing."""

    def __init__(self, home: Path, *, create: bool) -> None:
        self.db: sqlite3.Connection | None = None
        if create or state_path(home).exists():
            self.db = open_state_db(home)

    def rows(self, table: str) -> Iterator[tuple[Any, ...]]:
        if self.db is None:
            return
        cur = self.db.execute(f"SELECT {', '.join(_COLUMNS[table])} FROM {table}")
        while chunk := cur.fetchmany(CHUNK):
            for row in chunk:
                yield _norm(table, row)

    @contextmanager
    def replacing(self) -> Iterator[None]:
        assert self.db is not None
        self.db.execute("BEGIN IMMEDIATE")
        try:
            for table in TABLES:
                self.db.execute(f"DELETE FROM {table}")
            yield
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def write(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        assert self.db is not None
        marks = ", ".join("?" * len(_COLUMNS[table]))
        self.db.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


class PgTables:
    """The ledger of a PostgreSQL home (its ``import_*`` tables), file rows of ``host``."""

    def __init__(self, pg: "PgHome", host: str) -> None:
        self.pg, self.host = pg, host
        self.conn = pg.dedicated(autocommit=False)

    def _select(self, table: str) -> tuple[str, tuple[Any, ...]]:
        cols = [c if c != "sid" else "session_id" for c in _COLUMNS[table]]
        cols = [f'"{c}"' if c == "offset" else c for c in cols]
        sql = f"SELECT {', '.join(cols)} FROM import_{table}"
        return (sql + " WHERE host = %s", (self.host,)) if table == "files" else (sql, ())

    def rows(self, table: str) -> Iterator[tuple[Any, ...]]:
        sql, args = self._select(table)
        with self.conn.cursor(name=f"ledger_{table}") as cur:
            cur.itersize = CHUNK
            cur.execute(sql, args)
            for row in cur:
                yield _norm(table, row)
        self.conn.commit()

    @contextmanager
    def replacing(self) -> Iterator[None]:
        try:
            for table in TABLES:
                if table == "files":
                    self.conn.execute("DELETE FROM import_files WHERE host = %s", (self.host,))
                else:
                    self.conn.execute(f"DELETE FROM import_{table}")
            yield
            self.conn.commit()
        except BaseException:
            self.conn.rollback()
            raise

    def write(self, table: str, rows: list[tuple[Any, ...]]) -> None:
        if table == "files":  # the host goes second: (kind, host, path, ...)
            rows = [(r[0], self.host, *r[1:]) for r in rows]
        width = len(rows[0]) if rows else 0
        with self.conn.cursor() as cur:
            cur.executemany(f"INSERT INTO import_{table} VALUES "
                            f"({', '.join(['%s'] * width)})", rows)

    def close(self) -> None:
        self.conn.close()


Tables = SqliteTables | PgTables


def open_tables(home: Path | str, pg: "PgHome | None", *, create: bool) -> Tables:
    """The ledger of a home: ``pg`` when it is a PostgreSQL home, else the directory's file."""
    if pg is not None:
        return PgTables(pg, host_name())
    return SqliteTables(Path(home), create=create)


def copy_ledger(src: Tables, dst: Tables) -> int:
    """Replace ``dst``'s ledger with ``src``'s in one transaction; returns the rows copied."""
    copied = 0
    with dst.replacing():
        for table in TABLES:
            chunk: list[tuple[Any, ...]] = []
            for row in src.rows(table):
                chunk.append(row)
                if len(chunk) >= CHUNK:
                    dst.write(table, chunk)
                    copied, chunk = copied + len(chunk), []
            if chunk:
                dst.write(table, chunk)
                copied += len(chunk)
            fault_point("home-copy-ledger")  # a table written, the transaction still open
    return copied


def ledger_digest(tables: Tables) -> dict[str, tuple[int, int]]:
    """Per table: the row count and an order-free sum of row hashes."""
    out = {}
    for table in TABLES:
        count = total = 0
        for row in tables.rows(table):
            digest = hashlib.blake2b(repr(row).encode("utf-8", "surrogatepass"),
                                     digest_size=8).digest()
            total = (total + int.from_bytes(digest, "big")) % (1 << 64)
            count += 1
        out[table] = (count, total)
    return out
