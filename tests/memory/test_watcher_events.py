"""The watcher is told, not polled: a branch the head leaves is written at once when it
qualifies, a session whose head went quiet gets its boundary write without a scan of every
session, and one bad session never stops the others. Clocks are pinned, never waited on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scriptorium.config import load_settings
from scriptorium.errors import ScriptoriumError
from scriptorium.memory.watcher import IdleWatcher
from scriptorium.memory.writers.embedded import EmbeddedWriter
from scriptorium.memory.writing import Memory

NOW = 2_000_000_000.0  # a pinned clock, far after every node's created_at


class PickyWriter(EmbeddedWriter):
    """The embedded writer, failing for the sessions named in ``fail`` with ``error``."""

    def __init__(self, fail: set[str] | None = None, error: Exception | None = None):
        self.fail = fail or set()
        self.error = error or RuntimeError("the writer fell over")
        self.calls: list[str] = []

    def write(self, request):
        sid = request.batch[0].session_id
        self.calls.append(sid)
        if sid in self.fail:
            raise self.error
        return super().write(request)


def memory(home: Path, writer=None, **settings) -> Memory:
    values = {"trigger_tokens": 12, **settings}
    return Memory(home, settings=load_settings(home, values), writer=writer or PickyWriter())


def talk(mem: Memory, sid: str, *turns: tuple[str, str, str]) -> None:
    if not mem.store.exists(sid):
        mem.store.create_session(sid)
    for node, role, text in turns:
        mem.store.append_message(sid, {"id": node, "role": role, "content": text})


def last_move(mem: Memory) -> float:
    """When the newest announced head move happened (the pinned clocks count from it)."""
    return mem.store.events.reader().poll()[-1].at


def watcher(mem: Memory, idle: float = 3600.0) -> IdleWatcher:
    return IdleWatcher(mem, idle_seconds=idle, interval_seconds=300, clock=lambda: NOW)


def test_a_branch_the_head_leaves_is_written_when_told_without_waiting_for_idle(
        tmp_path: Path) -> None:
    mem = memory(tmp_path)
    w = watcher(mem)
    w.step()  # the watcher starts following the log here
    talk(mem, "s", ("u1", "user", "We need a venue for forty people in Lisbon in May."),
         ("a1", "assistant", "I will shortlist three venues near the river by Friday."),
         ("u2", "user", "The budget is fifty thousand euros, flights included."))
    mem.store.edit("s", "u2", "Actually the budget is sixty thousand euros.", node_id="u2e")
    report = w.step(now=last_move(mem) + 1)
    assert [(r["session_id"], r["tip"]) for r in report.written] == [("s", "u2")]
    assert report.written[0]["marked"] == ["u1", "a1", "u2"]
    assert [r.node_id for r in mem.pending("s", "u2")] == []
    assert [r.node_id for r in mem.pending("s")] == ["u2e"]  # the head waits for its idle write


def test_a_left_branch_below_the_threshold_waits_and_says_why(tmp_path: Path) -> None:
    mem = memory(tmp_path, trigger_tokens=10_000)
    w = watcher(mem)
    w.step()
    talk(mem, "s", ("u1", "user", "Which city?"), ("a1", "assistant", "Lisbon."))
    mem.store.retry("s", "a1", "Porto.", node_id="a1r")
    report = w.step(now=last_move(mem) + 1)
    assert report.written == []
    assert report.waiting and report.waiting[0]["tip"] == "a1"
    assert "below the threshold" in report.waiting[0]["reason"]
    assert "a rejected reply" in report.waiting[0]["reason"]  # a retry: waits for a batch
    assert any("waiting s: branch a1" in line for line in report.lines())


def test_a_quiet_session_is_written_from_the_log_without_a_scan_of_every_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mem = memory(tmp_path, trigger_tokens=10_000)
    w = watcher(mem, idle=60)
    w.step()
    talk(mem, "quiet", ("u1", "user", "Deploys go out on Tuesdays."))
    moved_at = last_move(mem)

    def no_scan() -> list:
        raise AssertionError("the told path must not list every session")

    monkeypatch.setattr(mem.store, "list_sessions", no_scan)
    assert w.step(now=moved_at + 30).written == []          # not quiet long enough
    report = w.step(now=moved_at + 61)
    assert [r["session_id"] for r in report.written] == ["quiet"]
    assert mem.pending("quiet") == []
    assert w.step(now=moved_at + 999).written == []          # once, not again


def test_a_restarted_watcher_catches_up_from_where_it_stopped_and_tells_nothing_twice(
        tmp_path: Path) -> None:
    mem = memory(tmp_path, trigger_tokens=10_000)
    first = watcher(mem, idle=60)
    first.step()
    talk(mem, "s", ("u1", "user", "The launch is on the third of June."))
    at = last_move(mem)
    assert first.step(now=at + 1).events == 1                 # told, not yet quiet
    del first                                                 # the watcher goes down
    talk(mem, "t", ("v1", "user", "Standup moves to 9:30."))  # a move while it is down
    second = watcher(mem, idle=60)
    assert not second.needs_full_pass()
    report = second.step(now=at + 600)
    assert report.events == 1                                 # only the move it missed
    assert sorted(r["session_id"] for r in report.written) == ["s", "t"]
    assert watcher(mem, idle=60).step(now=at + 900).events == 0


def test_a_first_start_or_a_lost_position_makes_one_full_pass(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    talk(mem, "s", ("u1", "user", "Before any watcher ran."))
    w = watcher(mem, idle=0)
    assert w.needs_full_pass()
    report = w.run_once(now=NOW)
    assert [r["session_id"] for r in report.written] == ["s"]


def _dangling(mem: Memory, sid: str) -> None:
    """A session whose one node names a predecessor that does not exist."""
    talk(mem, sid, ("u1", "user", "Fine so far."))
    history = mem.store.root / sid / "history"
    node = json.loads(next(history.iterdir()).read_text())
    node.update(id="u9", seq=9, predecessor="missing-node")
    (history / "00000009-u-u9.json").write_text(json.dumps(node))


def test_one_unreadable_session_does_not_stop_the_others(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    _dangling(mem, "broken")
    talk(mem, "good", ("u1", "user", "Keep the retro on Fridays at four."))
    report = watcher(mem, idle=0).run_once(now=NOW)
    assert [r["session_id"] for r in report.written] == ["good"]
    failed = {r["session_id"]: r["failure"] for r in report.terminal + report.retry_later}
    assert "broken" in failed and failed["broken"]["message"]
    assert any(line.startswith("failed broken:") or line.startswith("retry later broken:")
               for line in report.lines())


def test_a_writer_that_raises_fails_only_its_own_session(tmp_path: Path) -> None:
    writer = PickyWriter(fail={"bad"})
    mem = memory(tmp_path, writer)
    talk(mem, "bad", ("u1", "user", "This one trips the writer."))
    talk(mem, "good", ("u1", "user", "This one is fine."))
    report = watcher(mem, idle=0).run_once(now=NOW)
    assert [r["session_id"] for r in report.written] == ["good"]
    assert [r["session_id"] for r in report.terminal] == ["bad"]
    assert report.terminal[0]["failure"]["reason_code"] == "WRITER_FAILURE_UNKNOWN"
    assert "RuntimeError: the writer fell over" in report.terminal[0]["failure"]["message"]


def test_a_terminal_failure_is_retried_once_the_configuration_changes(homes) -> None:
    """On both homes: a session that failed for good is left alone under the configuration
    it failed under, and written again once that changes (here the settings)."""
    writer = PickyWriter(fail={"s"}, error=ValueError("no such model"))
    mem = homes.open(writer, trigger_tokens=12, watcher_idle_seconds=0)
    talk(mem, "s", ("u1", "user", "Write me later."))
    failed = mem.watch_once(now=NOW).terminal
    assert [(r["session_id"], r["failure"]["retryable"]) for r in failed] == [("s", False)]
    again = mem.watch_once(now=NOW)
    assert (again.considered, again.written) == (0, [])              # same config: left alone
    writer.fail = set()
    fixed = homes.open(writer, trigger_tokens=13, watcher_idle_seconds=0)  # the user changed it
    report = fixed.watch_once(now=NOW)
    assert [r["session_id"] for r in report.written] == ["s"] and report.terminal == []
    assert [r.node_id for r in fixed.pending("s")] == []
    assert fixed.watch_once(now=NOW).considered == 0                  # and not again after


def test_retry_failed_retries_a_terminal_failure_under_the_same_configuration(
        tmp_path: Path) -> None:
    writer = PickyWriter(fail={"s"}, error=ValueError("no such model"))
    mem = memory(tmp_path, writer)
    talk(mem, "s", ("u1", "user", "Write me later."))
    assert watcher(mem, idle=0).run_once(now=NOW).terminal
    writer.fail = set()
    report = watcher(mem, idle=0).run_once(now=NOW, retry_failed=True)
    assert [r["session_id"] for r in report.written] == ["s"]


class KeyWriter(EmbeddedWriter):
    """Refuses (terminally, as the llm writer does) while its API key variable is unset."""

    def write(self, request):
        if not os.environ.get("SCRIPTORIUM_TEST_KEY"):
            raise ScriptoriumError("SCRIPTORIUM_TEST_KEY is not set", code="MODEL_AUTHENTICATION",
                                   retryable=False)
        return super().write(request)


def test_a_missing_api_key_is_retried_once_the_key_is_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SCRIPTORIUM_TEST_KEY", raising=False)
    mem = memory(tmp_path, KeyWriter(), llm_api_key_env="SCRIPTORIUM_TEST_KEY")
    talk(mem, "s", ("u1", "user", "Remember the vendor contract renews in March."))
    first = watcher(mem, idle=0).run_once(now=NOW)
    assert first.terminal[0]["failure"]["reason_code"] == "MODEL_AUTHENTICATION"
    assert watcher(mem, idle=0).run_once(now=NOW).considered == 0
    monkeypatch.setenv("SCRIPTORIUM_TEST_KEY", "sk-now-set")
    report = watcher(mem, idle=0).run_once(now=NOW)
    assert [r["session_id"] for r in report.written] == ["s"]
    state = json.dumps(watcher(mem, idle=0).load_state())
    assert "sk-now-set" not in state  # only a hash of the key decides, never the key


def _cli(home: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from scriptorium.cli import main; main()",
                             "--home", str(home), *args], text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, **kw)


def test_memory_watch_names_each_session_and_its_reason(tmp_path: Path) -> None:
    mem = memory(tmp_path)
    _dangling(mem, "broken")
    talk(mem, "good", ("u1", "user", "Quarterly review on the second Monday."))
    proc = _cli(tmp_path, "memory", "watch", "--once", "--idle-seconds", "0")
    out, err = proc.communicate(timeout=120)
    assert "written good: 1 turn(s)" in out
    assert "broken:" in out and ("failed broken" in out or "retry later broken" in out)


def test_sigterm_stops_memory_watch_cleanly_with_exit_0(tmp_path: Path) -> None:
    memory(tmp_path)
    proc = _cli(tmp_path, "memory", "watch", "--interval", "300")
    assert proc.stderr is not None
    line = proc.stderr.readline()  # printed once the SIGTERM handler is installed
    assert line.startswith("watching "), line
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)
    assert proc.returncode == 0


def test_a_waiting_watcher_is_woken_by_the_os_when_a_move_is_appended(tmp_path: Path) -> None:
    """With a one-hour timer, only the OS's notification of the log's change can wake the
    loop in time: the left branch being marked proves the watcher was told."""
    import threading

    from scriptorium.sessions.events import Waker

    mem = memory(tmp_path)
    talk(mem, "s", ("u1", "user", "We need a venue for forty people in Lisbon in May."),
         ("a1", "assistant", "I will shortlist three venues near the river by Friday."))
    if not Waker(mem.store.events).notified:
        pytest.skip("this OS gives no inotify; the watcher falls back to a timer")
    w = IdleWatcher(mem, idle_seconds=3600, interval_seconds=3600, tick_seconds=3600)
    w.step()  # positioned at the end of the log
    stop = threading.Event()
    wake_r, wake_w = os.pipe()  # as the CLI's signal wakeup: ends the sleep when stopping
    loop = threading.Thread(target=w.run_forever, kwargs={"stop": stop, "wake_fds": [wake_r]})
    loop.start()
    try:
        import time

        time.sleep(0.5)  # let the loop reach its wait; a move before that is found anyway
        talk(mem, "s", ("u2", "user", "The budget is fifty thousand euros, flights included."))
        mem.store.edit("s", "u2", "Make that sixty thousand euros.", node_id="u2e")
        deadline = time.monotonic() + 60  # a liveness bound; the timer alone would take 1 h
        while mem.pending("s", "u2"):
            assert time.monotonic() < deadline, "the watcher was never woken"
            time.sleep(0.05)
    finally:
        stop.set()
        os.write(wake_w, b"x")
        loop.join(timeout=60)
        os.close(wake_r)
        os.close(wake_w)
    assert not loop.is_alive()
