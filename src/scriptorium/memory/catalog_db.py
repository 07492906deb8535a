"""Where the topic catalog keeps its summaries: one SQLite file in the workspace's runtime dir.

Held in dictionaries, the summaries made a process's memory grow with memory's size (about
2.6 kB per written session, never let go) and had to be saved whole at exit. In tables, the
process holds none of them: every answer is an indexed lookup, every change is written as it
is learnt (one short transaction per install or per few dozen files parsed), and the next
process, or one started after a crash, starts from what the last one learnt instead of
parsing every topic again.

Tables (all derived; a damaged or foreign file is deleted and rebuilt by parsing):
``files`` (fingerprint, hash, title per topic file), ``blocks`` (each block's summary),
``ids`` / ``dups`` (which file holds a block id; ids more than one file holds), ``cites``
(which file cites a source), ``targets`` (which file links a footnote target), ``names``
(file name and title keys), ``links`` (block links) and ``log`` (paths in the order their
summaries changed, for ``changed_since``).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Set
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple

from ..sqlitefile import SUFFIXES, ensure_schema, remove_files
from .fingerprints import Fingerprint

log = logging.getLogger(__name__)

DB_FILE = "topic-catalog.sqlite"
OLD_FILE = "topic-catalog.json"  # what earlier versions saved: dropped on open
SCHEMA_VERSION = "6"
LOG_LIMIT = 100_000  # changes remembered for changed_since
RECENT_SUMMARIES = 64  # summaries kept in the process (a batch touches a few topics)

_SCHEMA = """
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE files(path TEXT PRIMARY KEY, sha TEXT NOT NULL, mtime INT, ctime INT, size INT,
                   ino INT, checked INT, title TEXT, unresolved INT, normal INT);
CREATE TABLE blocks(path TEXT, n INT, id TEXT, ids TEXT, line INT, links TEXT, targets TEXT,
                    refs TEXT, unresolved INT, target_refs TEXT, PRIMARY KEY (path, n))
    WITHOUT ROWID;
