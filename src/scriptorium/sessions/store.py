"""SessionStore: the DAG session store on disk (DESIGN §3, store reference §3–§4).

Every write (append, node rewrite, head move, meta write) happens under one per-session
cross-process lock (``flock`` on ``<sid>/.session.lock``), after refreshing the cache from
disk, so idempotence, seq assignment and head-advance decisions see every other process's
writes, and a node rewrite always merges into the bytes on disk. Reads take no file lock:
every file is replaced atomically, so a reader sees the old or the new version, never a mix.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import CorruptFile, InvalidInput, ScriptoriumError
from ..fsutil import (FileLock, atomic_write_bytes, atomic_write_json, atomic_write_text,
                      check_name, check_text, json_object)
from .announce import HeadAnnouncer, HeadListener
from .appends import AppendOps
from .checks import check_new_session_id
from .commits import GITIGNORE, CommitOps
from .errors import SessionNotFound
from .events import RESERVED_SESSION_ID, HeadMoveLog
from .forks import ForkOps
from .index import SessionIndex
from .lines import LineOps
from .marks import MarkOps
from .node import Node, new_id
from .nodefiles import LOCK_NAME
from .ops import Op
from .reads import ReadOps

if TYPE_CHECKING:  # pragma: no cover
    from .bulk import BulkAppender

log = logging.getLogger(__name__)

# Sessions whose index (nodes, fingerprints) and locks a store keeps in memory, least
# recently used dropped first: a process that walks thousands of sessions (``write --all``)
# holds a bounded number, and a dropped one is read again from disk when next asked for.
MAX_OPEN_SESSIONS = 32

class SessionStore(AppendOps, ReadOps, ForkOps, LineOps, MarkOps, CommitOps, HeadAnnouncer):
    """All sessions under ``root`` (= ``<home>/sessions``)."""

    lock_timeout: float = 60.0

    def __init__(self, root: Path, *, git: bool = True):
        self.root = Path(root)
        self.git = git  # False skips per-turn commits (tests, benchmarks of the bare store)
        self.events = HeadMoveLog(self.root)  # head moves, told to other processes
        self._indexes: OrderedDict[str, SessionIndex] = OrderedDict()
        self._tlocks: OrderedDict[str, threading.RLock] = OrderedDict()
        self._flocks: dict[str, FileLock] = {}
        self._guard = threading.Lock()
        self._listeners: list[HeadListener] = []
        self._lines = LineOps.new_cache()

    @classmethod
    def from_home(cls, home: Path, **kw: Any) -> "SessionStore":
        return cls(Path(home) / "sessions", **kw)

    # --- plumbing ----------------------------------------------------------------------------
    def _dir(self, sid: str) -> Path:
        if sid == RESERVED_SESSION_ID:
            raise InvalidInput(f"invalid session id {sid!r}: reserved for the store's own files")
        return self.root / check_name(sid, "session id")

    def exists(self, sid: str) -> bool:
        """True when ``<root>/<sid>`` is a real session directory (meta.json or history/)."""
        d = self._dir(sid)
        if d.is_symlink() or not d.is_dir():
            return False
        return (d / "meta.json").is_file() or (d / "history").is_dir()

    def _require(self, sid: str) -> Path:
        if not self.exists(sid):
            raise SessionNotFound(f"session {sid} not found under {self.root}")
        return self.root / sid

    def _locks(self, sid: str) -> tuple[threading.RLock, FileLock]:
        with self._guard:
            tl = self._tlocks.get(sid)
            if tl is None:
                tl = self._tlocks[sid] = threading.RLock()
                self._flocks[sid] = FileLock(self.root / sid / LOCK_NAME,
                                             timeout=self.lock_timeout,
                                             what=f"session {sid} lock")
                self._drop_idle_locks()
            else:
                self._tlocks.move_to_end(sid)
            return tl, self._flocks[sid]

    def _drop_idle_locks(self) -> None:
        """Forget the least recently used locks past MAX_OPEN_SESSIONS whose file lock no
        thread of this process holds (caller holds ``_guard``). Should a thread still be
        about to take a dropped pair, the ``flock`` itself keeps excluding the new pair:
        two descriptors of one lock file exclude each other."""
        for old in list(self._tlocks)[:max(0, len(self._tlocks) - MAX_OPEN_SESSIONS)]:
            if not self._flocks[old].held:
                del self._tlocks[old], self._flocks[old]

    def _index(self, sid: str) -> SessionIndex:
        with self._guard:
            idx = self._indexes.get(sid)
            if idx is None:
                idx = self._indexes[sid] = SessionIndex(sid, self.root / sid)
                while len(self._indexes) > MAX_OPEN_SESSIONS:
                    old, _ = self._indexes.popitem(last=False)
                    self._forget_lines(old)
            else:
                self._indexes.move_to_end(sid)
            return idx

    @contextlib.contextmanager
    def _reading(self, sid: str) -> Iterator[SessionIndex]:
        self._require(sid)
        tl, _ = self._locks(sid)
        with tl:
            idx = self._index(sid)
            idx.refresh()
            yield idx

    @contextlib.contextmanager
    def _writing(self, sid: str) -> Iterator[Op]:
        self._require(sid)
        with self._locked(sid) as idx:
            op = Op(sid, idx)
            yield op
            self._log_moves(op.events)
        self._announce(op.events)

    def _log_moves(self, events: list[tuple[str, str | None, str | None]]) -> None:
        """Tell other processes (under the session lock, so one session's moves keep their
        order). The moves are already durable in meta.json: a log that cannot be written costs
        a reader one full poll, never a turn, so it is reported, not raised."""
        if not events:
            return
        try:
            self.events.append(events, time.time())
        except (OSError, ScriptoriumError) as exc:
            log.warning("head-move log not written (%s): watchers find the move by polling", exc)

    @contextlib.contextmanager
    def _locked(self, sid: str) -> Iterator[SessionIndex]:
        """The session lock held, the index fresh; on the way out (even after an error) the
        index seals what this process wrote, so other processes notice it."""
        tl, fl = self._locks(sid)
        with tl, fl:
            idx = self._index(sid)
            idx.refresh()
            self._sweep_temps(idx)
            try:
                yield idx
            finally:
                idx.seal()

    @staticmethod
    def _sweep_temps(idx: SessionIndex) -> None:
        """Under the lock no other writer of ours is mid-write, so a temp file the last scan
        saw in ``history/`` was left by a killed process: remove it."""
        for name in idx.stale_temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(idx.hist / name)
        idx.stale_temps = []

    # --- sessions ---------------------------------------------------------------------------
    def create_session(self, session_id: str | None = None, title: str = "", **extra: Any) -> str:
        """Create a session (idempotent: an existing one is left as it is)."""
        sid = new_id() if session_id is None else session_id
        sdir = self._dir(sid)
        if not isinstance(title, str):
            raise InvalidInput(f"invalid title for session {sid}: expected a string")
        check_text(title, f"title of session {sid}")
        if sdir.is_symlink() or (sdir.exists() and not sdir.is_dir()):
            raise InvalidInput(f"session path {sdir} exists and is not a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        if not sdir.exists():
            check_new_session_id(self.root, sid, self.exists)
        sdir.mkdir(exist_ok=True)
        with self._locked(sid) as idx:
            if idx.meta_present:
                if idx.meta.get("id") != sid:  # a copied-in or history-only session
                    self._write_meta(idx, dict(idx.meta, id=sid))
                return sid
            now = time.time()
            meta = {"id": sid, "title": title, "created_at": now, "updated_at": now,
                    "head_id": idx.head, "branches": {}}
            meta.update(extra)
            (sdir / "history").mkdir(exist_ok=True)
            if not (sdir / ".gitignore").exists():
                atomic_write_text(sdir / ".gitignore", GITIGNORE, mode=0o644)
            self._write_meta(idx, meta)
        return sid

    def list_sessions(self) -> list[dict]:
        """One row per session, newest ``updated_at`` first. A session whose meta.json is
        unreadable is listed with ``error`` rather than hiding every other session."""
        rows = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for e in entries:
            try:
                check_name(e.name)
                if not self.exists(e.name):
                    continue
            except InvalidInput:
                continue
            row: dict[str, Any] = {"session_id": e.name, "title": "", "updated_at": 0.0,
                                   "head_id": None}
            try:
                meta = self._read_meta_file(Path(e.path) / "meta.json")
                title, upd, head = meta.get("title"), meta.get("updated_at"), meta.get("head_id")
                row["title"] = title if isinstance(title, str) else ""
                row["updated_at"] = upd if isinstance(upd, (int, float)) else 0.0
                row["head_id"] = head if isinstance(head, str) and head else None
            except CorruptFile as exc:
                row["error"] = str(exc)
            rows.append(row)
        rows.sort(key=lambda r: (r["updated_at"], r["session_id"]), reverse=True)
        return rows

    @staticmethod
    def _read_meta_file(path: Path) -> dict:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {}
        return json_object(data, f"meta file {path}")

    def _meta_for_write(self, idx: SessionIndex) -> dict:
        if idx.meta_present:
            return dict(idx.meta)
        now = time.time()
        return {"id": idx.sid, "title": "", "created_at": now, "updated_at": now,
                "head_id": idx.head, "branches": {}}

    def _write_meta(self, idx: SessionIndex, meta: dict) -> None:
        atomic_write_json(idx.meta_path, meta)
        idx.record_own_meta(meta)

    def _unstore_node(self, op: Op, node: Node) -> None:
        """Remove the node file an add wrote before it failed; the index re-lists
        ``history/`` at its next refresh and drops it."""
        idx = op.idx
        with contextlib.suppress(FileNotFoundError):
            os.unlink(idx.hist / node.filename())
        idx.forget_own_write()

    def _store_node(self, op: Op, node: Node) -> None:
        """Write a new node's file (its seq assigned) and teach the index."""
        idx = op.idx
        idx.before_own_history_write()
        idx.hist.mkdir(parents=True, exist_ok=True)
        name = node.filename()
        data = node.dumps()
        atomic_write_bytes(idx.hist / name, data)
        idx.record_own_write(name, node, data)

    def bulk(self, sid: str) -> "BulkAppender":
        """Many appends to ``sid`` under one lock, streamed to disk (importers): see
        :mod:`scriptorium.sessions.bulk`."""
        from .bulk import BulkAppender

        return BulkAppender(self, sid)
