"""The in-memory graph of one session: nodes by id, seq order, children by edge, meta, and
the derived views the walks need (branch roots, the first turn).

Both homes keep one per session and feed it nodes as they learn them: the directory store's
:class:`~.index.SessionIndex` from node files, the PostgreSQL store from rows. Everything
above (walks, lines, forks) reads only this, so it behaves the same on either home.
Each node is held under a *slot* name (the file name on disk, the node id in a database);
``files`` maps slot -> (fingerprint, node), the fingerprint being whatever tells the
feeder a slot changed.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Iterable

from .node import CHAIN_CALLERS, ROOT, Node
from .nodefiles import StatKey, gc_paused

_seq = attrgetter("seq")


def _add_edges(edges: tuple[dict[str, list[str]], dict[str, list[str]]], node: Node) -> None:
    if node.predecessor:
        edges[0].setdefault(node.predecessor, []).append(node.id)
    if node.caller and node.caller not in CHAIN_CALLERS:
        edges[1].setdefault(node.caller, []).append(node.id)


def _graph_key(node: Node) -> tuple[Any, ...]:
    """What a node contributes to the shape of lines (a mark changes none of it)."""
    md = node.metadata
    covers = md.get("covers_ids")
    return (node.id, node.seq, node.role, node.name, node.caller, node.predecessor,
            md.get("rewound"), tuple(covers) if isinstance(covers, list) else covers,
            md.get("spawn_branch_root"), md.get("source"), md.get("display"), md.get("name"))



class NodeGraph:
    """The nodes of one session and what is derived from them (rebuilt lazily)."""

    def __init__(self, sid: str):
        self.sid = sid
        self.files: dict[str, tuple[StatKey, Node]] = {}
        self.nodes: dict[str, Node] = {}
        self.file_of: dict[str, str] = {}
        self.meta: dict[str, Any] = {}
        self.meta_present = False
        # derived structures, rebuilt lazily when the shape changed
        self._shape_dirty = True
        self._order: list[Node] = []
        # children by predecessor and by caller: built on first use (most reads need none)
        self._edges: tuple[dict[str, list[str]], dict[str, list[str]]] | None = None
        self._first_conv_seq: int | None = None
        self._root_memo: dict[str, str] = {}
        self.max_seq = -1
        # bumped whenever a node's place in the graph may have changed (lines are cached on it)
        self.generation = 0

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
            self._reindex_ids()  # the file now holds another id (a hand edit): rare
            return
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
        if self._edges is not None:
            _add_edges(self._edges, node)
        if (self._first_conv_seq is None and node.conversational and node.chain_level
                and not node.is_root):
            self._first_conv_seq = node.seq

    def _reindex_ids(self) -> None:
        """Rebuild id -> file from the files in one pass (after files vanished or changed
        id); for an id held by two files the earliest by (seq, name) wins."""
        nodes: dict[str, Node] = {}
        file_of: dict[str, str] = {}
        for name, (_, node) in self.files.items():
            owner = file_of.get(node.id)
            if owner is None or (node.seq, name) < (nodes[node.id].seq, owner):
                nodes[node.id], file_of[node.id] = node, name
        self.nodes, self.file_of = nodes, file_of
        self.max_seq = max((n.seq for _, n in self.files.values()), default=-1)
        self._shape_dirty = True
        self.generation += 1  # nodes came or went: cached lines are stale

    # --- derived views ------------------------------------------------------------------------
    def _rebuild_shape(self) -> None:
        files, file_of = self.files, self.file_of
        order = [files[f][1] for f in file_of.values()]
        order.sort(key=_seq)
        if len({n.seq for n in order}) != len(order):  # two files share a seq: name decides
            order.sort(key=lambda n: (n.seq, file_of[n.id]))
        self._order = order
        self._first_conv_seq = next((n.seq for n in self._order if n.conversational
                                     and n.chain_level and not n.is_root), None)
        self._edges = None
        self._root_memo = {}
        self.max_seq = max((n.seq for _, n in self.files.values()), default=-1)
        self._shape_dirty = False

    def _shape(self) -> None:
        if self._shape_dirty:
            with gc_paused(bulk=len(self.files) > 1000):
                self._rebuild_shape()

    def ordered(self) -> list[Node]:
        """Every node in seq order (ties broken by file name)."""
        self._shape()
        return self._order

    def _children(self) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
        self._shape()
        if self._edges is None:
            edges: tuple[dict[str, list[str]], dict[str, list[str]]] = ({}, {})
            for n in self._order:
                _add_edges(edges, n)
            self._edges = edges
        return self._edges

    def children_by_pred(self, node_id: str) -> list[str]:
        return self._children()[0].get(node_id, [])

    def children_by_caller(self, node_id: str) -> list[str]:
        return self._children()[1].get(node_id, [])

    def branch_root(self, node_id: str) -> str:
        """The node where the predecessor line through ``node_id`` starts (a first turn, the
        ROOT node, a spawn root, a summary…; a dangling or cyclic line ends where it breaks).

        Memoised: a node's predecessor only changes through a shape rebuild, which clears the
        memo, and appending never changes an existing node's root, so each node is walked once.
        """
        self._shape()
        memo, nodes = self._root_memo, self.nodes
        path: list[str] = []
        append = path.append
        limit = len(nodes)
        cur = node_id
        while True:
            root = memo.get(cur)
            if root is not None:
                break
            node = nodes.get(cur)
            if node is None:
                root = cur
                break
            append(cur)
            pred = node.predecessor
            if not pred or cur == ROOT or (pred == ROOT and ROOT not in nodes):
                root = cur
                break
            if len(path) > limit:  # more steps than nodes: a cycle
                root = self._cycle_entry(node_id)
                break
            cur = pred
        memo.update(dict.fromkeys(path, root))
        return root

    def _cycle_entry(self, node_id: str) -> str:
        """The first node a predecessor walk from ``node_id`` meets twice."""
        seen: set[str] = set()
        cur = node_id
        while cur not in seen:
            seen.add(cur)
            cur = self.nodes[cur].predecessor  # type: ignore[assignment]
        return cur

    def first_conversational_seq(self) -> int | None:
        self._shape()
        return self._first_conv_seq

    @property
    def head(self) -> str | None:
        h = self.meta.get("head_id", self.meta.get("last_node_id"))
        return h if isinstance(h, str) and h else None

    def ids(self) -> Iterable[str]:
        return self.nodes.keys()
