"""A writer SIGKILLed on a PostgreSQL home costs a redo, never an omission and never a turn
cited twice: real processes (pg_memory_worker.py) killed at the write path's steps, then
a redo by a new process, compared with the same workload written without a crash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from pgmemkit import Homes
from pgserver import home_url
from scriptorium.memory.catalog import TopicCatalog
from scriptorium.memory.records import records

WORKER = Path(__file__).resolve().parent / "pg_memory_worker.py"

pytestmark = pytest.mark.slow


def workload(homes: Homes) -> None:
    """Two sessions, one with a retried reply and a branch from an earlier turn."""
    mem = homes.open()
    store = mem.store
    store.create_session("a", title="Release planning")
    for i in range(6):
        store.append_message("a", {"id": f"a{i}", "role": "user" if i % 2 == 0 else "assistant",
                                   "content": f"Release step {i}: the build {i} ships on day {i}."})
    store.retry("a", "a5", "Release step 5 again: the build ships on Friday.", node_id="a5r")
    store.append_message("a", {"id": "f0", "role": "user", "predecessor": "a2",
                               "content": "Another idea: ship the beta to staging first."})
    store.create_session("b", title="Deploys")
    for i in range(4):
        store.append_message("b", {"id": f"b{i}", "role": "user" if i % 2 == 0 else "assistant",
                                   "content": f"Deploy rule {i}: deploys wait for review {i}."})


def run(url: str, tmp: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRIPTORIUM_FAULT")}
    if fault:
        env["SCRIPTORIUM_FAULT"] = fault
    return subprocess.run([sys.executable, str(WORKER), url, str(tmp),
                           "--audit", str(tmp / "audit.jsonl")],
                          env=env, capture_output=True, text=True, timeout=180)


def citations(homes: Homes) -> Counter:
    """How many paragraphs cite each source, over the whole of memory."""
    ws = homes.open().workspace
    return Counter(ref for _, block in TopicCatalog.of(ws).refresh().blocks()
                   for ref in block.refs)


def owed(homes: Homes) -> dict[str, list[str]]:
    """Every turn of every branch that is still pending (should be none after a redo)."""
    mem = homes.open()
    out = {}
    for row in mem.store.list_sessions():
        sid = row["session_id"]
        for branch in mem.store.list_branches(sid):
            ids = [r.node_id for r in mem.pending(sid, branch["tip"])]
            if ids:
                out[f"{sid}@{branch['tip']}"] = ids
    return out


def every_turn(homes: Homes) -> set[str]:
    mem = homes.open()
    return {r.source_id for row in mem.store.list_sessions()
            for b in mem.store.list_branches(row["session_id"])
            for r in records(row["session_id"], mem.store.get_branch(row["session_id"], b["tip"]))}


@pytest.fixture(scope="module")
def clean_run(pg_server_url, tmp_path_factory):
    """The same workload written by one process that nobody killed."""
    tmp = tmp_path_factory.mktemp("clean")
    url = home_url(pg_server_url)
    homes = Homes("postgres", tmp, url)
    workload(homes)
    done = run(url, tmp)
    assert done.returncode == 0, done.stderr[-2000:]
    clean = citations(homes), owed(homes)  # a one-turn retry waits by policy
    homes.close()
    return clean


# archived, not installed | installed in the database, the mirror not yet | installed, unmarked
@pytest.mark.parametrize("step", ["after-archive", "prepared", "before-mark"])
def test_a_writer_killed_mid_write_leaves_a_redo_that_loses_nothing_and_cites_nothing_twice(
        pg_url, tmp_path, clean_run, step):
    homes = Homes("postgres", tmp_path, pg_url)
    workload(homes)
    crashed = run(pg_url, tmp_path, fault=step)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-2000:]
    assert owed(homes), "the killed writer left nothing to redo"
    redo = run(pg_url, tmp_path)
    assert redo.returncode == 0, redo.stderr[-2000:] + redo.stdout[-2000:]
    clean_counts, clean_owed = clean_run
    assert owed(homes) == clean_owed
    counts = citations(homes)
    pending = {f"openprogram/{key.split('@')[0]}/{n}" for key, ids in clean_owed.items()
               for n in ids}
    assert set(counts) == every_turn(homes) - pending, "a turn was lost"
    assert counts == clean_counts, "a turn is cited more often than in a clean run"
    assert homes.open().verify().ok
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    seen = Counter(ref for batch in audit for ref in batch)
    assert max(seen.values()) <= 2  # the killed batch once more, nothing else again
    homes.close()


def test_a_killed_lock_holder_does_not_keep_memory_locked(pg_url, tmp_path):
    """The advisory locks die with their connection: a writer killed while holding its
    session's lock (paused after its writer ran) leaves the next writer free to go on; while
    it lived, only its own session was busy."""
    homes = Homes("postgres", tmp_path, pg_url)
    workload(homes)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SCRIPTORIUM_FAULT")},
           "SCRIPTORIUM_FAULT": "writer-ran", "SCRIPTORIUM_FAULT_ACTION": "pause",
           "SCRIPTORIUM_FAULT_FLAG": str(tmp_path / "flag")}
    proc = subprocess.Popen([sys.executable, str(WORKER), pg_url, str(tmp_path)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        for _ in range(1200):
            if (tmp_path / "flag").exists() or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert (tmp_path / "flag").exists(), "the worker never reached the write step"
        # the paused writer's session is busy; the other session is written meanwhile
        codes = [r.failure.reason_code if r.failure else None
                 for r in homes.open().write(force=True)]
        assert sorted(codes, key=str) == ["CONCURRENT_UPDATE", None]
    finally:
        proc.kill()
        proc.wait(30)
    assert run(pg_url, tmp_path).returncode == 0
    assert set(owed(homes)) <= {"a@a5"}  # only the one-turn retry, which waits by policy
    homes.close()
