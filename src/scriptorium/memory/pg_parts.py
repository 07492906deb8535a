"""The pieces of a PostgreSQL memory workspace that stand in for a directory's files: the
workspace lock (a session advisory lock), the history (revision rows instead of git), the
blocked-branch report (a runtime row), the evidence archive (frames written to the
database before the mirror) and the blocks' creation order (a row per block, not one
growing counters row). :mod:`.pg_workspace` puts them together.

Each piece keeps the directory's contract so the write path above cannot tell them apart:
the lock is busy ⇒ ConcurrentUpdate after the timeout; the history answers ``commit_all``
and ``added_matches``; a blocked report that cannot be read is empty.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..errors import ConcurrentUpdate
from .runtime_state import parse_runtime
from .failures import BlockedBranches
from .sources import SourceArchive
from .sources.model import SourceRecord

if TYPE_CHECKING:  # pragma: no cover
    from ..postgres.connect import PgHome

# How long one try of the advisory lock waits before the next: short, since a waiting
# writer should notice a free lock soon; the caller's timeout bounds the whole wait.
LOCK_POLL_SECONDS = 0.02


def lock_key(schema: str, session_id: str | None = None) -> int:
    """An advisory-lock key: the home's memory workspace, or one session's write steps in
    it. A stable signed 64-bit number (the same in every process and host)."""
    name = f"scriptorium-memory:{schema}" + ("" if session_id is None else f":{session_id}")
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class AdvisoryLocks:
    """Session-level advisory locks on connections of their own, so PostgreSQL releases
    them when their holder dies (a killed writer never leaves memory locked).

    Two modes on one workspace key: *exclusive* (upkeep: reorganize, backfill, verify's
    repair, migration; and the workspace lock of anything that is not a write step) and
    *shared* (write steps, each also holding its session's key exclusively), so writers of
    different sessions work at once and upkeep waits for all of them. Each holder takes a
    connection of its own from a small free list (locks held on one connection would not
    exclude each other)."""

    def __init__(self, pg: "PgHome", display: str) -> None:
        self.pg = pg
        self.display = display
        self._free: list[Any] = []
        self._guard = threading.Lock()

    def acquire(self, keys: Sequence[tuple[int, bool]], timeout: float | None) -> Any:
        """Take every ``(key, shared)`` (all or none) and return the connection holding
        them; busy after ``timeout`` ⇒ ConcurrentUpdate."""
        conn = self._take()
        deadline = None if timeout is None else time.monotonic() + timeout
        # every key tried in one statement (one round trip); a partial grant is given back
        tries = ", ".join(("pg_try_advisory_lock_shared(%s)" if shared
                           else "pg_try_advisory_lock(%s)") for _, shared in keys)
        held: list[tuple[int, bool]] = []
        try:
            while True:
                got = conn.execute(f"SELECT {tries}", [key for key, _ in keys]).fetchone()
                held = [k for k, ok in zip(keys, got) if ok]
                if len(held) == len(keys):
                    return conn
                self._unlock(conn, held)
                held = []
                if deadline is not None and time.monotonic() >= deadline:
                    raise ConcurrentUpdate(f"memory workspace is busy: another writer "
                                           f"holds the lock of {self.display}")
                time.sleep(LOCK_POLL_SECONDS)
        except self.pg._psycopg.OperationalError as exc:
            conn.close()
            raise self.pg._unreachable(exc) from None
        except BaseException:
            self.release(conn, held)
            raise

    @staticmethod
    def _unlock(conn: Any, keys: Sequence[tuple[int, bool]]) -> None:
        if keys:
            conn.execute("SELECT " + ", ".join(
                ("pg_advisory_unlock_shared(%s)" if shared else "pg_advisory_unlock(%s)")
                for _, shared in reversed(keys)), [key for key, _ in reversed(keys)])

    def release(self, conn: Any, keys: Sequence[tuple[int, bool]]) -> None:
        try:
            self._unlock(conn, keys)
        except self.pg._psycopg.Error:
            conn.close()  # the locks die with the connection
            return
        with self._guard:
            self._free.append(conn)

    def _take(self) -> Any:
        with self._guard:
            while self._free:
                conn = self._free.pop()
                if not conn.closed:
                    return conn
        return self.pg.dedicated()

    def close(self) -> None:
        with self._guard:
            free, self._free = self._free, []
        for conn in free:
            conn.close()


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
    every process and host writing this home). Writers of different sessions update it at
    once, so each update reads and writes it in one transaction under a lock of its own."""

    NAME = "blocked"

    def __init__(self, pg: "PgHome") -> None:
        self.pg = pg
        self.path = Path(f"{pg.target.display}#memory_runtime/{self.NAME}")  # for messages
        self._key = lock_key(pg.target.schema, "\0blocked")
        self._local = threading.local()

    @contextmanager
    def _conn(self) -> Iterator[Any]:
        held = getattr(self._local, "conn", None)
        if held is not None:
            yield held
            return
        with self.pg.connection() as conn:
            yield conn

    @contextmanager
    def _updating(self) -> Iterator[None]:
        with self.pg.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (self._key,))
            self._local.conn = conn
            try:
                yield
            finally:
                self._local.conn = None

    def note(self, *args: Any, **kw: Any) -> None:
        with self._updating():
            super().note(*args, **kw)

    def forget(self, reason_codes: set[str]) -> list[str]:
        with self._updating():
            return super().forget(reason_codes)

    def adopt(self, data: dict[str, dict[str, dict[str, Any]]]) -> bool:
        with self._updating():
            return super().adopt(data)

    def _read(self) -> Any:
        with self._conn() as conn:
            row = conn.execute("SELECT body FROM memory_runtime WHERE name = %s",
                               (self.NAME,)).fetchone()
        return row[0] if row else None

    def _write(self, data: dict[str, dict[str, dict[str, Any]]]) -> None:
        with self._conn() as conn:
            if data:
                conn.execute("INSERT INTO memory_runtime (name, body) VALUES (%s, %s::jsonb) "
                             "ON CONFLICT (name) DO UPDATE SET body = EXCLUDED.body",
                             (self.NAME, json.dumps(data)))
            else:
                conn.execute("DELETE FROM memory_runtime WHERE name = %s", (self.NAME,))


