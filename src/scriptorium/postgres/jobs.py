"""The writer job queue in a PostgreSQL home: which sessions owe a write, and who is on it.

A job is a session's work since its last job: the tips the head left (``work_left``, one row
per (session, tip)), the threshold check after a move, and, once the session has been quiet
for the idle allowance (or at once when draining), its session-boundary write. The queue is
fed by a trigger on the head-move log (migration ``work``), inside the transaction that moves
the head, so a committed move is never missing from it.

A claim is a row lock: :func:`claim` takes ``work_claims`` rows ``FOR UPDATE SKIP LOCKED`` in
the worker's open transaction, so other workers pass over it, and a worker that dies releases
its claim when PostgreSQL sees its connection close; the unfinished job is then simply due
again. Every time here is the database's clock, so workers on many hosts agree on what is due.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

NOW = "extract(epoch FROM clock_timestamp())"

# what makes a session's job due, given %(drain)s and %(idle)s
_DUE = f"""(c.retry_at IS NULL OR c.retry_at <= {NOW}) AND (
            q.last_seq > c.moves_seq
            OR (q.last_seq > c.boundary_seq AND (%(drain)s OR q.last_at <= {NOW} - %(idle)s)))"""

_CLAIM = f"""
    SELECT c.session_id, q.last_seq, c.attempts,
           (q.last_seq > c.boundary_seq AND (%(drain)s OR q.last_at <= {NOW} - %(idle)s))
    FROM work_claims c JOIN work_queue q USING (session_id)
    WHERE {_DUE}
    ORDER BY q.last_at
    LIMIT 1
    FOR UPDATE OF c SKIP LOCKED
"""


@dataclass(frozen=True)
class LeftTip:
    """A tip the head moved away from, and where it went (``new_tip``)."""

    tip: str
    new_tip: str | None


@dataclass(frozen=True)
class Job:
    """One session's work, as claimed: everything moved up to ``seq``.

    ``boundary`` says the session went quiet (or the worker drains): write it whole.
    Otherwise the job is the per-move work: the ``left`` tips and the threshold check."""

    session_id: str
    seq: int
    boundary: bool
    left: tuple[LeftTip, ...] = ()
    attempts: int = 0


@dataclass
class JobOutcome:
    """What a handler reports: a failure (``reason_code``, ``retryable``, ``message``) or
    None, and anything worth showing (e.g. the turns marked)."""

    failure: dict[str, Any] | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def claim(conn: Any, *, idle: float, drain: bool) -> Job | None:
    """Lock and return the longest-waiting due job, or None. ``conn`` must be inside a
    transaction that stays open while the job runs (the lock is the claim)."""
    params = {"idle": idle, "drain": drain}
    row = conn.execute(_CLAIM, params).fetchone()
    if row is None:
        return None
    sid, seq, attempts, boundary = row
    left = conn.execute("SELECT tip, new_tip FROM work_left WHERE session_id = %s AND seq <= %s"
                        " ORDER BY seq", (sid, seq)).fetchall()
    return Job(sid, int(seq), bool(boundary), tuple(LeftTip(t, n) for t, n in left),
               int(attempts))


def finish(conn: Any, job: Job, outcome: JobOutcome, *, worker: str,
           retry_seconds: float) -> None:
    """Record the outcome in the claim's transaction. Done (or failed for good): the moves up
    to ``job.seq`` are handled, a later move makes the session due again. A retryable
    failure leaves the job due after a back-off (doubling per attempt, jittered)."""
    failure = outcome.failure
    if failure is not None and failure.get("retryable"):
        # jittered, so workers that collided on one topic do not collide again in step
        backoff = retry_seconds * 2 ** min(job.attempts, 8) * random.uniform(0.5, 1.5)
        conn.execute(f"UPDATE work_claims SET attempts = attempts + 1, failure = %s,"
                     f" retry_at = {NOW} + %s, done_by = %s WHERE session_id = %s",
                     (json.dumps(failure), backoff, worker, job.session_id))
        return
    conn.execute(f"UPDATE work_claims SET moves_seq = greatest(moves_seq, %(seq)s),"
                 f" boundary_seq = CASE WHEN %(boundary)s THEN greatest(boundary_seq, %(seq)s)"
                 f" ELSE boundary_seq END, attempts = 0, retry_at = NULL, failure = %(failure)s,"
                 f" done_by = %(worker)s, done_at = {NOW} WHERE session_id = %(sid)s",
                 {"seq": job.seq, "boundary": job.boundary, "worker": worker,
                  "sid": job.session_id,
                  "failure": json.dumps(failure) if failure is not None else None})
    conn.execute("DELETE FROM work_left WHERE session_id = %s AND seq <= %s",
                 (job.session_id, job.seq))


def seconds_until_due(conn: Any, *, idle: float, drain: bool) -> float | None:
    """How long until some job falls due (0: one is due now, perhaps held by another worker);
    None when nothing is owed at all, by anyone."""
    row = conn.execute(f"""
        SELECT min(greatest(coalesce(c.retry_at, 0),
                   CASE WHEN q.last_seq > c.moves_seq OR %(drain)s THEN 0
                        ELSE q.last_at + %(idle)s END) - {NOW})
        FROM work_claims c JOIN work_queue q USING (session_id)
        WHERE q.last_seq > c.moves_seq OR q.last_seq > c.boundary_seq""",
                       {"idle": idle, "drain": drain}).fetchone()
    return None if row is None or row[0] is None else max(0.0, float(row[0]))


def queue_status(conn: Any) -> dict[str, Any]:
    """Counts for a status line: sessions known, owing a write, failed for good."""
    row = conn.execute("""
        SELECT count(*),
               count(*) FILTER (WHERE q.last_seq > c.moves_seq OR q.last_seq > c.boundary_seq),
               count(*) FILTER (WHERE c.failure IS NOT NULL
                                AND NOT coalesce((c.failure->>'retryable')::boolean, false))
        FROM work_claims c JOIN work_queue q USING (session_id)""").fetchone()
    return {"sessions": int(row[0]), "owing": int(row[1]), "failed": int(row[2])}


def channel(schema: str) -> str:
    """The LISTEN channel the feed trigger notifies (and finished jobs, so idle drainers
    re-check)."""
    return schema + "_work"
