"""A real full disk (issue 11): the home on a tiny tmpfs that fills up during `session add`,
`memory write` and `memory search`, run as real `scriptorium` processes.

Each round fills the filesystem with a ballast file, leaving 0, 12 KiB or 48 KiB free, so
ENOSPC strikes at different points (a node file, a session commit, the evidence archive, a
topic install, the search index). Every command must either succeed (a history commit that
could not be made is a warning) or fail with one line on stderr and a non-zero exit; a `session
add` that failed stored nothing. Then the ballast goes, the failed adds are retried with the
same `--id` (each stored exactly once), and after a forced write every live turn is marked and
cited exactly once, every file parses, git fsck passes and verify is ok.

Mounting needs root (or CAP_SYS_ADMIN): elsewhere the test skips saying so, except under
CI=true, where it fails (the CI machine can mount).
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from faultkit import check_files, check_workspace, final_state

from scriptorium.sessions import SessionStore

DISK_BYTES = 2 * 1024 * 1024
LEAVE_FREE = (0, 12 * 1024, 48 * 1024)


def _cannot_mount(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"the full-disk test cannot run in CI: {reason}")
    pytest.skip(f"full-disk test skipped: {reason}")


@pytest.fixture
def disk(tmp_path: Path):
    """A fresh tmpfs of DISK_BYTES mounted at tmp_path/disk, unmounted afterwards."""
    mnt = tmp_path / "disk"
    mnt.mkdir()
    try:
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0700",
                               "tmpfs", str(mnt)], capture_output=True, text=True)
    except FileNotFoundError:
        _cannot_mount("the mount command is missing")
    if done.returncode != 0:
        _cannot_mount(f"mounting a tmpfs needs root or CAP_SYS_ADMIN: "
                      f"{done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` with a ballast file until only ``leave`` bytes are free."""
    ballast = disk / "ballast"
    free = os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize
    target = max(0, free - leave)
    fd = os.open(ballast, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        while target > 0:
            target -= os.write(fd, b"\0" * min(target, 65536))
        while leave == 0:  # to the last byte
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return ballast


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "scriptorium", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120)


def stored(home: Path, sid: str) -> list[str]:
    return [n.id for n in SessionStore(home / "sessions").get_nodes(sid)]


@pytest.mark.slow
def test_a_full_disk_loses_nothing_and_every_error_is_one_line(disk):
    home = disk / "home"
    assert cli(home, "session", "new", "--id", "s").returncode == 0
    failures: list[str] = []
    turn = 0
    for leave in LEAVE_FREE:
        ballast = fill(disk, leave)
        adds: dict[str, int] = {}
        runs = []
        for step in ("add", "add", "write", "search", "add", "add", "write-all"):
            if step == "add":
                turn += 1
                node = f"t{turn:03d}"
                role = "user" if turn % 2 else "assistant"
                run = cli(home, "session", "add", "s", "--role", role, "--id", node, "--text",
                          f"Turn {turn}: we decided to deploy staging on Tuesday, budget {turn}.")
                adds[node] = run.returncode
            elif step == "write":
                run = cli(home, "memory", "write", "s", "--force", "--json")
            elif step == "search":
                run = cli(home, "memory", "search", "deploy staging", "--json")
            else:
                run = cli(home, "memory", "write", "--all", "--force", "--json")
            runs.append(run)
            assert "Traceback" not in run.stdout + run.stderr, run.stderr
            *said, last = run.stderr.strip().splitlines() or [""]
            assert all(line.startswith("warning: ") for line in said), run.stderr
            if run.returncode != 0:  # the error is one line (after any warnings)
                assert last.startswith("error: "), (leave, step, run.stderr)
                failures.append(f"{step}: {last}")
            if step != "add" and run.returncode != 0:  # a full disk passes: retryable,
                doc = json.loads(run.stdout)           # never a branch blocked for good
                said = [doc["error"]] if "error" in doc else [
                    r["failure"] for r in doc["sessions"] if r["failure"]]
                assert said and all(f["retryable"] for f in said), said
        ballast.unlink()
        # space again: a failed add stored nothing; its retry with the same --id stores it once
        have = stored(home, "s")
        for node, code in adds.items():
            assert (node in have) == (code == 0), (node, code, leave)
            retry = cli(home, "session", "add", "s", "--role", "user", "--id", node, "--text",
                        f"retry of {node}") if code else None
            assert retry is None or retry.returncode == 0, retry.stderr
        assert sorted(stored(home, "s")).count(node) == 1
        write = cli(home, "memory", "write", "--all", "--force", "--json")
        assert write.returncode == 0, write.stderr
        assert all(r["failure"] is None for r in json.loads(write.stdout)["sessions"])
        check_workspace(home)  # files parse, git fsck, no journal left, verify ok
    # the disk really was full: the round with nothing free failed commands
    print(json.dumps({"failed_commands": failures, "turns": turn}, indent=1))
    assert failures, "no command ever met the full disk"
    check_files(home)
    final = final_state(home)
    assert final.eligible == turn
    assert final.omissions == final.uncited == final.duplicate_citations == []


def test_without_mount_rights_the_test_skips_locally_and_fails_in_ci(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="full-disk test skipped: no rights"):
        _cannot_mount("no rights")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="cannot run in CI: no rights"):
        _cannot_mount("no rights")
