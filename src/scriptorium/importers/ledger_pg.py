"""The ledger of a PostgreSQL home: its ``import_*`` tables (migration component ``imports``).

The same records as the directory home's SQLite file (:mod:`.ledger`). A file row is keyed by
host as well as path, because a path names a file on one machine: two hosts importing their
own ``~/.claude/projects`` into one home keep their own offsets (a file seen from a second
host is read once more there, and every node it holds is found already stored). The host is
:func:`~scriptorium.postgres.host.host_name` (``$SCRIPTORIUM_HOST``, else the OS host name).

One import of a format at a time per home: the ledger holds a session-level advisory lock on
its own connection from open to close, so a second ``import claude-code`` (on any host) waits
for the first and then finds its files unchanged; a process that dies releases it with its
connection.

Round trips and memory: a graph asks its state several times per source line. What was read
or written lately is cached (two generations of :data:`CACHE_LIMIT` entries each: when the
young one fills, the old one is dropped), and writes are sent in batches of :data:`FLUSH_AT`
rows, so memory stays bounded whatever the transcript's size. A session with no saved state
(its first import) keeps, besides, a hash of every key it wrote (8 bytes each, an
:class:`~scriptorium.sessions.bulk.IdSet`): a key it never wrote is answered "absent" with no
query, so a cold import sends only batched writes; a session imported before, or a key that
left the cache, asks the database.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from ..postgres.host import host_name
from ..sessions.bulk import IdSet
from .ledger import FileState, Ledger

if TYPE_CHECKING:  # pragma: no cover - the postgres extra is optional
    from ..postgres.connect import PgHome

CACHE_LIMIT = 5_000
FLUSH_AT = 2_000

_SELECT = {
    "pos": "SELECT anchor, side FROM import_pos WHERE session_id = %s AND id = %s",
    "preds": "SELECT pred FROM import_preds WHERE session_id = %s AND id = %s",
    "kids": "SELECT true FROM import_kids WHERE session_id = %s AND id = %s",
    "names": "SELECT value FROM import_names WHERE session_id = %s AND space = %s AND key = %s",
}
_UPSERT = {
    "pos": "INSERT INTO import_pos VALUES (%s, %s, %s, %s) ON CONFLICT (session_id, id)"
           " DO UPDATE SET anchor = EXCLUDED.anchor, side = EXCLUDED.side",
    "preds": "INSERT INTO import_preds VALUES (%s, %s, %s) ON CONFLICT (session_id, id)"
             " DO UPDATE SET pred = EXCLUDED.pred",
    "kids": "INSERT INTO import_kids VALUES (%s, %s) ON CONFLICT DO NOTHING",
    "names": "INSERT INTO import_names VALUES (%s, %s, %s, %s)"
             " ON CONFLICT (session_id, space, key) DO UPDATE SET value = EXCLUDED.value",
}


def _hkey(table: str, key: Any) -> str:
    """One string for a (table, key) pair, for the hash set of written keys."""
    return "\x1f".join((table, *key)) if isinstance(key, tuple) else f"{table}\x1f{key}"


def _text(value: str) -> str:
    """PostgreSQL text holds no NUL character (a source's key might): kept as U+FFFD."""
    return value.replace("\x00", "\ufffd") if "\x00" in value else value


class PgLedger(Ledger):
    """The import tables of the home ``pg``, with the file rows of one format on this host
    loaded; one connection of its own, one transaction per source file."""

    def __init__(self, pg: "PgHome", kind: str, host: str | None = None) -> None:
        self.pg = pg
        self.host = host or host_name()
        self.conn = pg.dedicated(autocommit=False)
        try:
            with self.guard():
                self.conn.execute("SELECT pg_advisory_lock(hashtext(%s))",
                                  (f"scriptorium-import:{pg.target.schema}:{kind}",))
                rows = self.conn.execute(
                    'SELECT path, size, mtime_ns, inode, "offset", lines, head, session_id,'
                    " parse FROM import_files WHERE kind = %s AND host = %s",
                    (kind, self.host)).fetchall()
                self.conn.commit()
        except BaseException:
            self.conn.close()
            raise
        super().__init__(kind, {row[0]: FileState.from_row(row[1:]) for row in rows})

    @contextmanager
    def guard(self) -> Iterator[None]:
        """A server that goes away is DatabaseUnreachable (retryable), not a driver error."""
        try:
            yield
        except self.pg._psycopg.OperationalError as exc:
            raise self.pg._unreachable(exc) from None

    def begin(self) -> None:
        """Nothing to send: the connection opens a transaction with its first statement."""

    def commit(self) -> None:
        with self.guard():
            self.conn.commit()

    def rollback(self) -> None:
        if self.conn.closed:
            return
        try:
            self.conn.rollback()
        except self.pg._psycopg.OperationalError:
            pass  # the connection is gone, and its transaction with it

    def close(self) -> None:
        self.conn.close()  # ends the advisory lock too

    def session(self, sid: str) -> "PgSessionState":
        return PgSessionState(self, sid)

    def _store_file(self, path: str, state: FileState) -> None:
        with self.guard():
            self.conn.execute(
                "INSERT INTO import_files VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (kind, host, path) DO UPDATE SET size = EXCLUDED.size,"
                " mtime_ns = EXCLUDED.mtime_ns, inode = EXCLUDED.inode,"
                ' "offset" = EXCLUDED."offset", lines = EXCLUDED.lines, head = EXCLUDED.head,'
                " session_id = EXCLUDED.session_id, parse = EXCLUDED.parse",
                (self.kind, self.host, path, state.size, state.mtime_ns, state.inode,
                 state.offset, state.lines, state.head, state.session_id,
                 json.dumps(state.parse)))


class PgSessionState:
    """One session's graph state in the import tables, cached for one graph's run (see the
    module docstring); writes are sent in batches and all of them by :meth:`save_extra`."""

    def __init__(self, ledger: PgLedger, sid: str) -> None:
        self.ledger = ledger
        self.sid = sid
        with ledger.guard():
            row = ledger.conn.execute("SELECT data FROM import_extra WHERE session_id = %s",
                                      (sid,)).fetchone()
        self.extra: dict[str, Any] = json.loads(row[0]) if row else {}
        # nothing saved yet: a key this run never wrote is absent (see the module docstring)
        self._written: IdSet | None = IdSet() if row is None else None
        self._cache: dict[tuple[str, Any], Any] = {}
        self._old: dict[tuple[str, Any], Any] = {}
        self._dirty: dict[str, dict[Any, tuple[Any, ...]]] = {t: {} for t in _UPSERT}
        self._pending = 0

    def _get(self, table: str, key: Any) -> Any:
        if (table, key) in self._cache:
            return self._cache[table, key]
        if (table, key) in self._old:
            value = self._old[table, key]
        elif self._written is not None and _hkey(table, key) not in self._written:
            return None
        else:
            self._flush()  # a key written in this run may be on its way still
            args = (self.sid, *key) if isinstance(key, tuple) else (self.sid, key)
            with self.ledger.guard():
                row = self.ledger.conn.execute(_SELECT[table], args).fetchone()
            value = None if row is None else (row if table == "pos" else row[0])
        self._remember(table, key, value)
        return value

    def _set(self, table: str, key: Any, value: Any, row: tuple[Any, ...]) -> None:
        if key not in self._dirty[table]:
            self._pending += 1
        self._dirty[table][key] = (self.sid, *row)
        if self._written is not None:
            self._written.add(_hkey(table, key))
        self._remember(table, key, value)
        if self._pending >= FLUSH_AT:
            self._flush()

    def _remember(self, table: str, key: Any, value: Any) -> None:
        if len(self._cache) >= CACHE_LIMIT:
            self._old, self._cache = self._cache, {}
        self._cache[table, key] = value

    def _flush(self) -> None:
        if not self._pending:
            return
        with self.ledger.guard(), self.ledger.conn.cursor() as cur:
            for table, rows in self._dirty.items():
                if rows:
                    cur.executemany(_UPSERT[table], list(rows.values()))
                    rows.clear()
        self._pending = 0

    # --- the SessionState interface ---------------------------------------------------------
    def pos(self, node: str) -> tuple[str | None, bool] | None:
        value = self._get("pos", node)
        return None if value is None else (value[0], bool(value[1]))

    def set_pos(self, node: str, anchor: str | None, side: bool) -> None:
        self._set("pos", node, (anchor, side), (node, anchor, side))

    def pred(self, node: str) -> str | None:
        value: str | None = self._get("preds", node)
        return value

    def set_pred(self, node: str, pred: str) -> None:
        self._set("preds", node, pred, (node, pred))

    def has_kid(self, node: str) -> bool:
        return self._get("kids", node) is not None

    def add_kid(self, node: str) -> None:
        self._set("kids", node, True, (node,))

    def name(self, space: str, key: str) -> str | None:
        value: str | None = self._get("names", (space, _text(key)))
        return value

    def set_name(self, space: str, key: str, value: str) -> None:
        key, value = _text(key), _text(value)
        self._set("names", (space, key), value, (space, key, value))

    def save_extra(self) -> None:
        self._flush()
        with self.ledger.guard():
            self.ledger.conn.execute(
                "INSERT INTO import_extra VALUES (%s, %s) ON CONFLICT (session_id)"
                " DO UPDATE SET data = EXCLUDED.data", (self.sid, json.dumps(self.extra)))
