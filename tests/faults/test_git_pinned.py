"""Every git call is pinned to its own repository (issue 11, item 1).

A ``.git`` that exists but is not a repository (what a process killed during ``git init``
left) used to make git search parent directories: the per-turn ``git add -A`` and commit then
landed in whatever repository enclosed the home, staging unrelated files. These tests put the
home inside an enclosing repository and check, with real git and real processes, that nothing
ever reaches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from scriptorium.gitrepo import GitRepo


def git(cwd: Path, *args: str, check: bool = True) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env,
                          check=check).stdout


def scriptorium(home: Path, *args: str, env: dict | None = None):
    """Run the real CLI in a fresh process."""
    return subprocess.run([sys.executable, "-c", "from scriptorium.cli import main; main()",
                           "--home", str(home), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=120)


@pytest.fixture
def outer(tmp_path: Path) -> Path:
    """An enclosing git repository with one commit and one unrelated untracked file."""
    root = tmp_path / "outer"
    root.mkdir()
    git(root, "init", "-q", "--initial-branch=main")
    git(root, "config", "user.email", "t@t")
    git(root, "config", "user.name", "t")
    (root / "tracked.txt").write_text("mine\n")
    git(root, "add", "tracked.txt")
    git(root, "commit", "-q", "-m", "outer")
    (root / "unrelated.txt").write_text("not yours\n")
    return root


def assert_untouched(outer: Path) -> None:
    assert git(outer, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(outer, "diff", "--cached", "--name-only") == ""
    assert git(outer, "ls-files").split() == ["tracked.txt"]


def half_made_git(path: Path) -> None:
    """What ``git init`` killed early leaves: a .git with a config and nothing else."""
    (path / ".git").mkdir(parents=True)
    (path / ".git" / "config").write_text("[core]\n\trepositoryformatversion = 0\n")


def test_a_half_made_session_git_is_recreated_and_the_enclosing_repo_is_never_touched(outer):
    home = outer / "home"
    assert scriptorium(home, "session", "new", "--id", "s").returncode == 0
    half_made_git(home / "sessions" / "s")
    for role, text in (("user", "Plan the trip"), ("assistant", "Sure")):
        run = scriptorium(home, "session", "add", "s", "--role", role, "--text", text, "--json")
        assert run.returncode == 0, run.stderr
        assert "warnings" not in json.loads(run.stdout)
    assert_untouched(outer)
    log = git(home / "sessions" / "s", "log", "--format=%s").split("\n")
    assert log[:2] == ["turn: Plan the trip", "session init"]


def test_a_damaged_session_git_holding_history_is_refused_with_a_warning_not_an_escape(outer):
    home = outer / "home"
    scriptorium(home, "session", "new", "--id", "s")
    sdir = home / "sessions" / "s"
    half_made_git(sdir)
    (sdir / ".git" / "objects" / "ab").mkdir(parents=True)
    (sdir / ".git" / "objects" / "ab" / "cdef").write_bytes(b"an object worth keeping")
    scriptorium(home, "session", "add", "s", "--role", "user", "--text", "hi", "--id", "u1")
    run = scriptorium(home, "session", "add", "s", "--role", "assistant", "--text", "yo",
                      "--id", "a1", "--json")
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["node_id"] == "a1" and out["head_id"] == "a1"
    assert any("not committed" in w and "GIT_DAMAGED" in w for w in out["warnings"])
    assert (sdir / ".git" / "objects" / "ab" / "cdef").read_bytes() == b"an object worth keeping"
    assert_untouched(outer)


def test_a_broken_memory_git_warns_in_the_write_output_and_never_escapes(outer):
    home = outer / "home"
    scriptorium(home, "session", "new", "--id", "s")
    scriptorium(home, "session", "add", "s", "--role", "user", "--text", "Book the ferry")
    mem = home / "memory"
    half_made_git(mem)
    (mem / ".git" / "refs" / "heads").mkdir(parents=True)
    (mem / ".git" / "refs" / "heads" / "main").write_text("0" * 40 + "\n")  # history to keep
    run = scriptorium(home, "memory", "write", "s", "--force", "--json")
    assert run.returncode == 0, run.stderr
    row = json.loads(run.stdout)["sessions"][0]
    assert row["marked"] and row["failure"] is None
    assert any("GIT_DAMAGED" in w for w in row["warnings"])
    human = scriptorium(home, "memory", "write", "s", "--force")
    assert human.returncode == 0
    status = scriptorium(home, "memory", "status", "--json")
    assert any("memory history is not recorded" in w
               for w in json.loads(status.stdout)["warnings"])
    assert "warning: memory history is not recorded" in status.stderr
    assert_untouched(outer)


def test_a_half_made_memory_git_is_recreated_by_the_next_write(outer):
    home = outer / "home"
    scriptorium(home, "session", "new", "--id", "s")
    scriptorium(home, "session", "add", "s", "--role", "user", "--text", "Book the ferry")
    half_made_git(home / "memory")
    run = scriptorium(home, "memory", "write", "s", "--force", "--json")
    assert run.returncode == 0, run.stderr
    assert "warnings" not in json.loads(run.stdout)["sessions"][0]
    assert git(home / "memory", "log", "-1", "--format=%s").startswith("memory: write 1 turn")
    assert_untouched(outer)


@pytest.mark.parametrize("where", ["session", "memory"])
def test_a_process_killed_during_the_first_git_init_leaves_a_usable_home(outer, where):
    home = outer / "home"
    scriptorium(home, "session", "new", "--id", "s")
    scriptorium(home, "session", "add", "s", "--role", "user", "--text", "Plan the trip",
                "--id", "u1")
    kill = {"SCRIPTORIUM_FAULT": "git-init"}
    if where == "session":
        died = scriptorium(home, "session", "add", "s", "--role", "assistant", "--text", "Sure",
                           "--id", "a1", env=kill)
        repo_dir = home / "sessions" / "s"
    else:
        died = scriptorium(home, "memory", "write", "s", "--force", env=kill)
        repo_dir = home / "memory"
    assert died.returncode == -9
    assert not (repo_dir / ".git").exists()  # never half a repository
    # the next command in a fresh process finds a usable home and builds the history
    retry = scriptorium(home, "session", "add", "s", "--role", "assistant", "--text", "Sure",
                        "--id", "a1", "--json")
    assert retry.returncode == 0, retry.stderr
    write = scriptorium(home, "memory", "write", "s", "--force", "--json")
    assert write.returncode == 0, write.stderr
    assert "warnings" not in json.loads(write.stdout)["sessions"][0]
    assert not [p for p in repo_dir.iterdir() if p.name.startswith(".git-init-")]
    assert GitRepo(repo_dir).log() and GitRepo(repo_dir).fsck()
    assert_untouched(outer)


def test_git_never_reads_a_repository_named_by_the_environment(tmp_path, outer, monkeypatch):
    monkeypatch.setenv("GIT_DIR", str(outer / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(outer))
    repo = GitRepo(tmp_path / "r")
    repo.ensure()
    (tmp_path / "r" / "a.txt").write_text("one")
    assert repo.commit_all("one")
    assert_untouched(outer)


def test_a_relative_home_gets_its_history_in_its_own_repository(outer):
    """``--home h`` (relative): git runs inside the work tree, so its pinned GIT_DIR must be
    absolute or the first ``git init`` fails (found by the CLI kill campaign)."""
    def run(*args: str):
        return subprocess.run([sys.executable, "-c", "from scriptorium.cli import main; main()",
                               "--home", "home", *args], cwd=outer, capture_output=True,
                              text=True, timeout=120)
    assert run("session", "new", "--id", "s").returncode == 0
    assert run("session", "add", "s", "--role", "user", "--text", "Book the ferry").returncode == 0
    write = run("memory", "write", "s", "--force", "--json")
    assert write.returncode == 0, write.stderr
    assert json.loads(write.stdout)["sessions"][0]["marked"]
    assert git(outer / "home" / "memory", "log", "-1", "--format=%s").startswith("memory: write")
    assert_untouched(outer)
