"""``memory work``: the memory write as a job of the PostgreSQL home's worker queue.

The queue and the claim are :mod:`scriptorium.postgres.worker`'s; this module says what a job
*does*, with the watcher's rules (:mod:`.watcher`), so a worker and a watcher write the same
turns at the same moments:

* a move that left a tip behind (a retry, an edit, a spawn, an explicit head change — not an
  append) writes that branch at once if the ``side_branches`` policy says it is due;
* after any move the head gets the per-turn check (its pending turns reach the token
  threshold, or the newest is older than the idle allowance);
* a session quiet for the watcher's idle time (or any session, when draining) gets its
  session-boundary write.

Each write is the normal :class:`~scriptorium.memory.writing.Memory` write (archive, install,
mark), so a job redone after its worker died writes nothing twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, ReasonCode, ScriptoriumError
from .failed_jobs import requeue_reconfigured, stamp_config
from .failures import Failure, classify
from .results import SessionResult
from .writers.base import finds_topics_by_catalog
from .view import MemoryView

if TYPE_CHECKING:  # pragma: no cover - the postgres extra is optional
    from ..postgres.connect import PgHome
    from ..postgres.jobs import Job, JobOutcome, LeftTip
    from ..postgres.worker import Worker


class MemoryJobs:
    """The job handler: runs one claimed job against ``memory`` and reports its outcome."""

    def __init__(self, memory: MemoryView) -> None:
        self.memory = memory
        workspace: Any = getattr(memory, "workspace", None)
        if hasattr(workspace, "lazy_topics"):
            workspace.lazy_topics = finds_topics_by_catalog(getattr(memory, "writer", None))

    def __call__(self, job: "Job") -> "JobOutcome":
        from ..postgres.jobs import JobOutcome

        workspace = getattr(self.memory, "workspace", None)
        conflicts = getattr(workspace, "conflicts", 0)
        published = getattr(workspace, "publish_seconds", 0.0)
        results = self._run(job)
        failure: Failure | None = next((r.failure for r in results if r.failure), None)
        if failure is not None and failure.retryable \
                and failure.reason_code == ReasonCode.CONCURRENT_UPDATE:
            # other workers' installs moved its topic on every try: once more at once (a
            # redo writes nothing twice), before the job is reported for a later retry
            again = self._run(job)
            results += again
            failure = next((r.failure for r in again if r.failure), None)
        marked = [node for r in results for node in r.marked]
        # installs redone because another worker's install moved a topic under them
        redos = getattr(workspace, "conflicts", 0) - conflicts
        # seconds in publishing transactions, which no other writer of the home overlaps
        serial = getattr(workspace, "publish_seconds", 0.0) - published
        return JobOutcome(failure=stamp_config(self.memory, failure.to_dict()) if failure
                          else None, detail={"marked": marked, "redos": redos,
                                             "publish_s": round(serial, 6)})

    def _run(self, job: "Job") -> list[SessionResult]:
        """The job's writes: its session-boundary write, or the branches the head left and
        the head's per-turn check."""
        results: list[SessionResult] = []
        try:
            if job.boundary:
                results.append(self.memory.write_session(job.session_id))
            else:
                for left in job.left:
                    result = self._left(job.session_id, left)
                    if result is not None:
                        results.append(result)
                    if result is not None and result.failure is not None:
                        break
                else:
                    results.append(self.memory.write_turn(job.session_id))
        except ScriptoriumError as exc:
            results.append(SessionResult(job.session_id, failure=classify(exc)))
        return results

    def _left(self, sid: str, left: "LeftTip") -> SessionResult | None:
        """The head left ``left.tip``: write that branch if it is still a live tip off the
        head's line and the policy says it is due (else it waits for the boundary write)."""
        store = self.memory.store
        if left.new_tip is not None and left.new_tip != left.tip:
            try:
                if store.get_node(sid, left.new_tip).predecessor == left.tip:
                    return None  # an append: the head moved on along the same line
            except ScriptoriumError:
                pass  # the new tip is gone again; the branch check below decides
        live = {row["tip"] for row in store.list_branches(sid) if not row.get("archived")}
        if left.tip not in live or left.tip == store.head(sid):
            return None
        if not self.memory.branch_qualifies(sid, left.tip):
            return None
        return self.memory.write_branch(sid, left.tip)


def pg_home_of(memory: Any) -> "PgHome":
    """The PostgreSQL home behind ``memory`` (its own, or its session store's); a directory
    home has none, and ``memory work`` is refused there with what to use instead."""
    from ..postgres.connect import PgHome

    for owner in (memory, getattr(memory, "store", None), getattr(memory, "workspace", None)):
        pg = getattr(owner, "pg", None)
        if isinstance(pg, PgHome):
            return pg
    raise InvalidInput("memory work needs a PostgreSQL home (--home postgresql://...); a "
                       "directory home is written by `scriptorium memory watch`")


def make_worker(memory: MemoryView, *, idle_seconds: float | None = None,
                interval_seconds: float | None = None, drain: bool = False,
                name: str | None = None) -> "Worker":
    """A queue worker for ``memory``'s PostgreSQL home running :class:`MemoryJobs`; the idle
    time defaults to the watcher's (``watcher_idle_seconds``), so both write at the same
    moments. Sessions that failed for good under another configuration are owed again
    (:func:`~.failed_jobs.requeue_reconfigured`)."""
    from ..postgres.worker import DEFAULT_INTERVAL, Worker

    pg = pg_home_of(memory)
    requeue_reconfigured(pg, memory)
    return Worker(pg, MemoryJobs(memory),
                  idle_seconds=(memory.settings.watcher_idle_seconds if idle_seconds is None
                                else idle_seconds),
                  interval_seconds=(DEFAULT_INTERVAL if interval_seconds is None
                                    else interval_seconds),
                  drain=drain, name=name)