CREATE TABLE ids(id TEXT, path TEXT, n INT);
CREATE INDEX ids_id ON ids(id);
CREATE INDEX ids_path ON ids(path);
CREATE TABLE dups(id TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE cites(ref TEXT, path TEXT, PRIMARY KEY (ref, path)) WITHOUT ROWID;
CREATE INDEX cites_path ON cites(path);
CREATE TABLE targets(target TEXT, path TEXT, ref TEXT, akey TEXT,
                     PRIMARY KEY (target, path)) WITHOUT ROWID;
CREATE INDEX targets_path ON targets(path);
CREATE TABLE names(key TEXT, path TEXT, PRIMARY KEY (key, path)) WITHOUT ROWID;
CREATE INDEX names_path ON names(path);
CREATE TABLE links(path TEXT, target TEXT, id TEXT, line INT);
CREATE INDEX links_path ON links(path);
CREATE TABLE log(seq INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT);
"""
_BY_PATH = ("blocks", "ids", "cites", "targets", "names", "links")


class FileState(NamedTuple):
    """What the catalog last saw of one topic file (no blocks): enough to tell if it moved."""

    sha: str
    fp: Fingerprint
    checked_ns: int


@dataclass(frozen=True)
class BlockSummary:
    """The parts of a block the write path needs (field names match ``topics.Block`` so
    ``validate_tree`` reads either)."""

    id: str
    ids: tuple[str, ...]
    line: int
    links: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]      # footnote link targets, in citation order
    refs: tuple[str, ...]         # the source ids they resolve to, each once
    unresolved: bool
    # what each target resolved to (None: nothing; () unknown): how it was learnt, not what
    # the block is, so not compared
    target_refs: tuple[str | None, ...] = field(default=(), compare=False)


@dataclass(frozen=True)
class TopicSummary:
    path: str
    sha: str
    fp: Fingerprint
    checked_ns: int
    blocks: tuple[BlockSummary, ...]
    title: str = ""
    # the file is what the runtime's normalisation wrote (an install, not a hand edit): each
    # of its paragraphs is already normal, so a write normalises only what it changes
    normal: bool = False

    @property
    def unresolved(self) -> bool:
        return any(b.unresolved for b in self.blocks)

    @cached_property
    def refs_by_id(self) -> dict[str, frozenset[str]]:
        """Block id or alias -> the sources the blocks answering to it cite."""
        out: dict[str, set[str]] = {}
        for block in self.blocks:
            for block_id in block.ids:
                out.setdefault(block_id, set()).update(block.refs)
        return {k: frozenset(v) for k, v in out.items()}


def _dumps(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class IdView(Set[str]):
    """The committed block ids and aliases, asked one at a time (``in``) without loading
    them all: what ``normalize_topic`` checks a new block's id against."""

    def __init__(self, db: "CatalogDB", lock: "threading.RLock"):
        self.db = db
        self.lock = lock

    def __contains__(self, block_id: object) -> bool:
        if not isinstance(block_id, str):
            return False
        with self.lock:
            return bool(self.db.one("SELECT 1 FROM ids WHERE id=? LIMIT 1", (block_id,)))

    def __iter__(self) -> Iterator[str]:
        with self.lock:
            return iter([r[0] for r in self.db.rows("SELECT DISTINCT id FROM ids")])

    def __len__(self) -> int:
        with self.lock:
            return int(self.db.one("SELECT COUNT(DISTINCT id) FROM ids")[0])


class CatalogDB:
    """The catalog's tables on one connection (``path`` None: in memory, for a catalog
    with no runtime dir, or one whose file cannot be used). Callers serialise access."""

    def __init__(self, path: Path | None, *, first_seq: int = 0):
        self.path = path
        self.conn = self._connect(first_seq)
        # The last few summaries read, valid while no other connection has committed (SQLite's
        # data_version) and dropped on this one's own changes to their path: a batch asks for
        # the summaries of the few topics it touches many times.
        self._recent: OrderedDict[str, TopicSummary] = OrderedDict()
        self._recent_version = -1

    # -- opening ---------------------------------------------------------------------------

    def _connect(self, first_seq: int) -> sqlite3.Connection:
        if self.path is None:
            return self._open(":memory:", first_seq)
        try:
            (self.path.parent / OLD_FILE).unlink(missing_ok=True)
            if any(os.path.islink(str(self.path) + s) for s in SUFFIXES) \
                    or os.path.islink(self.path.parent):
                raise OSError(f"{self.path}: a symlink; the catalog stays in memory")
            try:
                return self._open(str(self.path), first_seq)
            except sqlite3.DatabaseError as exc:  # not a database, or damaged: derived
                log.warning("topic catalog %s unreadable (%s); rebuilding", self.path, exc)
                remove_files(self.path)
                return self._open(str(self.path), first_seq)
        except (OSError, sqlite3.Error) as exc:
            log.warning("topic catalog kept in memory: %s", exc)
            self.path = None
            return self._open(":memory:", first_seq)

    @staticmethod
    def _open(target: str, first_seq: int) -> sqlite3.Connection:
        conn = sqlite3.connect(target, timeout=60.0, isolation_level=None,
                               check_same_thread=False)
        try:
            if target != ":memory:":
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=OFF")  # derived: a lost tail is re-parsed
                conn.execute("PRAGMA journal_size_limit=1048576")
                os.chmod(target, 0o600)
            conn.execute("PRAGMA cache_size=-1024")  # 1 MB: lookups are by index
            def fill(conn: sqlite3.Connection) -> None:
                conn.execute("INSERT INTO meta VALUES ('log_floor', ?)", (str(first_seq),))
                if first_seq:  # seqs of a catalog this one replaces never match its own
                    conn.execute("INSERT INTO sqlite_sequence(name, seq) VALUES ('log', ?)",
                                 (first_seq,))

            ensure_schema(conn, SCHEMA_VERSION, _SCHEMA, fill)
        except BaseException:
            conn.close()
            raise
        return conn

    def close(self) -> None:
        try:
            self.conn.close()
        except sqlite3.Error:  # pragma: no cover - closing a broken handle
            pass

    # -- reading ---------------------------------------------------------------------------

    def one(self, sql: str, args: tuple[object, ...] = ()) -> tuple[Any, ...]:
        """The first row, or () when there is none."""
        row: tuple[Any, ...] | None = self.conn.execute(sql, args).fetchone()
        return row if row is not None else ()

    def rows(self, sql: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
        return list(self.conn.execute(sql, args).fetchall())

    def file_states(self) -> dict[str, FileState]:
        return {r[0]: FileState(r[1], (r[2], r[3], r[4], r[5]), r[6]) for r in self.conn.execute(
            "SELECT path, sha, mtime, ctime, size, ino, checked FROM files")}

    def summary(self, rel: str) -> TopicSummary | None:
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._recent_version:
            self._recent.clear()
            self._recent_version = version
        hit = self._recent.get(rel)
        if hit is not None:
            self._recent.move_to_end(rel)
            return hit
        found = self._read_summary(rel)
        if found is not None and not self.conn.in_transaction:  # a rollback would stale it
            self._recent[rel] = found
            if len(self._recent) > RECENT_SUMMARIES:
                self._recent.popitem(last=False)
        return found

    def forget_recent(self) -> None:
        self._recent.clear()

    def _read_summary(self, rel: str) -> TopicSummary | None:
        row = self.one("SELECT sha, mtime, ctime, size, ino, checked, title, normal FROM files "
                       "WHERE path=?", (rel,))
        if not row:
            return None
        blocks = tuple(
            BlockSummary(i, tuple(json.loads(ids)), line,
                         tuple(tuple(x) for x in json.loads(links)), tuple(json.loads(targets)),
                         tuple(json.loads(refs)), bool(unres), tuple(json.loads(at)))
            for i, ids, line, links, targets, refs, unres, at in self.conn.execute(
                "SELECT id, ids, line, links, targets, refs, unresolved, target_refs "
                "FROM blocks WHERE path=? ORDER BY n", (rel,)))
        return TopicSummary(rel, row[0], (row[1], row[2], row[3], row[4]), row[5], blocks,
                            row[6], bool(row[7]))

    def paths_of(self, block_id: str) -> list[str]:
        return [r[0] for r in self.conn.execute(
            "SELECT path FROM ids WHERE id=? GROUP BY path ORDER BY MIN(rowid)", (block_id,))]

    def cited(self, refs: Iterable[str] | None) -> set[str]:
        if refs is None:
            return {r[0] for r in self.conn.execute("SELECT DISTINCT ref FROM cites")}
        return {r[0] for r in self.conn.execute(
            f"SELECT DISTINCT ref FROM cites WHERE ref IN {_IN_LIST}", (_as_list(refs),))}

    @property
    def seq(self) -> int:
        row = self.one("SELECT seq FROM sqlite_sequence WHERE name='log'")
        return max(row[0] if row else 0, self._floor())

    def _floor(self) -> int:
        return int(self.one("SELECT value FROM meta WHERE key='log_floor'")[0])

    def changed_since(self, seq: int) -> set[str] | None:
        if seq < self._floor() or seq > self.seq:
            return None
        return {r[0] for r in self.conn.execute("SELECT path FROM log WHERE seq > ?", (seq,))}

    # -- writing (inside :meth:`transaction`) ----------------------------------------------

    def transaction(self) -> "_Tx":
        return _Tx(self.conn)

    def put(self, s: TopicSummary, names: list[str],
            archive_key: Callable[[str], str | None] = lambda target: None) -> None:
        """Record one file's summary (replacing any earlier one) and log its path.
        ``archive_key``: footnote target -> the key of the archive file it was resolved in.
        A file already held is changed row by row: only the rows of blocks, ids, citations
        and targets that differ are written (a write adds a paragraph to a long topic and
        moves the lines below it, it does not rewrite the topic's rows), leaving exactly the
        rows a first put of the summary leaves."""
        self._recent.pop(s.path, None)
        c = self.conn
        known = c.execute("SELECT 1 FROM files WHERE path=?", (s.path,)).fetchone() is not None
        c.execute("INSERT OR REPLACE INTO files VALUES (?,?,?,?,?,?,?,?,?,?)",
                  (s.path, s.sha, *s.fp, s.checked_ns, s.title, int(s.unresolved),
                   int(s.normal)))
        blocks = [(n, b.id, _dumps(b.ids), b.line, _dumps(b.links), _dumps(b.targets),
                   _dumps(b.refs), int(b.unresolved), _dumps(b.target_refs))
                  for n, b in enumerate(s.blocks)]
        ids = {(i, n) for n, b in enumerate(s.blocks) for i in b.ids}
        cites = {ref for b in s.blocks for ref in b.refs}
        targets: dict[str, tuple[str | None, str | None]] = {}
        for b in s.blocks:
            for t, ref in zip(b.targets, b.target_refs or (None,) * len(b.targets)):
                if t not in targets:
                    targets[t] = (ref, archive_key(t) if ref is not None else None)
        links = [(p, i, b.line) for b in s.blocks for p, i in b.links]
        _Rows(c, s.path, known).write(blocks, ids, cites, targets, set(names), links)
        self._note(s.path)

    def touch(self, rel: str, fp: Fingerprint, checked_ns: int) -> None:
        """The file's bytes are what was summarised; only its fingerprint moved."""
        self._recent.pop(rel, None)
        self.conn.execute("UPDATE files SET mtime=?, ctime=?, size=?, ino=?, checked=? "
                          "WHERE path=?", (*fp, checked_ns, rel))

    def drop(self, rel: str) -> None:
        if self._remove(rel):
            self._note(rel)

    def _remove(self, rel: str) -> bool:
        self._recent.pop(rel, None)
        c = self.conn
        if c.execute("DELETE FROM files WHERE path=?", (rel,)).rowcount == 0:
            return False
        held = [r[0] for r in c.execute("SELECT DISTINCT id FROM ids WHERE path=?", (rel,))]
        for table in _BY_PATH:
            c.execute(f"DELETE FROM {table} WHERE path=?", (rel,))
        if held:
            c.execute(f"DELETE FROM dups WHERE id IN {_IN_LIST} AND (SELECT COUNT(DISTINCT "
                      "path) FROM ids WHERE ids.id = dups.id) < 2", (_as_list(held),))
        return True

    def _note(self, rel: str) -> None:
        seq = self.conn.execute("INSERT INTO log(path) VALUES (?)", (rel,)).lastrowid or 0
        floor = self._floor()
        if seq - floor > LOG_LIMIT:  # older readers of the log start again from scratch
            floor = seq - LOG_LIMIT // 2
            self.conn.execute("DELETE FROM log WHERE seq <= ?", (floor,))
            self.conn.execute("UPDATE meta SET value=? WHERE key='log_floor'", (str(floor),))


class _Rows:
    """The rows of one file's summary in the tables keyed by path, written as the
    difference from what they hold (everything, for a file not held before)."""

    def __init__(self, conn: sqlite3.Connection, path: str, known: bool):
        self.c, self.path, self.known = conn, path, known

    def _old(self, sql: str) -> list[tuple[Any, ...]]:
        return self.c.execute(sql, (self.path,)).fetchall() if self.known else []

    def write(self, blocks: list[tuple[Any, ...]], ids: set[tuple[str, int]], cites: set[str],
              targets: dict[str, tuple[str | None, str | None]], names: set[str],
              links: list[tuple[str, str, int]]) -> None:
        c, path = self.c, self.path
        old = {r[0]: r for r in self._old(
            "SELECT n, id, ids, line, links, targets, refs, unresolved, target_refs "
            "FROM blocks WHERE path=?")}
        for row in blocks:
            before = old.pop(row[0], None)
            if before is None or before[:3] + before[4:] != row[:3] + row[4:]:
                c.execute("INSERT OR REPLACE INTO blocks VALUES (?,?,?,?,?,?,?,?,?,?)",
                          (path, *row))
            elif before[3] != row[3]:  # moved by lines added or removed above it
                c.execute("UPDATE blocks SET line=? WHERE path=? AND n=?", (row[3], path, row[0]))
        c.executemany("DELETE FROM blocks WHERE path=? AND n=?", [(path, n) for n in old])
        held = set(self._old("SELECT id, n FROM ids WHERE path=?"))
        gone = held - ids
        c.executemany("DELETE FROM ids WHERE path=? AND id=? AND n=?",
                      [(path, i, n) for i, n in gone])
        added = sorted(ids - held, key=lambda x: (x[1], x[0]))
        c.executemany("INSERT INTO ids VALUES (?,?,?)", [(i, path, n) for i, n in added])
        had = {r[0] for r in self._old("SELECT ref FROM cites WHERE path=?")}
        c.executemany("DELETE FROM cites WHERE ref=? AND path=?", [(r, path) for r in had - cites])
        c.executemany("INSERT INTO cites VALUES (?,?)", [(r, path) for r in cites - had])
        was = {r[0]: (r[1], r[2]) for r in self._old(
            "SELECT target, ref, akey FROM targets WHERE path=?")}
        c.executemany("DELETE FROM targets WHERE target=? AND path=?",
                      [(t, path) for t in was.keys() - targets.keys()])
        c.executemany("INSERT OR REPLACE INTO targets VALUES (?,?,?,?)",
                      [(t, path, *v) for t, v in targets.items() if was.get(t) != v])
        named = {r[0] for r in self._old("SELECT key FROM names WHERE path=?")}
        if named != names:
            c.execute("DELETE FROM names WHERE path=?", (path,))
            c.executemany("INSERT INTO names VALUES (?,?)", [(k, path) for k in sorted(names)])
        if self._old("SELECT target, id, line FROM links WHERE path=? ORDER BY rowid") != links:
            c.execute("DELETE FROM links WHERE path=?", (path,))
            c.executemany("INSERT INTO links VALUES (?,?,?,?)", [(path, *x) for x in links])
        _recount_dups(c, {i for i, _ in gone} | {i for i, _ in added})


def _recount_dups(c: sqlite3.Connection, changed: set[str]) -> None:
    """Keep ``dups`` (ids more than one file holds) right for the ids whose rows changed."""
    if not changed:
        return
    chosen = _as_list(sorted(changed))
    c.execute(f"DELETE FROM dups WHERE id IN {_IN_LIST}", (chosen,))
    c.execute(f"INSERT INTO dups SELECT id FROM ids WHERE id IN {_IN_LIST} GROUP BY id "
              "HAVING COUNT(DISTINCT path) > 1", (chosen,))


# A list of values bound as one JSON array: the same SQL for any length, so sqlite's statement
# cache holds one statement per query, not one per list length seen (which grew with the home).
_IN_LIST = "(SELECT value FROM json_each(?))"


def _as_list(values: Iterable[str]) -> str:
    return json.dumps(list(values), ensure_ascii=False)


class _Tx:
    """``with db.transaction():`` one IMMEDIATE SQLite transaction, committed on success."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if exc_type is None:
            self.conn.execute("COMMIT")
        elif self.conn.in_transaction:
            self.conn.execute("ROLLBACK")
