"""The memory workspace: layout, git, identity, the write lock, runtime.json, revision."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from scriptorium.errors import ConcurrentUpdate
from scriptorium.memory.topics import TopicFormatError
from scriptorium.memory.workspace import RuntimeState, Workspace



def run_py(code: str, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for(path: Path, proc: subprocess.Popen | None = None, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"child exited early: {proc.communicate()}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.fixture
def ws_root(tmp_path: Path) -> Path:
    return tmp_path / "memory"


# -- layout and git ---------------------------------------------------------------------------


def test_opening_a_new_workspace_lays_it_out_with_a_private_git_history(ws_root):
    ws = Workspace.open(ws_root)
    for name in ("topics", "sources", ".scriptorium"):
        assert (ws_root / name).is_dir()
    assert ws.git.exists and [c["message"] for c in ws.git.log()] == [
        "memory: initialize history"]
    exclude = (ws_root / ".git" / "info" / "exclude").read_text()
    assert "/.scriptorium*" in exclude and "/.nativemem*" in exclude


def test_opening_without_create_touches_nothing(ws_root):
    ws = Workspace.open(ws_root, create=False)
    assert not ws_root.exists() and ws.topic_docs() == [] and ws.find_block("x") is None


def test_a_reference_workspace_without_git_opens_and_its_memory_is_committed(written_home):
    root = written_home / "memory"
    ws = Workspace.open(root)
    assert ws.workspace_id == "w-5eed0001"
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True).stdout
    assert "topics/projects/lisbon-offsite.md" in tracked
    assert "sources/openprogram/_v2/offsite.md" in tracked
    assert ".scriptorium" not in tracked


def test_a_legacy_runtime_dir_name_is_kept_when_it_exists(ws_root):
    (ws_root / ".nativemem").mkdir(parents=True)
    ws = Workspace.open(ws_root)
    assert ws.runtime_dir == ws_root / ".nativemem"
    assert not (ws_root / ".scriptorium").exists()
    wid = ws.workspace_id
    assert (ws_root / ".nativemem" / "workspace-id").read_text().strip() == wid


# -- identity -----------------------------------------------------------------------------------


def test_the_workspace_id_is_w_and_8_hex_and_survives_reopening(ws_root):
    first = Workspace.open(ws_root).workspace_id
    assert re.fullmatch(r"w-[0-9a-f]{8}", first)
    assert (ws_root / ".scriptorium" / "workspace-id").read_text() == first + "\n"
    assert Workspace.open(ws_root).workspace_id == first


def test_an_invalid_workspace_id_file_is_replaced_by_a_valid_one(ws_root):
    (ws_root / ".scriptorium").mkdir(parents=True)
    (ws_root / ".scriptorium" / "workspace-id").write_text("W-NOT-VALID\n")
    new = Workspace.open(ws_root).workspace_id
    assert re.fullmatch(r"w-[0-9a-f]{8}", new)
    assert Workspace(ws_root).workspace_id == new


def test_eight_threads_and_two_processes_asking_first_get_one_durable_id(ws_root):
    ws_root.mkdir()
    go = ws_root.parent / "go"
    code = """
        import os, sys, time
        from pathlib import Path
        from scriptorium.memory.workspace import Workspace
        ws = Workspace(Path(sys.argv[1]))
        Path(sys.argv[3]).write_text("ready")
        while not os.path.exists(sys.argv[2]):
            pass
        print(ws.workspace_id)
    """
    ready = [ws_root.parent / f"ready-{i}" for i in range(2)]
    procs = [run_py(code, str(ws_root), str(go), str(r)) for r in ready]
    for r, p in zip(ready, procs):
        wait_for(r, p)
    barrier = threading.Barrier(9)
    seen: list[str] = []

    def ask() -> None:
        barrier.wait()
        seen.append(Workspace(ws_root).workspace_id)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    barrier.wait()
    go.write_text("go")
    for t in threads:
        t.join()
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        seen.append(out.strip())
    assert len(seen) == 10 and len(set(seen)) == 1
    assert (ws_root / ".scriptorium" / "workspace-id").read_text().strip() == seen[0]


# -- the write lock ---------------------------------------------------------------------------


HOLD_LOCK = """
    import sys, time
    from pathlib import Path
    from scriptorium.memory.workspace import Workspace
    ws = Workspace(Path(sys.argv[1]))
    with ws.lock():
        Path(sys.argv[2]).write_text("held")
        time.sleep(120)
