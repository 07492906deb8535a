"""The memory workspace of a PostgreSQL home.

Memory lives in tables (component ``memory`` of :mod:`scriptorium.postgres.migrations`):
every memory file (``topics/**.md``, ``sources/**``, the runtime counters) is a row of
``memory_files`` stamped with the *generation* that last wrote it; ``memory_state`` holds
the current generation (every write moves it, in the same transaction as its rows, so a
reader that sees generation *g* sees every write up to *g*); each install adds a
``memory_revisions`` row and the topic files it wrote (the history); the workspace id and
the blocked-branch report are rows too. The creation order of blocks is one row per block
(``memory_block_order``), ranked by the install that created it: no install rewrites or
locks a row that grows with memory (:class:`~.pg_parts.PgBlockOrder`).

The writers, the transaction's validation and every reader work on files, so each process
keeps a *mirror*: a private temporary directory laid out like a directory workspace, pulled
from the database by generation when it is opened and whenever the workspace lock is taken
(in a write step, the archive files of other sessions and, in a worker, the topic files
of other workers only when read: :mod:`.pg_mirror`).
The database is memory; the mirror is a cache that a crash simply throws away, so it is
written without fsync (:func:`~scriptorium.fsutil.cache_writes`). The mirror's topic catalog
learns other writers' topics from the summaries their installs stored (:mod:`.pg_catalog`),
without parsing them or walking ``topics/``.

The write order is the directory home's, with the database as the point of no return:
archive → install → mark. Inside a write step the archived frames wait in the mirror and
commit in the install's own database transaction (with the topic files, the block ranks and
the revision row, whole or not at all: one generation per batch), or as the step ends when
it installs nothing; outside a step they commit at once. Then the mark (the session store).
A crash before that transaction leaves only a redo, which archives the batch again. The
locks are session advisory locks, released by PostgreSQL when their holder dies, so a killed
writer leaves a redo, never a locked home. A write step holds the home's lock shared and its
session's lock exclusively, so writers of different sessions run at once; each install is
checked per topic file against the version its stage began from
(:meth:`PgWorkspace.publish`). Upkeep holds the home's lock exclusively.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from ..errors import CorruptFile, ReasonCode
from ..fsutil import cache_writes
from .directory import WORKSPACE_ID_RE
from .runtime_state import RuntimeState
from .failures import BlockedBranches
from .catalog import TopicSummary
from .pg_catalog import STORE_SUMMARY_SQL, PgTopicCatalog, StoredSummary
from .pg_copies import CopyOps
from .pg_mirror import MIRROR_PREFIX, RUNTIME_FILE, MirrorOps, is_memory_path, \
    remove_dead_mirrors
from .pg_parts import (AdvisoryLocks, PathIndex, PgBlockedBranches, PgBlockOrder, PgHistory,
                       PgSourceArchive, lock_key)
from .workspace import Workspace

if TYPE_CHECKING:  # pragma: no cover
    from ..postgres.connect import PgHome

__all__ = ["MIRROR_PREFIX", "RUNTIME_FILE", "PgBegin", "PgWorkspace"]


class PgBegin:
    """A transaction's start on a database home. The tree as a whole may move meanwhile
    (other sessions' installs land), so :meth:`moved` and :meth:`overwritten` never say so;
    the files an install writes are checked against ``versions`` in the install's own
    database transaction (:meth:`PgWorkspace.publish`)."""

    def __init__(self, versions: dict[str, int]) -> None:
        self.versions = versions

    def moved(self, ws: Any) -> bool:
        return False

    def overwritten(self, ws: Any, replaced: Any) -> bool:
        return False


class PgWorkspace(MirrorOps, CopyOps, Workspace):
    """A memory workspace whose files are rows of a PostgreSQL home, worked on through a
    private mirror directory (see the module docstring). One per process and home is the
    intended use; several are fine (each has its own mirror and lock connection)."""

    engine = "postgresql"

    def __init__(self, root: Path, pg: "PgHome") -> None:
        super().__init__(root)
        self.pg = pg
        self.git = PgHistory(pg)  # type: ignore[assignment]
        self._paths = PathIndex()  # every path the database holds (the collision check)
        # archive files the database holds in a version the mirror does not (path ->
        # version): fetched when first read in a write step, by any refresh outside one
        self._remote: dict[str, int] = {}
        self.fetched_archive = 0  # archive files the mirror pulled from the database (tests)
        self.fetched_topics = 0  # topic files the mirror pulled from the database (tests)
        self.fetched_summaries = 0  # stored summaries pulled with them (tests)
        self._topics_remote = False  # some topic file may be left in the database (remote)
        # a write step leaves the topic files this mirror does not hold in the database,
        # taking their stored summaries (set by a worker whose writer reaches existing
        # topics only through the catalog: :mod:`.work`); see :meth:`refresh`
        self.lazy_topics = False
        self.sources = PgSourceArchive(self.root, self.runtime_dir, self._publish_sources,
                                       fetch=self._fetch, entries=self._paths.entries,
                                       fetch_all=self.fetch_all)
        self._key = lock_key(pg.target.schema)
        self._locks = AdvisoryLocks(pg, pg.target.display)
        self._local = threading.local()
        self._generation = 0           # the generation the mirror reflects
        self._have: dict[str, int] = {}  # path -> version the mirror holds
        self.conflicts = 0  # installs refused: a topic moved under them (each one is redone)
        # seconds inside publishing transactions, which queue on the generation row: the
        # part of a write no other writer of this home can overlap (the benchmark's Amdahl)
        self.publish_seconds = 0.0
        self._repull: set[str] = set()  # mirror files dropped, pulled again whatever their version
        # topic files the refreshes wrote since the catalog last asked: path -> the stored
        # summary of that version (None: none stored, or deleted)
        self._changed: dict[str, TopicSummary | None] = {}
        self._changed_guard = threading.Lock()
        self._runtime_at: int | None = None  # the generation its counters file was checked at
        self._order = PgBlockOrder(RUNTIME_FILE)
        self._counters_seen: Any = None  # the order's marker when the mirror's file was made
        self._in_transaction: list[Callable[["PgWorkspace", dict[str, bytes | None], Any],
                                            None]] = []

    @classmethod
    def open_home(cls, pg: "PgHome") -> "PgWorkspace":
        """The workspace of the home ``pg`` is connected to, with a fresh mirror pulled
        from the database. The mirror is removed when the workspace is collected."""
        remove_dead_mirrors()
        base = Path(tempfile.mkdtemp(prefix=f"{MIRROR_PREFIX}{os.getpid()}-"))
        ws = cls(base / "memory", pg)
        weakref.finalize(ws, shutil.rmtree, str(base), True)
        weakref.finalize(ws, ws._locks.close)
        for path in (ws.root, ws.topics_dir, ws.sources_dir, ws.runtime_dir):
            path.mkdir(mode=0o700, parents=True, exist_ok=True)
        # a worker's steps never read most of the archive, nor (see ``lazy_topics``) the
        # topics other workers wrote, nor the counters file (the creation order of every
        # block): whoever needs them pulls them, not the open
        ws.refresh(lazy=True, opening=True, counters=False)
        return ws

    # -- the directory seams -----------------------------------------------------------------

    def git_needs_init(self) -> bool:
        return False

    def ensure_git(self) -> None:
        """The history is the revision rows; nothing to start."""

    def maintain_history(self) -> None:
        """Nothing to pack (see :class:`PgHistory`)."""

    def commit_history(self, message: str, changed: Sequence[str]) -> str | None:
        """The install's history is the revision row :meth:`publish` wrote in the same
        database transaction; this names it."""
        self.sources.written.clear()
        return self.git.commit_all(message)

    def blocked_branches(self) -> BlockedBranches:
        return PgBlockedBranches(self.pg)

    @property
    def location(self) -> str:
        """Where this memory lives, for messages (the password hidden)."""
        return self.pg.target.display

    # -- identity --------------------------------------------------------------------------------

    @property
    def workspace_id(self) -> str:
        """``w-`` + 8 hex, one row: the first of any number of concurrent first users wins
        (INSERT … ON CONFLICT DO NOTHING) and everyone reads the winner."""
        if self._workspace_id is None:
            with self.pg.connection() as conn:
                conn.execute("INSERT INTO memory_identity (one, workspace_id) VALUES "
                             "(true, %s) ON CONFLICT (one) DO NOTHING",
                             ("w-" + uuid.uuid4().hex[:8],))
                found = conn.execute("SELECT workspace_id FROM memory_identity").fetchone()[0]
            if not WORKSPACE_ID_RE.fullmatch(found):
                raise CorruptFile(f"{self.location}: workspace id {found!r} is not w-<8 hex>")
            self._workspace_id = found
        return self._workspace_id

    def _read_workspace_id(self) -> str | None:
        """The id if one was made (None: never written; verify must not create one)."""
        with self.pg.connection() as conn:
            row = conn.execute("SELECT workspace_id FROM memory_identity").fetchone()
        return row[0] if row and WORKSPACE_ID_RE.fullmatch(row[0]) else None

    # -- locks: threads of this process, then every process and host -------------------------

    @contextmanager
    def lock(self, timeout: float | None = 1.0) -> Iterator[None]:
        """The workspace lock: re-entrant in the thread holding it, and it pulls what others
        installed. Outside a write step the outermost holder also takes the home's lock
        exclusively (upkeep waits for every writer); inside a step (:meth:`step_lock`) the
        step's shared hold covers other processes, and this only orders the threads that
        touch the mirror. A worker's step with ``lazy_topics`` pulls once, as it starts
        (and again after an install was refused, for the files that moved): what other
        workers install meanwhile is checked at its install (each file it writes against
        the version it began from) or asked of the database by the catalog, so the step's
        later holds need not pull what other workers wrote."""
        outer = not self.locked_here
        with super().lock(timeout), cache_writes():  # the mirror is a cache: no fsync
            if not outer or getattr(self._local, "step", False):
                if outer and not (self.lazy_topics and getattr(self._local, "pulled", False)
                                  and not self._repull):
                    self.refresh()
                    self._local.pulled = True
                yield
                return
            keys = [(self._key, False)]
            conn = self._locks.acquire(keys, timeout)
            try:
                self.refresh()
                yield
            finally:
                self._locks.release(conn, keys)

    @contextmanager
    def step_lock(self, session_id: str, timeout: float | None = 1.0) -> Iterator[None]:
        """One write step: the home's lock shared (upkeep is excluded, other sessions'
        steps are not) and the session's own lock (one step per session at a time, so a
        batch is never written twice at once). What the steps could race on is checked at
        install: each topic file it writes must still be the version it began from."""
        if getattr(self._local, "step", False) or self.locked_here:
            yield  # nested in a step or in the exclusive lock: already covered
            return
        keys = [(self._key, True), (lock_key(self.pg.target.schema, session_id), False)]
        conn = self._locks.acquire(keys, timeout)
        self._local.step, self._local.pulled = True, False
        try:
            with cache_writes():  # what a step writes locally is the mirror: no fsync
                # the session's archive files as the database holds them: another process
                # may have written this session last, and the step archives on top of them
                with self.lock(timeout):  # (refreshes, ordered with this process's threads)
                    pass
                yield
        finally:
            self._local.step = self._local.pulled = False
            try:
                self._flush_unpublished()  # a step that installed nothing still archives
            finally:
                self._locks.release(conn, keys)

    def begin_state(self, catalog: Any) -> "PgBegin":
        """What a transaction began from: the version of every file the mirror holds."""
        return PgBegin(dict(self._have))

    def add_transaction_hook(self, fn: Callable[["PgWorkspace", dict[str, bytes | None], Any],
                                                None]) -> None:
        """Call ``fn(workspace, writes, conn)`` inside every write's database transaction,
        after its rows and before its commit (a derived table kept in step with memory,
        e.g. a search index: if ``fn`` raises, the write is not made). Added once."""
        if fn not in self._in_transaction:
            self._in_transaction.append(fn)

    # -- the mirror -----------------------------------------------------------------------------

    def topic_paths(self) -> list[str]:
        """Every topic file of the mirror; outside a write step the topic files the mirror
        left in the database (an open leaves them all) are pulled first, so a reader that
        lists the tree (show, the MCP server's resources) sees it whole."""
        if self._topics_remote and not self.in_write_step():
            self._pull([rel for rel in self._remote if rel.startswith("topics/")])
            self._topics_remote = False
        return super().topic_paths()

    def read_topic(self, rel: str, *, strict: bool = True) -> Any:
        """The topic file ``rel``, pulled first if the mirror left it in the database."""
        self._fetch(rel)
        return super().read_topic(rel, strict=strict)

    def revision_files(self) -> list[str]:
        """Every file of memory (the files a write step or the open left remote, and the
        counters file, which the open does not assemble, pulled first)."""
        self.refresh(counters=True)
        self.fetch_all()
        return super().revision_files()

    def revision(self) -> str:
        """The revision of memory as the database holds it now (the mirror pulled first)."""
        self.refresh(counters=True)
        return super().revision()

    def runtime_bytes(self) -> bytes | None:
        """The counters file as the database holds it now. Inside a write step: none, since
        an install reads it only to rank the blocks it creates, which :meth:`_push` does
        in the database (reading the whole order per install would grow with memory)."""
        if getattr(self._local, "step", False):
            return None
        with self.pg.connection() as conn:
            with conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                return self._order.file(conn)

    def in_write_step(self) -> bool:
        """Whether this thread is inside a write step (:meth:`step_lock`)."""
        return bool(getattr(self._local, "step", False))

    def new_catalog(self) -> PgTopicCatalog:
        """This mirror's topic catalog (see :mod:`.pg_catalog`; ``TopicCatalog.of`` asks)."""
        return PgTopicCatalog(self)

    def install_summaries(self, rows: dict[str, StoredSummary]) -> None:
        """The summaries (path -> stored form, keys and normal flag) of the topic files the
        next install of this thread writes: stored in its own database transaction
        (:meth:`_push`)."""
        self._local.summaries = rows

    def stored_summaries(self) -> set[str]:
        """The paths whose summaries this thread's last install stored with it."""
        return set(getattr(self._local, "stored", ()))

    def _push(self, writes: dict[str, bytes | None], revision: dict[str, Any] | None = None,
              base: dict[str, int] | None = None) -> int:
        """Write ``writes`` (None: deleted) as one new generation, with its revision row when
        ``revision`` is given; returns the generation. With ``base`` (path -> the version a
        transaction began from), each topic file written must still be at that version,
        else StaleTransaction (retryable) and nothing is written. The blocks an install
        creates are ranked in rows of their own (:class:`PgBlockOrder`), not by rewriting the
        counters file; a counters file written without a revision that creates blocks is an
        explicit save. The generation row is updated first, so publishing transactions queue
        there and each checks a settled state."""
        from .transaction import StaleTransaction

        # the summaries the install announced (:meth:`install_summaries`): taken whatever
        # happens next, so none outlives the install it describes
        summaries: dict[str, StoredSummary] = getattr(self._local, "summaries", {}) \
            if revision is not None else {}
        self._local.summaries, self._local.stored = {}, set()
        for rel in writes:
            if not is_memory_path(rel):
                raise CorruptFile(f"refusing to store {rel!r}: not a memory path")
        began = time.perf_counter()
        with self.pg.connection() as conn, self._timed(began):
            with conn.transaction():
                topics = sorted(rel for rel in writes if rel.startswith("topics/"))
                with conn.pipeline():  # one round trip: the versions are read once it waited
                    bumped = conn.execute("UPDATE memory_state SET generation = generation + 1"
                                          " RETURNING generation")
                    found = conn.execute("SELECT path, version FROM memory_files WHERE "
                                         "path = ANY(%s)", (topics,)) if base is not None \
                        else None
                generation: int = bumped.fetchone()[0]
                if base is not None and found is not None:
                    now = dict(found.fetchall())
                    moved = [rel for rel in topics if now.get(rel) != base.get(rel)]
                    if moved:
                        self.conflicts += 1
                        # the retry's refresh pulls them whole, held or remote
                        self._repull.update(moved)
                        raise StaleTransaction(
                            f"{moved[0]} changed while the writer was running (another "
                            "writer installed it); retry on a fresh stage",
                            code=ReasonCode.CONCURRENT_UPDATE)
                created = revision["created"] if revision is not None else []
                if RUNTIME_FILE in writes:
                    if created:  # an install's counters differ only by its ranks: rows
                        del writes[RUNTIME_FILE]
                    else:
                        self._order.saved(conn, writes[RUNTIME_FILE])
                with conn.pipeline(), conn.cursor() as cur:  # the rows: one round trip
                    if created:
                        self._order.rank(conn, created)
                    cur.executemany(
                        "INSERT INTO memory_files (path, content, version) VALUES (%s, %s, %s) "
                        "ON CONFLICT (path) DO UPDATE SET content = EXCLUDED.content, "
                        "version = EXCLUDED.version",
                        [(rel, data, generation) for rel, data in sorted(writes.items())])
                    if revision is not None:
                        cur.execute(
                            "INSERT INTO memory_revisions (rev, message, changed_files, "
                            "created_blocks, removed_blocks) VALUES (%s, %s, %s, %s, %s)",
                            (generation, revision["message"], revision["changed"],
                             revision["created"], revision["removed"]))
                        cur.executemany(
                            "INSERT INTO memory_file_history (rev, path, content) "
                            "VALUES (%s, %s, %s)",
                            [(generation, rel, data) for rel, data in sorted(writes.items())
                             if rel.startswith("topics/")])
                        if summaries:  # other workers take these instead of parsing
                            cur.executemany(STORE_SUMMARY_SQL, [
                                (rel, generation, body, keys, normal)
                                for rel, (body, keys, normal) in sorted(summaries.items())
                                if writes.get(rel) is not None])
                for hook in self._in_transaction:
                    hook(self, writes, conn)
        for rel in writes:
            self._have[rel] = generation
            self._remote.pop(rel, None)
            if writes[rel] is None:
                self._paths.remove(rel)
            else:
                self._paths.add(rel)
        self._local.stored = {rel for rel in summaries if writes.get(rel) is not None}
        if generation == self._generation + 1:
            self._generation = generation
        return generation

    @contextmanager
    def _timed(self, began: float) -> Iterator[None]:
        try:
            yield
        finally:
            self.publish_seconds += time.perf_counter() - began

    def _publish_sources(self, writes: dict[str, bytes | None]) -> None:
        """A batch's archived frames. Inside a write step they join the step's install (one
        database transaction for archive and install: one generation, one pass of the
        transaction hooks, as the issue allows a database home) or, when the step installs
        nothing, are pushed as it ends; a crash before either loses only what the redo
        archives again. Elsewhere they are pushed at once."""
        if getattr(self._local, "step", False):
            self._local.unpublished = {**getattr(self._local, "unpublished", {}), **writes}
            return
        self._push(writes)

    def _take_unpublished(self) -> dict[str, bytes | None]:
        pending: dict[str, bytes | None] = getattr(self._local, "unpublished", {})
        self._local.unpublished = {}
        return pending

    def _flush_unpublished(self) -> None:
        """Push the step's frames no install took; if that fails the mirror forgets them
        (they are re-read from the database), so nothing here is ahead of memory."""
        pending = self._take_unpublished()
        if not pending:
            return
        try:
            self._push(pending)
        except BaseException:
            self._forget_mirror(pending)
            raise

    def publish(self, writes: dict[str, bytes | None], message: str, created: list[str],
                removed: list[str], base: Any) -> str | None:
        """The install's point of no return: its files and revision in one transaction,
        refused (retryable) when a topic it writes moved since ``base``."""
        changed = sorted(rel for rel in writes if rel.startswith("topics/"))
        pending = self._take_unpublished()  # the step's archived frames commit with it
        try:
            generation = self._push({**pending, **writes},
                                    {"message": message, "changed": changed,
                                     "created": list(created), "removed": list(removed)},
                                    base=base.versions if isinstance(base, PgBegin) else None)
        except BaseException:
            self._local.unpublished = {**pending, **self._take_unpublished()}
            raise
        label = f"r{generation}"
        self.git.last_label = label  # type: ignore[attr-defined]
        return label

    # -- runtime counters -----------------------------------------------------------------------

    def save_runtime(self, state: RuntimeState) -> None:
        """The counters are a memory row like any file (migration retires cursors here)."""
        self._push({RUNTIME_FILE: state.dumps().encode("utf-8")})
        super().save_runtime(state)

    def close(self) -> None:
        """Let go of the lock connection (the pool belongs to the home)."""
        self._locks.close()

    def __repr__(self) -> str:
        return f"PgWorkspace({self.location!r}, mirror={os.fspath(self.root)!r})"
