"""Git: one repo per session, lazy init with a local identity, one commit per completed turn."""

from __future__ import annotations

import subprocess


def git(sdir, *args) -> str:
    return subprocess.run(["git", *args], cwd=sdir, capture_output=True, text=True,
                          check=True).stdout


def test_git_starts_lazily_at_the_first_completed_turn(gstore):
    gstore.create_session("s1")
    sdir = gstore.root / "s1"
    gstore.append_message("s1", {"id": "u1", "role": "user", "content": "Plan the trip\nmore"})
    assert not (sdir / ".git").exists()
    gstore.append_message("s1", {"id": "a1", "role": "assistant", "content": "Sure"})
    assert [c["message"] for c in gstore.git_log("s1")] == ["turn: Plan the trip", "session init"]
    assert git(sdir, "config", "--local", "user.email").strip() == "scriptorium@local"


def test_each_completed_turn_is_one_commit_with_its_user_line(gstore):
    gstore.create_session("s1")
    long = "x" * 100
    for i, text in enumerate(["first", long]):
        gstore.append_message("s1", {"id": f"u{i}", "role": "user", "content": text})
        gstore.append_message("s1", {"id": f"a{i}", "role": "assistant", "content": "ok"})
    msgs = [c["message"] for c in gstore.git_log("s1")]
    assert msgs == [f"turn: {'x' * 60}", "turn: first", "session init"]
    tracked = git(gstore.root / "s1", "ls-files").split()
    assert ".session.lock" not in tracked and "history/00000003-l-a1.json" in tracked


def test_commit_can_be_forced_or_suppressed_per_append(gstore):
    gstore.create_session("s1")
    gstore.append_message("s1", {"id": "u1", "role": "user", "content": "hi"}, commit=True)
    gstore.append_message("s1", {"id": "a1", "role": "assistant", "content": "yo"}, commit=False)
    assert [c["message"] for c in gstore.git_log("s1")] == ["turn: hi", "session init"]


def test_metadata_merges_ride_along_with_the_next_commit(gstore):
    gstore.create_session("s1")
    gstore.append_message("s1", {"id": "u1", "role": "user", "content": "hi"})
    gstore.append_message("s1", {"id": "a1", "role": "assistant", "content": "yo"})
    gstore.merge_node_metadata_batch("s1", {"u1": {"memory_written_scriptorium": "w-1"}})
    assert len(gstore.git_log("s1")) == 2
    gstore.append_message("s1", {"id": "u2", "role": "user", "content": "again"})
    gstore.append_message("s1", {"id": "a2", "role": "assistant", "content": "sure"})
    sdir = gstore.root / "s1"
    files = git(sdir, "show", "--name-only", "--format=", "HEAD").split()
    assert "history/00000000-u-u1.json" in files and "history/00000003-l-a2.json" in files
    assert "w-1" in git(sdir, "show", "HEAD:history/00000000-u-u1.json")


def test_a_reference_session_gets_its_repo_on_the_first_write_that_commits(written):
    sdir = written.root / "offsite"
    written.append_message("offsite", {"id": "o8", "role": "assistant", "content": "ok"},
                           commit=True)
    assert (sdir / ".git").is_dir() and (sdir / ".gitignore").is_file()
    assert written.git_log("offsite")[0]["message"].startswith("turn: ")


def test_rewind_is_committed(gstore, chat):
    chat(gstore, "s1", "u1", "a1", "u2", "a2")
    gstore.rewind("s1", "u2")
    assert gstore.git_log("s1")[0]["message"] == "rewind"
    assert gstore.commit_turn("s1", "nothing new") is None
