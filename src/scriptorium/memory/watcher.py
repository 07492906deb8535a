"""The idle watcher: write every branch of sessions that went quiet.

A session idle for ``idle_seconds`` whose ``updated_at`` differs from the value the watcher last
handled gets a forced (session-boundary) write. The processed map is persisted after every
terminal outcome, so a crash never repeats a finished session's model call:

* success → the session is recorded as handled at that ``updated_at``;
* a retryable failure (a busy workspace, a rate limit) → not recorded, the next pass retries;
* a terminal failure → recorded (so it stops burning quota) together with the failure.

Marks never move ``updated_at``, so a written session is not handed straight back. A corrupt
processed file is an error that names it, never silently emptied (that would re-write
everything). Two watcher processes never run the same pass: a pass holds a non-blocking lock.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import ConcurrentUpdate, CorruptFile
from ..fsutil import FileLock, atomic_write_json
from .writing import Memory

STATE_FILE = "session-end.json"
LOCK_FILE = "session-end.lock"


@dataclass
class PassReport:
    """What one watcher pass did."""

    ran: bool = True
    considered: int = 0
    written: list[dict[str, Any]] = field(default_factory=list)
    retry_later: list[dict[str, Any]] = field(default_factory=list)
    terminal: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"ran": self.ran, "considered": self.considered, "written": self.written,
                "retry_later": self.retry_later, "terminal": self.terminal}


class IdleWatcher:
    """Polls the session store and hands idle sessions to the boundary write path."""

    def __init__(self, memory: Memory, *, idle_seconds: float | None = None,
                 interval_seconds: float | None = None):
        self.memory = memory
        settings = memory.settings
        self.idle_seconds = settings.watcher_idle_seconds if idle_seconds is None else idle_seconds
        self.interval = (settings.watcher_interval_seconds if interval_seconds is None
                         else interval_seconds)
        runtime = memory.workspace.runtime_dir
        self.state_path: Path = runtime / STATE_FILE
        self.lock = FileLock(runtime / LOCK_FILE, timeout=0, what="watcher pass")

    # -- persisted state -----------------------------------------------------------------

    def load_state(self) -> dict[str, Any]:
        if not self.state_path.exists():
            return {"processed": {}, "failures": {}}
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptFile(f"watcher state {self.state_path} is unreadable: {exc}") from None
        if not isinstance(data, dict) or not isinstance(data.get("processed", {}), dict):
            raise CorruptFile(f"watcher state {self.state_path} is not a processed map")
        data.setdefault("processed", {})
        data.setdefault("failures", {})
        return data

    def _save_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.state_path, state, indent=1)

    # -- one pass --------------------------------------------------------------------------

    def run_once(self, now: float | None = None) -> PassReport:
        """One pass over every session; skipped (ran=False) if another pass is running."""
        try:
            self.lock.acquire()
        except ConcurrentUpdate:
            return PassReport(ran=False)
        try:
            return self._pass(time.time() if now is None else now)
        finally:
            self.lock.release()

    def _pass(self, now: float) -> PassReport:
        report = PassReport()
        state = self.load_state()
        processed: dict[str, Any] = state["processed"]
        for row in self.memory.store.list_sessions():
            sid, updated_at = row["session_id"], row.get("updated_at")
            if not updated_at or float(updated_at) > now - self.idle_seconds:
                continue
            if processed.get(sid) == updated_at:
                continue
            report.considered += 1
            result = self.memory.write_session(sid)
            entry = {"session_id": sid, "updated_at": updated_at, "marked": result.marked}
            if result.failure is None:
                processed[sid] = updated_at
                state["failures"].pop(sid, None)
                report.written.append(entry)
            elif result.failure.retryable:
                report.retry_later.append({**entry, "failure": result.failure.to_dict()})
                continue
            else:
                processed[sid] = updated_at
                state["failures"][sid] = {**result.failure.to_dict(), "at": now,
                                          "updated_at": updated_at}
                report.terminal.append({**entry, "failure": result.failure.to_dict()})
            self._save_state(state)  # persisted before the next session is touched
        return report

    def run_forever(self, stop: threading.Event | None = None, max_passes: int | None = None,
                    on_pass: Callable[[PassReport], None] | None = None) -> None:
        """Poll every ``interval`` seconds until ``stop`` is set or ``max_passes`` ran."""
        stop = stop or threading.Event()
        passes = 0
        while not stop.is_set():
            report = self.run_once()
            passes += 1
            if on_pass:
                on_pass(report)
            if max_passes is not None and passes >= max_passes:
                return
            stop.wait(self.interval)
