"""PgSessionStore: the session store of a PostgreSQL home (issue #20).

The same public API, rules and errors as the directory store (:class:`~.store.SessionStore`):
the operations are the shared mixins (appends, reads, forks, lines, marks); this module only
supplies their primitives over tables (``postgres/migrations.py``, component ``sessions``):

- ``sessions`` (one row per session: its meta as jsonb and a ``rev`` counter),
- ``nodes`` (one row per node: the node's JSON, its seq and the ``rev`` that last wrote it),
- ``head_moves`` (every head move, written in the transaction that made it, then
  ``NOTIFY scriptorium_<home>`` so listeners on any host are told after it commits; read
  like the directory home's log through :attr:`PgSessionStore.events`, see
  :mod:`.pg_events`).

A write is one transaction holding the session row ``FOR UPDATE``: the row lock is the
directory store's session lock, across processes and hosts, and dies with its connection.
Each process keeps the session's graph cached (:class:`PgIndex`) with the ``rev`` it reflects;
every write bumps ``rev`` and stamps the rows it wrote with it, so a read asks for the rev
(one indexed row) and fetches only the rows written since. A failed transaction drops the
cache, so nothing it held survives in memory either.

Not supported on this home: the per-turn git history (``git_log``, ``commit_turn`` with a
non-empty session): the rows are the history.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Iterator

from ..errors import ConcurrentUpdate, CorruptFile, InvalidInput
from ..faults import fault_point
from ..fsutil import check_name, check_text, name_key
from .announce import HeadAnnouncer, HeadListener
from .appends import AppendOps
from .checks import check_session_id_length, same_name_clash
from .errors import NodeNotFound, SessionNotFound
from .events import RESERVED_SESSION_ID
from .forks import ForkOps
from .lines import LineOps
from .marks import MarkOps
from .node import Node, new_id
from .ops import Op
from .pg_bulk import PgBulkAppender
from .pg_events import PgHeadMoveLog, log_moves
from .pg_rows import INSERT_NODE, PgIndex, PgOp, jsonb, node_json
from .reads import ReadOps
from .store import MAX_OPEN_SESSIONS

if TYPE_CHECKING:  # pragma: no cover
    from ..postgres.connect import PgHome

NOTIFY_PREFIX = "scriptorium_"  # the channel is the home's schema name: scriptorium_<home>


class PgSessionStore(AppendOps, ReadOps, ForkOps, LineOps, MarkOps, HeadAnnouncer):
    """All sessions of one PostgreSQL home (see the module docstring)."""

    git = False  # no per-turn git history: the rows are the history
    lock_timeout: float = 60.0  # seconds a write waits for the session's row lock

    def __init__(self, pg: "PgHome"):
        self.pg = pg
        self.root = pg.target.display  # where error messages say the sessions live
        self.channel = NOTIFY_PREFIX + pg.target.home
        self.events = PgHeadMoveLog(pg, self.channel)  # head moves, told to other processes
        self._indexes: OrderedDict[str, PgIndex] = OrderedDict()  # LRU, see MAX_OPEN_SESSIONS
        # a session's thread lock lives while some thread holds or waits for it, no longer:
        # a walk of every session keeps none (a lock nobody references excludes nobody)
        self._tlocks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._guard = threading.Lock()
        self._listeners: list[HeadListener] = []
        self._lines = LineOps.new_cache()
        self._known = threading.local()  # session id -> its row, read by a caller (known_row)

    @classmethod
    def open(cls, url: str) -> "PgSessionStore":
        """The store of the home ``url`` names (its schema created or upgraded)."""
        from ..postgres.connect import PgHome

        return cls(PgHome.open(url))

    def close(self) -> None:
        self.pg.close()

    # --- plumbing ----------------------------------------------------------------------------
    @staticmethod
    def _sid(sid: str) -> str:
        if sid == RESERVED_SESSION_ID:  # refused on every home, so a copy never meets it
            raise InvalidInput(f"invalid session id {sid!r}: reserved for the store's own files")
        return check_name(sid, "session id")

    def _tlock(self, sid: str) -> Any:
        """The thread lock of ``sid``: the same object for every thread while any of them
        holds a reference to it (the ``with`` block holding it keeps it alive)."""
        with self._guard:
            lock = self._tlocks.get(sid)
            if lock is None:
                lock = self._tlocks[sid] = threading.RLock()
            return lock

    def exists(self, sid: str) -> bool:
        sid = self._sid(sid)
        with self._read_connection() as conn:
            return conn.execute("SELECT 1 FROM sessions WHERE id = %s", (sid,)).fetchone() \
                is not None

    # a session's row, for a caller that reads it in its own round trip (see known_row)
    SESSION_ROW_SQL = "SELECT meta, rev FROM sessions WHERE id = %s"

    @contextlib.contextmanager
    def known_row(self, sid: str, row: tuple[Any, int] | None) -> Iterator[None]:
        """Within (this thread): reads of ``sid`` (its line, divergences, nodes) take
        ``row``, the session's (meta, rev) that the caller read with its own statements
        (one round trip for both, as a branch-aware search does), instead of reading it
        again, while this process's graph of the session is at that rev; otherwise they read
        what changed as always."""
        known = self._known.__dict__
        before = known.get(sid)
        known[sid] = row
        try:
            yield
        finally:
            known[sid] = before

    def _current(self, sid: str) -> PgIndex | None:
        """The cached graph of ``sid`` when a row given by :meth:`known_row` shows it is
        current (no round trip), else None."""
        row = self._known.__dict__.get(sid)
        if row is None:
            return None
        with self._guard:
            idx = self._indexes.get(sid)
        return idx if idx is not None and not idx.pending and row[1] == idx.rev else None

    def _sync(self, conn: Any, sid: str, *, lock: bool) -> PgIndex:
        """The session's cached graph brought up to date (the row locked when ``lock``)."""
        row = conn.execute("SELECT meta, rev FROM sessions WHERE id = %s"
                           + (" FOR UPDATE" if lock else ""), (sid,)).fetchone()
        if row is None:
            raise SessionNotFound(f"session {sid} not found in {self.root}")
        meta, rev = row
        with self._guard:
            idx = self._indexes.get(sid)
            if idx is None or rev < idx.rev:  # first read, or a home recreated under us
                idx = self._indexes[sid] = PgIndex(sid)
            self._indexes.move_to_end(sid)
            while len(self._indexes) > MAX_OPEN_SESSIONS:  # a walk of every session: bounded
                old, _ = self._indexes.popitem(last=False)
                self._forget_lines(old)
        if rev != idx.rev:
            idx.learn(conn.execute("SELECT body, rev FROM nodes WHERE session_id = %s AND "
                                   "rev > %s ORDER BY seq", (sid, idx.rev)))
            idx.meta, idx.rev = meta, rev
        return idx

    @contextlib.contextmanager
    def _lock_timeout(self, conn: Any, sid: str) -> Iterator[None]:
        """Within: the session row's lock waits at most ``lock_timeout``, then is busy like
        the directory store's lock (the setting is sent in the block's pipeline)."""
        from psycopg.errors import LockNotAvailable

        try:
            with conn.pipeline():  # one round trip with what the block sends
                conn.execute("SELECT set_config('lock_timeout', %s, true)",
                             (f"{int(self.lock_timeout * 1000)}ms",))
                yield
        except LockNotAvailable:
            raise ConcurrentUpdate(f"session {sid} lock is busy ({self.root}); another writer "
                                   f"holds it") from None

    def _lock(self, conn: Any, sid: str) -> PgIndex:
        """The session's row locked for this transaction and its graph up to date."""
        with self._lock_timeout(conn, sid):
            return self._sync(conn, sid, lock=True)

    def _lock_row(self, conn: Any, sid: str) -> tuple[dict[str, Any], int]:
        """The session's row locked for this transaction: its meta and rev, no graph (a
        bulk append streams; see :mod:`.pg_bulk`)."""
        with self._lock_timeout(conn, sid):
            row = conn.execute("SELECT meta, rev FROM sessions WHERE id = %s FOR UPDATE",
                               (sid,)).fetchone()
        if row is None:
            raise SessionNotFound(f"session {sid} not found in {self.root}")
        return row[0], row[1]

    def _forget(self, sid: str) -> None:
        with self._guard:
            self._indexes.pop(sid, None)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[Any]:
        """A pooled connection (see PgHome.connection) whose unexpected database errors (a
        table dropped by hand, a constraint broken outside scriptorium) become one
        CorruptFile line naming the home, never a traceback."""
        from psycopg import Error

        try:
            with self.pg.connection() as conn:
                yield conn
        except Error as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise CorruptFile(f"PostgreSQL home {self.root}: {first}") from None

    @contextlib.contextmanager
    def _read_connection(self) -> Iterator[Any]:
        """A pooled connection in autocommit for the length of a read: each statement sees
        what was committed before it (a read needs no more, see :meth:`_sync`), and no
        COMMIT round trip is paid at the end."""
        with self._connection() as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False

    @contextlib.contextmanager
    def _reading(self, sid: str) -> Iterator[PgIndex]:
        sid = self._sid(sid)
        with self._tlock(sid):
            idx = self._current(sid)
            if idx is None:
                try:
                    with self._read_connection() as conn:
                        idx = self._sync(conn, sid, lock=False)
                except BaseException:
                    self._forget(sid)
                    raise
            yield idx

    @contextlib.contextmanager
    def _writing(self, sid: str) -> Iterator[PgOp]:
        sid = self._sid(sid)
        with self._tlock(sid):
            try:
                with self._connection() as conn:
                    idx = self._lock(conn, sid)
                    op = PgOp(sid, idx, conn=conn, rev=idx.rev + 1)
                    yield op
                    self._finish(op, idx)
                idx.pending = False  # committed: the graph is the database's again
            except BaseException:
                held = self._indexes.get(sid)
                if held is not None and held.pending:
                    self._forget(sid)  # the graph holds what the rollback undid
                raise
        self._announce(op.events)

    def _finish(self, op: PgOp, idx: PgIndex) -> None:
        """Publish the transaction's changes: the session row's meta and rev, and its head
        moves (rows + NOTIFY, both delivered only if the transaction commits). A refused
        write changed nothing, so its graph (and cache) stays as it was."""
        if not idx.pending:
            return
        conn = op.conn
        with conn.pipeline():
            for statement, params in op.queued:
                conn.execute(statement, params)
            conn.execute("UPDATE sessions SET meta = %s, rev = %s WHERE id = %s",
                         (jsonb(idx.meta, f"meta of session {op.sid}"), op.rev, op.sid))
            if op.events:
                log_moves(conn, self.channel, op.events, time.time())
        idx.rev = op.rev

    # --- the primitives the shared operations write through ---------------------------------
    def _store_node(self, op: Op, node: Node) -> None:
        assert isinstance(op, PgOp) and isinstance(op.idx, PgIndex)
        op.queued.append((INSERT_NODE, (op.sid, node.id, node.seq, op.rev,
                                        node_json(node, op.sid))))
        op.idx.put(node, op.rev)

    def _meta_for_write(self, idx: PgIndex) -> dict[str, Any]:
        return dict(idx.meta)

    def _write_meta(self, idx: PgIndex, meta: dict[str, Any]) -> None:
        """Staged in the graph; the row is written once, when the transaction finishes."""
        idx.meta = meta
        idx.pending = True

    def _rewrite_metadata_locked(self, op: Op, patches: dict[str, dict[str, Any]], *,
                                 crash_points: bool = False) -> None:
        """Merge each patch into its node's metadata (the graph is exact under the row lock)
        and rewrite the rows in the open transaction: the marks commit together or not at
        all. ``crash_points`` keeps the marker's named steps (``mark-staged``, ``mid-mark``);
        a kill at either leaves no mark, as the transaction never commits."""
        assert isinstance(op, PgOp) and isinstance(op.idx, PgIndex)
        idx = op.idx
        check_text(patches, f"metadata patch for session {op.sid}")
        merged: list[tuple[Node, Any]] = []
        for node_id, patch in patches.items():
            current = idx.nodes.get(node_id)
            if current is None:
                raise NodeNotFound(f"node {node_id} not found in session {op.sid}")
            node = current.copy()
            for key, value in patch.items():
                if key == "predecessor":
                    continue
                if value is None:
                    node.metadata.pop(key, None)
                else:
                    node.metadata[key] = value
            merged.append((node, node_json(node, op.sid)))
        if crash_points:
            fault_point("mark-staged")
        for i, (node, body) in enumerate(merged):
            op.queued.append(("UPDATE nodes SET body = %s, rev = %s WHERE session_id = %s "
                              "AND id = %s", (body, op.rev, op.sid, node.id)))
            idx.put(node, op.rev)
            if i == 0 and crash_points:
                fault_point("mid-mark")

    def _commit(self, op: Op, message: str, *, soft: bool = False) -> str | None:
        return None  # no git history on this home: the committed transaction is the record

    def _maybe_commit(self, op: Op, node: Node, commit: bool | None) -> str | None:
        return None

    def commit_turn(self, sid: str, message: str) -> str | None:
        """Nothing to commit on a PostgreSQL home (every write is already a committed
        transaction); returns None, as the directory store does when nothing changed."""
        if not isinstance(message, str) or not message.strip():
            raise InvalidInput(f"session {sid}: commit message must be a non-empty string")
        with self._reading(sid):
            return None

    def git_log(self, sid: str, limit: int = 50) -> list[dict[str, Any]]:
        raise InvalidInput(f"session {sid}: a PostgreSQL home keeps no per-turn git history "
                           f"(the node rows are the history)")

    # --- sessions ---------------------------------------------------------------------------
    def create_session(self, session_id: str | None = None, title: str = "", **extra: Any) -> str:
        """Create a session (idempotent: an existing one is left as it is)."""
        sid = self._sid(new_id() if session_id is None else session_id)
        if not isinstance(title, str):
            raise InvalidInput(f"invalid title for session {sid}: expected a string")
        check_text(title, f"title of session {sid}")
        check_text(extra, f"meta of session {sid}")
        check_session_id_length(sid)
        key = name_key(sid)
        now = time.time()
        meta = {"id": sid, "title": title, "created_at": now, "updated_at": now,
                "head_id": None, "branches": {}}
        meta.update(extra)
        with self._connection() as conn:
            created = conn.execute(
                "INSERT INTO sessions (id, name_key, meta) VALUES (%s, %s, %s) "
                "ON CONFLICT DO NOTHING RETURNING id",
                (sid, key, jsonb(meta, f"meta of session {sid}"))).fetchone()
            if created is None:
                clash = conn.execute("SELECT id FROM sessions WHERE name_key = %s AND id <> %s",
                                     (key, sid)).fetchone()
                if clash is not None:
                    raise same_name_clash(sid, clash[0])
        return sid

    def list_sessions(self) -> list[dict[str, Any]]:
        """One row per session, newest ``updated_at`` first (as the directory store)."""
        with self._read_connection() as conn:
            found = conn.execute("SELECT id, meta->'title', meta->'updated_at', "
                                 "meta->'head_id' FROM sessions").fetchall()
        rows = []
        for sid, title, upd, head in found:
            rows.append({"session_id": sid, "title": title if isinstance(title, str) else "",
                         "updated_at": upd if isinstance(upd, (int, float)) else 0.0,
                         "head_id": head if isinstance(head, str) and head else None})
        rows.sort(key=lambda r: (r["updated_at"], r["session_id"]), reverse=True)
        return rows

    def bulk(self, sid: str) -> PgBulkAppender:
        """Many appends to ``sid`` in one transaction (importers, home copies): see
        :mod:`scriptorium.sessions.pg_bulk`."""
        return PgBulkAppender(self, sid)
