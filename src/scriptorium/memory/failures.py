"""How a write that did not happen is reported: a reason code, whether a retry can help, and
a one-line message. Every write path (per turn, boundary, watcher, backfill) uses these, so a
caller sees one vocabulary (memory reference §3.11). A branch that a non-retryable failure
blocks is remembered (``BlockedBranches``) until a write on it succeeds, with a hint saying
what the user can do.
"""

from __future__ import annotations

import errno
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ReasonCode, ScriptoriumError, from_os_error
from ..fsutil import atomic_write_json


@dataclass
class Failure:
    """Why a write did not happen, and whether trying again later can help."""

    reason_code: ReasonCode
    retryable: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return {"reason_code": self.reason_code, "retryable": self.retryable,
                "message": self.message}


def classify(exc: BaseException) -> Failure:
    """Turn any exception from a write step into a reported failure."""
    if isinstance(exc, ScriptoriumError):
        return Failure(exc.code, exc.retryable, str(exc))
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return classify(from_os_error(exc))  # DISK_FULL: retryable, never blocks a branch
    if isinstance(exc, ValueError):
        return Failure(ReasonCode.WRITER_PRECONDITION_FAILED, False, str(exc) or type(exc).__name__)
    retryable = bool(getattr(exc, "retryable", False))
    return Failure(ReasonCode.WRITER_FAILURE_UNKNOWN, retryable, f"{type(exc).__name__}: {exc}")


# -- branches that cannot make progress --------------------------------------------------------

BLOCKED_FILE = "blocked.json"

_HINTS = {
    "INVALID_TOPIC_FORMAT": "a topic file, or the writer's edit of it, breaks the format: fix "
                            "the file the message names (or use --writer embedded), then run "
                            "`scriptorium memory write {sid} --force`",
    "SOURCE_ARCHIVE_INVALID": "the evidence archive is damaged: run `scriptorium memory verify "
                              "--repair`, then `scriptorium memory write {sid} --force`",
    "MISSING_SOURCE": "a topic cites evidence the archive lost: run `scriptorium memory verify "
                      "--repair`, then `scriptorium memory write {sid} --force`",
    "WRITER_NO_PROGRESS": "the writer added nothing for these turns: write them with another "
                          "writer (`scriptorium memory write {sid} --force --writer embedded`)",
}
_WRITER_HINT = ("the writer's edits were rejected: retry with another writer (`scriptorium "
                "memory write {sid} --force --writer embedded`) or fix the model's setup")
_MODEL_HINT = ("fix the llm writer's setup ([writer.llm] in config.toml, the key's environment "
               "variable) or use --writer embedded, then `scriptorium memory write {sid} --force`")


def hint(reason_code: str, session_id: str) -> str:
    """What a user can do about a branch blocked by ``reason_code``."""
    if reason_code in _HINTS:
        text = _HINTS[reason_code]
    elif reason_code.startswith("MODEL_") or reason_code == "WRITER_PRECONDITION_FAILED":
        text = _MODEL_HINT
    elif reason_code in ("COMMIT_REJECTED", "NOT_EVIDENCE", "READ_ONLY_PATH",
                         "FOREIGN_CITATION_REMOVED"):
        text = _WRITER_HINT
    else:
        text = "fix what the message names, then run `scriptorium memory write {sid} --force`"
    return text.format(sid=session_id)


class BlockedBranches:
    """The last non-retryable failure per (session, branch tip), kept in the runtime dir so
    ``memory status`` and ``memory verify`` can show a branch that cannot make progress
    (every later turn of it waits behind the failed batch). A success on the branch clears
    it. Writers update it under the workspace lock; readers need no lock (atomic file)."""

    def __init__(self, runtime_dir: Path):
        self.path = Path(runtime_dir) / BLOCKED_FILE

    def load(self) -> dict[str, dict[str, dict[str, Any]]]:
        """{session: {tip: record}}; a missing or unreadable file is empty (it is a report,
        never a reason to stop writing)."""
        data = self._read()
        if not isinstance(data, dict):
            return {}
        return {sid: {tip: rec for tip, rec in tips.items() if isinstance(rec, dict)}
                for sid, tips in data.items() if isinstance(tips, dict)}

    def _save(self, data: dict[str, dict[str, dict[str, Any]]]) -> None:
        self._write({sid: tips for sid, tips in data.items() if tips})

    # where the report is kept (a database home keeps it in a row)
    def _read(self) -> Any:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def _write(self, data: dict[str, dict[str, dict[str, Any]]]) -> None:
        if data:
            atomic_write_json(self.path, data, indent=1)
        elif self.path.exists():
            self.path.unlink()

    def note(self, session_id: str, tip: str | None, failure: Failure | None,
             batch: list[str], marked: list[str], at: str) -> None:
        """Record a non-retryable ``failure`` of ``batch`` at ``tip``, or clear what a success
        (``marked``) unblocked: the record of ``tip`` and any whose batch is now marked.
        Caller holds the workspace lock."""
        if failure is not None and failure.retryable:
            return
        data = self.load()
        if failure is None and session_id not in data:
            return
        tips = data.setdefault(session_id, {})
        if failure is not None:
            tips[str(tip)] = {**failure.to_dict(), "batch": list(batch), "at": at}
        else:
            done = set(marked)
            for key in [k for k, rec in tips.items()
                        if k == str(tip) or done & set(rec.get("batch") or [])]:
                del tips[key]
        self._save(data)

    def adopt(self, data: dict[str, dict[str, dict[str, Any]]]) -> bool:
        """Make the whole report ``data`` (another home's, for a home copy); True when it
        changed anything. Caller holds the workspace lock."""
        if self.load() == data:
            return False
        self._save(data)
        return True

    def forget(self, reason_codes: set[str]) -> list[str]:
        """Drop every record with one of ``reason_codes`` (their cause was repaired; a write
        that still fails records it again). Returns the sessions touched. Caller holds the
        workspace lock."""
        data = self.load()
        touched = []
        for sid, tips in data.items():
            for key in [k for k, rec in tips.items() if rec.get("reason_code") in reason_codes]:
                del tips[key]
                touched.append(sid)
        if touched:
            self._save(data)
        return sorted(set(touched))

    def for_branch(self, session_id: str, tip: str,
                   pending: list[str]) -> dict[str, Any] | None:
        """The failure blocking the branch ending at ``tip``: recorded at that tip, or at an
        older tip of it whose failed batch is still pending here."""
        tips = self.load().get(session_id, {})
        rec = tips.get(tip)
        if rec is None:
            waiting = set(pending)
            rec = next((r for r in tips.values()
                        if (r.get("batch") or [None])[0] in waiting), None)
        if rec is None:
            return None
        code = str(rec.get("reason_code", ""))
        return {"reason_code": code, "message": str(rec.get("message", "")),
                "since": rec.get("at"), "hint": hint(code, session_id)}
