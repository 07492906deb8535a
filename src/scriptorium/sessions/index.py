"""The per-process cache of one session: nodes by id, seq order, children by edge, meta.

Freshness across processes rests on stat fingerprints, refreshed *incrementally*: one
``stat`` of ``history/`` and ``meta.json`` answers "nothing changed" without listing the
directory; otherwise one ``scandir`` compares each file's ``(inode, mtime_ns, size)`` with
what was parsed and re-parses only new or changed files (every writer replaces files by
rename, so a rewrite always changes the directory and the file's inode).

Coarse file-system clocks can give two writes the same mtime; like git's "racily clean"
rule, a fingerprint whose mtime is too close to when it was observed is not trusted, so
the next refresh looks again. This closes the reference store's blind spot (a foreign write
in the same mtime tick as our own) without ever recording our own write as covering others.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Iterable

from ..errors import CorruptFile
from .node import CHAIN_CALLERS, ROOT, Node, parse_node

# A fingerprint observed less than this long after its mtime may hide a same-tick write.
RACY_NS = 100_000_000

StatKey = tuple[int, int, int]


def _graph_key(node: Node) -> tuple:
    """What a node contributes to the shape of lines (a mark changes none of it)."""
    md = node.metadata
    covers = md.get("covers_ids")
    return (node.id, node.seq, node.role, node.name, node.caller, node.predecessor,
            md.get("rewound"), tuple(covers) if isinstance(covers, list) else covers,
            md.get("spawn_branch_root"), md.get("source"), md.get("display"), md.get("name"))


class SessionIndex:
    """In-memory view of one session directory; always rebuildable from disk."""

    def __init__(self, sid: str, sdir: Path):
        self.sid = sid
        self.dir = sdir
        self.hist = sdir / "history"
        self.meta_path = sdir / "meta.json"
        self.files: dict[str, tuple[StatKey, Node]] = {}
        # files whose fingerprint may hide a same-tick rewrite -> the bytes we last parsed
        self._racy: dict[str, bytes] = {}
        self.nodes: dict[str, Node] = {}
        self.file_of: dict[str, str] = {}
        self.meta: dict = {}
        self.meta_present = False
        self._dir_fp: tuple[int, int] | None = None
        self._dir_racy = True
        self._meta_fp: StatKey | None = None
        self._meta_racy = True
        self._synced_once = False
        # derived structures, rebuilt lazily when the shape changed
        self._shape_dirty = True
        self._order: list[Node] = []
        self._by_pred: dict[str, list[str]] = {}
        self._by_caller: dict[str, list[str]] = {}
        self._first_conv_seq: int | None = None
        self._root_memo: dict[str, str] = {}
        self.max_seq = -1
        # bumped whenever a node's place in the graph may have changed (lines are cached on it)
        self.generation = 0
        # counters for tests and benchmarks
        self.scans = 0
        self.parses = 0

    # --- refresh -----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Bring the cache up to date with disk; return True when anything was re-read."""
        now = time.time_ns()
        changed = False
        try:
            st = os.stat(self.hist)
            dir_fp: tuple[int, int] | None = (st.st_ino, st.st_mtime_ns)
        except FileNotFoundError:
            dir_fp = None
        if not self._synced_once or dir_fp != self._dir_fp or self._dir_racy:
            changed |= self._scan(now, dir_fp is not None)
            self._dir_fp = dir_fp
            self._dir_racy = dir_fp is not None and dir_fp[1] >= now - RACY_NS
        try:
            mt = os.stat(self.meta_path)
            meta_fp: StatKey | None = (mt.st_ino, mt.st_mtime_ns, mt.st_size)
        except FileNotFoundError:
            meta_fp = None
        if not self._synced_once or meta_fp != self._meta_fp or self._meta_racy:
            changed |= self._load_meta(meta_fp)
            self._meta_fp = meta_fp
            self._meta_racy = meta_fp is not None and meta_fp[1] >= now - RACY_NS
        self._synced_once = True
        return changed

    def _scan(self, now: int, present: bool) -> bool:
        self.scans += 1
        seen: set[str] = set()
        changed = False
        racy: dict[str, bytes] = {}
        if present:
            try:
                it = os.scandir(self.hist)
            except FileNotFoundError:
                it = None
            except NotADirectoryError:
                raise CorruptFile(f"session {self.sid}: {self.hist} is not a directory "
                                  f"(move it aside to open the session)") from None
            if it is not None:
                with it:
                    for entry in it:
                        name = entry.name
                        if name.startswith(".") or not name.endswith(".json"):
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:
                            continue
                        if not stat.S_ISREG(st.st_mode):
                            continue  # never follow a symlink out of history/
                        key = (st.st_ino, st.st_mtime_ns, st.st_size)
                        seen.add(name)
                        is_racy = st.st_mtime_ns >= now - RACY_NS
                        old = self.files.get(name)
                        if old is not None and old[0] == key and name not in self._racy:
                            continue
                        try:
                            with open(os.path.join(self.hist, name), "rb") as fh:
                                data = fh.read()
                        except FileNotFoundError:
                            seen.discard(name)
                            continue
                        if is_racy:
                            racy[name] = data
                        if old is not None and old[0] == key and self._racy.get(name) == data:
                            continue  # racily clean, but the bytes prove it unchanged
                        node = parse_node(data, self.hist / name)
                        self.parses += 1
                        if old is None or old[1].to_json() != node.to_json():
                            changed = True
                        self._put(name, key, node)
        for name in [n for n in self.files if n not in seen]:
            self._drop(name)
            changed = True
        self._racy = racy
        return changed

    def _load_meta(self, fp: StatKey | None) -> bool:
        if fp is None:
            changed = self.meta_present
            self.meta, self.meta_present = {}, False
            return changed
        try:
            data = self.meta_path.read_bytes()
        except FileNotFoundError:
            self.meta, self.meta_present = {}, False
            return True
        try:
            meta = json.loads(data)
        except (ValueError, UnicodeDecodeError) as exc:
            raise CorruptFile(f"corrupt meta file {self.meta_path}: {exc}") from None
        if not isinstance(meta, dict):
            raise CorruptFile(f"corrupt meta file {self.meta_path}: not a JSON object")
        changed = meta != self.meta or not self.meta_present
        self.meta, self.meta_present = meta, True
        return changed

    # --- incremental bookkeeping ---------------------------------------------------------
    def _put(self, name: str, key: StatKey, node: Node) -> None:
        old = self.files.get(name)
        self.files[name] = (key, node)
        if old is None or _graph_key(old[1]) != _graph_key(node):
            self.generation += 1
        owner = self.file_of.get(node.id)
        if owner is not None and owner != name:
            # Two files claim one id: keep the earliest by (seq, name); shape is rebuilt.
            other = self.files[owner][1]
            if (node.seq, name) < (other.seq, owner):
                self.file_of[node.id] = name
                self.nodes[node.id] = node
            self._shape_dirty = True
            return
        if old is not None and old[1].id != node.id:
            self._forget_id(old[1].id, name)
        prev = self.nodes.get(node.id)
        self.nodes[node.id] = node
        self.file_of[node.id] = name
        if prev is None:
            self._add_shape(node)
        elif (prev.seq, prev.predecessor, prev.caller, prev.role) != (
                node.seq, node.predecessor, node.caller, node.role):
            self._shape_dirty = True
        elif not self._shape_dirty and not self._order_swap(prev, node):
            # same place in the graph, but the seq order holds the old object
            self._shape_dirty = True

    def _order_swap(self, prev: Node, node: Node) -> bool:
        # Binary search by seq: the order list is sorted, so the swap is O(log n).
        lo, hi = 0, len(self._order)
        while lo < hi:
            mid = (lo + hi) // 2
            if self._order[mid].seq < prev.seq:
                lo = mid + 1
            else:
                hi = mid
        for i in range(lo, len(self._order)):
            if self._order[i] is prev:
                self._order[i] = node
                return True
            if self._order[i].seq > prev.seq:
                break
        return False

    def _add_shape(self, node: Node) -> None:
        if node.seq > self.max_seq:
            self.max_seq = node.seq
        if self._shape_dirty:
            return
        if self._order and node.seq <= self._order[-1].seq:
            self._shape_dirty = True
            return
        self._order.append(node)
        if node.predecessor:
            self._by_pred.setdefault(node.predecessor, []).append(node.id)
        if node.caller and node.caller not in CHAIN_CALLERS:
            self._by_caller.setdefault(node.caller, []).append(node.id)
        if (self._first_conv_seq is None and node.conversational and node.chain_level
                and not node.is_root):
            self._first_conv_seq = node.seq

    def _forget_id(self, node_id: str, name: str) -> None:
        if self.file_of.get(node_id) == name:
            del self.file_of[node_id]
            del self.nodes[node_id]
            # another file may hold the same id
            for other, (_, n) in self.files.items():
                if n.id == node_id and other != name:
                    self.file_of[node_id] = other
                    self.nodes[node_id] = n
                    break
        self._shape_dirty = True

    def _drop(self, name: str) -> None:
        _, node = self.files.pop(name)
        self.generation += 1
        self._racy.pop(name, None)
        self._forget_id(node.id, name)
        self.max_seq = max((n.seq for _, n in self.files.values()), default=-1)

    def record_own_write(self, name: str, node: Node, data: bytes) -> None:
        """Adopt a file this process just wrote (under the session lock).

        Only that file's fingerprint is recorded; the directory fingerprint is left alone,
        so a foreign write that landed meanwhile is still found by the next refresh.
        """
        try:
            st = os.stat(self.hist / name)
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            return
        self._put(name, key, node)
        self._racy[name] = data

    def record_own_meta(self, meta: dict) -> None:
        """Adopt meta.json as this process just wrote it (the fingerprint stays racy)."""
        self.meta, self.meta_present = meta, True
        self._meta_racy = True

    # --- derived views ------------------------------------------------------------------------
    def _rebuild_shape(self) -> None:
        order = sorted(((self.files[f][1].seq, f) for f in self.file_of.values()))
        self._order = [self.files[f][1] for _, f in order]
        by_pred: dict[str, list[str]] = {}
        by_caller: dict[str, list[str]] = {}
        first = None
        for n in self._order:
            if n.predecessor:
                by_pred.setdefault(n.predecessor, []).append(n.id)
            if n.caller and n.caller not in CHAIN_CALLERS:
                by_caller.setdefault(n.caller, []).append(n.id)
            if first is None and n.conversational and n.chain_level and not n.is_root:
                first = n.seq
        self._by_pred, self._by_caller, self._first_conv_seq = by_pred, by_caller, first
        self._root_memo = {}
        self.max_seq = max((n.seq for _, n in self.files.values()), default=-1)
        self._shape_dirty = False

    def _shape(self) -> None:
        if self._shape_dirty:
            self._rebuild_shape()

    def ordered(self) -> list[Node]:
        """Every node in seq order (ties broken by file name)."""
        self._shape()
        return self._order

    def children_by_pred(self, node_id: str) -> list[str]:
        self._shape()
        return self._by_pred.get(node_id, [])

    def children_by_caller(self, node_id: str) -> list[str]:
        self._shape()
        return self._by_caller.get(node_id, [])

    def branch_root(self, node_id: str) -> str:
        """The node where the predecessor line through ``node_id`` starts (a first turn, the
        ROOT node, a spawn root, a summary…; a dangling or cyclic line ends where it breaks).

        Memoised: a node's predecessor only changes through a shape rebuild, which clears the
        memo, and appending never changes an existing node's root, so each node is walked once.
        """
        self._shape()
        memo = self._root_memo
        path: list[str] = []
        cur = node_id
        while cur not in memo:
            node = self.nodes.get(cur)
            if node is None or cur in path:
                root = cur
                break
            path.append(cur)
            pred = node.predecessor
            if not pred or cur == ROOT or (pred == ROOT and ROOT not in self.nodes):
                root = cur
                break
            cur = pred
        else:
            root = memo[cur]
        for seen in path:
            memo[seen] = root
        return root

    def first_conversational_seq(self) -> int | None:
        self._shape()
        return self._first_conv_seq

    @property
    def head(self) -> str | None:
        h = self.meta.get("head_id", self.meta.get("last_node_id"))
        return h if isinstance(h, str) and h else None

    def ids(self) -> Iterable[str]:
        return self.nodes.keys()
