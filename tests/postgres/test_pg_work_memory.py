"""A queue job runs the memory write with the watcher's rules: a branch the head left is
written at once when it qualifies, an append is not a branch, the head is written when it
reaches the threshold, and a drain writes every turn of every live branch exactly once.

The rules are pinned on a directory memory whose announced head moves are copied into a
PostgreSQL home's queue (clocks and moves under the test's control); then `memory work` runs
on a PostgreSQL home end to end: the store's own moves feed it, a worker killed between
install and mark is redone with nothing lost or doubled, and a new turn wakes a waiting one."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.errors import InvalidInput
from scriptorium.memory.citations import citation_map
from scriptorium.memory.records import PROVIDER
from scriptorium.memory.work import MemoryJobs, make_worker
from scriptorium.memory.writing import Memory
from scriptorium.postgres.worker import Worker
from pgserver import home_url
from workkit import GENEROUS, WorkerProc, copy_moves, open_home, wait_for


@pytest.fixture
def pg(pg_url):
    home = open_home(pg_url)
    yield home
    home.close()


def memory(home: Path, **settings) -> Memory:
    return Memory(home, settings=load_settings(home, {"trigger_tokens": 12, **settings}))


def talk(mem: Memory, sid: str, *turns: tuple[str, str, str]) -> None:
    if not mem.store.exists(sid):
        mem.store.create_session(sid)
    for node, role, text in turns:
        mem.store.append_message(sid, {"id": node, "role": role, "content": text})


def worker(pg, mem: Memory, **kw) -> Worker:
    return Worker(pg, MemoryJobs(mem), **{"idle_seconds": 3600.0, **kw})


def test_a_branch_the_head_left_is_written_by_its_job_without_waiting_for_quiet(pg, tmp_path):
    mem = memory(tmp_path, trigger_tokens=10_000)
    talk(mem, "s", ("u1", "user", "We need a venue for forty people in Lisbon in May."),
         ("a1", "assistant", "I will shortlist three venues near the river by Friday."),
         ("u2", "user", "The budget is fifty thousand euros, flights included."))
    mem.store.edit("s", "u2", "Actually the budget is sixty thousand euros.", node_id="u2e")
    copy_moves(pg, mem.store)
    w = worker(pg, mem)
    report = w.run_one()
    w.close()
    assert report is not None and not report.boundary and report.failure is None
    assert report.detail["marked"] == ["u1", "a1", "u2"]
    assert mem.pending("s", "u2") == []
    assert [r.node_id for r in mem.pending("s")] == ["u2e"]  # the head waits for quiet


def test_appends_below_the_threshold_are_checked_and_left_for_the_boundary_write(pg, tmp_path):
    mem = memory(tmp_path, trigger_tokens=10_000)
    talk(mem, "s", ("u1", "user", "Deploys go out on Tuesdays."),
         ("a1", "assistant", "Noted: Tuesday deploys."))
    copy_moves(pg, mem.store)
    w = worker(pg, mem)
    report = w.run_one()
    assert report is not None and report.detail["marked"] == []
    assert w.run_one() is None  # nothing more is due until the session is quiet
    w.close()
    assert [r.node_id for r in mem.pending("s")] == ["u1", "a1"]


def test_a_head_that_reaches_the_threshold_is_written_by_the_moves_job(pg, tmp_path):
    mem = memory(tmp_path, trigger_tokens=12)
    talk(mem, "s", ("u1", "user", "The quarterly report is due on the fifth of July, "
                                  "and finance wants the draft a week before."))
    copy_moves(pg, mem.store)
    w = worker(pg, mem)
    report = w.run_one()
    w.close()
    assert report is not None and not report.boundary and report.detail["marked"] == ["u1"]


def test_a_drain_writes_every_turn_of_every_live_branch_once(pg, tmp_path):
    mem = memory(tmp_path, trigger_tokens=10_000)
    for n in range(3):
        sid = f"s{n}"
        talk(mem, sid, (f"{sid}u1", "user", f"Project {n} ships in week {n + 10}."),
             (f"{sid}a1", "assistant", f"Week {n + 10} it is for project {n}."),
             (f"{sid}u2", "user", f"Project {n} needs {n + 2} reviewers."))
    mem.store.edit("s1", "s1u2", "Project 1 needs five reviewers after all.",
                   node_id="s1u2e")
    copy_moves(pg, mem.store)
    owed = {(sid, r.node_id) for sid in ("s0", "s1", "s2") for tip in mem.live_tips(sid)
            for r in mem.pending(sid, tip)}
    assert len(owed) == 10  # nine turns on the heads' lines, and the edit's old turn
    w = worker(pg, mem, drain=True)
    reports = []
    summary = w.run(threading.Event(), until_idle=True, on_report=reports.append)
    assert summary.failed == 0 and summary.stopped_by == "idle"
    marked = [(r.session_id, node) for r in reports for node in r.detail["marked"]]
    assert sorted(marked) == sorted(owed)  # every owed turn, none twice
    for sid in ("s0", "s1", "s2"):
        for tip in mem.live_tips(sid):
            assert mem.pending(sid, tip) == [], (sid, tip)
    assert mem.verify().to_dict()["ok"]
    assert w.run_one() is None  # nothing owed: a second drain writes nothing
    w.close()


def test_a_directory_memory_has_no_queue_to_work(tmp_path):
    with pytest.raises(InvalidInput, match="memory watch"):
        make_worker(memory(tmp_path))


# -- on a PostgreSQL home: the store's own head moves feed the queue --------------------------

def pg_memory(url: str, **settings) -> Memory:
    return Memory.open(url, settings=load_settings(url, {"trigger_tokens": 10_000,
                                                           **settings}))


def owed(mem: Memory) -> set[tuple[str, str]]:
    return {(row["session_id"], r.node_id) for row in mem.store.list_sessions()
            for tip in mem.live_tips(row["session_id"])
            for r in mem.pending(row["session_id"], tip)}


def seed(mem: Memory, sessions: int = 3) -> None:
    for n in range(sessions):
        sid = f"s{n}"
        talk(mem, sid, (f"{sid}u1", "user", f"Project {n} ships in week {n + 10}."),
             (f"{sid}a1", "assistant", f"Week {n + 10} it is for project {n}."),
             (f"{sid}u2", "user", f"Project {n} needs {n + 2} reviewers."))
    mem.store.edit("s1", "s1u2", "Project 1 needs five reviewers after all.", node_id="s1u2e")


def test_memory_work_drains_a_postgresql_home_writing_every_turn_once(pg_url):
    with pg_memory(pg_url) as mem:
        seed(mem)
        before = owed(mem)
        assert len(before) == 10
        reports = []
        summary = mem.work(drain=True, until_idle=True, on_report=reports.append)
        assert summary.failed == 0 and summary.stopped_by == "idle"
        marked = [(r.session_id, node) for r in reports for node in r.detail["marked"]]
        assert sorted(marked) == sorted(before)
        assert owed(mem) == set() and mem.verify().to_dict()["ok"]


@pytest.mark.slow
def test_a_worker_killed_between_install_and_mark_is_redone_with_nothing_lost_or_doubled(
        pg_url, pg_server_url, tmp_path, monkeypatch):
    with pg_memory(home_url(pg_server_url)) as clean:  # the same sessions, written once
        seed(clean)
        clean.work(drain=True, until_idle=True)
        clean_counts = {src: len(blocks) for src, blocks in citation_map(clean.workspace).items()}
    with pg_memory(pg_url) as mem:
        seed(mem)
        before = owed(mem)
        flag = tmp_path / "reached"
        monkeypatch.setenv("SCRIPTORIUM_FAULT", "before-mark")
        monkeypatch.setenv("SCRIPTORIUM_FAULT_ACTION", "pause")
        monkeypatch.setenv("SCRIPTORIUM_FAULT_FLAG", str(flag))
        victim = WorkerProc(pg_url, "victim", "--memory", "--drain", "--until-idle")
        for name in ("SCRIPTORIUM_FAULT", "SCRIPTORIUM_FAULT_ACTION", "SCRIPTORIUM_FAULT_FLAG"):
            monkeypatch.delenv(name)
        try:
            wait_for(lambda: flag.exists() or victim.proc.poll() is not None,
                     "the worker to reach before-mark")
            assert flag.exists(), victim.stderr()
            victim.proc.send_signal(signal.SIGKILL)
        finally:
            victim.kill()
        assert owed(mem)  # the killed job's batch is installed but not marked
        heir = WorkerProc(pg_url, "heir", "--memory", "--drain", "--until-idle")
        code, lines = heir.finish()
        assert code == 0
        assert all(line.get("failure") is None for line in lines)
        assert owed(mem) == set() and mem.verify().to_dict()["ok"]
        cited = {src: len(blocks) for src, blocks in citation_map(mem.workspace).items()}
        assert {f"{PROVIDER}/{sid}/{node}" for sid, node in before} <= set(cited)
        assert cited == clean_counts  # the redo cites nothing more than a clean run


@pytest.mark.slow
def test_a_turn_recorded_on_a_postgresql_home_wakes_a_waiting_worker(pg_url):
    with pg_memory(pg_url) as mem:
        # the safety-net interval is an hour: only the announcement can wake it in time
        worker = WorkerProc(pg_url, "sleeper", "--memory", "--idle", "0", "--interval", "3600")
        try:
            worker.wait_ready()
            talk(mem, "late", ("l1", "user", "The office moves to the fourth floor in March."))
            job = worker.line()
            assert job["event"] == "job" and job["session_id"] == "late"
            assert job["marked"] == ["l1"] and owed(mem) == set()
            worker.proc.send_signal(signal.SIGTERM)
            code, lines = worker.finish()
        finally:
            worker.kill()
        assert code == 0 and lines[-1]["stopped_by"] == "stop"


def test_the_memory_work_command_drains_a_postgresql_home(pg_url):
    import json
    import os
    import subprocess
    import sys

    with pg_memory(pg_url) as mem:
        seed(mem, sessions=2)
        before = owed(mem)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
        done = subprocess.run([sys.executable, "-m", "scriptorium", "--home", pg_url, "memory",
                               "work", "--drain", "--json"], capture_output=True, text=True,
                              env=env, timeout=GENEROUS)
        assert done.returncode == 0, done.stderr
        docs = [json.loads(line) for line in done.stdout.splitlines()]
        assert docs[-1]["stopped_by"] == "idle" and docs[-1]["failed"] == 0
        marked = {(d["session_id"], n) for d in docs[:-1] for n in d["marked"]}
        assert marked == before and owed(mem) == set()
