"""The watcher: memory is told when a branch stops moving, and polls only as a safety net.

Two ways in, one set of rules:

* **Told.** Every head move any process makes through the store lands in the head-move log
  (:mod:`scriptorium.sessions.events`). :meth:`IdleWatcher.step` reads what was appended since
  its saved position: a branch the head just *left* (a retry, an edit, a spawn, an explicit
  head change — its tip is still live and no longer the head) is written at once if its pending
  work qualifies, and a session whose head has been quiet for ``idle_seconds`` gets its
  session-boundary write. Nothing scans every session.
* **Polled.** :meth:`IdleWatcher.run_once` is the old pass over every session (idle and
  ``updated_at`` differing from the value last handled). :meth:`run_forever` runs it at start
  when the log cannot vouch for what happened while the watcher was down, then every
  ``interval_seconds`` to find anything an announcement missed.

A watcher you can leave running: one session's failure (an unreadable DAG, a migration error,
any exception from a writer) is recorded for that session with its reason and the pass goes on;
a retryable failure is retried on the next pass; a terminal one is recorded with the
configuration it failed under and retried once that configuration (settings, writer, API key)
changes, or on ``retry_failed``. A corrupt state file is set aside with a warning and the
watcher starts afresh (marks make every redo safe). Two watchers never run a pass at once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..errors import ConcurrentUpdate, ScriptoriumError
from ..fsutil import FileLock, atomic_write_json
from ..sessions.events import HeadMove, LogReader
from .failures import Failure, classify
from .results import SessionResult
from .side_branches import REJECTED_REPLY
from .view import MemoryView

STATE_FILE = "session-end.json"
LOCK_FILE = "session-end.lock"
TICK_SECONDS = 0.5  # how often the log is looked at when the OS cannot tell us (two stats)
NOTIFIED_TIMER = 30.0  # with inotify: a timer only so a stop set by another thread is seen


@dataclass
class PassReport:
    """What one pass or step did, session by session."""

    ran: bool = True
    considered: int = 0
    events: int = 0
    written: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    retry_later: list[dict[str, Any]] = field(default_factory=list)
    terminal: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __bool__(self) -> bool:
        return bool(self.written or self.retry_later or self.terminal or self.warnings
                    or self.waiting)

    def lines(self) -> list[str]:
        """One line per session written, waiting or failed, with the reason."""
        out = list(f"warning: {w}" for w in self.warnings)
        for row in self.written:
            where = f" (branch {row['tip']})" if row.get("tip") else ""
            out.append(f"written {row['session_id']}{where}: {len(row['marked'])} turn(s)")
        for row in self.waiting:
            out.append(f"waiting {row['session_id']}: {row['reason']}")
        for row in self.retry_later:
            f = row["failure"]
            out.append(f"retry later {row['session_id']}: {f['reason_code']}: {f['message']}")
        for row in self.terminal:
            f = row["failure"]
            out.append(f"failed {row['session_id']}: {f['reason_code']}: {f['message']} (not "
                       f"retried until the configuration changes or memory watch "
                       f"--retry-failed)")
        return out


def config_fingerprint(memory: MemoryView) -> str:
    """What a terminal failure depends on: the settings, the writer, and whether the model key
    is set (its hash, never the key). A change means a failed session deserves another try."""
    settings = dataclasses.asdict(memory.settings)
    settings.pop("extra", None)
    key = os.environ.get(memory.settings.llm_api_key_env or "", "")
    parts = [json.dumps(settings, sort_keys=True, default=str),
             type(memory.writer).__module__ + "." + type(memory.writer).__qualname__,
             hashlib.sha256(key.encode()).hexdigest()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


class IdleWatcher:
    """Writes the sessions of ``memory`` as they are told to move and go quiet."""

    def __init__(self, memory: MemoryView, *, idle_seconds: float | None = None,
                 interval_seconds: float | None = None, tick_seconds: float = TICK_SECONDS,
                 clock: Callable[[], float] = time.time):
        self.memory = memory
        settings = memory.settings
        self.idle_seconds = settings.watcher_idle_seconds if idle_seconds is None else idle_seconds
        self.interval = (settings.watcher_interval_seconds if interval_seconds is None
                         else interval_seconds)
        self.tick = tick_seconds
        self.clock = clock
        runtime = memory.workspace.runtime_dir
        self.state_path: Path = runtime / STATE_FILE
        self.lock = FileLock(runtime / LOCK_FILE, timeout=0, what="watcher pass")
        self._reader: LogReader | None = None
        self._started_blind = False
        self._quiet: dict[str, float] = {}

    # -- persisted state -----------------------------------------------------------------

    def load_state(self, warnings: list[str] | None = None) -> dict[str, Any]:
        """The processed map, the recorded failures and the log position. A state file that
        cannot be read is moved aside (``.corrupt``) with a warning: starting afresh costs
        redone checks, never a lost or doubled turn, because marks decide what is written."""
        fresh: dict[str, Any] = {"processed": {}, "failures": {}, "quiet": {}}
        if not self.state_path.exists():
            return fresh
        try:
            data = json.loads(self.state_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict) or not isinstance(data.get("processed", {}), dict) \
                    or not isinstance(data.get("failures", {}), dict):
                raise ValueError("not a watcher state object")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            aside = self.state_path.with_name(STATE_FILE + ".corrupt")
            try:
                os.replace(self.state_path, aside)
            except OSError:
                pass
            if warnings is not None:
                warnings.append(f"watcher state {self.state_path} was unreadable ({exc}); "
                                f"set aside as {aside.name}, starting afresh")
            return fresh
        data.setdefault("processed", {})
        data.setdefault("failures", {})
        if not isinstance(data.get("quiet"), dict):
            data["quiet"] = {}
        return data

    def _save_state(self, state: dict[str, Any]) -> None:
        atomic_write_json(self.state_path, state, indent=1)

    # -- one session, isolated -------------------------------------------------------------

    def _record(self, report: PassReport, state: dict[str, Any], sid: str,
                updated_at: Any, now: float, write: Callable[[], SessionResult],
                tip: str | None = None) -> None:
        """Run one write and file its outcome; any exception is this session's failure."""
        entry: dict[str, Any] = {"session_id": sid, "updated_at": updated_at, "marked": []}
        if tip is not None:
            entry["tip"] = tip
        try:
            result = write()
            entry["marked"] = result.marked
            failure: Failure | None = result.failure
        except Exception as exc:  # one session must never stop the others
            failure = classify(exc)
        if failure is None:
            if tip is None:
                state["processed"][sid] = updated_at
            state["failures"].pop(sid, None)
            if entry["marked"] or tip is None:
                report.written.append(entry)
        elif failure.retryable:
            report.retry_later.append({**entry, "failure": failure.to_dict()})
        else:
            if tip is None:
                state["processed"][sid] = updated_at
            state["failures"][sid] = {**failure.to_dict(), "at": now, "updated_at": updated_at,
                                      "config": config_fingerprint(self.memory)}
            report.terminal.append({**entry, "failure": failure.to_dict()})
        self._save_state(state)  # persisted before the next session is touched

    def _due(self, state: dict[str, Any], sid: str, updated_at: Any,
             retry_failed: bool) -> bool:
        """Whether a quiet session still needs its boundary write."""
        failure = state["failures"].get(sid)
        if failure is not None and failure.get("retryable") is False:
            if retry_failed or failure.get("config") != config_fingerprint(self.memory):
                return True
        return state["processed"].get(sid) != updated_at

    # -- the safety net: a pass over every session ----------------------------------------

    def run_once(self, now: float | None = None, *, retry_failed: bool = False) -> PassReport:
        """One polling pass over every session; skipped (ran=False) if another pass runs."""
        try:
            self.lock.acquire()
        except ConcurrentUpdate:
            return PassReport(ran=False)
        try:
            return self._pass(self.clock() if now is None else now, retry_failed)
        finally:
            self.lock.release()

    def _pass(self, now: float, retry_failed: bool) -> PassReport:
        report = PassReport()
        state = self.load_state(report.warnings)
        for row in self.memory.store.list_sessions():
            sid, updated_at = row["session_id"], row.get("updated_at")
            if "error" in row:
                self._record(report, state, sid, updated_at, now,
                             lambda e=row["error"]: _raise(e))
                continue
            if not updated_at or float(updated_at) > now - self.idle_seconds:
                continue
            if not self._due(state, sid, updated_at, retry_failed):
                continue
            report.considered += 1
            state["quiet"].pop(sid, None)
            self._quiet.pop(sid, None)
            self._record(report, state, sid, updated_at, now,
                         lambda s=sid: self.memory.write_session(s))
        return report

    # -- told: the head-move log ------------------------------------------------------------

    def step(self, now: float | None = None) -> PassReport:
        """Read the moves announced since the last step; write the branches the head left
        and the sessions that went quiet. Skipped (ran=False) while another pass runs."""
        try:
            self.lock.acquire()
        except ConcurrentUpdate:
            return PassReport(ran=False)
        try:
            return self._step(self.clock() if now is None else now)
        finally:
            self.lock.release()

    def needs_full_pass(self) -> bool:
        """True when the log cannot vouch for every move since the saved position (first
        start, the watcher was down longer than the log keeps, or a line was lost)."""
        reader = self._ensure_reader(self.load_state())
        return self._started_blind or not reader.complete

    def _ensure_reader(self, state: dict[str, Any]):
        if self._reader is None:
            seq = state.get("event_seq")
            self._started_blind = not isinstance(seq, int)
            log = self.memory.store.events
            self._reader = log.reader(seq if isinstance(seq, int) else log.last_seq())
            self._quiet = {sid: float(t) for sid, t in state["quiet"].items()
                           if isinstance(t, (int, float))}
        return self._reader

    def _step(self, now: float) -> PassReport:
        report = PassReport()
        if self._reader is None:
            self._ensure_reader(self.load_state(report.warnings))
        moves = self._reader.poll()
        quiet = self._quiet  # told sessions not yet written: their last move
        due = [sid for sid, since in quiet.items() if now - since >= self.idle_seconds]
        if not moves and not due:
            return report  # an idle tick: one stat of the log, nothing read or written
        state = self.load_state(report.warnings)
        report.events = len(moves)
        for move in moves:
            quiet[move.session_id] = max(move.at, quiet.get(move.session_id, 0.0))
            if move.old is not None and move.old != move.new:
                self._left(report, state, move, now)
        state["event_seq"] = self._reader.seq
        state["quiet"] = quiet
        self._save_state(state)  # the position and the quiet map survive a restart
        for sid in sorted(sid for sid, since in quiet.items()
                          if now - since >= self.idle_seconds):
            del quiet[sid]
            updated_at = self._updated_at(sid)
            if updated_at is None or not self._due(state, sid, updated_at, False):
                self._save_state(state)
                continue
            report.considered += 1
            self._record(report, state, sid, updated_at, now,
                         lambda s=sid: self.memory.write_session(s))
        return report

    def _left(self, report: PassReport, state: dict[str, Any], move: HeadMove,
              now: float) -> None:
        """The head left ``move.old``: if that tip is still a live branch, write it now when
        its pending work qualifies (else it waits for the session's boundary write)."""
        sid, tip = move.session_id, move.old
        assert tip is not None
        try:
            if move.new is not None and self.memory.store.get_node(
                    sid, move.new).predecessor == tip:
                return  # an append: the head moved on along the same line
            live = {row["tip"] for row in self.memory.store.list_branches(sid)}
        except Exception as exc:  # an unreadable session is recorded, never fatal
            self._record(report, state, sid, None, now, lambda e=exc: _raise(e), tip=tip)
            return
        if tip not in live or tip == move.new:
            return  # the head moved on along the same line: nothing was left behind
        if not self.memory.branch_qualifies(sid, tip):
            pending = self.memory.pending(sid, tip)
            if pending:
                why = self.memory.side_branch_due(sid, tip, pending)[1]
                what = "a retried reply only (a rejected reply), " \
                    if why == REJECTED_REPLY else ""
                report.waiting.append({"session_id": sid, "tip": tip, "reason":
                                       f"branch {tip} owes {len(pending)} turn(s), {what}"
                                       f"below the threshold: it waits for a full batch "
                                       f"(side_branches = {self.memory.settings.side_branches})"})
            return
        self._record(report, state, sid, None, now,
                     lambda: self.memory.write_branch(sid, tip), tip=tip)

    def _updated_at(self, sid: str) -> Any:
        try:
            return self.memory.store.get_meta(sid).get("updated_at")
        except ScriptoriumError:
            return None

    # -- the loop --------------------------------------------------------------------------

    def run_forever(self, stop: threading.Event | None = None,
                    on_report: Callable[[PassReport], None] | None = None,
                    max_passes: int | None = None, wake_fds: Sequence[int] = ()) -> None:
        """Follow the log and poll every ``interval`` seconds (first at once when the log
        cannot vouch for the past) until ``stop`` is set. Between steps it sleeps until the
        log changes (inotify), a session comes due, the next poll, or a timer (``tick`` when
        the OS cannot notify, :data:`NOTIFIED_TIMER` when it can); a readable ``wake_fds``
        descriptor (a signal's wakeup pipe) ends the sleep at once. A stop between steps ends
        the loop; a step under way finishes first (a write is never cut short)."""
        stop = stop or threading.Event()
        waker = self.memory.store.events.waker()  # inotify, or LISTEN on PostgreSQL
        waker.open()  # watch the log before the first look at it: no move falls between
        passes = 0
        next_poll = self.clock() if self.needs_full_pass() else self.clock() + self.interval
        try:
            while not stop.is_set():
                if self.clock() >= next_poll:
                    report = self.run_once()
                    passes += 1
                    next_poll = self.clock() + self.interval
                    if on_report and report:
                        on_report(report)
                    if max_passes is not None and passes >= max_passes:
                        return
                report = self.step()
                if on_report and report:
                    on_report(report)
                if stop.is_set():
                    break
                timer = NOTIFIED_TIMER if waker.notified else self.tick
                now = self.clock()
                due = min((since + self.idle_seconds for since in self._quiet.values()),
                          default=now + timer)
                waker.wait(max(0.0, min(timer, next_poll - now, due - now)), wake_fds)
        finally:
            waker.close()


def _raise(error: Any) -> SessionResult:
    if isinstance(error, BaseException):
        raise error
    from ..errors import CorruptFile

    raise CorruptFile(str(error))
