"""What the committed topics hold, kept current instead of re-parsed: the topic catalog.

A write asks "which turns does memory already cite?", and its transaction asks which block
ids exist, where each lives, which sources each block cites and which block links point where.
Parsing every topic file to answer that made every batch cost as much as all of memory. The
catalog keeps a small summary per topic file (block ids, lines, block links, footnote targets
and the source ids they resolve to: no text), so those answers cost a dictionary lookup.

It is derived and never trusted blindly: before use it compares each file's fingerprint
(mtime, ctime, size, inode) with the one it summarised and re-reads what changed, so a hand
edit outside any transaction is seen. As git does for its index, a file modified within a
timestamp tick of when it was summarised ("racily clean") is also checked by content hash.
A transaction hands it the files it installed (:meth:`TopicCatalog.installed`), already
parsed, so the next batch re-reads nothing.

The summaries live in a SQLite file in the runtime dir (scriptorium.memory.catalog_db), not
in the process: its memory does not grow with memory's size, and each summary is written as it
is learnt, so parsing every topic is paid once per home, not once per process (a new process,
or one started after a crash, checks fingerprints instead).

It also answers, without touching the files: which topic is on a subject (by file name or
title, :meth:`TopicCatalog.named`: the embedded writer's "extend, don't duplicate"), and
which files changed since a given moment (:meth:`TopicCatalog.changed_since`: a parked stage
copies only those). One refresh is enough per hold of the write lock (``refresh(hold=…)``):
the write step asks twice (already cited? then begin) within one hold.

Footnotes whose target the archive could not resolve are resolved again when the archive's
directories change (evidence archived later), as the search index does.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Protocol

from ..fsutil import real_path_of
from .catalog_db import DB_FILE, BlockSummary, CatalogDB, FileState, IdView, TopicSummary
from .catalog_summary import (
    Resolve, archive_key, archive_rel, block_summary, key_of, name_keys, slug, summarize,
    title_of,
)
from .fingerprints import Fingerprint, fingerprint, is_racy, sha256
from .topics import TopicDoc, parse_topic_bytes
from .walk import lstat_rel, markdown_files, read_rel, sources_signature

if TYPE_CHECKING:  # pragma: no cover
    from .sources import SourceArchive


class CatalogPlace(Protocol):
    """Where a catalog lives: what it needs of the workspace directory (which imports this
    module, so it is named by what it provides, not imported)."""

    root: Path
    runtime_dir: Path
    sources: "SourceArchive"

SAVED_FILE = DB_FILE
WRITE_AFTER = 64  # summaries parsed before they are written to the catalog's file

log = logging.getLogger(__name__)

# importable from here as before (pg_catalog, tests)
__all__ = ["TopicCatalog", "CatalogPlace", "BlockSummary", "TopicSummary", "Resolve", "summarize",
           "name_keys", "slug", "title_of", "SAVED_FILE"]


class TopicCatalog:
    """The summaries of one workspace's committed topics (see the module docstring), kept in
    its runtime dir's ``topic-catalog.sqlite`` (in memory when there is no runtime dir or the
    file cannot be used). One per process and workspace through :meth:`of`; safe to use
    from several threads, and several processes share the file."""

    _instances: dict[str, "TopicCatalog"] = {}
    _instances_lock = threading.Lock()
    _open: "OrderedDict[int, TopicCatalog]" = OrderedDict()  # catalogs holding a connection
    MAX_OPEN = 8  # past this, the least recently opened catalog's file is closed

    def __init__(self, root: Path, sources: "SourceArchive", runtime_dir: Path | None = None):
        self.root = Path(root)
        self.sources = sources
        self.saved_path = Path(runtime_dir) / SAVED_FILE if runtime_dir is not None else None
        self._lock = threading.RLock()
        self._db: CatalogDB | None = None     # opened on first use
        self._pid = os.getpid()               # the process that opened it
        self._sources_seen: tuple | None = None
        self._fresh_hold: int | None = None   # the lock hold the last refresh ran in
        self.history_seq: int | None = None   # the seq this process last committed to git at
        self.parses = 0                       # files parsed so far (tests count them)
        self.scans = 0                        # walks of topics/ so far (tests count them)

    @classmethod
    def of(cls, workspace: CatalogPlace) -> "TopicCatalog":
        """The catalog of ``workspace`` in this process, shared by every workspace object
        of the same root (each object's root resolved once, not at every write)."""
        with cls._instances_lock:
            key = f"{os.getpid()}:{real_path_of(workspace, 'root')}"
            catalog = cls._instances.get(key)
            if catalog is None:
                own = getattr(workspace, "new_catalog", None)  # a database home brings its own
                catalog = cls._instances[key] = own() if own is not None else \
                    cls(workspace.root, workspace.sources, workspace.runtime_dir)
            return catalog

    @property
    def db(self) -> CatalogDB:
        """The catalog's tables, opened on first use (and again after :meth:`close`)."""
        with self._lock:
            if self._db is None:
                if self.saved_path is not None:
                    self.saved_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                self._db = CatalogDB(self.saved_path)
                self._pid = os.getpid()
                self._opened()
            return self._db

    def _opened(self) -> None:
        """Keep at most MAX_OPEN catalogs' files open per process (a process that touches
        many workspaces, like a test run, would otherwise hold a descriptor for each)."""
        if self._db is None or self._db.path is None:
            return  # in memory: closing it would lose it
        with TopicCatalog._instances_lock:
            TopicCatalog._open[id(self)] = self
            # a forked child never closes its parent's connections (they are not its own)
            victims = [c for c in list(TopicCatalog._open.values())[:-self.MAX_OPEN]
                       if c._pid == os.getpid()]
        for other in victims:
            if other._lock.acquire(blocking=False):  # busy: closed another time
                try:
                    other.close()
                finally:
                    other._lock.release()

    def close(self) -> None:
        """Close the catalog's file (it is opened again when next used)."""
        with self._lock:
            with TopicCatalog._instances_lock:
                TopicCatalog._open.pop(id(self), None)
            if self._db is not None and self._db.path is not None:
                self._db.close()
                self._db = None

    def _in_memory(self, exc: Exception) -> None:
        """The catalog's file failed under a write (disk full, locked for a minute): go on
        with a catalog in memory, rebuilt by the next refresh, whose change-log positions
        never match the file's (so a stage synced to the file compares every file)."""
        log.warning("topic catalog %s failed (%s); keeping it in memory", self.saved_path, exc)
        old = self._db
        seq = 0
        if old is not None:
            try:
                seq = old.seq
            except sqlite3.Error:
                seq = 1 << 40
            old.close()
        self._db = CatalogDB(None, first_seq=seq + 1)
        self._fresh_hold = None
        self._sources_seen = None

    # -- keeping it current -------------------------------------------------------------

    def refresh(self, hold: int | None = None) -> "TopicCatalog":
        """Re-read every topic file whose fingerprint (or, when racy, content) changed: one
        ``lstat`` per topic file, so a hand edit between two writes is seen. ``hold``: the
        caller's hold of the write lock (``WorkspaceDir.lock_hold``); a second refresh in
        the same hold is skipped (no writer can have installed in between, and a hand edit
        made in that moment is ordered after this write, as :mod:`.moved` does)."""
        with self._lock:
            if hold is not None and hold == self._fresh_hold:
                return self
            try:
                self._refresh()
            except sqlite3.Error as exc:
                self._in_memory(exc)
                self._refresh()
            self._fresh_hold = hold
            return self

    def _refresh(self) -> None:
        now = time.time_ns()
        self.scans += 1
        db = self.db
        disk = markdown_files(self.root, "topics")
        known = db.file_states()
        learnt: list[TopicSummary | str] = []  # summaries to put, paths to drop
        for rel in known.keys() - disk.keys():
            learnt.append(rel)
        touched: list[tuple[str, Fingerprint]] = []
        for rel, st in disk.items():
            old = known.get(rel)
            fp = fingerprint(st)
            if old is not None and old.fp == fp and not is_racy(fp, old.checked_ns):
                continue
            try:
                data = read_rel(self.root, rel)
            except OSError:
                learnt.append(rel)
                continue
            sha = sha256(data)
            if old is not None and old.sha == sha:
                if fp != old.fp or not is_racy(fp, now):  # else the next look hashes again
                    touched.append((rel, fp))
                continue
            learnt.append(summarize(parse_topic_bytes(data, rel, strict=False), self.sources,
                                    sha=sha, fp=fp, checked_ns=now, title=title_of(data)))
            self.parses += 1
            if len(learnt) >= WRITE_AFTER:  # written as learnt: a crash keeps what was parsed
                self._write(learnt, touched, now)
        self._write(learnt, touched, now)
        self._resolve_again()

    def _write(self, learnt: list["TopicSummary | str"],
               touched: list[tuple[str, Fingerprint]], now: int) -> None:
        if not learnt and not touched:
            return
        db = self.db
        keys: dict[str, str | None] = {}  # archive file -> its key now (see resolutions)
        for item in learnt:
            if not isinstance(item, str):
                seen: set[tuple[str, str]] = set()  # footnotes link a few files: each once
                for block in item.blocks:
                    for target in block.targets:
                        part = target.partition("#")[:2]
                        if part in seen:
                            continue
                        seen.add(part)
                        link = archive_rel(item.path, target)
                        if link is not None and link not in keys:
                            keys[link] = archive_key(self.root, link)
        with db.transaction():
            for item in learnt:
                if isinstance(item, str):
                    db.drop(item)
                else:
                    db.put(item, name_keys(item), key_of(keys, item.path))
            for rel, fp in touched:
                db.touch(rel, fp, now)
        learnt.clear()
        touched.clear()

    def _put(self, summary: TopicSummary) -> None:
        """Record one summary learnt elsewhere (a subclass's source of summaries)."""
        self._write([summary], [], 0)

    def _drop(self, rel: str) -> None:
        self._write([rel], [], 0)

    def forget_recent(self) -> None:
        """Let go of the summaries kept since the last call (a commit asks for the few it
        touches many times; between writes the process keeps none)."""
        with self._lock:
            self.db.forget_recent()

    def forget_hold(self) -> None:
        """The next refresh walks topics/ whatever hold it runs in (a commit found memory
        moved under it: its retry must see what moved)."""
        self._fresh_hold = None

    def _resolve_again(self) -> None:
        """Footnotes that did not resolve may resolve now that more evidence is archived."""
        signature = sources_signature(self.root)
        if signature == self._sources_seen:
            return
        self._sources_seen = signature
        for (rel,) in self.db.rows("SELECT path FROM files WHERE unresolved ORDER BY path"):
            summary = self.db.summary(rel)
            if summary is None:
                continue
            blocks = [block_summary(b.id, b.ids, b.line, b.links, b.targets,
                             self.sources.resolve_target, rel) if b.unresolved else b
                      for b in summary.blocks]
            self._write([replace(summary, blocks=tuple(blocks))], [], 0)

    def installed(self, docs: dict[str, TopicDoc | None], data: dict[str, bytes | None],
                  shas: Mapping[str, str], resolve: Resolve | None = None) -> None:
        """Learn what a transaction just installed (``None``: the file was deleted), without
        reading it back (``shas``: the sha-256 of each installed body; ``resolve``: the
        transaction's own footnote resolutions). Caller holds the workspace write lock."""
        with self._lock:
            now = time.time_ns()
            learnt: list[TopicSummary | str] = []
            for rel, doc in docs.items():
                body = data.get(rel)
                if doc is None or body is None:
                    learnt.append(rel)
                    continue
                try:
                    st = lstat_rel(self.root, rel)
                except OSError:
                    learnt.append(rel)
                    continue
                summary = self._installed_summary(rel, doc, body, shas[rel], resolve)
                learnt.append(replace(summary, fp=fingerprint(st), checked_ns=now, normal=True))
            try:
                self._write(learnt, [], now)
            except sqlite3.Error as exc:  # what it failed to learn, the next refresh reads
                self._in_memory(exc)

    # -- the change log -----------------------------------------------------------------------

    @property
    def seq(self) -> int:
        """Where the catalog's change log stands (see :meth:`changed_since`)."""
        with self._lock:
            return self.db.seq

    def changed_since(self, seq: int) -> set[str] | None:
        """Paths whose summary changed (added, replaced, dropped) since :attr:`seq` was
        ``seq``; None when that is too long ago to tell (the caller compares everything)."""
        with self._lock:
            return self.db.changed_since(seq)

    # -- answers --------------------------------------------------------------------------

    def _installed_summary(self, rel: str, doc: TopicDoc, body: bytes, sha: str,
                           resolve: Resolve | None) -> TopicSummary:
        """The summary of an installed topic, before its file's fingerprint is known."""
        return summarize(doc, self.sources, sha=sha, resolve=resolve, title=title_of(body))

    def summary(self, rel: str) -> TopicSummary | None:
        with self._lock:
            return self.db.summary(rel)

    def sha_of(self, rel: str) -> str | None:
        """The content hash of the committed file ``rel`` (None: no such topic), without
        reading its blocks (a stage asks this of every file that changed)."""
        with self._lock:
            row = self.db.one("SELECT sha FROM files WHERE path=?", (rel,))
        return row[0] if row else None

    def normal_sha(self, rel: str) -> str | None:
        """The content hash of the committed file ``rel`` when the runtime's normalisation
        wrote it (an install, not a hand edit: see scriptorium.memory.normalize_edit)."""
        with self._lock:
            row = self.db.one("SELECT sha FROM files WHERE path=? AND normal", (rel,))
        return row[0] if row else None

    def summaries(self) -> list[TopicSummary]:
        """Every summary, read from the file (for tests and whole-tree checks)."""
        return [s for s in map(self.summary, self.paths()) if s is not None]

    def file_states(self) -> dict[str, FileState]:
        """Path -> (hash, fingerprint, when checked) of every topic file, without blocks."""
        with self._lock:
            return self.db.file_states()

    def shas(self) -> dict[str, str]:
        with self._lock:
            return dict(self.db.rows("SELECT path, sha FROM files"))

    def paths(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self.db.rows("SELECT path FROM files ORDER BY path")]

    def cited(self, refs: Iterable[str] | None = None) -> set[str]:
        """The source ids some committed block cites (only among ``refs`` when given)."""
        with self._lock:
            return self.db.cited(refs)

    def where(self, block_id: str) -> str | None:
        """The topic file holding the block with this id or alias."""
        paths = self.paths_of(block_id)
        return paths[0] if paths else None

    def paths_of(self, block_id: str) -> list[str]:
        """Every topic file holding a block with this id or alias (two: a duplicate)."""
        with self._lock:
            return self.db.paths_of(block_id)

    def before_validate(self, docs: Mapping[str, TopicDoc]) -> None:
        """A transaction parsed the files it installs and is about to check them against
        the committed tree. This catalog holds every topic of the tree: nothing to bring
        (a catalog of part of it, :class:`~.pg_catalog.PgTopicCatalog`, fetches here)."""

    def paths_citing(self, target: str) -> list[str]:
        """The topic files with a footnote linking ``target``, sorted."""
        with self._lock:
            return [r[0] for r in self.db.rows(
                "SELECT path FROM targets WHERE target=? ORDER BY path", (target,))]

    def resolutions(self, rel: str) -> dict[str, str]:
        """Footnote target -> source id, for each target of ``rel`` that resolved, while the
        archive file it links is the very file it was resolved in (the archive replaces a
        file by rename on every write, so a rewritten, replaced or deleted one shows in its
        lstat, as the archive's own cache checks)."""
        with self._lock:
            rows = self.db.rows("SELECT target, ref, akey FROM targets WHERE path=? AND ref "
                                "IS NOT NULL", (rel,))
        now: dict[tuple[str, str], str | None] = {}  # a target's link part -> its file's key
        out: dict[str, str] = {}
        for target, ref, akey in rows:
            if akey is None:
                continue
            part = target.partition("#")[:2]
            if part not in now:
                link = archive_rel(rel, target)
                now[part] = archive_key(self.root, link) if link is not None else None
            if now[part] == akey:
                out[target] = ref
        return out

    def duplicates(self) -> list[str]:
        with self._lock:
            return [r[0] for r in self.db.rows("SELECT id FROM dups ORDER BY id")]

    def links(self) -> list[tuple[str, str, str, int]]:
        """Every block link of the tree: (file, linked path, linked id, line of the block)."""
        with self._lock:
            return [(r[0], r[1], r[2], r[3]) for r in self.db.rows(
                "SELECT path, target, id, line FROM links ORDER BY path, rowid")]

    def refs_of(self, block_id: str) -> set[str]:
        """The sources committed blocks answering to ``block_id`` cite."""
        out: set[str] = set()
        with self._lock:
            for (refs,) in self.db.rows(
                    "SELECT b.refs FROM ids i JOIN blocks b ON b.path = i.path AND b.n = i.n "
                    "WHERE i.id=?", (block_id,)):
                out.update(json.loads(refs))
        return out

    def ids(self) -> set[str]:
        return set(self.has_id())

    def has_id(self) -> IdView:
        """The committed block ids and aliases as a set asked one at a time (``in``) without
        loading them all (a transaction asks under the write lock, so no install changes it
        meanwhile)."""
        return IdView(self.db, self._lock)

    def named(self, stem: str, title: str) -> list[str]:
        """Topic paths whose file name is ``stem`` (``stem.md``) or whose title slugs to
        ``title`` (:func:`slug`), sorted."""
        keys = [f"stem:{stem}"] + ([f"title:{title}"] if title else [])
        with self._lock:
            return [r[0] for r in self.db.rows(
                f"SELECT DISTINCT path FROM names WHERE key IN ({','.join('?' * len(keys))}) "
                "ORDER BY path", tuple(keys))]

    def blocks(self) -> Iterator[tuple[str, BlockSummary]]:
        """Every block, file by file (one file's summary read at a time)."""
        for rel in self.paths():
            summary = self.summary(rel)
            for block in summary.blocks if summary is not None else ():
                yield rel, block
