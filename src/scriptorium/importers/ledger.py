"""The importers' bookkeeping (the ledger), one interface for both kinds of home.

Two kinds of records:

- per source file (:class:`FileState`): size, mtime, inode, the byte offset and line count
  read so far, a hash of its first bytes, the session it feeds and the parser's state at that
  offset. A re-run stats each file and skips it when size, mtime and inode are unchanged, so
  a run with nothing new opens no source file and no session. A file that shrank, or whose
  first bytes changed, was rewritten in place and is read again from the start.
- per imported session (:class:`SessionState`): the tree position of every source id (the
  turn above it), chain predecessors, which turns already have a child turn, content keys and
  id aliases, links between files, and a little format state. Lookups go to the ledger's
  store, so the memory an import needs does not grow with the size of a transcript.

One transaction per source file, committed after the nodes it describes are durable, so the
file's offset and its session's graph state move together; a crash costs a re-read that finds
every node already stored.

Where it lives: a directory home keeps it in ``home/imports/state.sqlite``
(:mod:`.ledger_sqlite`); a PostgreSQL home in its ``import_*`` tables (:mod:`.ledger_pg`).
:func:`.run.open_ledger` is the one place that picks.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

HEAD_BYTES = 4096


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
    parse: dict[str, Any] = field(default_factory=dict)  # the parser's state at ``offset``

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> "FileState":
        """From a stored row: size, mtime_ns, inode, offset, lines, head, session id and
        the parser state as JSON text."""
        size, mtime_ns, inode, offset, lines, head, session_id, parse = row
        return cls(size, mtime_ns, inode, offset, lines, head, session_id,
                   json.loads(parse or "{}"))


def head_hash(path: Path, upto: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(min(upto, HEAD_BYTES))).hexdigest()


class SessionState(Protocol):
    """One imported session's graph state (see :mod:`.graph`), read and written through the
    ledger inside its open transaction."""

    sid: str
    extra: dict[str, Any]  # a little format state, saved whole by save_extra

    def pos(self, node: str) -> tuple[str | None, bool] | None: ...

    def set_pos(self, node: str, anchor: str | None, side: bool) -> None: ...

    def pred(self, node: str) -> str | None: ...

    def set_pred(self, node: str, pred: str) -> None: ...

    def has_kid(self, node: str) -> bool: ...

    def add_kid(self, node: str) -> None: ...

    def name(self, space: str, key: str) -> str | None:
        """A value of one of the small maps: ``alias``, ``key``, ``link``, ``covered``."""

    def set_name(self, space: str, key: str, value: str) -> None: ...

    def save_extra(self) -> None:
        """Save ``extra`` and anything still held back (the end of one graph's run)."""


class Ledger:
    """The bookkeeping of one source format: the file rows (loaded at open, so deciding that
    a file is unchanged costs no query) and the sessions' graph state. Subclasses store it."""

    def __init__(self, kind: str, files: dict[str, FileState]) -> None:
        self.kind = kind
        self.files = files

    # --- transactions: one per source file (or ChatGPT conversation) -----------------------
    def begin(self) -> None:
        raise NotImplementedError

    def commit(self) -> None:
        raise NotImplementedError

    def rollback(self) -> None:
        """Undo the open transaction; safe to call when none is open."""
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def session(self, sid: str) -> SessionState:
        """The graph state of session ``sid`` (empty for a session not imported before)."""
        raise NotImplementedError

    def _store_file(self, path: str, state: FileState) -> None:
        raise NotImplementedError

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
        self._store_file(str(path), state)

