"""Bulk appends on a PostgreSQL home: many nodes into one session in one transaction.

The same interface and edge rules as the directory store's
:class:`~.bulk.BulkAppender` (importers and home copies use either through
``store.bulk(sid)``). The session row stays locked ``FOR UPDATE`` for the whole batch, rows are
sent in batches of :data:`BATCH` (one round trip each), the meta, the rev and the head move are
written once at the end, and nothing is visible to anyone until the batch commits. An error
anywhere rolls the whole batch back.

Streamed, like the directory appender: the session's graph is never loaded. What the edge
rules need of the stored nodes is their ids (an :class:`~.bulk.IdSet`, 8 bytes each), the
highest seq and whether a turn is stored (one short query each); whether a new head is a
summary is asked of its row. Each node is let go once its row is sent, so an import's memory
does not grow with the size of its transcript. The store's cached graph of the session is
dropped when the batch ends: the next read learns the rows from the database.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any, ContextManager, Protocol

from ..fsutil import check_name
from .appends import next_activity
from .bulk import BatchHead, IdSet, check_bulk_edges
from .node import Node, node_from_json
from .pg_events import log_moves
from .pg_rows import INSERT_NODE, jsonb, node_json

BATCH = 500
_SCAN = 200  # rows per page while looking for the first stored turn


class PgRowStore(Protocol):
    """What the appender needs of the PostgreSQL session store (:mod:`.pg_store`)."""

    channel: str

    def _sid(self, sid: str) -> str: ...

    def _tlock(self, sid: str) -> Any: ...

    def _connection(self) -> ContextManager[Any]: ...

    def _lock_row(self, conn: Any, sid: str) -> tuple[dict[str, Any], int]: ...

    def _forget(self, sid: str) -> None: ...

    def _announce(self, events: Any) -> None: ...


class PgBulkAppender(BatchHead):
    """Append nodes to one existing session; use as a context manager (it holds the row)."""

    def __init__(self, store: PgRowStore, sid: str):
        self.store = store
        self.sid = sid
        self.added = 0
        self.head: str | None = None
        self.title = ""
        self.ids = IdSet()
        self.summaries: set[str] = set()  # added in this batch
        self.has_turns = False
        self.max_seq = -1
        self._stack = ExitStack()
        self._rows: list[tuple[Any, ...]] = []
        self._meta_extra: dict[str, Any] = {}
        self._head_set = False
        self._events: list[tuple[str, str | None, str | None]] = []

    def __enter__(self) -> "PgBulkAppender":
        store = self.store
        self.sid = store._sid(self.sid)
        self._stack.enter_context(store._tlock(self.sid))
        try:
            self.conn = self._stack.enter_context(store._connection())
            self.meta, rev = store._lock_row(self.conn, self.sid)
            self.rev = rev + 1
            self._learn()
        except BaseException:
            self._stack.close()
            raise
        title = self.meta.get("title")
        self.title = title if isinstance(title, str) else ""
        head = self.meta.get("head_id")
        self.head = self._old_head = head if isinstance(head, str) and head else None
        return self

    def _learn(self) -> None:
        """The stored ids (streamed by a server-side cursor), the highest seq, and whether
        a turn is stored (rows read in seq order up to the first one)."""
        with self.conn.cursor(name=f"bulk_ids_{id(self)}") as cur:
            cur.itersize = 5000
            cur.execute("SELECT id, seq FROM nodes WHERE session_id = %s", (self.sid,))
            for node_id, seq in cur:
                self.ids.add(node_id)
                self.max_seq = max(self.max_seq, seq)
        after = -1
        while after < self.max_seq and not self.has_turns:
            rows = self.conn.execute(
                "SELECT body, seq FROM nodes WHERE session_id = %s AND seq > %s ORDER BY seq "
                "LIMIT %s", (self.sid, after, _SCAN)).fetchall()
            for body, seq in rows:
                after = seq
                if _is_turn(node_from_json(body, f"session {self.sid} (database row)")):
                    self.has_turns = True
                    break
            if not rows:
                break

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc_type is None:
                self._publish()
        except BaseException as err:
            self.store._forget(self.sid)
            if not self._stack.__exit__(type(err), err, err.__traceback__):
                raise
            return
        self.store._forget(self.sid)  # its cached graph (if any) lacks this batch's rows
        committed = exc_type is None
        self._stack.__exit__(exc_type, exc, tb)  # type: ignore[arg-type]
        if committed:
            self.store._announce(self._events)

    def _flush(self) -> None:
        if self._rows:
            with self.conn.cursor() as cur:
                cur.executemany(INSERT_NODE, self._rows)
            self._rows = []

    def _publish(self) -> None:
        """The last rows, then the meta (activity clock, extra keys, head) and rev once."""
        self._flush()
        if not (self.added or self._head_set or self._meta_extra):
            return
        meta = dict(self.meta)
        if self.added:
            meta["updated_at"] = next_activity(meta.get("updated_at"))
        meta.update(self._meta_extra)
        meta["head_id"] = self.head
        with self.conn.pipeline():
            self.conn.execute("UPDATE sessions SET meta = %s, rev = %s WHERE id = %s",
                              (jsonb(meta, f"meta of session {self.sid}"), self.rev,
                               self.sid))
            if self.head != self._old_head:
                self._events.append((self.sid, self._old_head, self.head))
                log_moves(self.conn, self.store.channel, self._events, time.time())

    # --- writes -------------------------------------------------------------------------------
    def has(self, node_id: str) -> bool:
        return node_id in self.ids

    def append(self, node: Node) -> bool:
        """Send ``node`` (seq assigned here, in batches); False when its id is already
        stored."""
        check_name(node.id, "node id")
        if node.id in self.ids:
            return False
        turn = check_bulk_edges(self.sid, node, self.ids, self.has_turns)
        self.max_seq += 1
        node.seq = self.max_seq
        self._rows.append((self.sid, node.id, node.seq, self.rev, node_json(node, self.sid)))
        self.ids.add(node.id)
        if node.is_summary:
            self.summaries.add(node.id)
        self.has_turns = self.has_turns or turn
        self.added += 1
        if len(self._rows) >= BATCH:
            self._flush()
        return True

    def _known(self, node_id: str) -> bool:
        return node_id in self.ids

    def _summary(self, node_id: str) -> bool:
        if node_id in self.summaries:
            return True
        row = self.conn.execute("SELECT body FROM nodes WHERE session_id = %s AND id = %s",
                                (self.sid, node_id)).fetchone()
        return row is not None and node_from_json(
            row[0], f"session {self.sid} (database row)").is_summary


def _is_turn(node: Node) -> bool:
    """What the edge rules count as a stored turn (the graph's first conversational node)."""
    return bool(node.conversational and node.chain_level and not node.is_root)
