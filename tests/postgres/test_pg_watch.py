"""`memory watch` on a PostgreSQL home runs as a queue worker: its state is in the home, so a
watcher killed at the worst moment and restarted (here two at once, as on two hosts) loses
nothing and writes nothing twice; `--once` and `--retry-failed` keep their meaning."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pgserver import home_url
from scriptorium.config import load_settings
from scriptorium.memory.citations import citation_map
from scriptorium.memory.writing import Memory
from testkit import Cli
from workkit import GENEROUS, wait_for

SRC = str(Path(__file__).parents[2] / "src")


def pg_memory(url: str) -> Memory:
    """Memory as the watcher processes below see it: sessions due once quiet 0 s."""
    return Memory.open(url, settings=load_settings(url, {"watcher_idle_seconds": 0}))


def talk(mem: Memory, sid: str, *turns: tuple[str, str, str]) -> None:
    if not mem.store.exists(sid):
        mem.store.create_session(sid, title=f"Project {sid}")
    for node, role, text in turns:
        mem.store.append_message(sid, {"id": node, "role": role, "content": text})


def seed(mem: Memory, sessions: int = 4) -> None:
    for n in range(sessions):
        sid = f"s{n}"
        talk(mem, sid, (f"{sid}u1", "user", f"Project {n} ships in week {n + 10}."),
             (f"{sid}a1", "assistant", f"Week {n + 10} it is for project {n}."))


def owed(mem: Memory) -> set[tuple[str, str]]:
    return {(row["session_id"], r.node_id) for row in mem.store.list_sessions()
            for tip in mem.live_tips(row["session_id"])
            for r in mem.pending(row["session_id"], tip)}


def cited(mem: Memory) -> dict[str, int]:
    mem.workspace.refresh()
    return {src: len(blocks) for src, blocks in citation_map(mem.workspace).items()}


def watcher(url: str, **env: str) -> subprocess.Popen:
    """``scriptorium memory watch`` in a process of its own (sessions due once quiet 0 s)."""
    return subprocess.Popen(
        [sys.executable, "-m", "scriptorium", "--home", url, "memory", "watch",
         "--idle-seconds", "0", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env={**os.environ, "PYTHONPATH": SRC, **env})


def stop(proc: subprocess.Popen) -> tuple[int, list[dict]]:
    """SIGTERM: the watcher ends between jobs and exits 0."""
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=GENEROUS)
    assert proc.returncode == 0, err
    return proc.returncode, [json.loads(line) for line in out.splitlines() if line.strip()]


def test_watch_once_on_a_postgresql_home_writes_the_quiet_sessions_then_finds_nothing(pg_url):
    with pg_memory(pg_url) as mem:
        seed(mem, sessions=2)
        before = owed(mem)
        cli = Cli(pg_url)
        first = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
        assert {(row["session_id"], n) for row in first["written"] for n in row["marked"]} \
            == before
        assert owed(mem) == set() and first["terminal"] == []
        again = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
        assert again["written"] == [] and again["considered"] == 0
        talk(mem, "s0", ("s0u2", "user", "Project 0 moved to week 12."))
        third = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
        assert [(r["session_id"], r["marked"]) for r in third["written"]] == [("s0", ["s0u2"])]


def test_a_session_failed_for_good_waits_for_retry_failed_or_a_new_configuration(
        pg_url, monkeypatch):
    with pg_memory(pg_url) as mem:
        seed(mem, sessions=1)
        cli = Cli(pg_url)
        monkeypatch.setenv("SCRIPTORIUM_WRITER_KIND", "llm")  # and no model key: terminal
        monkeypatch.setenv("SCRIPTORIUM_LLM_API_KEY_ENV", "SCRIPTORIUM_TEST_NO_SUCH_KEY")
        monkeypatch.delenv("SCRIPTORIUM_TEST_NO_SUCH_KEY", raising=False)
        failed = cli("memory", "watch", "--once", "--idle-seconds", "0", "--json")
        assert failed.exit_code == 1
        assert [r["session_id"] for r in json.loads(failed.stdout)["terminal"]] == ["s0"]
        waits = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
        assert waits["considered"] == 0 and owed(mem)  # the same configuration: left alone
        retried = cli("memory", "watch", "--once", "--idle-seconds", "0", "--retry-failed",
                      "--json")
        assert [r["session_id"] for r in json.loads(retried.stdout)["terminal"]] == ["s0"]
        monkeypatch.delenv("SCRIPTORIUM_WRITER_KIND")  # the configuration changes
        monkeypatch.delenv("SCRIPTORIUM_LLM_API_KEY_ENV")
        fixed = cli.json("memory", "watch", "--once", "--idle-seconds", "0")
        assert [r["session_id"] for r in fixed["written"]] == ["s0"]
        assert owed(mem) == set()


@pytest.mark.slow
def test_a_watcher_killed_mid_write_and_restarted_twice_over_loses_and_doubles_nothing(
        pg_url, pg_server_url, tmp_path):
    with pg_memory(home_url(pg_server_url)) as clean:  # the same sessions, watched once
        seed(clean)
        talk(clean, "s1", ("s1u2", "user", "Project 1 needs two reviewers."))
        assert clean.watch_once().written
        clean_counts = cited(clean)
        assert clean_counts
    with pg_memory(pg_url) as mem:
        seed(mem)
        flag = tmp_path / "reached"
        victim = watcher(pg_url, SCRIPTORIUM_FAULT="before-mark",
                         SCRIPTORIUM_FAULT_ACTION="pause", SCRIPTORIUM_FAULT_FLAG=str(flag))
        try:
            wait_for(lambda: flag.exists() or victim.poll() is not None,
                     "the watcher to reach before-mark")
            assert flag.exists(), victim.stderr.read() if victim.stderr else ""
            victim.send_signal(signal.SIGKILL)  # installed, not marked: the worst moment
        finally:
            victim.kill()
            victim.communicate()
        assert owed(mem)
        # restarted twice over, as on two hosts: they share what is owed
        heirs = [watcher(pg_url), watcher(pg_url)]
        try:
            wait_for(lambda: not owed(mem), "the restarted watchers to write every turn")
            talk(mem, "s1", ("s1u2", "user", "Project 1 needs two reviewers."))
            wait_for(lambda: not owed(mem), "the new turn to be written")
            reports = [stop(proc)[1] for proc in heirs]
        finally:
            for proc in heirs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()
        assert all(r["terminal"] == [] and r["retry_later"] == [] for rs in reports for r in rs)
        assert mem.verify().to_dict()["ok"]
        assert cited(mem) == clean_counts  # every turn cited as often as by one clean watcher
        # and one more watcher, started later, finds every job handled: nothing is redone
        assert Cli(pg_url).json("memory", "watch", "--once", "--idle-seconds", "0")[
            "considered"] == 0
