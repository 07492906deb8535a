"""A worker: claims due jobs from a PostgreSQL home's queue and runs them, any number at once
on any number of hosts, told of new work by LISTEN instead of polling.

What the worker guarantees is independent of what a job does (``handle``, a callable; the
memory write is :mod:`scriptorium.memory.work`): a job is run by one worker at a time (its
claim is a row lock held in the worker's open transaction); a worker that dies mid-job loses
its claim with its connection and another worker redoes the job (the memory write is safe to
redo: marks decide what is written); the outcome is recorded in the claim's transaction, so a
job is marked done only if its worker lived to commit.

Between jobs the worker sleeps until a head move is announced (NOTIFY from the queue's feed),
the next job falls due (the idle allowance), the safety-net interval ends, or a wake
descriptor (a signal's pipe) is readable. A stop ends the loop between jobs: a job under way
finishes first.
"""

from __future__ import annotations

import os
import select
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .connect import PgHome
from .host import host_name
from .jobs import Job, JobOutcome, channel, claim, finish, seconds_until_due

Handler = Callable[[Job], JobOutcome]
DEFAULT_INTERVAL = 60.0  # the safety net: how long a worker sleeps with nothing announced
DEFAULT_RETRY = 1.0  # first back-off after a retryable failure (doubles per attempt)


@dataclass
class JobReport:
    """One job run by this worker: which, and how it went."""

    session_id: str
    seq: int
    boundary: bool
    left: list[str]
    failure: dict[str, Any] | None
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "seq": self.seq, "boundary": self.boundary,
                "left": self.left, "failure": self.failure, **self.detail}

    def line(self) -> str:
        what = "session-boundary write" if self.boundary else "moves"
        if self.failure:
            return (f"{self.session_id}: {what} failed: {self.failure.get('reason_code')}: "
                    f"{self.failure.get('message')}")
        marked = self.detail.get("marked")
        extra = f", {len(marked)} turn(s) written" if isinstance(marked, list) else ""
        return f"{self.session_id}: {what} done{extra}"


@dataclass
class WorkSummary:
    """What one run of the worker did."""

    worker: str
    jobs: int = 0
    failed: int = 0
    stopped_by: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"worker": self.worker, "jobs": self.jobs, "failed": self.failed,
                "stopped_by": self.stopped_by}


def _failure_of(exc: BaseException, transient: type[BaseException]) -> dict[str, Any]:
    """An exception escaping a handler, as a recorded failure: retryable if it says so, or
    if it is ``transient`` (the driver's lost-connection error: the next try may work)."""
    retryable = bool(getattr(exc, "retryable", False)) or isinstance(exc, transient)
    return {"reason_code": str(getattr(exc, "code", "ERROR")), "retryable": retryable,
            "message": (str(exc) or type(exc).__name__).strip().splitlines()[0]}


class Worker:
    """Runs ``handle`` for each due job of the home ``pg``.

    ``idle_seconds``: how long a session must be quiet before its session-boundary job is
    due; ``drain``: every owed job is due now (write everything pending, then stop with
    ``until_idle``)."""

    def __init__(self, pg: PgHome, handle: Handler, *, idle_seconds: float,
                 interval_seconds: float = DEFAULT_INTERVAL, drain: bool = False,
                 retry_seconds: float = DEFAULT_RETRY, name: str | None = None) -> None:
        self.pg = pg
        self.handle = handle
        self.idle = idle_seconds
        self.interval = interval_seconds
        self.drain = drain
        self.retry_seconds = retry_seconds
        self.name = name or f"{host_name()}:{os.getpid()}"
        self.channel = channel(pg.target.schema)
        self._conn: Any = None

    def _claims(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self.pg.dedicated()
        return self._conn

    def run_one(self) -> JobReport | None:
        """Claim one due job and run it to its recorded outcome; None when nothing claimable
        is due. The claim's transaction is open for the whole job."""
        conn = self._claims()
        with conn.transaction():
            job = claim(conn, idle=self.idle, drain=self.drain)
            if job is None:
                return None
            try:
                outcome = self.handle(job)
            except Exception as exc:  # one job's failure must not end the worker
                outcome = JobOutcome(failure=_failure_of(exc, self.pg._psycopg.OperationalError))
            with conn.pipeline():  # the outcome and the wake-up: one round trip
                finish(conn, job, outcome, worker=self.name, retry_seconds=self.retry_seconds)
                conn.execute("SELECT pg_notify(%s, '')", (self.channel,))  # drainers look
        return JobReport(job.session_id, job.seq, job.boundary, [t.tip for t in job.left],
                         outcome.failure, outcome.detail)

    def due_in(self) -> float | None:
        """Seconds until a job falls due (0: now, maybe held by another worker), None when
        nothing is owed."""
        conn = self._claims()
        with conn.transaction():
            return seconds_until_due(conn, idle=self.idle, drain=self.drain)

    def run(self, stop: threading.Event | None = None, *, until_idle: bool = False,
            wake_fds: Sequence[int] = (), on_report: Callable[[JobReport], None] | None = None,
            on_ready: Callable[[], None] | None = None,
            max_jobs: int | None = None) -> WorkSummary:
        """Run jobs until ``stop`` is set (``until_idle``: or until nothing is owed by
        anyone; ``max_jobs``: or after that many). LISTEN starts before the first look at
        the queue, so no move falls between a look and the sleep that follows it. A server
        that goes away ends the run with DatabaseUnreachable (retryable: start it again)."""
        stop = stop or threading.Event()
        summary = WorkSummary(self.name)
        listener = self.pg.dedicated()
        try:
            return self._loop(listener, stop, summary, until_idle, wake_fds, on_report,
                              on_ready, max_jobs)
        except self.pg._psycopg.OperationalError as exc:  # the server went away mid-run
            self.close()
            raise self.pg._unreachable(exc) from None
        finally:
            listener.close()

    def _loop(self, listener: Any, stop: threading.Event, summary: WorkSummary,
              until_idle: bool, wake_fds: Sequence[int],
              on_report: Callable[[JobReport], None] | None,
              on_ready: Callable[[], None] | None, max_jobs: int | None) -> WorkSummary:
        from psycopg import sql

        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
        if on_ready:
            on_ready()
        while not stop.is_set():
            report = self.run_one()
            if report is not None:
                summary.jobs += 1
                summary.failed += report.failure is not None
                if on_report:
                    on_report(report)
                if max_jobs is not None and summary.jobs >= max_jobs:
                    summary.stopped_by = "max_jobs"
                    return summary
                continue
            due = self.due_in()
            if until_idle and due is None:
                summary.stopped_by = "idle"
                return summary
            delay = self.interval if due is None else min(self.interval, due)
            if due == 0:  # owed now but held by another worker: its finish will tell us
                delay = self.interval
            _wait(listener, delay, wake_fds)
        summary.stopped_by = "stop"
        return summary

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _wait(listener: Any, timeout: float, wake_fds: Sequence[int]) -> None:
    """Sleep until a notification arrives, a wake descriptor is readable, or ``timeout``."""
    if timeout > 0:
        ready, _, _ = select.select([listener.fileno(), *wake_fds], [], [], timeout)
        for fd in ready:
            if fd in wake_fds:
                try:
                    os.read(fd, 4096)
                except (BlockingIOError, InterruptedError):
                    pass
    for _ in listener.notifies(timeout=0.0):  # consume what arrived; content is not needed
        pass

