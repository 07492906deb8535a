"""The head-move log of a PostgreSQL home: the ``head_moves`` table, read like the directory
home's file log (:mod:`.events`), and woken by ``LISTEN`` instead of inotify.

The same interface as :class:`~.events.HeadMoveLog` (``reader(after)``, ``last_seq()``,
``waker()``), so the memory watcher follows either home unchanged, here across hosts:

- **Ordered as committed.** A write takes ``pg_advisory_xact_lock`` just before it inserts
  its moves, at the very end of its transaction, so seq order is commit order: a reader that
  has seen seq *n* never meets a smaller seq later. The lock is held only for the insert and
  the commit.
- **Told.** The write's transaction also sends ``NOTIFY scriptorium_<home>`` (delivered only
  if it commits); a :class:`PgWaker` listening on its own connection wakes on it.
- **Bounded.** Every :data:`PRUNE_EVERY` moves the writer deletes all but the newest
  :data:`KEEP_MOVES`; a reader left further behind learns it (``complete`` false) and makes
  one full poll, as with the file log.
"""

from __future__ import annotations

import os
import select
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ScriptoriumError
from .events import HeadMove

if TYPE_CHECKING:  # pragma: no cover
    from ..postgres.connect import PgHome

KEEP_MOVES = 40_000
PRUNE_EVERY = 1_000
# pg_advisory_xact_lock key of the head-move log (per schema: each home has its own table,
# and an advisory lock is per database, so the key includes the schema's name)
LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtext('scriptorium-head-moves:' || current_schema()))"

HeadMoves = list[tuple[str, "str | None", "str | None"]]


# One statement per move: the row, its NOTIFY (json built from the row's seq) and, every
# PRUNE_EVERY moves, the pruning; no result is needed, so a write sends them all in one
# pipeline with its other statements.
_MOVE_SQL = """
WITH m AS (INSERT INTO head_moves (session_id, old_head, new_head, at)
           VALUES (%(sid)s, %(old)s, %(new)s, %(at)s) RETURNING seq),
     told AS (SELECT pg_notify(%(channel)s, json_build_object(
                  'seq', m.seq, 'session_id', %(sid)s::text, 'old', %(old)s::text,
                  'new', %(new)s::text, 'at', %(at)s::float8)::text) FROM m),
     pruned AS (DELETE FROM head_moves WHERE (SELECT seq FROM m) %% %(every)s = 0
                AND seq <= (SELECT seq FROM m) - %(keep)s)
SELECT count(*) FROM told
"""


def log_moves(conn: Any, channel: str, moves: HeadMoves, at: float) -> None:
    """Record ``moves`` in the write's open transaction (rows, then NOTIFY); see the module
    docstring for why the advisory lock comes first. Sends without waiting for results, so
    inside ``conn.pipeline()`` it costs no round trip of its own."""
    conn.execute(LOCK_SQL)
    for sid, old, new in moves:
        conn.execute(_MOVE_SQL, {"sid": sid, "old": old, "new": new, "at": at,
                                 "channel": channel, "every": PRUNE_EVERY, "keep": KEEP_MOVES})


class PgHeadMoveLog:
    """The ``head_moves`` table of one home, read through ``pg``'s pool."""

    def __init__(self, pg: "PgHome", channel: str):
        self.pg = pg
        self.channel = channel

    def last_seq(self) -> int:
        with self.pg.connection() as conn:
            return int(conn.execute("SELECT coalesce(max(seq), 0) FROM head_moves").fetchone()[0])

    def reader(self, after: int = 0) -> "PgLogReader":
        return PgLogReader(self, after)

    def waker(self) -> "PgWaker":
        return PgWaker(self)


class PgLogReader:
    """Follows the table from seq ``after``: :meth:`poll` returns the moves committed since,
    each once (one indexed query; nothing read when nothing moved)."""

    def __init__(self, log: PgHeadMoveLog, after: int = 0):
        self.log = log
        self.seq = after
        self.complete = True  # false once moves after ``seq`` were pruned unread

    def poll(self) -> list[HeadMove]:
        with self.log.pg.connection() as conn:
            rows = conn.execute("SELECT seq, session_id, old_head, new_head, at FROM head_moves"
                                " WHERE seq > %s ORDER BY seq", (self.seq,)).fetchall()
        out = []
        for seq, sid, old, new, at in rows:
            if seq != self.seq + 1 and self.seq:
                self.complete = False  # pruned, or a sequence value a failed commit used
            out.append(HeadMove(int(seq), sid, old, new, float(at)))
            self.seq = int(seq)
        return out


class PgWaker:
    """Blocks until a head move is notified, a wake descriptor is readable, or a timeout
    (the same interface as :class:`~.events.Waker`)."""

    def __init__(self, log: PgHeadMoveLog):
        self.log = log
        self._conn: Any = None
        self._tried = False

    @property
    def notified(self) -> bool:
        """True when waits end on NOTIFY (else only on their timeout)."""
        self.open()
        return self._conn is not None

    def open(self) -> None:
        """Start listening (once): a move committed after this ends the next wait."""
        if self._tried:
            return
        self._tried = True
        from psycopg import sql

        try:
            conn = self.log.pg.dedicated()
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.log.channel)))
        except ScriptoriumError:
            return  # the server did not answer: waits fall back to their timeout
        self._conn = conn

    def wait(self, timeout: float, wake_fds: Sequence[int] = ()) -> None:
        self.open()
        listen = self._conn.fileno() if self._conn is not None else None
        fds = [*wake_fds, *([listen] if listen is not None else [])]
        if not fds:
            select.select([], [], [], max(0.0, timeout))
            return
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout))
        for fd in ready:
            if fd == listen:
                for _ in self._conn.notifies(timeout=0):  # drain: the next wait blocks again
                    pass
                continue
            try:
                os.read(fd, 65536)
            except (BlockingIOError, OSError):
                pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
