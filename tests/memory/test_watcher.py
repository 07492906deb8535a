"""The idle watcher: quiet sessions get a forced write once per updated_at."""

from __future__ import annotations

import json
import multiprocessing


from scriptorium.config import load_settings
from scriptorium.errors import ConcurrentUpdate
from scriptorium.memory.watcher import IdleWatcher
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory


class CountingWriter(EmbeddedWriter):
    def __init__(self, fail: Exception | None = None):
        self.calls = 0
        self.fail = fail

    def write(self, request):
        self.calls += 1
        if self.fail is not None:
            raise self.fail
        return super().write(request)


def setup(home, writer, idle=0.0):
    mem = Memory(home, settings=load_settings(home, {"trigger_tokens": 10_000}), writer=writer)
    mem.store.create_session("s", title="Deploys")
    mem.store.append_message("s", {"id": "m0", "role": "user", "content": "Deploy on Tuesdays."})
    mem.store.append_message("s", {"id": "m1", "role": "assistant", "content": "Noted."})
    return mem, IdleWatcher(mem, idle_seconds=idle, interval_seconds=0.01)


def test_an_idle_session_is_written_once_per_updated_at(home):
    writer = CountingWriter()
    mem, watcher = setup(home, writer)
    first = watcher.run_once()
    assert [w["session_id"] for w in first.written] == ["s"] and writer.calls == 1
    assert first.written[0]["marked"] == ["m0", "m1"]
    # Marks do not move updated_at, so the written session is not handed straight back.
    assert watcher.run_once().considered == 0 and writer.calls == 1
    state = json.loads(watcher.state_path.read_text())
    assert state["processed"]["s"] == mem.store.get_meta("s")["updated_at"]


def test_a_new_turn_hands_the_session_back(home):
    writer = CountingWriter()
    mem, watcher = setup(home, writer)
    watcher.run_once()
    mem.store.append_message("s", {"id": "m2", "role": "user", "content": "And Thursdays."})
    report = watcher.run_once()
    assert report.written[0]["marked"] == ["m2"]


def test_a_session_that_is_not_idle_yet_waits(home):
    writer = CountingWriter()
    _, watcher = setup(home, writer, idle=3600)
    assert watcher.run_once().considered == 0 and writer.calls == 0


def test_a_retryable_failure_is_retried_on_the_next_pass(home):
    writer = CountingWriter(fail=ConcurrentUpdate("busy"))
    mem, watcher = setup(home, writer)
    report = watcher.run_once()
    assert report.retry_later and not report.terminal
    assert "s" not in watcher.load_state()["processed"]
    writer.fail = None
    assert watcher.run_once().written[0]["marked"] == ["m0", "m1"]


def test_a_terminal_failure_is_recorded_and_not_offered_again(home):
    writer = CountingWriter(fail=ValueError("the model does not exist"))
    mem, watcher = setup(home, writer)
    report = watcher.run_once()
    assert report.terminal[0]["failure"]["reason_code"] == "WRITER_PRECONDITION_FAILED"
    state = watcher.load_state()
    assert state["failures"]["s"]["retryable"] is False and "s" in state["processed"]
    assert watcher.run_once().considered == 0 and writer.calls == 1
    assert [r.node_id for r in mem.pending("s")] == ["m0", "m1"]  # never marked


def test_the_watchers_state_survives_a_write_and_does_not_move_the_revision(home):
    mem, watcher = setup(home, CountingWriter())
    watcher.run_once()
    revision = mem.workspace.revision()
    state = watcher.state_path.read_bytes()
    watcher._save_state(json.loads(state))  # rewriting the map alone
    assert mem.workspace.revision() == revision
    assert IdleWatcher(mem).load_state() == json.loads(state)


def test_a_corrupt_state_file_is_set_aside_with_a_warning_and_the_pass_goes_on(home):
    mem, watcher = setup(home, CountingWriter())
    watcher.state_path.parent.mkdir(parents=True, exist_ok=True)
    watcher.state_path.write_text("{not json")
    report = watcher.run_once()
    assert len(report.warnings) == 1 and "session-end.json" in report.warnings[0]
    assert report.written[0]["marked"] == ["m0", "m1"]
    aside = watcher.state_path.with_name("session-end.json.corrupt")
    assert aside.read_text() == "{not json"  # kept for a look, never silently lost
    assert watcher.load_state()["processed"]["s"] == mem.store.get_meta("s")["updated_at"]


def _hold(path, ready, release):
    from pathlib import Path

    from scriptorium.fsutil import FileLock

    with FileLock(Path(path)):
        ready.set()
        release.wait(20)


def test_two_watcher_processes_do_not_run_the_same_pass(home):
    writer = CountingWriter()
    _, watcher = setup(home, writer)
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_hold, args=(str(watcher.lock.path), ready, release))
    proc.start()
    try:
        assert ready.wait(20)
        report = watcher.run_once()
    finally:
        release.set()
        proc.join(20)
    assert report.ran is False and writer.calls == 0
    assert watcher.run_once().ran is True


def test_memory_watch_once_from_the_cli(home, cli):
    mem, _ = setup(home, CountingWriter())
    data = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
    assert data["ran"] and data["written"][0]["marked"] == ["m0", "m1"]
