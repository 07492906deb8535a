"""A queue worker process for the tests: a probe job, or (``--memory``) the memory write.

``python work_proc.py URL --name N [--memory] [--hold S] [--block SID] [--drain]
[--until-idle] [--idle S] [--interval S]``

With ``--memory`` the job is :class:`scriptorium.memory.work.MemoryJobs` on
``Memory.open(URL)`` (what ``memory work`` runs); each job's line carries the turns marked.

The probe job proves what the queue promises: it takes a session-level advisory lock named
for the job's session on its own connection, *trying* (a refusal means another worker is
running the same session's job at this moment: recorded as ``overlap``), writes ``started``,
holds the job ``--hold`` seconds (or forever for ``--block SID``, until it is killed),
writes ``done`` with the seq it covered, and lets go. Stdout: one JSON line per event
(``ready`` once listening, ``job`` per job run, ``summary`` at the end). SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

from scriptorium.postgres.connect import PgHome
from scriptorium.postgres.jobs import Job, JobOutcome
from scriptorium.postgres.worker import Worker


def say(event: str, **data: object) -> None:
    print(json.dumps({"event": event, **data}), flush=True)


def on_sigterm() -> tuple[threading.Event, int]:
    """A stop event SIGTERM sets, and a descriptor that wakes the worker's sleep at once."""
    stop = threading.Event()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.set_wakeup_fd(wake_w)
    return stop, wake_r


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--name", required=True)
    ap.add_argument("--hold", type=float, default=0.0)
    ap.add_argument("--block", default=None)
    ap.add_argument("--drain", action="store_true")
    ap.add_argument("--until-idle", action="store_true")
    ap.add_argument("--idle", type=float, default=0.0)
    ap.add_argument("--interval", type=float, default=3600.0)
    ap.add_argument("--memory", action="store_true")
    ap.add_argument("--profile", default=None,
                    help="write this worker's cProfile stats into this directory")
    args = ap.parse_args(argv)
    if args.memory and args.profile:
        import cProfile

        prof = cProfile.Profile(time.process_time)  # CPU, not wall: the machine is shared
        try:
            return prof.runcall(memory_worker, args)
        finally:
            prof.dump_stats(os.path.join(args.profile, f"{args.name}-{os.getpid()}.prof"))
    if args.memory:
        return memory_worker(args)
    pg = PgHome.open(args.url)
    probe = pg.dedicated()

    def record(job: Job, event: str) -> None:
        probe.execute("INSERT INTO work_probe (session_id, seq, worker, event)"
                      " VALUES (%s, %s, %s, %s)", (job.session_id, job.seq, args.name, event))

    def handle(job: Job) -> JobOutcome:
        key = "work-probe:" + job.session_id
        got = probe.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]
        if not got:
            record(job, "overlap")
        record(job, "started")
        if job.session_id == args.block:
            while True:  # a worker stuck mid-job, until SIGKILL
                time.sleep(1)
        time.sleep(args.hold)
        record(job, "done")
        if got:
            probe.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))
        return JobOutcome(detail={"left": [t.tip for t in job.left]})

    stop, wake_r = on_sigterm()
    worker = Worker(pg, handle, idle_seconds=args.idle, interval_seconds=args.interval,
                    drain=args.drain, name=args.name)
    summary = worker.run(stop, until_idle=args.until_idle, wake_fds=[wake_r],
                         on_ready=lambda: say("ready", cpu=time.process_time()),
                         on_report=lambda r: say("job", **r.to_dict()))
    say("summary", **summary.to_dict())
    worker.close()
    pg.close()
    return 0


def memory_worker(args: argparse.Namespace) -> int:
    from scriptorium.config import load_settings
    from scriptorium.memory.work import make_worker
    from scriptorium.memory.writing import Memory

    stop, wake_r = on_sigterm()
    with Memory.open(args.url, settings=load_settings(args.url, {"trigger_tokens": 10_000})) as mem:
        worker = make_worker(mem, idle_seconds=args.idle, interval_seconds=args.interval,
                             drain=args.drain, name=args.name)
        summary = worker.run(stop, until_idle=args.until_idle, wake_fds=[wake_r],
                             on_ready=lambda: say("ready", cpu=time.process_time()),
                             on_report=lambda r: say("job", **r.to_dict()))
        worker.close()
    say("summary", cpu=time.process_time(), **summary.to_dict())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
