"""Bulk appends: many nodes into one session under one lock, streamed to disk.

An importer adds thousands of nodes at a time. Going through ``append_message`` would write
``meta.json`` and fsync twice per node, and would keep every node's text in the process
cache. The :class:`BulkAppender` holds the session lock for the whole batch, knows the ids
already stored from the history file *names* alone (``<seq>-<r>-<id>.json``), writes each
node file by atomic rename, fsyncs them once at the end and writes ``meta.json`` once. Its
memory grows with the number of ids, not with their text. The store's cache is not fed: the
next read of the session refreshes it from disk like any foreign write.

Idempotent by id (an existing id is never rewritten) and strict about edges: a predecessor
or caller must already exist, in the session or earlier in the same batch.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import os
import re
import time
from array import array
from typing import Any, Container, Iterator

from ..fsutil import atomic_write_json, atomic_write_text, check_name, fsync_dir
from .errors import AppendRefused, HeadRefused, NodeNotFound
from .node import CHAIN_CALLERS, ROOT, Node
from .commits import GITIGNORE
from .nodefiles import LOCK_NAME, write_gen
from .ops import BulkStore

SYNC_ALL_ABOVE = 64  # more new files than this: one os.sync() rather than one fsync each
_FILE_RE = re.compile(r"^(\d+)-([a-z])-(.+)\.json$")


class IdSet:
    """A set of node ids in 8 bytes each (a sorted array of 64-bit hashes, plus a small set
    of recent ones), so a session of a million nodes costs 8 MB, not a hundred. A false
    "present" needs two ids of one session to share 64 bits of blake2b: ~n²/2⁶⁵."""

    MERGE_AT = 4096

    def __init__(self) -> None:
        self._sorted = array("Q")
        self._recent: set[int] = set()

    @staticmethod
    def _h(node_id: str) -> int:
        return int.from_bytes(hashlib.blake2b(node_id.encode("utf-8", "surrogatepass"),
                                              digest_size=8).digest(), "big")

    def add(self, node_id: str) -> None:
        self._recent.add(self._h(node_id))
        if len(self._recent) >= self.MERGE_AT:  # merged lazily: no list of all ids
            self._sorted = array("Q", heapq.merge(self._sorted, sorted(self._recent)))
            self._recent = set()

    def __contains__(self, node_id: object) -> bool:
        if not isinstance(node_id, str):
            return False
        h = self._h(node_id)
        if h in self._recent:
            return True
        i = bisect.bisect_left(self._sorted, h)
        return i < len(self._sorted) and self._sorted[i] == h


def check_bulk_edges(sid: str, node: Node, ids: Container[str], has_turns: bool) -> bool:
    """An importer's node must hang on nodes already stored (``ids``): its predecessor and
    caller exist, and a top-level turn without a predecessor is the session's first turn, a
    spawn root or a summary. Returns whether ``node`` is a top-level turn."""
    pred = node.predecessor
    if pred and pred != ROOT and pred not in ids:
        raise AppendRefused(f"session {sid}: predecessor {pred} of node {node.id} "
                            f"does not exist")
    caller = node.caller or ""
    if (caller not in CHAIN_CALLERS and caller not in ids
            and not node.metadata.get("caller_session")):
        raise AppendRefused(f"session {sid}: caller {caller} of node {node.id} does not exist")
    turn = node.role in ("user", "llm") and node.chain_level and not node.is_root
    if (turn and not pred and node.input is None and has_turns
            and not node.is_spawn_root and "covers_ids" not in node.metadata):
        raise AppendRefused(f"session {sid}: node {node.id} has no predecessor and is "
                            f"not the first turn, a spawn root or a summary")
    return turn


class BatchHead:
    """What a batch publishes at its end besides its nodes: the head (checked when set) and
    extra meta keys. Shared by both bulk appenders; each says which ids it knows."""

    sid: str
    head: str | None
    _head_set: bool
    _meta_extra: dict[str, Any]

    def _known(self, node_id: str) -> bool:
        raise NotImplementedError

    def _summary(self, node_id: str) -> bool:
        raise NotImplementedError

    def set_head(self, node_id: str | None) -> None:
        """Move the head when the batch is published (one event, old -> new)."""
        if node_id is not None:
            if not self._known(node_id):
                raise NodeNotFound(f"node {node_id} not found in session {self.sid}")
            if self._summary(node_id):
                raise HeadRefused(f"session {self.sid}: node {node_id} is a compaction summary "
                                  f"and cannot be the head")
        self.head = node_id
        self._head_set = True

    def update_meta(self, **fields: object) -> None:
        """Extra meta keys to publish with the batch (never ``head_id``/``id``)."""
        for key in ("head_id", "id"):
            fields.pop(key, None)
        self._meta_extra.update(fields)


class BulkAppender(BatchHead):
    """Append nodes to one existing session; use as a context manager (it holds the lock)."""

    def __init__(self, store: BulkStore, sid: str):
        self.store = store
        self.sid = sid
        self.ids = IdSet()
        self.summaries: set[str] = set()
        self.max_seq = -1
        self.has_turns = False
        self.added = 0
        self.head: str | None = None
        self._head_set = False
        self._written: list[str] = []
        self._count = 0  # nodes written since the last flush
        self._meta_extra: dict = {}
        self._stack: list = []
        self.title = ""

    # --- lifetime ------------------------------------------------------------------------------
    def __enter__(self) -> "BulkAppender":
        sdir = self.store._require(self.sid)
        tl, fl = self.store._locks(self.sid)
        tl.acquire()
        try:
            fl.acquire()
        except BaseException:
            tl.release()
            raise
        self._stack = [tl, fl]
        self.hist = sdir / "history"
        self.hist.mkdir(exist_ok=True)
        self.meta_path = sdir / "meta.json"
        self._hist = str(self.hist)
        self._tmp = os.path.join(self._hist, f".bulk-{os.getpid()}.tmp")
        for name in self._names():
            m = _FILE_RE.match(name)
            if not m:
                continue
            seq, letter, nid = int(m.group(1)), m.group(2), m.group(3)
            self.ids.add(nid)
            self.max_seq = max(self.max_seq, seq)
            if letter in ("u", "l") and nid != ROOT:
                self.has_turns = True
            if nid.startswith("summary_"):
                self.summaries.add(nid)
        meta = self.store._read_meta_file(self.meta_path)
        self.title = meta.get("title") if isinstance(meta.get("title"), str) else ""
        head = meta.get("head_id")
        self.head = head if isinstance(head, str) and head else None
        self._old_head = self.head
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        tl, fl = self._stack
        events: list = []
        try:
            if self._count or self._head_set or self._meta_extra:
                self._flush(events)
                write_gen(self.hist.parent / LOCK_NAME)  # other processes' caches re-check
                self.store._log_moves(events)  # under the lock, like every other head move
        finally:
            fl.release()
            tl.release()
        if exc_type is None:
            self.store._announce(events)

    def _names(self) -> Iterator[str]:
        with os.scandir(self.hist) as it:
            for entry in it:
                if entry.name.endswith(".json") and not entry.name.startswith("."):
                    yield entry.name

    def _flush(self, events: list) -> None:
        """Make the written nodes durable, then publish meta.json once."""
        if self._count > SYNC_ALL_ABOVE:
            os.sync()  # one call instead of thousands of fsyncs
        else:
            for name in self._written:
                fd = os.open(self.hist / name, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
        if self._count:
            fsync_dir(self.hist)
        meta = self.store._read_meta_file(self.meta_path) or {
            "id": self.sid, "title": "", "created_at": time.time(), "branches": {}}
        if self._count:
            prev = meta.get("updated_at")
            now = time.time()
            if isinstance(prev, (int, float)) and now <= prev:
                now = prev + 1e-6
            meta["updated_at"] = now
        meta.update(self._meta_extra)
        meta["head_id"] = self.head
        atomic_write_json(self.meta_path, meta)
        if self.head != self._old_head:
            events.append((self.sid, self._old_head, self.head))
        sdir = self.meta_path.parent
        if not (sdir / ".gitignore").exists():
            atomic_write_text(sdir / ".gitignore", GITIGNORE, mode=0o644)
        self._written = []
        self._count = 0

    # --- writes -------------------------------------------------------------------------------
    def has(self, node_id: str) -> bool:
        return node_id in self.ids

    def append(self, node: Node) -> bool:
        """Write ``node`` (seq assigned here); False when its id is already stored."""
        check_name(node.id, "node id")
        if node.id in self.ids:
            return False
        turn = check_bulk_edges(self.sid, node, self.ids, self.has_turns)
        self.max_seq += 1
        node.seq = self.max_seq
        name = node.filename()
        # One temp name per appender (we hold the session lock), renamed into place: a
        # reader never sees a torn node file; a crash leaves only a dot-file readers skip.
        fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(node.dumps())
        os.replace(self._tmp, os.path.join(self._hist, name))  # str: no pathlib interning
        self._count += 1
        if self._count <= SYNC_ALL_ABOVE:  # past that, one os.sync() covers them: no list
            self._written.append(name)
        self.ids.add(node.id)
        if node.is_summary:
            self.summaries.add(node.id)
        if turn:
            self.has_turns = True
        self.added += 1
        return True

    def _known(self, node_id: str) -> bool:
        return node_id in self.ids

    def _summary(self, node_id: str) -> bool:
        return node_id in self.summaries
