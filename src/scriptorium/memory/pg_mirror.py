"""A PostgreSQL workspace's mirror: the private directory the writers and readers work in,
pulled from the database by generation (see :mod:`.pg_workspace`).

What a pull fetches follows the work. Every file the mirror holds is pulled again when it
moves. Inside a write step no archive file of another session is pulled (neither when the
mirror is opened), and, in a worker whose writer reaches topics only through the catalog
(``lazy_topics``: :mod:`.work`), no topic file the mirror does not hold, nor its summary:
the catalog holds only the topics the mirror holds, and asks the database (the keys stored
with each summary) which of the others concern a job. Those files are noted as remote and
fetched when something needs them (:meth:`MirrorOps._pull`: the archive asks before each
load, the catalog when a topic it asked about is remote), all at once before a walk of
the whole tree
(:meth:`MirrorOps.fetch_all`: status, verify, the revision's files, a home copy) and by any
other pull outside a write step. Opening a mirror fetches no topic file nor summary either
(:meth:`MirrorOps.refresh` with ``opening``): a worker started to replace a killed one pays
for its batches, not for memory, and a write step whose writer may read any file pulls the
topics the open left. So a job's cost follows its own batch, not how much the other workers
wrote. The archive's collision check asks the index of every path the
database holds (:class:`~.pg_parts.PathIndex`), kept from the same rows, so a file the
mirror never fetched still counts. Mixed into :class:`~.pg_workspace.PgWorkspace`, whose
state it reads and writes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

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
        fetched_topics: int
        fetched_summaries: int
        lazy_topics: bool
        _topics_remote: bool

        def lock(self, timeout: float | None = 1.0) -> Any: ...

    def refresh(self, *, full: bool = False, counters: bool | None = None,
                lazy: bool | None = None, opening: bool = False) -> None:
        """Pull every row written since the mirror's generation (``full``: everything) and
        write or delete the mirror files that differ. One repeatable-read snapshot, so the
        mirror lands on exactly one generation. Inside a write step the archive files are
        not pulled, only noted (:meth:`_fetch` pulls the few a job reads), nor (with
        ``lazy_topics``) the topic files this mirror does not hold: they are noted as
        remote, and the catalog asks the database which of them concern a job
        (:meth:`topics_keyed`); and the counters file (with the whole block order,
        which grows with memory) is not assembled unless ``counters`` says so: nothing in
        a step reads it (:meth:`load_runtime`). ``lazy`` leaves the archive files remote
        outside a step too; ``opening`` (a mirror just opened) leaves every topic file
        with stored keys remote as well, and fetches no summary: its first reader pulls
        them, its first write step pulls them unless its worker's ``lazy_topics`` says it
        asks the database instead, so a worker's open does not grow with memory."""
        if full:
            self._generation, self._have, self._remote = 0, {}, {}
            self._runtime_at = self._counters_seen = None
        in_step = not counters if counters is not None else getattr(self._local, "step", False)
        if lazy is None:
            lazy = bool(getattr(self._local, "step", False))
        leave = opening or (lazy and self.lazy_topics)  # topic files left in the database
        owed = bool(self._remote) if not lazy else (not leave and self._topics_remote)
        runtime: list[bytes | None] = []  # the assembled counters file, when it changed
        marker: Any = self._counters_seen
        repull = set(self._repull)
        with self.pg.connection() as conn:
            if not repull and not owed and (
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
                if generation == self._generation and not repull and not owed and (
                        in_step or self._runtime_at == generation):
                    return
                rows = conn.execute("SELECT path, version, content IS NULL FROM memory_files "
                                    "WHERE version > %s", (self._generation,)).fetchall()
                if self._generation == 0:
                    self._paths.clear()
                wanted, left = self._note(rows, lazy, leave)
                wanted += sorted(repull - set(wanted))
                contents = self._rows(conn, wanted, left)
                if not in_step and self._runtime_at != generation:
                    marker = self._order.marker(conn)
                    if marker != self._counters_seen:
                        runtime.append(self._order.file(conn))
        self._repull -= repull
        self._land(contents)
        with self._changed_guard:
            for path in repull - {row[0] for row in contents}:
                if path.startswith("topics/"):
                    self._changed[path] = None  # gone from the database too
        if runtime:
            self._write_mirror(RUNTIME_FILE, runtime[0])
        if not in_step:
            self._runtime_at, self._counters_seen = generation, marker
        self._generation = generation

    def _note(self, rows: list[tuple[str, int, bool]], lazy: bool,
              leave: bool) -> tuple[list[str], list[str]]:
        """Take the (path, version, deleted) rows a refresh found into the path index.
        Returns the paths whose content to pull now (every file the mirror holds in
        another version) and, with ``leave``, the topic files the mirror does not hold,
        to leave in the database (see :meth:`_rows`). With ``lazy`` the archive files are
        noted as remote (a stale copy dropped) and pulled when read; outside a step every
        remote file is pulled, and in a step that does not ``leave`` topics every remote
        topic file (one an open left)."""
        wanted: list[str] = []
        left: list[str] = []
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
            if leave and not deleted and path.startswith("topics/") \
                    and path not in self._have:
                left.append(path)
                continue
            wanted.append(path)
        if not lazy or (not leave and self._topics_remote):
            listed = set(wanted)
            wanted += [path for path in self._remote if path not in listed
                       and (not lazy or path.startswith("topics/"))]
            self._topics_remote = False  # (:meth:`_land` says so again if one is left)
        return wanted, left

    @staticmethod
    def _rows(conn: Any, wanted: list[str],
              lazy: Sequence[str] = ()) -> list[tuple[Any, ...]]:
        """(path, content, deleted, version, stored summary, its normal flag) of ``wanted``
        and of the ``lazy`` topic paths, those without content or summary when their
        version has a stored summary with its keys (else whole: a file no key lookup would
        find must be held). The paths the database lacks have no row."""
        if not wanted and not lazy:
            return []
        whole = "f.path = ANY(%(wanted)s) OR s.keys IS NULL"
        rows: list[tuple[Any, ...]] = conn.execute(
            f"SELECT f.path, CASE WHEN {whole} THEN f.content END, f.content IS NULL, "
            f"f.version, CASE WHEN {whole} THEN s.summary END, s.normal FROM memory_files f "
            "LEFT JOIN memory_topic_summaries s ON s.path = f.path AND s.version = f.version "
            "WHERE f.path = ANY(%(all)s)",
            {"wanted": list(wanted), "all": [*wanted, *lazy]}).fetchall()
        return rows

    def _land(self, rows: list[tuple[Any, ...]]) -> None:
        """Write the rows of :meth:`_rows` into the mirror: a file with its content is
        written (or deleted) and held, its stored summary handed to the catalog; a topic
        that came without is noted as remote (the catalog asks the database about it:
        :meth:`topics_keyed`, and :meth:`fetch_topics` brings it when it concerns a job)."""
        for path, content, deleted, version, summary, normal in rows:
            topic = path.startswith("topics/")
            if content is None and not deleted:  # left in the database (lazy topics)
                self._have.pop(path, None)
                self._remote[path] = version
                self._topics_remote = True
                continue
            if path != RUNTIME_FILE:
                self._write_mirror(path, None if deleted else bytes(content))
                if not deleted:
                    self.fetched_archive += path.startswith("sources/")
                    self.fetched_topics += topic
                    self.fetched_summaries += summary is not None
            self._have[path] = version
            self._remote.pop(path, None)
            if topic:
                with self._changed_guard:
                    self._changed[path] = summary_of(path, summary, bool(normal)) \
                        if summary is not None and not deleted else None

    def _pull(self, paths: Iterable[str]) -> None:
        """Fetch ``paths`` whole (content and stored summary) into the mirror, whatever it
        holds of them: the one archive file a read in a write step needs (:meth:`_fetch`),
        every remote file before a walk of the whole archive (:meth:`fetch_all`), the
        topic files a job turns out to read (:meth:`fetch_topics`). A path the database
        no longer holds leaves the mirror too. A topic pulled is announced to the catalog
        again, so a stage synced while it was remote copies it now."""
        wanted = sorted(set(paths))
        if not wanted:
            return
        with self.pg.connection() as conn:
            rows = self._rows(conn, wanted)
        self._land(rows)
        for path in set(wanted) - {row[0] for row in rows}:
            self._remote.pop(path, None)
            self._have.pop(path, None)
            with contextlib.suppress(OSError, CorruptFile):
                self._write_mirror(path, None)
            if path.startswith("topics/"):
                with self._changed_guard:
                    self._changed[path] = None

    def _fetch(self, rel: str) -> None:
        """Pull ``rel`` if the database holds a version the mirror does not (see
        :meth:`refresh`)."""
        if rel in self._remote:
            self._pull([rel])

    def fetch_all(self) -> None:
        """Pull every remote file (a reader about to walk the whole archive or tree)."""
        while self._remote:
            self._pull(list(self._remote))

    def topics_keyed(self, keys: Iterable[str]) -> list[str]:
        """The topic files whose stored keys (:func:`~.pg_catalog.topic_keys`) include one
        of ``keys`` and that this mirror does not hold: what a catalog that knows only
        the held topics must fetch to answer for the whole tree. One query of the keys
        index (migration ``work`` step 4), whatever the number of topics; none
        unless the mirror leaves topics in the database (``lazy_topics``, set before a
        worker's first step)."""
        if not self.lazy_topics:
            return []
        with self.pg.connection() as conn:
            rows = conn.execute("SELECT memory_topics_keyed(%s::text[])",
                                (sorted(set(keys)),)).fetchall()
        return sorted(path for (path,) in rows if path not in self._have)

    def fetch_topics(self, paths: Iterable[str]) -> list[str]:
        """Pull those of the topic files ``paths`` that are remote, under the workspace
        lock (it orders the threads touching the mirror); returns them."""
        with self.lock():
            remote = sorted(p for p in paths if p in self._remote)
            self._pull(remote)
        return remote

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
