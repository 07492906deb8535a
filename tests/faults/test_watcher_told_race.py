"""The told watcher under fire: two appending processes (appends, retries, edits, sub-agents,
compaction, rewinds, head switches) race a ``scriptorium memory watch`` process that is
SIGKILLed at random moments and restarted. Once the appenders stop, the last watcher is left
to settle: every qualifying branch (each head, and every other live branch whose pending work
qualifies) ends marked and cited, no turn is cited twice, and verify finds nothing wrong.

``SCRIPTORIUM_RACE_ROUNDS=N`` runs more seeds.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from faultkit import WORKER, check_files, final_state, open_memory, worker_env
from scriptorium.memory.verify import verify

SEEDS = range(int(os.environ.get("SCRIPTORIUM_RACE_ROUNDS", "1")))
TRIGGER = 30


def _watch(home: Path) -> subprocess.Popen:
    env = {**worker_env(), "SCRIPTORIUM_TRIGGER_TOKENS": str(TRIGGER)}
    return subprocess.Popen(
        [sys.executable, "-c", "from scriptorium.cli import main; main()", "--home", str(home),
         "memory", "watch", "--idle-seconds", "0.3", "--interval", "600"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True)


def _settled(home: Path) -> bool:
    mem = open_memory(home, trigger=TRIGGER)
    for row in mem.store.list_sessions():
        sid = row["session_id"]
        head = mem.store.head(sid)
        for tip in mem.live_tips(sid):
            if tip == head and mem.pending(sid, tip):
                return False
            if tip != head and mem.branch_qualifies(sid, tip):
                return False
    return True


@pytest.mark.slow
@pytest.mark.parametrize("seed", SEEDS)
def test_appenders_and_a_killed_told_watcher_leave_every_qualifying_branch_written_once(
        tmp_path: Path, seed: int) -> None:
    home = tmp_path / "home"
    home.mkdir()
    rng = random.Random(seed)
    appenders = [subprocess.Popen(
        [sys.executable, str(WORKER), "append", str(home), "--seed", str(seed * 10 + i),
         "--steps", "30", "--prefix", f"p{i}-", "--log", str(tmp_path / f"appends{i}.jsonl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=worker_env())
        for i in range(2)]
    kills = 0
    watcher = _watch(home)
    while any(p.poll() is None for p in appenders):
        time.sleep(rng.uniform(0.05, 0.6))
        if watcher.poll() is None:
            os.killpg(watcher.pid, signal.SIGKILL)
            watcher.wait()
            kills += 1
        watcher = _watch(home)
    for proc in appenders:
        assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    deadline = time.monotonic() + 180  # liveness bound, not a speed expectation
    while not _settled(home):
        assert watcher.poll() is None, watcher.stderr.read() if watcher.stderr else ""
        assert time.monotonic() < deadline, "the watcher never wrote every qualifying branch"
        time.sleep(0.2)
    watcher.send_signal(signal.SIGTERM)
    assert watcher.wait(timeout=60) == 0
    assert kills >= 1

    mem = open_memory(home, trigger=TRIGGER)
    final = final_state(home)
    assert final.duplicate_citations == []
    check_files(home)
    assert verify(mem).problems == []
    for row in mem.store.list_sessions():
        sid = row["session_id"]
        assert mem.pending(sid) == [], sid
        for tip in mem.live_tips(sid):
            assert not mem.branch_qualifies(sid, tip), (sid, tip)
