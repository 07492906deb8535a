"""One locked write on a session, and what the operation mixins (and the bulk appender) need
of the store for it.

:class:`~.store.SessionStore` is assembled from mixins (the fork operations and others); each
mixin runs its work inside the store's locked write. They annotate ``self`` with
:class:`LockedStore` — the store's locked-write primitives — so no mixin imports the store
that imports it.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..fsutil import FileLock

from .checks import Added
from .graph import NodeGraph
from .node import Node


@dataclass
class Op:
    """One locked write: the fresh index, head-move events to announce after unlocking, and
    what went wrong after the write was already durable (a git commit that failed)."""

    sid: str
    idx: NodeGraph  # the directory store's SessionIndex, or the PostgreSQL store's PgIndex
    events: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


class LockedStore(Protocol):
    """The store's primitives: a fresh read, a locked write and what is done under it (see
    SessionStore, and PgSessionStore for the same over a database row lock). ``root`` is
    where the sessions live, as error messages name it (a directory, or a home URL)."""

    git: bool

    @property
    def root(self) -> Path | str: ...

    def exists(self, sid: str) -> bool: ...

    def _reading(self, sid: str) -> AbstractContextManager[NodeGraph]: ...

    def _writing(self, sid: str) -> AbstractContextManager[Op]: ...

    def _store_node(self, op: Op, node: Node) -> None: ...

    def _unstore_node(self, op: Op, node: Node) -> None: ...

    def _append_locked(self, op: Op, node: Node, *, advance: bool = True) -> bool: ...

    def _add(self, sid: str, msg: dict[str, Any], after: str | None, commit: bool | None, *,
             strict: bool) -> Added: ...

    @staticmethod
    def _check_invariant(idx: Any, sid: str, node: Node) -> None: ...

    def _move_head(self, op: Op, node_id: str | None) -> None: ...

    def _rewrite_metadata_locked(self, op: Op, patches: dict[str, dict[str, Any]], *,
                                 crash_points: bool = False) -> None: ...

    def _meta_for_write(self, idx: Any) -> dict[str, Any]: ...

    def _write_meta(self, idx: Any, meta: dict[str, Any]) -> None: ...

    def _commit(self, op: Op, message: str, *, soft: bool = False) -> str | None: ...

    def _maybe_commit(self, op: Op, node: Node, commit: bool | None) -> str | None: ...


HeadMoves = list[tuple[str, str | None, str | None]]


class BulkStore(Protocol):
    """What :class:`~.bulk.BulkAppender` needs of the store: the session's locks, its meta
    file, and telling listeners and other processes about head moves."""

    def _require(self, sid: str) -> Path: ...

    def _locks(self, sid: str) -> tuple[threading.RLock, FileLock]: ...

    def _read_meta_file(self, path: Path) -> dict[str, Any]: ...

    def _log_moves(self, events: HeadMoves) -> None: ...

    def _announce(self, events: HeadMoves) -> None: ...
