"""Crash faults in the middle of an install: the next open finishes it or rolls it back,
never a mix. Real processes are SIGKILLed at named steps; simulated crashes stop in-process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from testkit import copy_state
from scriptorium import faults
from scriptorium.errors import CorruptFile
from scriptorium.memory.workspace import Workspace

# The deploy turns are the batch too: a write may delete only paragraphs citing its batch.
ALLOWED = ["openprogram/offsite/o1", "openprogram/offsite/o2", "openprogram/deploy/d0",
           "openprogram/deploy/d2"]

# One transaction touching every kind of entry: runtime.json (new block ranks), a deleted
# file, a new file in a new directory and a modified file.
EDIT = textwrap.dedent('''
    def edit(stage):
        p = stage / "topics/projects/lisbon-offsite.md"
        p.write_text(p.read_text() + "\\nThe assistant asked about the budget.[^e1]\\n\\n"
                     "[^e1]: Time: `2026-08-02`; Sources: [question](openprogram/offsite/o1)\\n")
        (stage / "topics/infrastructure/production.md").unlink()
        n = stage / "topics/people/team.md"
        n.parent.mkdir(parents=True)
        n.write_text("# Team\\n\\nTwelve people travel.[^e1]\\n\\n[^e1]: Time: `2026-08-02`; "
                     "Sources: [people](openprogram/offsite/o2)\\n")
''')
scope: dict = {}
exec(EDIT, scope)
edit = scope["edit"]

CHILD = EDIT + textwrap.dedent('''
    import sys
    from pathlib import Path
    from scriptorium.memory.workspace import Workspace
    ws = Workspace.open(Path(sys.argv[1]))
    with ws.begin(allowed_sources=sys.argv[2:]) as tx:
        edit(tx.stage)
        tx.commit("memory: crash test")
    print("done")
''')

# entries, sorted: 0 runtime.json (put), 1 production.md (delete), 2 people/team.md (new),
# 3 lisbon-offsite.md (put)
STEPS_BEFORE_COMMIT = ["before-prepare", "prepared", "backed-up-0", "backed-up-1",
                       "backed-up-3", "moved-in-0", "moved-in-2", "moved-in-3"]
STEPS_AFTER_COMMIT = ["committed", "cleaned", "git-committed"]


def snapshot(root: Path) -> dict[str, bytes]:
    ws = Workspace(root)
    out = {rel: (root / rel).read_bytes() for rel in ws.topic_paths()}
    out["runtime.json"] = ws.runtime_path.read_bytes() if ws.runtime_path.exists() else b""
    return out


def fresh(tmp_path: Path, name: str) -> Path:
    root = copy_state("written", tmp_path / name) / "memory"
    Workspace.open(root)  # git history and identity exist before the crash
    return root


@pytest.fixture(scope="module")
def states(tmp_path_factory) -> tuple[dict, dict]:
    """(old, new): the workspace before, and after an uninterrupted run of the transaction."""
    root = fresh(tmp_path_factory.mktemp("reference"), "ref")
    old = snapshot(root)
    ws = Workspace.open(root)
    with ws.begin(allowed_sources=ALLOWED) as tx:
        edit(tx.stage)
        result = tx.commit("memory: crash test")
    assert len(result.changed_files) == 3 and len(result.created_blocks) == 2
    return old, snapshot(root)


def assert_recovered(root: Path, expected: dict, *, committed: bool) -> None:
    ws = Workspace.open(root)
    assert snapshot(root) == expected
    assert not ws.journal_path.exists()
    assert not list(ws.runtime_dir.glob("tx-*"))
    status = subprocess.run(["git", "status", "--porcelain", "topics", "sources"], cwd=root,
                            capture_output=True, text=True).stdout
    assert status == ""  # history agrees with the files
    messages = [c["message"] for c in ws.git.log()]
    assert any("crash test" in m or "interrupted install" in m for m in messages) == committed
    # and the workspace takes the next transaction normally
    with ws.begin(allowed_sources=["openprogram/offsite/o3"]) as tx:
        p = tx.stage / "topics/projects/lisbon-offsite.md"
        p.write_text(p.read_text() + "\nFlights stay under 600 each.[^e1]\n\n[^e1]: Time: "
                     "`2026-08-02`; Sources: [flights](openprogram/offsite/o3)\n")
        assert tx.commit("after recovery").changed_files == ["topics/projects/lisbon-offsite.md"]


def child_env(step: str, action: str, flag: Path) -> dict:
    env = dict(os.environ)
    env.update(SCRIPTORIUM_FAULT=step, SCRIPTORIUM_FAULT_ACTION=action,
               SCRIPTORIUM_FAULT_FLAG=str(flag))
    return env


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS_BEFORE_COMMIT + STEPS_AFTER_COMMIT)
def test_a_process_killed_at_any_install_step_leaves_old_or_new_never_a_mix(tmp_path, states,
                                                                          step):
    old, new = states
    root = fresh(tmp_path, "ws")
    flag = tmp_path / "reached"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), *ALLOWED],
                          env=child_env(step, "kill", flag), capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert flag.read_text() == step
    committed = step in STEPS_AFTER_COMMIT
    assert_recovered(root, new if committed else old, committed=committed)


@pytest.mark.slow
@pytest.mark.parametrize("step", ["backed-up-1", "moved-in-2", "committed"])
def test_a_process_paused_mid_install_and_killed_by_another_is_recovered(tmp_path, states, step):
    old, new = states
    root = fresh(tmp_path, "ws")
    flag = tmp_path / "reached"
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(root), *ALLOWED],
                            env=child_env(step, "pause", flag), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not flag.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    # while it sits mid-install holding the lock, a reader is not blocked and does not recover
    ws = Workspace.open(root, create=False)
    assert ws.journal_path.exists()
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    committed = step == "committed"
    assert_recovered(root, new if committed else old, committed=committed)


class SimulatedCrash(BaseException):
    """Stops the install where it stands, like a power cut (no cleanup handler catches it)."""


@pytest.mark.parametrize("step", STEPS_BEFORE_COMMIT + STEPS_AFTER_COMMIT)
def test_a_simulated_crash_at_any_step_is_finished_or_rolled_back_by_the_next_open(
        tmp_path, states, step, monkeypatch):
    old, new = states
    root = fresh(tmp_path, "ws")

    def crash(at: str) -> None:
        if at == step:
            raise SimulatedCrash(at)

    monkeypatch.setattr(faults, "HOOK", crash)
    ws = Workspace.open(root)
    with pytest.raises(SimulatedCrash):
        with ws.begin(allowed_sources=ALLOWED) as tx:
            edit(tx.stage)
            tx.commit("memory: crash test")
    monkeypatch.setattr(faults, "HOOK", None)
    committed = step in STEPS_AFTER_COMMIT
    assert_recovered(root, new if committed else old, committed=committed)


def test_an_io_error_during_install_rolls_back_in_process(tmp_path, states, monkeypatch):
    old, _ = states
    root = fresh(tmp_path, "ws")

    def fail(at: str) -> None:
        if at == "moved-in-2":
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(faults, "HOOK", fail)
    ws = Workspace.open(root)
    with pytest.raises(OSError, match="No space"):
        with ws.begin(allowed_sources=ALLOWED) as tx:
            edit(tx.stage)
            tx.commit("memory: crash test")
    assert snapshot(root) == old and not ws.journal_path.exists()
    assert not (root / "topics" / "people").exists()
    monkeypatch.setattr(faults, "HOOK", None)
    assert_recovered(root, old, committed=False)


def test_a_crash_before_the_journal_leaves_only_an_abandoned_stage_that_is_cleaned(
        tmp_path, states):
    old, _ = states
    root = fresh(tmp_path, "ws")
    proc = subprocess.run([sys.executable, "-c", CHILD, str(root), *ALLOWED],
                          env=child_env("before-prepare", "kill", tmp_path / "f"),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL
    ws = Workspace(root)
    assert list(ws.runtime_dir.glob("tx-*"))  # the dead process's stage
    with ws.begin() as tx:
        assert [p.name for p in ws.runtime_dir.glob("tx-*")] == [tx.dir.name]
    assert snapshot(root) == old


def test_an_unreadable_journal_is_reported_not_guessed_at(tmp_path):
    root = fresh(tmp_path, "ws")
    ws = Workspace(root)
    ws.journal_path.write_text(json.dumps({"state": "prepared", "dir": "../../etc",
                                           "entries": []}))
    with pytest.raises(CorruptFile, match="install journal"):
        Workspace.open(root)
    ws.journal_path.write_text(json.dumps({"state": "prepared", "dir": "tx-1", "tx": "1",
                                           "entries": [{"path": "../outside", "existed": False,
                                                        "op": "put"}]}))
    with pytest.raises(CorruptFile):
        Workspace.open(root)
