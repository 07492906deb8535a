"""The pieces of a PostgreSQL memory workspace that stand in for a directory's files: the
workspace lock (a session advisory lock), the history (revision rows instead of git), the
blocked-branch report (a runtime row) and the evidence archive (frames written to the
database before the mirror). :mod:`.pg_workspace` puts them together.

Each piece keeps the directory's contract so the write path above cannot tell them apart:
the lock is busy ⇒ ConcurrentUpdate after the timeout; the history answers ``commit_all``
and ``added_matches``; a blocked report that cannot be read is empty.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from ..errors import ConcurrentUpdate
from .failures import BlockedBranches
from .sources import SourceArchive
from .sources.model import SourceRecord

if TYPE_CHECKING:  # pragma: no cover
    from ..postgres.connect import PgHome

# How long one try of the advisory lock waits before the next: short, since a waiting
# writer should notice a free lock soon; the caller's timeout bounds the whole wait.
LOCK_POLL_SECONDS = 0.02


def lock_key(schema: str) -> int:
    """The advisory-lock key of a home's memory workspace: a stable signed 64-bit number
    (the same in every process and host, different per home)."""
    digest = hashlib.sha256(f"scriptorium-memory:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


class AdvisoryLock:
    """The workspace write lock across processes and hosts: a session-level advisory lock
    on a connection of its own, so PostgreSQL releases it when its holder dies (a killed
    writer never leaves memory locked). Not re-entrant and not for threads: the workspace's
    in-process lock wraps it, and only the outermost holder takes this one."""

    def __init__(self, pg: "PgHome", key: int) -> None:
        self.pg = pg
        self.key = key
        self._conn: Any = None

    def _connection(self) -> Any:
        if self._conn is None or self._conn.closed:
            self._conn = self.pg.dedicated()
        return self._conn

    def acquire(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                got = self._connection().execute("SELECT pg_try_advisory_lock(%s)",
                                                 (self.key,)).fetchone()[0]
            except self.pg._psycopg.OperationalError as exc:
                self.close()
                raise self.pg._unreachable(exc) from None
            if got:
                return
            if deadline is not None and time.monotonic() >= deadline:
                raise ConcurrentUpdate(f"memory workspace is busy: another writer holds the "
                                       f"lock of {self.pg.target.display}")
            time.sleep(LOCK_POLL_SECONDS)

    def release(self) -> None:
        try:
            self._connection().execute("SELECT pg_advisory_unlock(%s)", (self.key,))
        except self.pg._psycopg.OperationalError:
            self.close()  # the lock died with the connection

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None


class PgHistory:
    """The memory history of a database home: one ``memory_revisions`` row per install, with
    the topic files it wrote (``memory_file_history``). Answers what the write path and
    verify ask of a git history."""

    exists = True

    def __init__(self, pg: "PgHome") -> None:
        self.pg = pg
        self.last_label: str | None = None  # set by the install that just published

    def repairable(self) -> bool:
        return False

    def problem(self) -> str | None:
        return None

    def ensure(self, *args: Any, **kw: Any) -> bool:
        return False

    def repack(self) -> None:
        """Nothing to pack: the database stores each revision's files once."""

    def commit_all(self, message: str, paths: Sequence[str] | None = None,
                   allow_empty: bool = False) -> str | None:
        """The install already wrote its revision row (in the same database transaction as
        its files); this names it."""
        label, self.last_label = self.last_label, None
        return label

    def added_matches(self, pattern: str, paths: Sequence[str]) -> set[str] | None:
        """Every match of ``pattern`` in a file any revision wrote under ``paths``."""
        regex = re.compile(pattern)
        found: set[str] = set()
        prefixes = [p.rstrip("/") + "/" for p in paths]
        with self.pg.connection() as conn:
            rows = conn.execute("SELECT path, content FROM memory_file_history "
                                "WHERE content IS NOT NULL").fetchall()
        for path, content in rows:
            if any(path.startswith(p) for p in prefixes):
                found.update(regex.findall(bytes(content).decode("utf-8", errors="replace")))
        return found

    def log(self, limit: int = 50) -> list[dict[str, Any]]:
        with self.pg.connection() as conn:
            rows = conn.execute("SELECT rev, at, message FROM memory_revisions "
                                "ORDER BY rev DESC LIMIT %s", (limit,)).fetchall()
        return [{"commit": f"r{rev}", "at": at.isoformat(), "message": msg}
                for rev, at, msg in rows]


class PgBlockedBranches(BlockedBranches):
    """The blocked-branch report in the ``memory_runtime`` row ``blocked`` (one value for
    every process and host writing this home)."""

    NAME = "blocked"

    def __init__(self, pg: "PgHome") -> None:
        self.pg = pg
        self.path = Path(f"{pg.target.display}#memory_runtime/{self.NAME}")  # for messages

    def load(self) -> dict[str, dict[str, dict[str, Any]]]:
        with self.pg.connection() as conn:
            row = conn.execute("SELECT body FROM memory_runtime WHERE name = %s",
                               (self.NAME,)).fetchone()
        data = row[0] if row else {}
        if not isinstance(data, dict):
            return {}
        return {sid: {tip: rec for tip, rec in tips.items() if isinstance(rec, dict)}
                for sid, tips in data.items() if isinstance(tips, dict)}

    def _save(self, data: dict[str, dict[str, dict[str, Any]]]) -> None:
        data = {sid: tips for sid, tips in data.items() if tips}
        with self.pg.connection() as conn:
            if data:
                conn.execute("INSERT INTO memory_runtime (name, body) VALUES (%s, %s::jsonb) "
                             "ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body",
                             (self.NAME, json.dumps(data)))
            else:
                conn.execute("DELETE FROM memory_runtime WHERE name = %s", (self.NAME,))


class PgSourceArchive(SourceArchive):
    """The evidence archive of a mirror: a batch's frames go to the database first (one
    transaction for the whole batch), then into the mirror's files, so what the database
    holds is never behind what a writer in this process could cite."""

    def __init__(self, workspace_root: Path, tmp_dir: Path | None,
                 publish: Callable[[dict[str, bytes | None]], None]) -> None:
        super().__init__(workspace_root, tmp_dir=tmp_dir)
        self._publish = publish
        self._pending: dict[str, str] | None = None

    def archive(self, records: list[SourceRecord]) -> list[str]:
        self._pending = {}
        try:
            written = super().archive(records)  # plans every file, collected by _replace
            pending, self._pending = self._pending, None
            if pending:
                self._publish({rel: text.encode("utf-8", errors="surrogateescape")
                               for rel, text in pending.items()})
                for rel, text in pending.items():
                    super()._replace(rel, text)
            return written
        finally:
            self._pending = None

    def _replace(self, rel: str, text: str) -> None:
        if self._pending is not None:
            self._pending[rel] = text
        else:
            super()._replace(rel, text)
