"""Helpers for the job-queue tests: head moves written straight into the home's head-move
log (:func:`move`: the rows the PostgreSQL store writes on a head change, without the nodes,
for the queue's own tests), worker processes (tests/postgres/work_proc.py) and waiting on
what they report, never on time. Moves of a directory home's log can be copied in
(:func:`copy_moves`), so the memory handler runs on a directory memory too."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scriptorium.postgres.connect import PgHome

PROC = Path(__file__).with_name("work_proc.py")
GENEROUS = 120.0  # seconds: only ever a bound on a wait for an event, never an expectation

PROBE = """
    CREATE TABLE IF NOT EXISTS work_probe (
        id         bigserial PRIMARY KEY,
        session_id text NOT NULL,
        seq        bigint NOT NULL,
        worker     text NOT NULL,
        event      text NOT NULL
    )"""


def open_home(url: str) -> PgHome:
    """The home at ``url``, with the probe table the test workers write to."""
    pg = PgHome.open(url)
    with pg.connection() as conn:
        conn.execute(PROBE)
    return pg


def move(pg: PgHome, sid: str, old: str | None, new: str | None) -> None:
    """One head move, committed, as the store records it."""
    with pg.connection() as conn:
        conn.execute("INSERT INTO head_moves (session_id, old_head, new_head, at)"
                     " VALUES (%s, %s, %s, %s)", (sid, old, new, time.time()))


def copy_moves(pg: PgHome, store: Any, after: int = 0) -> int:
    """Copy a directory store's announced head moves after ``after`` into ``head_moves``;
    returns the last seq copied."""
    moves = store.events.reader(after).poll()
    with pg.connection() as conn:
        for m in moves:
            conn.execute("INSERT INTO head_moves (session_id, old_head, new_head, at)"
                         " VALUES (%s, %s, %s, %s)", (m.session_id, m.old, m.new, m.at))
    return moves[-1].seq if moves else after


def probe(pg: PgHome) -> list[tuple[str, int, str, str]]:
    """(session_id, seq, worker, event) rows the test workers wrote, in order."""
    with pg.connection() as conn:
        return [tuple(r) for r in conn.execute(
            "SELECT session_id, seq, worker, event FROM work_probe ORDER BY id").fetchall()]


def wait_for(check: Any, what: str, timeout: float = GENEROUS) -> Any:
    """Re-check ``check()`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.05)


class WorkerProc:
    """A worker process (work_proc.py); stdout carries one JSON line per event."""

    def __init__(self, url: str, name: str, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(Path(__file__).parents[2] / "src"), os.environ.get("PYTHONPATH", "")])}
        self.name = name
        self.proc = subprocess.Popen([sys.executable, str(PROC), url, "--name", name, *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)

    def line(self, timeout: float = GENEROUS) -> dict[str, Any]:
        """The next event line; fails if the process ends or says nothing in time."""
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        text = self.proc.stdout.readline() if ready else ""
        if not text:
            raise AssertionError(f"worker {self.name} said nothing (exit "
                                 f"{self.proc.poll()}): {self.stderr()}")
        return json.loads(text)

    def wait_ready(self) -> None:
        assert self.line()["event"] == "ready"

    def stderr(self) -> str:
        if self.proc.poll() is None or self.proc.stderr is None:
            return ""
        return self.proc.stderr.read()[-2000:]

    def finish(self, timeout: float = GENEROUS) -> tuple[int, list[dict[str, Any]]]:
        """Wait for the process to end; its exit code and remaining event lines."""
        out, err = self.proc.communicate(timeout=timeout)
        lines = [json.loads(x) for x in out.splitlines() if x.strip()]
        if self.proc.returncode:
            print(err)
        return self.proc.returncode, lines

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()
