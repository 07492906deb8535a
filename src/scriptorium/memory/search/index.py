"""The derived search index: SQLite FTS5 (porter + unicode61) in the workspace runtime dir.

The index is never the source of truth. It lives in ``.scriptorium/search.sqlite`` (excluded
from the workspace revision and from git), it is brought up to date inside every installed
transaction (:func:`~scriptorium.memory.search.attach`). Before a query it reads the
workspace's install counter (0 before the first install): when no install happened since it
last looked, it trusts what it holds, without a ``stat`` per topic file; otherwise, and at
least every ``FULL_CHECK_NS``, it compares a fingerprint of each topic file (mtime, ctime,
size, inode) with what it indexed, so a topic hand-edited outside any transaction is re-read
(within that interval). Those fingerprints are rows of the index file, read when needed: a
process keeps nothing per topic file. When that check falls due during a write in a process
that queries, the write's install hook does it, so the query after a write costs what a warm
one does.
Deleting the file loses nothing: the next query rebuilds it from the topics (and the archive,
when sources are searched).

A build (or any re-index) is one write transaction: documents are inserted in bulk, the
archive file a footnote points into is parsed once and only what claims need of each turn is
kept. The file, its schema and pragmas are ``indexfile.py``; how a document is stored (a
small row; its file's path and its headings shared) is ``rows.py``; when FTS5's segments are
merged and the pages merges free given back is ``segments.py``.
Queries map the file (``mmap_size``) and rank the best raw BM25 matches (see ``query.py``).

File timestamps have coarse granularity (a kernel tick), so a file rewritten in place within
one tick at the same size keeps its fingerprint. As git does for its index ("racy clean"), a
file whose mtime is within a few seconds of when we indexed it is also checked by content hash
until it is old enough for its fingerprint to be trusted.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from ...errors import ConcurrentUpdate, ReasonCode
from ...fsutil import real_path_of
from ...heap import gc_paused
from ...sqlitefile import remove_files
from ..fingerprints import Fingerprint, fingerprint, is_racy, sha256
from ..walk import lstat_rel, markdown_files, read_rel, sources_signature
from ..sources import SourceArchive
from ..runtime_state import read_generation
from ..topics import TopicDoc
from .documents import TOP, Resolve, file_documents, kind_of, logical_path
from . import segments
from .indexfile import INDEX_FILE, SCHEMA_VERSION, map_for_queries, open_index, settle
from .rows import KINDS, Rows, replacer_rows
from .resolve import Resolver

log = logging.getLogger(__name__)

# A topics-only query trusts the install counter (``<runtime>/generation``) and walks the
# topic files (a stat each) only when it moved or when the last walk is older than this: a
# hand edit outside any transaction is seen within this long.
FULL_CHECK_NS = 2_000_000_000
# An update re-indexing at least this many files (a build: all of them) pauses the cyclic
# GC: its documents are many objects and no cycles (heap.gc_paused).
BULK_FILES = 64

__all__ = ["INDEX_FILE", "SCHEMA_VERSION", "SearchIndex", "SearchIndexUnavailable"]


def _resolving(known: Mapping[str, str], resolve: Resolve) -> Resolve:
    """``resolve``, answering first from ``known`` (target -> source id)."""
    def answer(path: str, target: str) -> str | None:
        found = known.get(target)
        return found if found is not None else resolve(path, target)
    return answer


class SearchIndexUnavailable(ConcurrentUpdate):
    """The index cannot be opened or written (a full disk, a path that is not a file): worth
    retrying later, like a busy workspace (exit 5)."""

    code = ReasonCode.SEARCH_INDEX_UNAVAILABLE


@dataclass(frozen=True)
class FileRow:
    kind: str
    fingerprint: Fingerprint
    sha: str
    checked_ns: int
    unresolved: int
    id: int = 0  # the row's id in ``files`` (its documents are listed under it)

    def racy(self) -> bool:
        return is_racy(self.fingerprint, self.checked_ns)


# A file's row as FileRow reads it. The rows are asked of the file when needed, not kept in
# the process: a process that writes or queries memory would hold one per topic (0.66 kB).
_ROW = "kind, mtime_ns, ctime_ns, size, ino, sha, checked_ns, unresolved, id"


def _file_row(got: tuple[Any, ...]) -> FileRow:
    return FileRow(got[0], (got[1], got[2], got[3], got[4]), got[5], got[6], got[7], got[8])


def _row(conn: sqlite3.Connection, rel: str) -> FileRow | None:
    got = conn.execute(f"SELECT {_ROW} FROM files WHERE path=?", (rel,)).fetchone()
    return None if got is None else _file_row(got)


def _generation(runtime_dir: Path) -> int:
    """The install counter; 0 before the first install (topics that came without one, copied
    or hand-written, are seen by the periodic full check like any hand edit)."""
    return read_generation(runtime_dir) or 0


class SearchIndex:
    """The FTS5 index of one workspace (see the module docstring).

    ``root`` is the workspace root (holding ``topics/`` and ``sources/``); ``runtime_dir`` is
    where the index file lives; ``sources`` resolves the footnote targets of claims to source
    ids. One instance may be shared by threads; processes share the file through SQLite's own
    locking (WAL mode).
    """

    def __init__(self, root: Path | str, runtime_dir: Path | str | None = None,
                 sources: SourceArchive | None = None):
        self.root = Path(root)
        self.runtime_dir = Path(runtime_dir) if runtime_dir is not None \
            else self.root / ".scriptorium"
        self.path = self.runtime_dir / INDEX_FILE
        self.sources = sources if sources is not None else SourceArchive(self.root)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._conn_id: tuple[int, int] | None = None
        self._mapped = False  # the connection maps the file (off after settle, until a query)
        self._sources_seen: tuple[tuple[str, int], ...] | None = None
        self._generation: int | None = None   # the install counter our last walk saw
        self._walked_ns = 0                   # when topics were last checked file by file
        self.walks = 0                        # full walks so far (tests count them)

    # -- the workspace's shared instance --------------------------------------------------

    _instances: "OrderedDict[tuple[str, str], SearchIndex]" = OrderedDict()
    _instances_lock = threading.Lock()
    _MAX_OPEN = 16  # least recently used indexes beyond this are closed (file handles)

    @classmethod
    def of(cls, workspace: Any) -> "SearchIndex":
        """The index of ``workspace``, shared by every workspace object of the same root so
        its caches are reused."""
        with cls._instances_lock:
            key = (real_path_of(workspace, "root"), real_path_of(workspace, "runtime_dir"))
            index = cls._instances.get(key)
            if index is None:
                index = cls(workspace.root, workspace.runtime_dir, workspace.sources)
                cls._instances[key] = index
            cls._instances.move_to_end(key)
            while len(cls._instances) > cls._MAX_OPEN:
                _, old = cls._instances.popitem(last=False)
                old.close()
            return index

    # -- connection -----------------------------------------------------------------------

    def _file_id(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def connection(self) -> sqlite3.Connection:
        """An open connection to the current index file, created (or recreated after it was
        deleted, replaced or found unreadable) as needed."""
        with self._lock:
            current = self._file_id()
            if self._conn is not None and current == self._conn_id:
                return self._conn
            self.close()
            try:
                conn = open_index(self.path)
            except sqlite3.DatabaseError as exc:  # not a database, or damaged: derived, so
                log.warning("search index %s unreadable (%s); rebuilding", self.path, exc)
                remove_files(self.path)
                conn = open_index(self.path)
            self._conn, self._conn_id, self._mapped = conn, self._file_id(), True
            self._generation = None  # a new file: the next query walks the topics
            return conn

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                except sqlite3.Error:  # pragma: no cover - closing a broken handle
                    pass
            self._conn, self._conn_id = None, None
            self._generation = None

    def settle(self) -> None:
        """Let the open connection give back the pages it cached and mapped, its map off
        until the next query (:func:`~.indexfile.settle`); between the sessions of a long
        write."""
        with self._lock:
            if self._conn is not None:
                settle(self._conn)
                self._mapped = False

    def discard(self) -> None:
        """Throw the index away (it is derived); the next query rebuilds it."""
        with self._lock:
            self.close()
            remove_files(self.path)

    # -- what is on disk --------------------------------------------------------------------

    def _changed(self, conn: sqlite3.Connection,
                 kinds: Iterable[str]) -> tuple[list[str], list[str], list[str]]:
        """(files to re-read, files gone, racy files whose content still matches): the walk
        compares each file with its row, all read for it and let go after."""
        kinds = tuple(kinds)
        known = {got[0]: _file_row(got[1:]) for got in conn.execute(
            f"SELECT path, {_ROW} FROM files WHERE kind IN ({','.join('?' * len(kinds))})",
            kinds)}
        disk: dict[str, os.stat_result] = {}
        for kind in kinds:
            disk.update(markdown_files(self.root, TOP[kind]))
        todo: list[str] = []
        settled: list[str] = []
        now = time.time_ns()
        for rel, st in disk.items():
            row = known.get(rel)
            if row is None or row.fingerprint != fingerprint(st):
                todo.append(rel)
            elif row.racy():
                try:
                    data = read_rel(self.root, rel)
                except OSError:
                    todo.append(rel)
                    continue
                if sha256(data) != row.sha:
                    todo.append(rel)
                elif not replace(row, checked_ns=now).racy():
                    settled.append(rel)  # old enough now: its fingerprint can be trusted
        gone = [rel for rel in known if rel not in disk]
        return sorted(todo), sorted(gone), settled

    # -- keeping it current ---------------------------------------------------------------

    def refresh(self, kinds: Iterable[str] = ("topic",), *, full: bool = True) -> int:
        """Re-read every file of ``kinds`` whose fingerprint changed (and drop vanished ones):
        one ``stat`` per file. With ``full=False`` (what a query does) a topics-only refresh
        is skipped when the install counter has not moved and the last walk is recent.
        Returns files re-indexed."""
        kinds = tuple(kinds)
        with self._lock:
            conn = self.connection()
            generation = _generation(self.runtime_dir)
            now = time.time_ns()
            if not full and kinds == ("topic",) \
                    and generation == self._generation and now - self._walked_ns < FULL_CHECK_NS:
                return 0  # no install since we looked, and our last walk is recent
            self._mark_indexed(conn, kinds)
            todo, gone, settled = self._changed(conn, kinds)
            self.walks += 1
            done = self._apply(conn, todo, gone, settled) if (todo or gone or settled) else 0
            self._generation, self._walked_ns = generation, now
            return done

    def update(self, paths: Iterable[str],
               parsed: Mapping[str, tuple[str, TopicDoc, bytes]] | None = None,
               refs: Callable[[str], Mapping[str, str]] | None = None) -> int:
        """Re-index ``paths`` (workspace-relative, as a transaction reports its changed files)
        and every topic whose citations did not all resolve (its evidence may have been
        archived since). Paths outside ``topics/``/``sources/`` are ignored. In a process
        that queries this index, the periodic full check is done here when it falls due.
        ``parsed``: path -> (sha-256 of the bytes, their parse, the bytes), from the
        transaction that installed them: a file still holding those bytes is neither hashed
        nor parsed again. ``refs``: topic path -> what its footnote targets resolve to, as the
        transaction's catalog knows it (``TopicCatalog.resolutions``): those of a file given
        in ``parsed`` are not asked of the archive again."""
        with self._lock:
            conn = self.connection()
            wanted = {p for p in (str(p).replace(os.sep, "/") for p in paths) if kind_of(p)}
            signature = sources_signature(self.root)
            if signature != self._sources_seen:  # something was archived since: look again
                wanted |= {got[0] for got in
                           conn.execute("SELECT path FROM files WHERE unresolved")}
            indexed = self._indexed_kinds(conn) | {"topic"}  # sources: only once asked for
            wanted = {p for p in wanted if kind_of(p) in indexed}
            todo, gone = [], []
            for rel in sorted(wanted):
                try:
                    st = lstat_rel(self.root, rel)
                    present = stat.S_ISREG(st.st_mode)
                except OSError:
                    present = False
                if present:
                    todo.append(rel)
                elif _row(conn, rel) is not None:
                    gone.append(rel)
            done = self._apply(conn, todo, gone, [], force=True, parsed=parsed, refs=refs) \
                if todo or gone else 0
            self._sources_seen = signature
            generation = _generation(self.runtime_dir)
            if self._generation is not None and generation == self._generation + 1:
                self._generation = generation  # the one install since we looked: this one
                if time.time_ns() - self._walked_ns >= FULL_CHECK_NS:
                    # The periodic check for hand edits is due: a write (which already costs
                    # far more than a walk) pays it, not the query that follows it.
                    done += self.refresh(("topic",))
            return done

    def rebuild(self, include_sources: bool | None = None) -> int:
        """Drop the index and build it again from the files. Returns the documents indexed.
        ``include_sources`` None: index sources only if they were indexed before."""
        with self._lock:
            if include_sources is None:
                include_sources = "source" in self._indexed_kinds(self.connection())
            self.discard()
            kinds = ("topic", "source") if include_sources else ("topic",)
            self.refresh(kinds)
            return self.count()

    def is_stale(self, include_sources: bool = False) -> bool:
        """True when a query would have to re-read some file first (or there is no index)."""
        kinds = ("topic", "source") if include_sources else ("topic",)
        with self._lock:
            if not self.path.exists():
                return True
            conn = self.connection()
            if not (set(kinds) - {"topic"}) <= self._indexed_kinds(conn):
                return True  # sources never indexed (topics: the walk below decides)
            todo, gone, _ = self._changed(conn, kinds)
            return bool(todo or gone)

    def count(self, kind: str | None = None) -> int:
        conn = self.connection()
        if kind is None:
            return conn.execute("SELECT count(*) FROM doc_rows").fetchone()[0]
        return conn.execute("SELECT count(*) FROM doc_rows WHERE kind=?",
                            (KINDS.index(kind),)).fetchone()[0]

    def _indexed_kinds(self, conn: sqlite3.Connection) -> set[str]:
        row = conn.execute("SELECT value FROM meta WHERE key='kinds'").fetchone()
        return set(json.loads(row[0])) if row else set()

    def _mark_indexed(self, conn: sqlite3.Connection, kinds: tuple[str, ...]) -> None:
        have = self._indexed_kinds(conn)
        if set(kinds) <= have:
            return
        conn.execute("INSERT OR REPLACE INTO meta VALUES ('kinds', ?)",
                     (json.dumps(sorted(have | set(kinds))),))

    def _apply(self, conn: sqlite3.Connection, todo: list[str], gone: list[str],
               settled: list[str], *, force: bool = False,
               parsed: Mapping[str, tuple[str, TopicDoc, bytes]] | None = None,
               refs: Callable[[str], Mapping[str, str]] | None = None) -> int:
        """Re-index ``todo``, forget ``gone``, and trust ``settled`` fingerprints, in one
        write transaction (another process doing the same waits, then finds little to do).
        A file a transaction installed (``parsed``, ``refs``: see :meth:`update`) keeps what
        its rows say of the turns its unchanged claims cite (documents.Known)."""
        reindexed = 0
        resolver = Resolver(self.sources)
        conn.execute("BEGIN IMMEDIATE")
        try:
            # each file's row is read inside the transaction: another process may have
            # indexed some of these files already
            rows = Rows(conn)
            building = rows.first_id == 1
            if building:
                segments.pause_merges(conn)
            now = time.time_ns()
            for rel in gone:
                self._forget(rows, rel)
            for rel in settled:
                conn.execute("UPDATE files SET checked_ns=? WHERE path=?", (now, rel))
            with gc_paused(bulk=building or len(todo) >= BULK_FILES):
                for rel in todo:
                    try:
                        st = lstat_rel(self.root, rel)
                        data = read_rel(self.root, rel)
                    except OSError:
                        self._forget(rows, rel)
                        continue
                    given = (parsed or {}).get(rel)
                    if given is not None and given[2] != data:
                        given = None  # the file changed since that install: hash and parse it
                    sha = given[0] if given is not None else sha256(data)
                    row = _row(conn, rel)
                    fp = fingerprint(st)
                    if row is not None and row.sha == sha and not (force and row.unresolved):
                        conn.execute("UPDATE files SET mtime_ns=?, ctime_ns=?, size=?, ino=?, "
                                     "checked_ns=? WHERE path=?", (*fp, now, rel))
                        continue
                    file = row.id if row is not None else 0
                    old = rows.old(file) if row is not None else {}
                    known, resolve = None, resolver.resolve
                    if given is not None and old and refs is not None and kind_of(rel) == "topic":
                        known = Rows.speakers_by_sources(old).get
                        resolve = _resolving(refs(rel), resolver.resolve)
                    docs, unresolved = file_documents(
                        rel, data, resolve, resolver.trusted, resolver.speakers,
                        given[1] if given is not None else None, known)
                    values = (kind_of(rel), *fp, sha, now, unresolved)
                    if row is None:
                        logical = logical_path(rel)
                        file = int(conn.execute(
                            "INSERT INTO files(path, legacy, kind, mtime_ns, ctime_ns, size, ino, "
                            "sha, checked_ns, unresolved) VALUES (?,?,?,?,?,?,?,?,?,?)",
                            (rel, logical if logical != rel else None, *values)).lastrowid or 0)
                    else:
                        conn.execute("UPDATE files SET kind=?, mtime_ns=?, ctime_ns=?, size=?, "
                                     "ino=?, sha=?, checked_ns=?, unresolved=? WHERE path=?",
                                     (*values, rel))
                    rows.replace(file, docs, known=row is not None, old=old)
                    reindexed += 1
            held = rows.flush(hold=segments.TAIL_DOCUMENTS if building else 0)
            built = segments.finish_writes(conn, building=building,
                                           documents=rows.next_id - 1, held=held)
            conn.execute("COMMIT")
            if built:
                segments.compact(conn)
            else:
                segments.give_back(conn)
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        return reindexed

    @staticmethod
    def _forget(rows: Rows, rel: str) -> None:
        found = rows.conn.execute("SELECT id FROM files WHERE path=?", (rel,)).fetchone()
        if found is not None:
            rows.delete(rows.old(found[0]))
            rows.conn.execute("DELETE FROM files WHERE id=?", (found[0],))

    # -- reading --------------------------------------------------------------------------

    def replacer_rows(self, mark: str, doc_ids: list[int]) -> list[dict[str, Any]]:
        """The claims holding ``mark`` in the topics of ``doc_ids``, in file order: what
        :mod:`.supersession` asks of either index (see :func:`.rows.replacer_rows`)."""
        with self._lock:
            return replacer_rows(self.connection(), mark, doc_ids)

    def write_many(self, sql: str, rows: list[tuple[Any, ...]]) -> None:
        """One write transaction of ``executemany`` (the embedding vector cache)."""
        with self._lock:
            conn = self.connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(sql, rows)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def rows(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """Run a read query on the index; rows as dicts."""
        with self._lock:
            conn = self.connection()
            if not self._mapped:
                map_for_queries(conn)
                self._mapped = True
            cur = conn.execute(sql, tuple(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, values)) for values in cur.fetchall()]
