"""Writes that failed for good on a PostgreSQL home, and when they are tried again.

The directory watcher records a terminal failure with the configuration it happened under
(:func:`~.watcher.config_fingerprint`: settings, writer, whether the model key is set) and
tries the session again once that changes, or on ``--retry-failed``. A PostgreSQL home keeps
failures on its queue's claim rows (``work_claims.failure``), so the same rule is: a terminal
failure is recorded with its configuration (:func:`stamp_config`), and a worker or watcher
that starts under another configuration makes those sessions owed again
(:func:`requeue_reconfigured`); ``--retry-failed`` makes all of them owed (:data:`REQUEUE_FAILED`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .view import MemoryView
from .watcher import config_fingerprint

if TYPE_CHECKING:  # pragma: no cover - the postgres extra is optional
    from ..postgres.connect import PgHome

# terminal failures (not retryable) recorded on claims: make their boundary write owed again
REQUEUE_FAILED = """
    UPDATE work_claims SET boundary_seq = 0, failure = NULL, retry_at = NULL, attempts = 0
    WHERE failure IS NOT NULL AND NOT coalesce((failure->>'retryable')::boolean, false)"""
# ... only those that failed under a configuration other than the one given
_REQUEUE_RECONFIGURED = REQUEUE_FAILED + " AND failure->>'config' IS DISTINCT FROM %s"


def stamp_config(memory: MemoryView, failure: dict[str, Any]) -> dict[str, Any]:
    """A failure as the queue records it: a terminal one carries the configuration it
    happened under."""
    if failure.get("retryable"):
        return failure
    return {**failure, "config": config_fingerprint(memory)}


def requeue_reconfigured(pg: "PgHome", memory: MemoryView) -> int:
    """Sessions of ``pg`` whose last write failed for good under another configuration than
    ``memory``'s are owed their boundary write again (a configuration changes only with a new
    process, so a worker does this when it starts). Returns how many."""
    with pg.connection() as conn:
        return int(conn.execute(_REQUEUE_RECONFIGURED, (config_fingerprint(memory),)).rowcount)
