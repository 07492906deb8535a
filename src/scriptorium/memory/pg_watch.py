"""``memory watch`` on a PostgreSQL home: the queue worker's path, reported as watcher passes.

The directory watcher (:mod:`.watcher`) keeps its state — the log position, the quiet
sessions, what it handled, the failures — in a file, and lets one pass run at a time through
a file lock: state and exclusion of one machine. A PostgreSQL home is shared by hosts, and
its writer queue (:mod:`scriptorium.postgres.jobs`) already keeps that state in rows: which
moves each session's jobs have handled, when it last moved, its failures, and a claim (a row
lock) while a job runs. So ``memory watch`` there *is* a queue worker (``memory work``):

* the same rules: a job applies the watcher's (:mod:`.work`), so a branch the head left is
  written when it qualifies and a session quiet for ``idle_seconds`` gets its boundary write;
* a watcher restarted, here or on another host, resumes where the queue says: nothing it
  handled is done again (marks and the handled moves are in the home), nothing owed is
  forgotten (a killed watcher's claim ends with its connection and the job is due again);
* any number of watchers share the work, and two never write one session at once.

Reports keep the watcher's shape (:class:`~.watcher.PassReport`), so the command's output is
the same on both homes. A terminal failure waits for the session's next move, for a worker
or watcher started under another configuration, or for ``--retry-failed`` (see
:mod:`.failed_jobs`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

from .failed_jobs import REQUEUE_FAILED
from .watcher import PassReport
from .view import MemoryView
from .work import make_worker, pg_home_of

if TYPE_CHECKING:  # pragma: no cover - the postgres extra is optional
    from ..postgres.worker import JobReport, Worker

# the safety-net wake of a watching worker at most (a missed notification costs this long)
MAX_INTERVAL = 60.0

def pass_report(jobs: Sequence["JobReport"]) -> PassReport:
    """Jobs run, as the watcher reports a pass: written, retry later, or failed for good."""
    report = PassReport(considered=len(jobs))
    for job in jobs:
        marked = job.detail.get("marked")
        failure = job.failure and {k: v for k, v in job.failure.items() if k != "config"}
        entry: dict[str, Any] = {"session_id": job.session_id,
                                 "marked": marked if isinstance(marked, list) else [],
                                 "updated_at": None}
        if not failure:
            if entry["marked"] or job.boundary:
                report.written.append(entry)
        elif failure.get("retryable"):
            report.retry_later.append({**entry, "failure": failure})
        else:
            report.terminal.append({**entry, "failure": failure})
    return report


class PgWatcher:
    """The watcher of a PostgreSQL home (see the module docstring); the same calls as
    :class:`~.watcher.IdleWatcher` that ``memory watch`` makes."""

    def __init__(self, memory: MemoryView, *, idle_seconds: float | None = None,
                 interval_seconds: float | None = None) -> None:
        self.memory = memory
        settings = memory.settings
        self.idle_seconds = settings.watcher_idle_seconds if idle_seconds is None else idle_seconds
        self.interval = min(settings.watcher_interval_seconds if interval_seconds is None
                            else interval_seconds, MAX_INTERVAL)
        self.pg = pg_home_of(memory)

    def _worker(self) -> "Worker":
        return make_worker(self.memory, idle_seconds=self.idle_seconds,
                           interval_seconds=self.interval)

    def requeue_failed(self) -> int:
        """Sessions whose last write failed for good are owed their boundary write again
        (due once quiet); returns how many."""
        with self.pg.connection() as conn:
            return int(conn.execute(REQUEUE_FAILED).rowcount)

    def run_once(self, now: float | None = None, *, retry_failed: bool = False) -> PassReport:
        """Run every job due now (the database's clock decides: ``now`` is not used), then
        return; ``retry_failed``: first make the failed-for-good sessions owed again."""
        if retry_failed:
            self.requeue_failed()
        worker = self._worker()
        jobs: list[JobReport] = []
        try:
            while (job := worker.run_one()) is not None:
                jobs.append(job)
        finally:
            worker.close()
        return pass_report(jobs)

    def run_forever(self, stop: threading.Event | None = None,
                    on_report: Callable[[PassReport], None] | None = None,
                    max_passes: int | None = None, wake_fds: Sequence[int] = ()) -> None:
        """Work the queue until ``stop`` is set (``max_passes``: or that many jobs ran),
        woken by head moves (LISTEN); a job under way finishes first."""
        worker = self._worker()

        def show(job: "JobReport") -> None:
            report = pass_report([job])
            if on_report and report:
                on_report(report)

        try:
            worker.run(stop, wake_fds=wake_fds, on_report=show, max_jobs=max_passes)
        finally:
            worker.close()
