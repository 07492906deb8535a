"""The writer job queue of a PostgreSQL home (`memory work`), against a real server: head
moves queue their session, a claim is a row lock (SKIP LOCKED) so workers share jobs and a
dead worker's job is taken over, LISTEN wakes a waiting worker, SIGTERM ends it cleanly.
Worker tests use real processes; every wait is on an event with a generous bound."""

from __future__ import annotations

import signal
import threading
from collections import Counter
from pathlib import Path

import pytest

from scriptorium.postgres.jobs import JobOutcome, claim, finish, queue_status
from scriptorium.postgres.worker import Worker
from workkit import GENEROUS, WorkerProc, move, open_home, probe, wait_for

@pytest.fixture
def pg(pg_url):
    home = open_home(pg_url)
    yield home
    home.close()


def claim_one(pg, *, idle: float = 0.0, drain: bool = False, outcome=None):
    """Claim, finish with ``outcome`` (done by default), commit; the job claimed or None."""
    with pg.connection() as conn:
        job = claim(conn, idle=idle, drain=drain)
        if job is not None:
            finish(conn, job, outcome or JobOutcome(), worker="t", retry_seconds=0.0)
        return job


# -- the queue -------------------------------------------------------------------------------

def test_a_head_move_queues_its_session_with_the_tip_it_left(pg):
    move(pg, "s", None, "u1")
    move(pg, "s", "u1", "a1")
    move(pg, "s", "a1", "a1r")  # a retry: the head left a1
    job = claim_one(pg, idle=3600)
    assert job is not None and job.session_id == "s" and not job.boundary
    assert [(t.tip, t.new_tip) for t in job.left] == [("u1", "a1"), ("a1", "a1r")]
    assert claim_one(pg, idle=3600) is None  # handled; the boundary write waits for quiet


def test_a_quiet_session_is_due_for_its_boundary_write_and_a_new_move_makes_it_due_again(pg):
    move(pg, "s", None, "u1")
    assert not claim_one(pg, idle=3600).boundary           # the move itself, at once
    assert claim_one(pg, idle=3600) is None                 # not quiet for an hour
    job = claim_one(pg, idle=0)                             # quiet long enough
    assert job is not None and job.boundary
    assert claim_one(pg, idle=0) is None                    # once, not again
    move(pg, "s", "u1", "a1")
    again = claim_one(pg, idle=0)
    assert again is not None and again.seq > job.seq


def test_drain_makes_every_owed_session_boundary_write_due_now(pg):
    for sid in ("a", "b", "c"):
        move(pg, sid, None, f"{sid}1")
    jobs = [claim_one(pg, idle=3600, drain=True) for _ in range(3)]
    assert sorted(j.session_id for j in jobs) == ["a", "b", "c"]
    assert all(j.boundary for j in jobs)
    assert claim_one(pg, idle=3600, drain=True) is None
    with pg.connection() as conn:
        assert queue_status(conn) == {"sessions": 3, "owing": 0, "failed": 0}


def test_a_claimed_session_is_skipped_by_others_and_free_again_when_its_claim_ends(pg):
    move(pg, "s", None, "u1")
    holder = pg.dedicated()
    with holder.transaction():
        held = claim(holder, idle=0, drain=False)
        assert held is not None
        assert claim_one(pg) is None  # SKIP LOCKED: another worker passes it over
    # the holder's transaction ended without recording an outcome: the job is due again
    assert claim_one(pg).session_id == "s"
    holder.close()


def test_a_head_move_is_not_held_up_by_a_worker_busy_with_that_session(pg):
    move(pg, "s", None, "u1")
    holder = pg.dedicated()
    with holder.transaction():
        assert claim(holder, idle=0, drain=False) is not None
        with pg.connection() as conn:  # the store's move, while the job runs
            conn.execute("SET LOCAL lock_timeout = '60s'")
            conn.execute("INSERT INTO head_moves (session_id, old_head, new_head, at)"
                         " VALUES ('s', 'u1', 'a1', 0)")
    holder.close()
    job = claim_one(pg, idle=3600)
    assert job is not None and [t.tip for t in job.left] == ["u1"]


def test_a_retryable_failure_is_retried_later_and_a_terminal_one_waits_for_the_next_move(pg):
    move(pg, "r", None, "u1")
    busy = JobOutcome(failure={"reason_code": "CONCURRENT_UPDATE", "retryable": True,
                               "message": "busy"})
    first = claim_one(pg, outcome=busy)
    assert first is not None
    with pg.connection() as conn:
        attempts, failure = conn.execute(
            "SELECT attempts, failure FROM work_claims WHERE session_id = 'r'").fetchone()
    assert attempts == 1 and failure["reason_code"] == "CONCURRENT_UPDATE"
    assert claim_one(pg).session_id == "r"  # back-off 0 here: due again, not lost
    move(pg, "t", None, "v1")
    broken = JobOutcome(failure={"reason_code": "WRITE_FAILED", "retryable": False,
                                 "message": "no"})
    assert not claim_one(pg, idle=3600, outcome=broken).boundary  # the move's job fails
    assert claim_one(pg, idle=0, outcome=broken).boundary  # the boundary write still comes
    assert claim_one(pg, idle=0) is None  # failed for good: not retried in a loop
    with pg.connection() as conn:
        assert queue_status(conn)["failed"] == 1
    move(pg, "t", "v1", "v2")
    assert claim_one(pg).session_id == "t"  # a new move: tried again


