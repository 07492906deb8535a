"""Bulk appends on a PostgreSQL home: many nodes into one session in one transaction.

The same interface and edge rules as the directory store's
:class:`~.bulk.BulkAppender` (importers and home copies use either through
``store.bulk(sid)``), over :meth:`PgSessionStore._writing`: the session row stays locked for
the whole batch, rows are sent in batches of :data:`BATCH` (one round trip each), the meta and
the head move are written once at the end, and nothing is visible to anyone until the batch
commits. An error anywhere rolls the whole batch back.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from ..fsutil import check_name
from .appends import next_activity
from .bulk import BatchHead, check_bulk_edges
from .node import Node
from .ops import LockedStore
from .pg_rows import INSERT_NODE, PgIndex, PgOp, node_json

BATCH = 500


class PgBulkAppender(BatchHead):
    """Append nodes to one existing session; use as a context manager (it holds the row)."""

    def __init__(self, store: LockedStore, sid: str):
        self.store = store
        self.sid = sid
        self.added = 0
        self.head: str | None = None
        self.title = ""
        self._stack = ExitStack()
        self._rows: list[tuple[Any, ...]] = []
        self._meta_extra: dict[str, Any] = {}
        self._head_set = False

    def __enter__(self) -> "PgBulkAppender":
        op = self._stack.enter_context(self.store._writing(self.sid))
        assert isinstance(op, PgOp) and isinstance(op.idx, PgIndex)  # the store's own kinds
        self._op, self._idx = op, op.idx
        title = self._idx.meta.get("title")
        self.title = title if isinstance(title, str) else ""
        self.head = self._idx.head
        self._old_head = self.head
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc_type is None:
                self._publish()
        except BaseException as err:
            if not self._stack.__exit__(type(err), err, err.__traceback__):
                raise
            return
        self._stack.__exit__(exc_type, exc, tb)  # type: ignore[arg-type]

    def _flush(self) -> None:
        if self._rows:
            with self._op.conn.cursor() as cur:
                cur.executemany(INSERT_NODE, self._rows)
            self._rows = []

    def _publish(self) -> None:
        """The last rows, then the meta (activity clock, extra keys, head) once."""
        self._flush()
        idx = self._idx
        if not (self.added or self._head_set or self._meta_extra):
            return
        meta = self.store._meta_for_write(idx)
        if self.added:
            meta["updated_at"] = next_activity(meta.get("updated_at"))
        meta.update(self._meta_extra)
        meta["head_id"] = self.head
        self.store._write_meta(idx, meta)
        if self.head != self._old_head:
            self._op.events.append((self.sid, self._old_head, self.head))

    # --- writes -------------------------------------------------------------------------------
    def has(self, node_id: str) -> bool:
        return node_id in self._idx.nodes

    def append(self, node: Node) -> bool:
        """Stage ``node`` (seq assigned here); False when its id is already stored."""
        check_name(node.id, "node id")
        idx = self._idx
        if node.id in idx.nodes:
            return False
        has_turns = idx.first_conversational_seq() is not None
        check_bulk_edges(self.sid, node, idx.nodes, has_turns)
        node.seq = idx.max_seq + 1
        self._rows.append((self.sid, node.id, node.seq, self._op.rev, node_json(node, self.sid)))
        idx.put(node, self._op.rev)
        self.added += 1
        if len(self._rows) >= BATCH:
            self._flush()
        return True

    def _known(self, node_id: str) -> bool:
        return node_id in self._idx.nodes

    def _summary(self, node_id: str) -> bool:
        return self._idx.nodes[node_id].is_summary
