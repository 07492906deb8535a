"""Import bookkeeping kept inside the home, in one SQLite file: ``home/imports/state.sqlite``.

Two kinds of rows:

- per source file (``files``): size, mtime, inode, the byte offset and line count read so far,
  a hash of its first bytes, the session it feeds and the parser's state at that offset. A
  re-run stats each file and skips it when size, mtime and inode are unchanged, so a run with
  nothing new opens no source file and no session. A file that shrank, or whose first bytes
  changed, was rewritten in place and is read again from the start.
- per imported session: the tree position of every source id (the turn above it), chain
  predecessors, which turns already have a child turn, content keys and id aliases, links
  between files, and a little format state. Lookups go to the database, so the memory an
  import needs does not grow with the size of a transcript.

One transaction per source file, committed after the nodes it describes are durable, so the
file's offset and its session's graph state move together; a crash costs a re-read that finds
every node already stored. Nothing is written outside ``home/imports``, and a symlink there is
refused rather than followed.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptFile, InvalidInput

HEAD_BYTES = 4096

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


@dataclass
class FileState:
    """What an earlier run read of one source file."""

    size: int = 0
    mtime_ns: int = 0
    inode: int = 0
    offset: int = 0
    lines: int = 0
    head: str = ""  # sha256 of the first min(offset, HEAD_BYTES) bytes
    session_id: str = ""
    parse: dict = field(default_factory=dict)  # the format parser's state at ``offset``


def head_hash(path: Path, upto: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(min(upto, HEAD_BYTES))).hexdigest()


class Ledger:
    """The bookkeeping database, with the file rows of one source format loaded."""

    def __init__(self, home: Path, kind: str):
        self.kind = kind
        self.root = Path(home) / "imports"
        self.path = self.root / "state.sqlite"
        for where in (self.root, self.path):
            if where.is_symlink():
                raise InvalidInput(f"refusing to use import bookkeeping through a symlink: "
                                   f"{where}")
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.db = sqlite3.connect(self.path, isolation_level=None)
            self.db.execute("PRAGMA synchronous=FULL")
            self.db.executescript(_SCHEMA)
            rows = self.db.execute(
                "SELECT path, size, mtime_ns, inode, offset, lines, head, session_id, parse "
                "FROM files WHERE kind=?", (kind,)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise CorruptFile(f"corrupt import bookkeeping {self.path}: {exc}") from None
        self.files = {row[0]: FileState(*row[1:8], json.loads(row[8] or "{}")) for row in rows}

    def close(self) -> None:
        self.db.close()

    # --- transactions: one per source file ----------------------------------------------------
    def begin(self) -> None:
        self.db.execute("BEGIN")

    def commit(self) -> None:
        self.db.execute("COMMIT")

    def rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")

    # --- source files -------------------------------------------------------------------------
    def get(self, path: Path) -> FileState | None:
        return self.files.get(str(path))

    def unchanged(self, path: Path, st: os.stat_result) -> bool:
        """True when size, mtime and inode match the last run: nothing to read."""
        old = self.files.get(str(path))
        return (old is not None and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns
                and old.inode == st.st_ino)

    def put(self, path: Path, state: FileState) -> None:
        """Record a file's new state (inside the caller's transaction)."""
        self.files[str(path)] = state
        self.db.execute(
            "INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?)",
            (self.kind, str(path), state.size, state.mtime_ns, state.inode, state.offset,
             state.lines, state.head, state.session_id, json.dumps(state.parse)))


class SessionState:
    """One session's graph state, read and written through the ledger's database."""

    def __init__(self, ledger: Ledger, sid: str):
        self.db = ledger.db
        self.sid = sid
        row = self.db.execute("SELECT data FROM extra WHERE sid=?", (sid,)).fetchone()
        self.extra: dict = json.loads(row[0]) if row else {}

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
