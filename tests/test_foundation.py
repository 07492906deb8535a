"""Behaviour of the shared primitives: names, atomic writes, locks, settings, tokens."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path

import pytest

from scriptorium.config import Settings, load_settings, resolve_home
from scriptorium.errors import ConcurrentUpdate, InvalidInput
from scriptorium.fsutil import FileLock, atomic_write_text, check_name, safe_join
from scriptorium.gitrepo import GitRepo
from scriptorium.tokens import count_tokens


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "a\\b", "a\x00b", "/", None, 3])
def test_an_unsafe_id_is_refused_with_a_one_line_error(bad):
    with pytest.raises(InvalidInput) as err:
        check_name(bad, "session id")
    assert "session id" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("good", ["s1", "o3-retry", "summary_0001", "a.b", "ROOT", "日本"])
def test_a_plain_id_is_accepted(good):
    assert check_name(good) == good


@pytest.mark.parametrize("rel", ["../x", "a/../../x", "/etc/passwd", "", "a\x00"])
def test_a_path_that_escapes_its_root_is_refused(tmp_path, rel):
    with pytest.raises(InvalidInput):
        safe_join(tmp_path, rel)


def test_a_path_inside_its_root_resolves_there(tmp_path):
    assert safe_join(tmp_path, "topics/a.md") == (tmp_path / "topics" / "a.md").resolve()


def test_a_symlink_cannot_smuggle_a_path_out(tmp_path):
    (tmp_path / "root").mkdir()
    os.symlink("/", tmp_path / "root" / "link")
    with pytest.raises(InvalidInput):
        safe_join(tmp_path / "root", "link/etc")


def test_atomic_write_replaces_whole_and_leaves_no_temp(tmp_path):
    target = tmp_path / "f.json"
    atomic_write_text(target, "old")
    atomic_write_text(target, "new")
    assert target.read_text() == "new"
    assert os.listdir(tmp_path) == ["f.json"]
    assert (target.stat().st_mode & 0o777) == 0o600


def _hold_lock(path: str, ready, release) -> None:
    with FileLock(Path(path)):
        ready.set()
        release.wait(10)


def test_a_lock_held_by_another_process_times_out_as_a_retryable_concurrent_update(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(tmp_path / "w.lock"), ready, release))
    proc.start()
    try:
        assert ready.wait(20)
        start = time.monotonic()
        with pytest.raises(ConcurrentUpdate) as err:
            FileLock(tmp_path / "w.lock", timeout=0.2).acquire()
        assert err.value.retryable and time.monotonic() - start >= 0.2
    finally:
        release.set()
        proc.join(10)
    with FileLock(tmp_path / "w.lock", timeout=1):
        pass  # free again once the holder exited


def test_a_lock_is_released_when_its_holder_is_killed(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold_lock, args=(str(tmp_path / "w.lock"), ready, release))
    proc.start()
    assert ready.wait(20)
    proc.kill()
    proc.join(10)
    with FileLock(tmp_path / "w.lock", timeout=2):
        pass


def test_settings_come_from_file_then_environment_then_arguments(tmp_path):
    (tmp_path / "config.toml").write_text(
        "[memory]\ntrigger_tokens = 8000\n[watcher]\nidle_seconds = 60\n"
        "[writer.llm]\nmodel = 'file-model'\n")
    s = load_settings(tmp_path, environ={"SCRIPTORIUM_WATCHER_IDLE_SECONDS": "5"})
    assert (s.trigger_tokens, s.watcher_idle_seconds, s.llm_model) == (8000, 5.0, "file-model")
    s = load_settings(tmp_path, {"trigger_tokens": 100, "llm_model": None}, environ={})
    assert (s.trigger_tokens, s.llm_model) == (100, "file-model")
    assert load_settings(tmp_path / "none", environ={}) == Settings()


@pytest.mark.parametrize("text", ["[memory]\ntrigger_tokens = -1\n", "[memory\n",
                                  "[writer]\nkind = 'magic'\n"])
def test_a_bad_setting_is_a_clear_error(tmp_path, text):
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(InvalidInput):
        load_settings(tmp_path, environ={})


def test_home_resolution_prefers_flag_then_env(monkeypatch, tmp_path):
    monkeypatch.setenv("SCRIPTORIUM_HOME", str(tmp_path / "env"))
    assert resolve_home(tmp_path / "flag") == tmp_path / "flag"
    assert resolve_home(None) == tmp_path / "env"
    monkeypatch.delenv("SCRIPTORIUM_HOME")
    assert resolve_home(None) == Path.home() / ".scriptorium"


def test_token_counts_grow_with_text_and_need_no_download():
    assert count_tokens("") == 0 and count_tokens("   ") == 0
    short = count_tokens("The budget is fifty thousand euros.")
    assert 5 <= short <= 12
    assert count_tokens("word " * 1000) == 1000
    assert count_tokens("日本語のテキスト") == 8


def test_git_history_is_created_lazily_with_a_local_identity(tmp_path):
    repo = GitRepo(tmp_path / "r")
    assert repo.ensure(exclude=["/.lock"]) is True
    assert repo.ensure() is False
    (tmp_path / "r" / "a.txt").write_text("x")
    (tmp_path / "r" / ".lock").write_text("")
    sha = repo.commit_all("add a")
    assert sha and repo.commit_all("nothing") is None
    assert [row["message"] for row in repo.log()] == ["add a", "init"]
    assert repo.fsck()


def test_an_initial_commit_can_leave_existing_files_to_the_next_commit(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "a.txt").write_text("x")
    repo = GitRepo(tmp_path / "r")
    repo.ensure(initial_message="init", include_existing=False)
    assert repo.commit_all("first turn") is not None
    assert [row["message"] for row in repo.log()] == ["first turn", "init"]


def test_regular_files_lists_only_real_files_and_never_follows_links(tmp_path):
    from scriptorium.fsutil import regular_files

    (tmp_path / "t" / "a").mkdir(parents=True)
    (tmp_path / "t" / "a" / "x.md").write_text("x")
    (tmp_path / "t" / "y.txt").write_text("y")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "z.md").write_text("z")
    os.symlink(tmp_path / "outside", tmp_path / "t" / "linkdir")
    os.symlink(tmp_path / "outside" / "z.md", tmp_path / "t" / "link.md")
    assert regular_files(tmp_path, tmp_path / "t", ".md") == ["t/a/x.md"]
    assert regular_files(tmp_path, tmp_path / "t") == ["t/a/x.md", "t/y.txt"]
    assert regular_files(tmp_path, tmp_path / "missing") == []


def test_an_atomic_write_can_stage_its_temp_file_elsewhere_on_the_same_filesystem(tmp_path):
    (tmp_path / "tmp").mkdir()
    atomic_write_text(tmp_path / "f.md", "data", tmp_dir=tmp_path / "tmp")
    assert (tmp_path / "f.md").read_text() == "data" and not os.listdir(tmp_path / "tmp")


def test_cache_writes_skip_fsync_only_in_their_own_thread(tmp_path, monkeypatch):
    import threading

    from scriptorium.fsutil import atomic_write_bytes, cache_writes

    synced: list[str] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(threading.current_thread().name),
                                                 real(fd))[1])
    other = threading.Thread(target=atomic_write_bytes, args=(tmp_path / "b", b"2"),
                             name="other")
    with cache_writes():
        atomic_write_bytes(tmp_path / "a", b"1")
        other.start()
        other.join()
    assert set(synced) == {"other"}  # the other thread still flushed; this one did not
    synced.clear()
    atomic_write_bytes(tmp_path / "c", b"3")
    assert synced  # outside the block this thread flushes again
    assert (tmp_path / "a").read_bytes() == b"1"
