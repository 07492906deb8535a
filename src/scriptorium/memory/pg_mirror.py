"""A PostgreSQL workspace's mirror: the private directory the writers and readers work in,
pulled from the database by generation (see :mod:`.pg_workspace`).

What a pull fetches follows the work: every topic file that moved (with its stored
summary, so the catalog need not parse it), but no archive file of another session, neither
inside a write step nor when the mirror is opened. Those are noted as remote and fetched
one at a time when something reads them (the archive asks :meth:`MirrorOps._fetch` before
each load), all at once before a walk of the whole archive (:meth:`MirrorOps._fetch_all`:
status, the revision's files, a home copy) and by any other pull outside a write step
(verify, upkeep). The archive's collision check asks the index of every path the database
holds (:class:`~.pg_parts.PathIndex`), kept from the same rows, so a file the mirror never
fetched still counts. Mixed into :class:`~.pg_workspace.PgWorkspace`, whose state it reads
and writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import CorruptFile
from ..fsutil import atomic_write_bytes, safe_join
from .catalog import TopicSummary
from .directory import RUNTIME_NAME
from .pg_catalog import summary_of

if TYPE_CHECKING:  # pragma: no cover
    from .pg_parts import PathIndex, PgBlockOrder

RUNTIME_FILE = f"{RUNTIME_NAME}/runtime.json"
MIRROR_PREFIX = "scriptorium-pg-"  # + pid + "-": the process's mirror in the temp dir


def remove_dead_mirrors() -> None:
    """Remove the mirrors of processes that died without cleaning up (a SIGKILLed writer):
    ours by name (``scriptorium-pg-<pid>-…``) and owner, whose pid no longer runs."""
    root = Path(tempfile.gettempdir())
    try:
        names = [n for n in os.listdir(root) if n.startswith(MIRROR_PREFIX)]
    except OSError:
        return
    for name in names:
        pid = name[len(MIRROR_PREFIX):].split("-", 1)[0]
        path = root / name
        try:
            if not pid.isdigit() or path.is_symlink() or path.stat().st_uid != os.getuid():
                continue
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue  # alive (someone else's) or unreadable: leave it


def is_memory_path(rel: str) -> bool:
    """The paths a database row may name (anything else is refused, never written)."""
    return rel.startswith(("topics/", "sources/")) or rel == RUNTIME_FILE


class MirrorOps:
    """The mirror side of a PostgreSQL workspace (see the module docstring)."""

    if TYPE_CHECKING:  # what the workspace it is mixed into provides
        pg: Any
        root: Path
        runtime_dir: Path
        location: str
        _local: threading.local
        _generation: int
        _have: dict[str, int]
        _remote: dict[str, int]
        _repull: set[str]
        _changed: dict[str, TopicSummary | None]
        _changed_guard: threading.Lock
        _runtime_at: int | None
        _counters_seen: Any
        _order: "PgBlockOrder"
        _paths: "PathIndex"
        fetched_archive: int

    def refresh(self, *, full: bool = False, counters: bool | None = None,
                lazy: bool | None = None) -> None:
        """Pull every row written since the mirror's generation (``full``: everything) and
        write or delete the mirror files that differ. One repeatable-read snapshot, so the
        mirror lands on exactly one generation. Inside a write step the archive files are
        not pulled, only noted (:meth:`_fetch` pulls the few a job reads), and the counters
        file (with the whole block order, which grows with memory) is not assembled unless
        ``counters`` says so: nothing in a step reads it (:meth:`load_runtime`). ``lazy``
        leaves the archive files remote outside a step too (a mirror just opened: its
        first reader pulls them, its first write step does not)."""
        if full:
            self._generation, self._have, self._remote = 0, {}, {}
            self._runtime_at = self._counters_seen = None
        in_step = not counters if counters is not None else getattr(self._local, "step", False)
        if lazy is None:
            lazy = bool(getattr(self._local, "step", False))
        runtime: list[bytes | None] = []  # the assembled counters file, when it changed
        marker: Any = self._counters_seen
        repull = set(self._repull)
        with self.pg.connection() as conn:
            if not repull and (lazy or not self._remote) and (
                    in_step or self._runtime_at == self._generation):
                conn.autocommit = True  # the common case, nothing new: one round trip
                try:
                    now = conn.execute("SELECT generation FROM memory_state").fetchone()[0]
                finally:
                    conn.autocommit = False
                if now == self._generation:
                    return
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                generation = conn.execute("SELECT generation FROM memory_state").fetchone()[0]
                if generation == self._generation and not repull and (
                        lazy or not self._remote) and (in_step or self._runtime_at == generation):
                    return
                rows = conn.execute("SELECT path, version, content IS NULL FROM memory_files "
                                    "WHERE version > %s", (self._generation,)).fetchall()
                if self._generation == 0:
                    self._paths.clear()
                wanted = self._note(rows, lazy)
                wanted += sorted(repull - set(wanted))
                # each topic with its summary of that very version, when its install stored one
                contents = conn.execute(
                    "SELECT f.path, f.content, f.version, s.summary FROM memory_files f "
                    "LEFT JOIN memory_topic_summaries s ON s.path = f.path "
                    "AND s.version = f.version WHERE f.path = ANY(%s)", (wanted,)).fetchall() \
                    if wanted else []
                if not in_step and self._runtime_at != generation:
                    marker = self._order.marker(conn)
                    if marker != self._counters_seen:
                        runtime.append(self._order.file(conn))
        self._repull -= repull
        for path, content, version, summary in contents:
            if path != RUNTIME_FILE:
                self._write_mirror(path, None if content is None else bytes(content))
                self.fetched_archive += path.startswith("sources/")
            self._have[path] = version
            self._remote.pop(path, None)
            if path.startswith("topics/"):
                with self._changed_guard:
                    self._changed[path] = summary_of(path, summary) \
                        if summary is not None and content is not None else None
        with self._changed_guard:
            for path in repull - {row[0] for row in contents}:
                if path.startswith("topics/"):
                    self._changed[path] = None  # gone from the database too
        if runtime:
            self._write_mirror(RUNTIME_FILE, runtime[0])
        if not in_step:
            self._runtime_at, self._counters_seen = generation, marker
        self._generation = generation

    def _note(self, rows: list[tuple[str, int, bool]], lazy: bool) -> list[str]:
        """Take the (path, version, deleted) rows a refresh found into the path index; the
        paths whose content to pull now: every file the mirror holds in another version,
        except (``lazy``) archive files, which are noted as remote (a stale copy dropped)
        and pulled when read. Outside a write step the remote ones are pulled too."""
        wanted = []
        for path, version, deleted in rows:
            if deleted:
                self._paths.remove(path)
            else:
                self._paths.add(path)
            if self._have.get(path) == version:
                continue
            if lazy and path.startswith("sources/"):
                if self._have.pop(path, None) is not None:
                    with contextlib.suppress(OSError, CorruptFile):
                        self._write_mirror(path, None)
                self._remote[path] = version
                continue
            wanted.append(path)
        if not lazy:
            wanted += [path for path in self._remote if path not in wanted]
        return wanted

    def _fetch_all(self) -> None:
        """Pull every remote archive file (a reader about to walk the whole archive)."""
        while self._remote:
            with self.pg.connection() as conn:
                rows = conn.execute("SELECT path, content, version FROM memory_files WHERE "
                                    "path = ANY(%s)", (sorted(self._remote),)).fetchall()
            for path, content, version in rows:
                self._write_mirror(path, None if content is None else bytes(content))
                self.fetched_archive += 1
                self._have[path] = version
            for path in {row[0] for row in rows} | set(self._remote):
                self._remote.pop(path, None)

    def _fetch(self, rel: str) -> None:
        """Pull the archive file ``rel`` if the database holds a version the mirror does
        not (see :meth:`refresh`): the one file a read in a write step needs."""
        if rel not in self._remote:
            return
        with self.pg.connection() as conn:
            row = conn.execute("SELECT content, version FROM memory_files WHERE path = %s",
                               (rel,)).fetchone()
        self._write_mirror(rel, None if row is None or row[0] is None else bytes(row[0]))
        self.fetched_archive += 1
        self._remote.pop(rel, None)
        if row is not None:
            self._have[rel] = row[1]

    def mirror_changes(self) -> dict[str, TopicSummary | None]:
        """The topic files the refreshes wrote since the last call, with their stored
        summaries (the catalog's whole view of what changed: nothing else edits a mirror)."""
        with self._changed_guard:
            changed, self._changed = self._changed, {}
        return changed

    def topic_bytes(self, rel: str) -> bytes | None:
        """The mirror's copy of the topic file ``rel`` (None: it has none)."""
        try:
            return (self.root / rel).read_bytes()
        except OSError:
            return None

    def version_of(self, rel: str) -> int | None:
        """The version of ``rel`` the mirror holds (None: not one the database gave it)."""
        return self._have.get(rel)

    def _write_mirror(self, rel: str, data: bytes | None) -> None:
        if not is_memory_path(rel):
            raise CorruptFile(f"{self.location}: memory_files names {rel!r}, which is not a "
                              "memory path (topics/, sources/ or the runtime counters)")
        target = safe_join(self.root, rel, "memory path")
        if data is None:
            target.unlink(missing_ok=True)
            return
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(target, data, durable=False, tmp_dir=self.runtime_dir)

    def _forget_mirror(self, paths: Iterable[str]) -> None:
        """Drop ``paths`` from the mirror; the next refresh pulls them again."""
        for rel in paths:
            self._have.pop(rel, None)
            self._repull.add(rel)
            with contextlib.suppress(OSError, CorruptFile):
                self._write_mirror(rel, None)
