"""A git commit killed mid-way (the writer's process group SIGKILLed) leaves .git/index.lock
behind; git never breaks it, so without clearing it every later commit of the memory workspace
failed and its history silently stopped (installs stood, commits only warned). Found by the
crash harness's random process-group kills."""

from __future__ import annotations

import subprocess

from scriptorium.config import load_settings
from scriptorium.gitrepo import GitRepo
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory


def test_a_commit_goes_through_the_locks_a_killed_git_left_behind(tmp_path):
    repo = GitRepo(tmp_path / "r")
    repo.ensure(initial_message="init")
    (tmp_path / "r" / "a.txt").write_text("one")
    first = repo.commit_all("one")
    for rel in ("index.lock", "HEAD.lock", "refs/heads/main.lock"):
        (tmp_path / "r" / ".git" / rel).write_text("")  # what a SIGKILLed git leaves
    (tmp_path / "r" / "a.txt").write_text("two")
    second = repo.commit_all("two")
    assert second and second != first
    assert [row["message"] for row in repo.log()][:2] == ["two", "one"]
    assert not list((tmp_path / "r" / ".git").rglob("*.lock"))
    assert repo.fsck()


def test_memory_history_keeps_going_after_a_writer_was_killed_inside_git_commit(home):
    mem = Memory(home, settings=load_settings(home, {"trigger_tokens": 1}),
                 writer=EmbeddedWriter())
    mem.store.create_session("s", title="Plans")
    mem.store.append_message("s", {"id": "m0", "role": "user", "content": "Book the ferry."})
    assert mem.write_session("s").failure is None
    (home / "memory" / ".git" / "index.lock").write_text("")
    mem.store.append_message("s", {"id": "m1", "role": "assistant", "content": "Ferry booked."})
    assert mem.write_session("s").failure is None
    assert mem.workspace.git.log()[0]["message"] == "memory: write 1 turn(s) of s"
    status = subprocess.run(["git", "-C", str(home / "memory"), "status", "--porcelain", "--",
                             "topics", "sources"], capture_output=True, text=True, check=True)
    assert status.stdout == ""  # the history holds the installed files