"""


def test_a_lock_held_by_another_process_is_a_retryable_concurrent_update(ws_root):
    ws = Workspace.open(ws_root)
    flag = ws_root.parent / "held"
    proc = run_py(HOLD_LOCK, str(ws_root), str(flag))
    try:
        wait_for(flag, proc)
        with pytest.raises(ConcurrentUpdate) as info:
            with ws.lock(timeout=0.2):
                pass
        assert info.value.retryable and info.value.code == "CONCURRENT_UPDATE"
        assert "write.lock" in str(info.value)
    finally:
        proc.kill()
        proc.communicate()


def test_a_killed_lock_holder_leaves_no_stale_lock(ws_root):
    ws = Workspace.open(ws_root)
    flag = ws_root.parent / "held"
    proc = run_py(HOLD_LOCK, str(ws_root), str(flag))
    wait_for(flag, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()
    with ws.lock(timeout=5):
        assert ws.locked_here


def test_the_lock_is_reentrant_in_one_thread_even_across_workspace_objects(ws_root):
    a, b = Workspace.open(ws_root), Workspace(ws_root)
    with a.lock(timeout=0.1):
        with b.lock(timeout=0.1):
            with a.lock(timeout=0.1):
                assert a.locked_here and b.locked_here
        assert a.locked_here
    assert not a.locked_here


def test_another_thread_waits_for_the_lock_and_then_gives_up(ws_root):
    ws = Workspace.open(ws_root)
    errors: list[Exception] = []

    def other() -> None:
        try:
            with Workspace(ws_root).lock(timeout=0.1):
                pass
        except ConcurrentUpdate as exc:
            errors.append(exc)

    with ws.lock():
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert len(errors) == 1 and errors[0].retryable
    t = threading.Thread(target=other)  # free again once released
    t.start()
    t.join()
    assert len(errors) == 1


# -- runtime.json ---------------------------------------------------------------------------------


@pytest.mark.parametrize("content", [b"{not-json", b"[1, 2]", b'"text"', b"\xff\xfe", b"", b"null"])
def test_an_unreadable_runtime_json_loads_as_defaults(ws_root, content):
    ws = Workspace.open(ws_root)
    ws.runtime_path.write_bytes(content)
    state = ws.load_runtime()
    assert state == RuntimeState() and state.cursors is None


def test_a_runtime_json_that_is_a_directory_loads_as_defaults(ws_root):
    ws = Workspace.open(ws_root)
    ws.runtime_path.mkdir()
    assert ws.load_runtime() == RuntimeState()


def test_runtime_json_keeps_counters_drops_unknown_keys_and_bad_fields(ws_root):
    ws = Workspace.open(ws_root)
    ws.runtime_path.write_text(json.dumps({
        "creation_order": {"f888f60e": 0, "bad": "x", "1c2d3e4f": 1},
        "write_commits_since_global": 2, "local_batches": True, "local_tokens": 20931,
        "last_global_at": "2026-08-10T03:00:04+00:00", "mystery": [1], "writer": {"x": 1}}))
    state = ws.load_runtime()
    assert state.creation_order == {"f888f60e": 0, "1c2d3e4f": 1}
    assert (state.write_commits_since_global, state.local_batches, state.local_tokens) == (2, 0, 20931)
    assert state.last_global_at == "2026-08-10T03:00:04+00:00"
    ws.save_runtime(state)
    saved = json.loads(ws.runtime_path.read_text())
    assert set(saved) == {"creation_order", "write_commits_since_global", "local_batches",
                          "local_tokens", "last_global_at"}


def test_legacy_cursors_are_readable_for_migration_and_dropped_once_retired(legacy_home):
    root = legacy_home / "memory"
    ws = Workspace.open(root)
    state = ws.load_runtime()
    assert state.cursors["offsite"]["message_id"] == "o7"
    assert state.local_batches == 1 and state.local_tokens == 300
    ws.save_runtime(state)  # saving before migration keeps them
    assert "cursors" in json.loads(ws.runtime_path.read_text())
    state.cursors = None
    ws.save_runtime(state)
    again = ws.load_runtime()
    assert again.cursors is None and again.local_tokens == 300


def test_the_reference_runtime_json_round_trips_byte_for_byte(written_home):
    root = written_home / "memory"
    ws = Workspace.open(root)
    before = ws.runtime_path.read_text()
    ws.save_runtime(ws.load_runtime())
    assert ws.runtime_path.read_text() == before


# -- revision ----------------------------------------------------------------------------------------


def expected_revision(root: Path, files: list[str]) -> str:
    digest = hashlib.sha256()
    for rel in sorted(files):
        digest.update(rel.encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def test_the_revision_hashes_memory_files_and_runtime_json_only(ws_root):
    ws = Workspace.open(ws_root)
    (ws_root / "topics" / "a.md").write_text("A\n")
    (ws_root / "sources" / "x").mkdir()
    (ws_root / "sources" / "x" / "s.md").write_text("S\n")
    ws.save_runtime(RuntimeState(local_batches=1))
    rev = ws.revision()
    assert re.fullmatch(r"[0-9a-f]{32}", rev)
    assert rev == expected_revision(ws_root, ["topics/a.md", "sources/x/s.md",
                                              ".scriptorium/runtime.json"])
    # internal paths and symlinks do not count
    (ws_root / ".scriptorium" / "session-end.json").write_text("{}")
    (ws_root / ".scriptorium-bm25.json").write_text("{}")
    (ws_root / ".nativemem-cache").write_text("x")
    (ws_root / "topics" / "link.md").symlink_to(ws_root / "topics" / "a.md")
    with ws.lock():
        pass  # write.lock
    assert ws.revision() == rev
    (ws_root / "topics" / "a.md").write_text("B\n")
    assert ws.revision() != rev


def test_runtime_json_moves_the_revision(ws_root):
    ws = Workspace.open(ws_root)
    rev = ws.revision()
    ws.save_runtime(RuntimeState(local_tokens=5))
    assert ws.revision() != rev


def test_the_revision_of_the_reference_workspace_covers_its_derived_files_too(written_home):
    root = written_home / "memory"
    ws = Workspace.open(root)
    files = ws.revision_files()
    assert "relations.json" in files and ".scriptorium/runtime.json" in files
    assert not any(f.startswith(".git/") or f == ".scriptorium/workspace-id" for f in files)
    assert ws.revision() == expected_revision(root, files)


# -- topics ------------------------------------------------------------------------------------------


def test_topic_docs_parse_every_topic_file_and_find_block_answers_ids(written_home):
    root = written_home / "memory"
    ws = Workspace.open(root)
    assert [d.path for d in ws.topic_docs()] == ["topics/infrastructure/production.md",
                                                 "topics/projects/lisbon-offsite.md"]
    doc, block = ws.find_block("ef3d9036")
    assert doc.path == "topics/infrastructure/production.md" and block.id == "ef3d9036"
    assert ws.find_block("nope") is None


def test_find_block_answers_aliases_and_a_broken_file_does_not_hide_others(ws_root):
    ws = Workspace.open(ws_root)
    (ws_root / "topics" / "a.md").write_text(
        "A.[^e-aaaaaaaaaa] ^old ^b1\n\n[^e-aaaaaaaaaa]: Time: `2026`; Sources: [x](p/t/m)\n")
    (ws_root / "topics" / "broken.md").write_text("Prose without anything.\n")
    doc, block = ws.find_block("old")
    assert block.id == "b1" and doc.path == "topics/a.md"
    with pytest.raises(TopicFormatError, match="topics/broken.md:1"):
        ws.topic_docs()