def test_a_job_that_raises_is_recorded_and_the_worker_goes_on(pg):
    move(pg, "x", None, "u1")
    move(pg, "y", None, "w1")

    def handle(job):
        if job.session_id == "x":
            raise RuntimeError("the writer fell over")
        return JobOutcome()

    worker = Worker(pg, handle, idle_seconds=3600, drain=True)
    summary = worker.run(threading.Event(), until_idle=True)
    worker.close()
    assert summary.jobs == 2 and summary.failed == 1 and summary.stopped_by == "idle"
    with pg.connection() as conn:
        failure = conn.execute("SELECT failure FROM work_claims WHERE session_id = 'x'"
                               ).fetchone()[0]
    assert "fell over" in failure["message"]


def test_a_worker_whose_server_goes_away_stops_with_database_unreachable(pg):
    from scriptorium.postgres.connect import DatabaseUnreachable

    worker = Worker(pg, lambda job: JobOutcome(), idle_seconds=3600, interval_seconds=3600)
    ready, raised = threading.Event(), []

    def run() -> None:
        try:
            worker.run(threading.Event(), on_ready=ready.set)
        except DatabaseUnreachable as exc:
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert ready.wait(GENEROUS)
    with pg.connection() as conn:  # what a server restart does to the worker's sessions
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                     " WHERE query = %s", (f'LISTEN "{worker.channel}"',))
    thread.join(GENEROUS)
    assert not thread.is_alive() and len(raised) == 1
    assert raised[0].retryable and "did not answer" in str(raised[0])


# -- worker processes ------------------------------------------------------------------------

def done_once(rows) -> Counter:
    return Counter(sid for sid, _seq, _w, event in rows if event == "done")


@pytest.mark.slow
def test_n_workers_share_the_jobs_with_no_job_run_twice_at_once(pg, pg_url):
    sessions = [f"s{i:02d}" for i in range(24)]
    for sid in sessions:
        move(pg, sid, None, sid + "-1")
    workers = [WorkerProc(pg_url, f"w{i}", "--drain", "--until-idle", "--hold", "0.05")
               for i in range(3)]
    results = [w.finish() for w in workers]
    assert [code for code, _ in results] == [0, 0, 0]
    rows = probe(pg)
    assert [r for r in rows if r[3] == "overlap"] == []
    assert done_once(rows) == Counter({sid: 1 for sid in sessions})  # each once, none lost
    ran = Counter(line["session_id"] for _, lines in results for line in lines
                  if line["event"] == "job")
    assert ran == Counter({sid: 1 for sid in sessions})


@pytest.mark.slow
def test_a_sigkilled_workers_job_is_taken_over_and_nothing_is_lost(pg, pg_url):
    sessions = [f"k{i}" for i in range(6)]
    for sid in sessions:
        move(pg, sid, None, sid + "-1")
    victim = WorkerProc(pg_url, "victim", "--drain", "--until-idle", "--block", "k0")
    try:
        wait_for(lambda: ("k0", "victim") in {(r[0], r[2]) for r in probe(pg)
                                               if r[3] == "started"}, "the victim to start k0")
        victim.proc.send_signal(signal.SIGKILL)
    finally:
        victim.kill()
    heir = WorkerProc(pg_url, "heir", "--drain", "--until-idle")
    code, _ = heir.finish()
    assert code == 0
    rows = probe(pg)
    assert done_once(rows) == Counter({sid: 1 for sid in sessions})
    assert ("k0", "heir") in {(r[0], r[2]) for r in rows if r[3] == "done"}
    assert [r for r in rows if r[3] == "overlap"] == []
    with pg.connection() as conn:
        assert queue_status(conn)["owing"] == 0


@pytest.mark.slow
def test_a_head_move_wakes_a_waiting_worker_and_sigterm_ends_it_cleanly(pg, pg_url):
    # the safety-net interval is an hour: only the announcement can wake it in time
    worker = WorkerProc(pg_url, "sleeper", "--interval", "3600", "--idle", "3600")
    try:
        worker.wait_ready()
        move(pg, "woken", None, "u1")
        job = worker.line()
        assert job["event"] == "job" and job["session_id"] == "woken"
        worker.proc.send_signal(signal.SIGTERM)
        code, lines = worker.finish()
    finally:
        worker.kill()
    assert code == 0
    assert lines[-1]["event"] == "summary" and lines[-1]["stopped_by"] == "stop"
    assert lines[-1]["jobs"] == 1


def test_memory_work_on_a_directory_home_is_refused_with_what_to_use(cli, home: Path):
    result = cli("memory", "work", "--drain")
    assert result.exit_code == 2
    assert "PostgreSQL home" in result.stderr and "memory watch" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
