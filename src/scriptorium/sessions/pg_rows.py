"""The rows of a PostgreSQL home's sessions as the store holds them in memory: a session's
cached graph with the ``rev`` it reflects, one write transaction, and how JSON is sent.

Kept below :mod:`.pg_store` and :mod:`.pg_bulk` so both use them without importing each
other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from ..errors import InvalidInput
from .graph import NodeGraph
from .node import Node, node_from_json
from .ops import Op

INSERT_NODE = "INSERT INTO nodes (session_id, id, seq, rev, body) VALUES (%s, %s, %s, %s, %s)"


class PgIndex(NodeGraph):
    """One session's graph as this process last read it, and the session ``rev`` it reflects.
    Nodes are held under their id (the slot) with ``(rev, 0, 0)`` as their fingerprint."""

    def __init__(self, sid: str):
        super().__init__(sid)
        self.rev = -1
        self.meta_present = True  # a session row always has its meta
        self.pending = False  # this transaction changed the meta or a node

    def learn(self, rows: Iterable[tuple[dict[str, Any], int]]) -> None:
        for body, rev in rows:
            node = node_from_json(body, f"session {self.sid} (database row)")
            self._put(node.id, (rev, 0, 0), node)

    def put(self, node: Node, rev: int) -> None:
        """A node this process just wrote (inside the open transaction)."""
        self._put(node.id, (rev, 0, 0), node)
        self.pending = True


@dataclass
class PgOp(Op):
    """One write transaction: the connection it runs on, the rev its rows get, and the
    statements queued for its end (sent in one pipeline with the session row and the head
    moves, so a write costs a few round trips whatever it changed)."""

    conn: Any = None
    rev: int = 0
    queued: list[tuple[str, tuple[Any, ...]]] = field(default_factory=list)


def jsonb(value: Any, what: str) -> Any:
    """``value`` as a jsonb parameter, serialised here so what JSON cannot hold (NaN,
    Infinity: a node file would take them, PostgreSQL's jsonb does not) is one clear
    InvalidInput naming ``what`` before anything is sent, not a database error."""
    import json

    from psycopg.types.json import Jsonb

    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError:
        raise InvalidInput(f"invalid {what}: NaN or Infinity, which JSON cannot hold") from None
    return Jsonb(value, dumps=lambda _value: text)


def node_json(node: Node, sid: str) -> Any:
    """A node's row body (see :func:`jsonb`)."""
    return jsonb(node.to_json(), f"node {node.id} of session {sid}")
