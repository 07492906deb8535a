"""One packing policy for every history: memory's and each session's count their commits in
``.git`` and pack by ``GitRepo.pack_if_due`` (sizes and counts, never speed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scriptorium.errors import WriteFailed
from scriptorium.gitrepo import UNPACKED_NAME, GitRepo, PackPolicy
from scriptorium.memory import directory as directory_mod
from scriptorium.sessions import SessionStore
from scriptorium.sessions import commits as commits_mod

from search_support import archive, open_ws, render


def loose(repo: GitRepo) -> int:
    out = subprocess.run(["git", "count-objects", "-v"], cwd=repo.path, capture_output=True,
                         text=True, check=True).stdout
    return int(out.splitlines()[0].split(":")[1])


def commit(repo: GitRepo, i: int) -> None:
    (repo.path / f"f{i}.txt").write_text(f"version {i}\n" * 50)
    assert repo.commit_paths(f"c{i}", [f"f{i}.txt"]) is not None


@pytest.fixture
def repo(tmp_path: Path) -> GitRepo:
    repo = GitRepo(tmp_path / "r")
    repo.ensure()
    return repo


def test_a_history_is_packed_once_every_commits_were_made_since_its_last_packing(repo):
    policy = PackPolicy(every=3)
    packed = []
    for i in range(6):
        commit(repo, i)
        # another GitRepo object (another process) adds to the same count, kept in .git
        packed.append(GitRepo(repo.path).pack_if_due(policy))
        assert (loose(repo) == 0) == packed[-1]
    assert packed == [False, False, True, False, False, True]
    assert (repo.gitdir / UNPACKED_NAME).read_text() == "0\n"
    assert repo.fsck()


def test_a_history_whose_loose_objects_reach_the_limit_is_packed_at_the_next_commit(repo):
    commit(repo, 0)
    assert repo.pack_if_due(PackPolicy(every=100, loose_bytes=repo.loose_bytes() + 1)) is False
    commit(repo, 1)
    assert repo.pack_if_due(PackPolicy(every=100, loose_bytes=repo.loose_bytes())) is True
    assert loose(repo) == 0 and repo.pack_count() == 1


def test_a_failed_packing_leaves_the_history_due_for_the_next_commit(repo, monkeypatch):
    policy = PackPolicy(every=2)
    commit(repo, 0)
    repo.pack_if_due(policy)
    commit(repo, 1)

    def failing(self, *, quick=False):
        raise WriteFailed("git repack failed: disk trouble")

    real = GitRepo.repack
    monkeypatch.setattr(GitRepo, "repack", failing)
    with pytest.raises(WriteFailed):
        repo.pack_if_due(policy)
    assert loose(repo) > 0
    monkeypatch.setattr(GitRepo, "repack", real)
    commit(repo, 2)
    assert repo.pack_if_due(policy) is True and loose(repo) == 0


def test_memory_and_session_histories_pack_by_the_one_policy(tmp_path, monkeypatch):
    """Both commit paths hand their policy to ``GitRepo.pack_if_due``: memory's counts loose
    bytes too (a batch into a big archive file), a session's packs quickly every few turns."""
    seen: list[tuple[str, PackPolicy]] = []
    real = GitRepo.pack_if_due

    def recording(self, policy):
        seen.append((self.path.name, policy))
        return real(self, policy)

    monkeypatch.setattr(GitRepo, "pack_if_due", recording)
    ws = open_ws(tmp_path / "memory")
    ids = archive(ws, [("s", "n0", "user", "turn 0", "2026-08-01T10:00:00+00:00")])
    with ws.begin(allowed_sources=ids) as tx:
        (tx.stage / "topics").mkdir(parents=True, exist_ok=True)
        (tx.stage / "topics/t.md").write_text(render([[("A fact.", [ids[0]], "2026-08-01")]]))
        tx.commit("seed")
    store = SessionStore.from_home(tmp_path / "home")
    store.create_session("s1")
    store.append_message("s1", {"id": "u0", "role": "user", "content": "q"})
    store.append_message("s1", {"id": "a0", "role": "assistant", "content": "a"})
    assert ("memory", PackPolicy(every=directory_mod.PACK_EVERY,
                                 loose_bytes=directory_mod.PACK_LOOSE_BYTES)) in seen
    assert ("s1", PackPolicy(every=commits_mod.PACK_EVERY, quick=True)) in seen
    assert (tmp_path / "memory" / ".git" / UNPACKED_NAME).is_file()  # counted in .git


def test_commits_write_no_reflog(repo):
    """A reflog is two lines a commit (about 350 bytes, more than a one-claim write's text)
    that nothing here ever expires; every commit it would name is reachable from HEAD."""
    commit(repo, 0)
    (repo.path / "g.txt").write_text("porcelain\n")
    assert repo.commit_all("by add -A") is not None
    assert not (repo.gitdir / "logs").exists()
    assert [c["message"] for c in repo.log()] == ["by add -A", "c0", "init"]


def test_a_history_made_with_reflogs_drops_them_at_its_next_packing(tmp_path):
    path = tmp_path / "old"
    path.mkdir()
    for args in (["init", "-q"], ["config", "user.name", "a"], ["config", "user.email", "a@a"],
                 ["commit", "-q", "--allow-empty", "-m", "old"]):
        subprocess.run(["git", *args], cwd=path, check=True)
    repo = GitRepo(path)
    assert (repo.gitdir / "logs" / "HEAD").is_file()  # as git init made it
    commit(repo, 0)
    assert repo.pack_if_due(PackPolicy(every=1)) is True
    assert not (repo.gitdir / "logs").exists()
    commit(repo, 1)
    assert not (repo.gitdir / "logs").exists() and len(repo.log()) == 3