class PgSourceArchive(SourceArchive):
    """The evidence archive of a mirror: a batch's frames go to the database first (one
    transaction for the whole batch), then into the mirror's files, so what the database
    holds is never behind what a writer in this process could cite.

    The mirror holds only the archive files this process read or wrote: a file is fetched
    when it is first read (``fetch``, before every load; ``fetch_all`` before a walk of the
    whole archive), and the case-folding collision check asks the workspace's index of
    every path the database holds (``entries``), not the mirror's directories, which lack
    the files nobody here read."""

    def __init__(self, workspace_root: Path, tmp_dir: Path | None,
                 publish: Callable[[dict[str, bytes | None]], None],
                 fetch: Callable[[str], None] = lambda rel: None,
                 entries: Callable[[str], list[str]] | None = None,
                 fetch_all: Callable[[], None] = lambda: None) -> None:
        super().__init__(workspace_root, tmp_dir=tmp_dir)
        self._publish = publish
        self._fetch = fetch
        self._fetch_all = fetch_all
        self._index = entries
        self._pending: dict[str, tuple[str, Any]] | None = None

    def _load(self, rel: str) -> Any:
        self._fetch(rel)
        return super()._load(rel)

    def _source_files(self) -> list[str]:
        self._fetch_all()  # a walk of the whole archive: every file here first
        return super()._source_files()

    def _entries(self, parent: str) -> list[str]:
        return self._index(parent) if self._index is not None else super()._entries(parent)

    def archive(self, records: list[SourceRecord]) -> list[str]:
        self._pending = {}
        try:
            written = super().archive(records)  # plans every file, collected by _replace
            pending, self._pending = self._pending, None
            if pending:
                self._publish({rel: text.encode("utf-8", errors="surrogateescape")
                               for rel, (text, _) in pending.items()})
                for rel, (text, parsed) in pending.items():
                    super()._replace(rel, text, parsed)
            return written
        finally:
            self._pending = None

    def _replace(self, rel: str, text: str, parsed: Any = None) -> None:
        if self._pending is not None:
            self._pending[rel] = (text, parsed)
        else:
            super()._replace(rel, text, parsed)


class PgBlockOrder:
    """The creation order of memory blocks in a database home (migration ``work``): one
    ``memory_block_order`` row per block an install created, ranked from a sequence in the
    install's own transaction, so concurrent installs neither rewrite nor lock one growing
    row. The runtime counters file (``runtime.json``) readers see is the counters row (what
    the last explicit save wrote, verbatim) with these ranks merged in (:meth:`file`)."""

    def __init__(self, path: str) -> None:
        self.path = path  # the counters file's row in memory_files

    @staticmethod
    def rank(conn: Any, created: Sequence[str]) -> None:
        """Rank ``created`` after every block ranked so far (a block already ranked keeps
        its place: a redo of an install creates nothing new)."""
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO memory_block_order (block_id, rank) VALUES "
                            "(%s, nextval('memory_block_rank')) ON CONFLICT DO NOTHING",
                            [(block_id,) for block_id in created])

    @staticmethod
    def saved(conn: Any, data: bytes | None) -> None:
        """An explicit save of the whole counters file (a migration, a home copy; under the
        exclusive lock, so no install ranks meanwhile): the file's own map is the order now,
        and later ranks continue after it."""
        conn.execute("DELETE FROM memory_block_order")
        order = parse_runtime(data).creation_order
        conn.execute("SELECT setval('memory_block_rank', %s, false)",
                     (max(order.values(), default=-1) + 1,))

    def marker(self, conn: Any) -> tuple[Any, ...]:
        """Moves whenever the counters file readers see changes: (newest rank, row version)."""
        return tuple(conn.execute(
            "SELECT (SELECT max(rank) FROM memory_block_order), (SELECT version FROM "
            "memory_files WHERE path = %s)", (self.path,)).fetchone())

    def file(self, conn: Any) -> bytes | None:
        """The counters file as readers see it: the saved row, plus every rank since."""
        row = conn.execute("SELECT content FROM memory_files WHERE path = %s",
                           (self.path,)).fetchone()
        saved = bytes(row[0]) if row and row[0] is not None else None
        ranked = conn.execute("SELECT block_id, rank FROM memory_block_order "
                              "ORDER BY rank").fetchall()
        if not ranked:
            return saved
        state = parse_runtime(saved)
        state.creation_order.update(dict(ranked))
        return state.dumps().encode("utf-8")


class PathIndex:
    """Every memory path the database holds, as directory listings (parent -> names): what
    the archive's collision check would list in a complete mirror, kept from the rows each
    refresh sees, so a mirror holding only what its jobs touched still refuses a path that
    collides with a file it never fetched."""

    def __init__(self) -> None:
        self._names: dict[str, set[str]] = {}

    def clear(self) -> None:
        self._names.clear()

    def add(self, rel: str) -> None:
        parts = rel.split("/")
        for depth in range(len(parts)):
            self._names.setdefault("/".join(parts[:depth]), set()).add(parts[depth])

    def remove(self, rel: str) -> None:
        parent, _, name = rel.rpartition("/")
        self._names.get(parent, set()).discard(name)

    def entries(self, parent: str) -> list[str]:
        return sorted(self._names.get(parent, ()))
