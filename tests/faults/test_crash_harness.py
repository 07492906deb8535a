"""Crash injection with real processes: the writer is SIGKILLed at every named step boundary
of a write (archive, writer, install, mark) and after random delays, over a branching
workload, restarted each time; nothing is ever lost, a crash costs at most a redo.

CI runs a bounded campaign; ``SCRIPTORIUM_FAULT_ROUNDS=N`` runs a bigger one
(``python benchmarks/faults_crash.py`` prints the README figures).
"""

from __future__ import annotations

import json
import os
import signal

import pytest

from faultkit import STEPS, InvariantBroken, check_redos, run_campaign, run_worker

ROUNDS = int(os.environ.get("SCRIPTORIUM_FAULT_ROUNDS", "30"))


@pytest.mark.slow
def test_kills_at_every_step_and_at_random_points_lose_no_turn_and_cost_at_most_a_redo(tmp_path):
    stats = run_campaign(tmp_path / "home", rounds=ROUNDS, random_share=0.5,
                         seed=int(os.environ.get("SCRIPTORIUM_FAULT_SEED", "11")))
    figures = stats.to_dict()
    print(json.dumps(figures))
    # every named step boundary was really crashed at, and so were random points
    assert set(STEPS) <= set(stats.crashes_at), figures
    assert stats.random_kills_tried > 0
    # zero omissions: every eligible turn of every live branch is marked for this workspace
    assert stats.final.eligible > 50
    assert stats.final.omissions == [] and stats.final.uncited == []
    # at most one redone batch per crash, and no turn written twice (two blocks saying the
    # same thing from it)
    assert stats.redone <= stats.crashes
    assert stats.final.duplicate_citations == []
    # history intact: fsck passed after every restart (check_workspace), and it holds the files
    assert stats.git_clean
    assert stats.final.commits > stats.crashes // 2
    # the workload branched every way it can
    assert {"retry", "edit", "spawn", "compact", "rewind", "switch"} <= set(stats.workload_ops)


def test_a_kill_at_a_named_step_really_kills_the_writer_process(tmp_path):
    from fault_workload import Workload
    from scriptorium.sessions import SessionStore

    home = tmp_path / "home"
    Workload(SessionStore(home / "sessions"), seed=1).run(6)
    run = run_worker(["write", str(home), "--mode", "session"], fault="before-mark")
    assert run.killed and run.returncode == -signal.SIGKILL
    again = run_worker(["write", str(home), "--mode", "session"])
    assert not again.killed and json.loads(again.stdout.strip().splitlines()[-1])["marked"] > 0


def test_the_redo_accounting_catches_a_turn_handed_twice_without_a_crash():
    audit = [{"pid": 1, "batch": ["a", "b"]}, {"pid": 2, "batch": ["b", "c"]}]
    with pytest.raises(InvariantBroken, match="without a crash"):
        check_redos(audit, [(1, False), (2, False)])
    assert check_redos(audit, [(1, True), (2, False)]) == (1, 1)
    with pytest.raises(InvariantBroken, match="after only 0 crash"):
        check_redos(audit + [{"pid": 3, "batch": ["a"]}], [(3, False), (1, True), (2, False)])
