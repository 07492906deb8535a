"""Git: one repo per session, lazy init with a local identity, one commit per completed turn."""

from __future__ import annotations

import subprocess

from scriptorium.gitrepo import UNPACKED_NAME


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


def test_a_sessions_history_is_packed_every_pack_every_commits(gstore, monkeypatch):
    """Each turn's commit writes the whole history/ tree anew, stored loose (undeflated); every
    PACK_EVERY commits (counted across processes, in .git) they are packed as deltas."""
    from scriptorium.sessions import commits

    monkeypatch.setattr(commits, "PACK_EVERY", 3)
    gstore.create_session("s1")
    sdir = gstore.root / "s1"

    def loose() -> int:
        counts = dict(line.split(": ") for line in git(sdir, "count-objects", "-v").splitlines())
        return int(counts["count"])

    def turn(i: int, store=gstore) -> None:
        store.append_message("s1", {"id": f"u{i}", "role": "user", "content": f"q{i}"})
        store.append_message("s1", {"id": f"a{i}", "role": "assistant", "content": f"a{i}"})

    turn(0)  # init + the first commit (1 of 3)
    turn(1)  # 2 of 3
    assert loose() > 0
    assert (sdir / ".git" / UNPACKED_NAME).read_text() == "2\n"
    turn(2, type(gstore).from_home(gstore.root.parent))  # another process's store adds up
    assert loose() == 0
    assert (sdir / ".git" / UNPACKED_NAME).read_text() == "0\n"
    assert [c["message"] for c in gstore.git_log("s1")][:3] == ["turn: q2", "turn: q1",
                                                               "turn: q0"]
    assert subprocess.run(["git", "fsck", "--no-progress"], cwd=sdir).returncode == 0
    assert git(sdir, "status", "--porcelain") == ""


def test_a_failed_packing_keeps_the_commit_and_says_so(gstore, monkeypatch):
    """Packing is upkeep: when it fails the turn and its commit stand, the append warns, and
    the count stays due so the next commit packs."""
    from scriptorium.errors import ReasonCode, WriteFailed
    from scriptorium.gitrepo import GitRepo
    from scriptorium.sessions import commits

    monkeypatch.setattr(commits, "PACK_EVERY", 2)
    real_repack = GitRepo.repack

    def broken(self, *, quick=False):
        raise WriteFailed("git repack failed: No space left on device",
                          code=ReasonCode.DISK_FULL, retryable=True)

    gstore.create_session("s1")
    gstore.append_message("s1", {"id": "u0", "role": "user", "content": "q0"})
    gstore.append_message("s1", {"id": "a0", "role": "assistant", "content": "a0"})
    monkeypatch.setattr(GitRepo, "repack", broken)
    gstore.append_message("s1", {"id": "u1", "role": "user", "content": "q1"})
    added = gstore.add("s1", {"id": "a1", "role": "assistant", "content": "a1"})
    assert [c["message"] for c in gstore.git_log("s1")][0] == "turn: q1"
    assert len(added.warnings) == 1 and "not packed" in added.warnings[0]
    assert "No space left" in added.warnings[0]
    monkeypatch.setattr(GitRepo, "repack", real_repack)
    sdir = gstore.root / "s1"
    gstore.append_message("s1", {"id": "u2", "role": "user", "content": "q2"})
    assert not gstore.add("s1", {"id": "a2", "role": "assistant", "content": "a2"}).warnings
    assert (sdir / ".git" / UNPACKED_NAME).read_text() == "0\n"
    assert git(sdir, "count-objects").startswith("0 objects")
