"""The ledger of a directory home: one SQLite file, ``home/imports/state.sqlite``.

The rows are those :mod:`.ledger` describes (a ``files`` table, and per session ``pos``,
``preds``, ``kids``, ``names``, ``extra``); lookups are queries, so memory does not grow with a
transcript. Nothing is written outside ``home/imports``, and a symlink there is refused
rather than followed.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from ..errors import CorruptFile, InvalidInput
from .ledger import FileState, Ledger

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (kind TEXT, path TEXT, size INTEGER, mtime_ns INTEGER,
  inode INTEGER, offset INTEGER, lines INTEGER, head TEXT, session_id TEXT, parse TEXT,
  PRIMARY KEY (kind, path)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS pos (sid TEXT, id TEXT, anchor TEXT, side INTEGER,
  PRIMARY KEY (sid, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS preds (sid TEXT, id TEXT, pred TEXT,
  PRIMARY KEY (sid, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kids (sid TEXT, id TEXT, PRIMARY KEY (sid, id)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS names (sid TEXT, space TEXT, key TEXT, value TEXT,
  PRIMARY KEY (sid, space, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS extra (sid TEXT PRIMARY KEY, data TEXT) WITHOUT ROWID;
"""


def state_path(home: Path) -> Path:
    """Where a directory home keeps its import bookkeeping."""
    return Path(home) / "imports" / "state.sqlite"


def open_state_db(home: Path) -> sqlite3.Connection:
    """The bookkeeping database of the directory home ``home`` (created with its tables if
    missing; never through a symlink), in autocommit mode with durable commits."""
    path = state_path(home)
    for where in (path.parent, path):
        if where.is_symlink():
            raise InvalidInput(f"refusing to use import bookkeeping through a symlink: {where}")
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
    except sqlite3.DatabaseError as exc:
        raise CorruptFile(f"corrupt import bookkeeping {path}: {exc}") from None
    return db


class SqliteLedger(Ledger):
    """The bookkeeping database, with the file rows of one source format loaded."""

    def __init__(self, home: Path, kind: str):
        self.db = open_state_db(home)
        self.path = state_path(home)
        try:
            rows = self.db.execute(
                "SELECT path, size, mtime_ns, inode, offset, lines, head, session_id, parse "
                "FROM files WHERE kind=?", (kind,)).fetchall()
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise CorruptFile(f"corrupt import bookkeeping {self.path}: {exc}") from None
        super().__init__(kind, {row[0]: FileState.from_row(row[1:]) for row in rows})

    def close(self) -> None:
        self.db.close()

    def begin(self) -> None:
        self.db.execute("BEGIN")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    def session(self, sid: str) -> "SqliteSessionState":
        return SqliteSessionState(self, sid)

    def _store_file(self, path: str, state: FileState) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?)",
            (self.kind, path, state.size, state.mtime_ns, state.inode, state.offset,
             state.lines, state.head, state.session_id, json.dumps(state.parse)))


class SqliteSessionState:
    """One session's graph state, read and written through the ledger's database."""

    def __init__(self, ledger: SqliteLedger, sid: str):
        self.db = ledger.db
        self.sid = sid
        row = self.db.execute("SELECT data FROM extra WHERE sid=?", (sid,)).fetchone()
        self.extra: dict[str, Any] = json.loads(row[0]) if row else {}

    def pos(self, node: str) -> tuple[str | None, bool] | None:
        row = self.db.execute("SELECT anchor, side FROM pos WHERE sid=? AND id=?",
                              (self.sid, node)).fetchone()
        return None if row is None else (row[0], bool(row[1]))

    def set_pos(self, node: str, anchor: str | None, side: bool) -> None:
        self.db.execute("INSERT OR REPLACE INTO pos VALUES (?,?,?,?)",
                        (self.sid, node, anchor, int(side)))

    def pred(self, node: str) -> str | None:
        row = self.db.execute("SELECT pred FROM preds WHERE sid=? AND id=?",
                              (self.sid, node)).fetchone()
        return None if row is None else row[0]

    def set_pred(self, node: str, pred: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO preds VALUES (?,?,?)", (self.sid, node, pred))

    def has_kid(self, node: str) -> bool:
        return self.db.execute("SELECT 1 FROM kids WHERE sid=? AND id=?",
                               (self.sid, node)).fetchone() is not None

    def add_kid(self, node: str) -> None:
        self.db.execute("INSERT OR IGNORE INTO kids VALUES (?,?)", (self.sid, node))

    def name(self, space: str, key: str) -> str | None:
        """A value of one of the small maps: ``alias``, ``key``, ``link``."""
        row = self.db.execute("SELECT value FROM names WHERE sid=? AND space=? AND key=?",
                              (self.sid, space, key)).fetchone()
        return None if row is None else row[0]

    def set_name(self, space: str, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO names VALUES (?,?,?,?)",
                        (self.sid, space, key, value))

    def save_extra(self) -> None:
        self.db.execute("INSERT OR REPLACE INTO extra VALUES (?,?)",
                        (self.sid, json.dumps(self.extra)))
