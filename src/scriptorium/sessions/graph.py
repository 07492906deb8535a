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

from ..heap import gc_paused
from .node import CHAIN_CALLERS, ROOT, Node
from .nodefiles import StatKey

_seq = attrgetter("seq")
# branch_root remembers the root of every this-many-th node of a line it walked
ROOT_MEMO_STRIDE = 64


def _add_edges(edges: tuple[dict[str, list[str]], dict[str, list[str]]], node: Node) -> None:
    if node.predecessor:
        edges[0].setdefault(node.predecessor, []).append(node.id)
    if node.caller and node.caller not in CHAIN_CALLERS:
        edges[1].setdefault(node.caller, []).append(node.id)


def _opens_chain(node: Node) -> bool:
    """Can ``node`` be a session's first turn (what ``first_conversational_seq`` looks for)?"""
    return node.conversational and node.chain_level and not node.is_root


def earlier(node: Node, name: str, other: Node, owner: str) -> bool:
    """Of two files claiming one id, does ``node`` (in ``name``) win over ``other`` (in
    ``owner``)? The earliest by (seq, file name), so every process picks the same one."""
    return (node.seq, name) < (other.seq, owner)


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
        # id -> slot of the node ``nodes`` holds; None until first asked for after a bulk
        # load (a cold read never needs it, see ``file_of``)
        self._file_of: dict[str, str] | None = {}
        self.meta: dict[str, Any] = {}
        self.meta_present = False
        # derived structures, each rebuilt lazily when first asked for after the shape
        # changed (``_reshape``): a cold read that only walks a branch never sorts the nodes
        self._shape_dirty = True  # the seq order and the edges
        self._order: list[Node] = []
        # children by predecessor and by caller: built on first use (most reads need none)
        self._edges: tuple[dict[str, list[str]], dict[str, list[str]]] | None = None
        self._first_conv_seq: int | None = None
        self._first_conv_known = False
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
        prev = self.nodes.get(node.id)
        if prev is not None and (old is None or old[1] is not prev):
            # Two files claim one id: keep the earliest by (seq, name); shape is rebuilt.
            file_of = self.file_of
            owner = file_of[node.id]
            if earlier(node, name, prev, owner):
                file_of[node.id] = name
                self.nodes[node.id] = node
            self._reshape()
            return
        if old is not None and old[1].id != node.id:
            self._reindex_ids()  # the file now holds another id (a hand edit): rare
            return
        self.nodes[node.id] = node
        if self._file_of is not None:
            self._file_of[node.id] = name
        if prev is None:
            self._add_shape(node)
        elif (prev.seq, prev.predecessor, prev.caller, prev.role) != (
                node.seq, node.predecessor, node.caller, node.role):
            self._reshape()
        elif not self._shape_dirty and not self._order_swap(prev, node):
            # same place in the graph, but the seq order holds the old object
            self._reshape()

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
        if self._first_conv_known and _opens_chain(node) and (
                self._first_conv_seq is None or node.seq < self._first_conv_seq):
            self._first_conv_seq = node.seq
        if self._shape_dirty:
            return
        if self._order and node.seq <= self._order[-1].seq:
            self._reshape()
            return
        self._order.append(node)
        if self._edges is not None:
            _add_edges(self._edges, node)

    def _reshape(self) -> None:
        """A node's place in the graph changed, or nodes came or went: every derived view
        is rebuilt when next asked for."""
        self._shape_dirty = True
        self._first_conv_known = False
        self._root_memo = {}

    def _reindex_ids(self) -> None:
        """Rebuild id -> file from the files in one pass (after files vanished or changed
        id); for an id held by two files the earliest by (seq, name) wins."""
        nodes: dict[str, Node] = {}
        file_of: dict[str, str] = {}
        for name, (_, node) in self.files.items():
            owner = file_of.get(node.id)
            if owner is None or earlier(node, name, nodes[node.id], owner):
                nodes[node.id], file_of[node.id] = node, name
        self._indexed(nodes, file_of, max((n.seq for _, n in self.files.values()), default=-1))

    def _indexed(self, nodes: dict[str, Node], file_of: dict[str, str] | None,
                 max_seq: int) -> None:
        """Take a freshly built id index (its nodes, id -> slot or None to derive that when
        first asked for, the highest seq of any slot): the derived views are rebuilt when
        next asked for."""
        self.nodes, self._file_of, self.max_seq = nodes, file_of, max_seq
        self._reshape()
        self.generation += 1  # nodes came or went: cached lines are stale

    @property
    def file_of(self) -> dict[str, str]:
        """id -> the slot holding the node ``nodes`` has for that id. After a bulk load it
        is derived on first use (one pass), since most reads never ask."""
        if self._file_of is None:
            nodes = self.nodes
            self._file_of = {node.id: name for name, (_, node) in self.files.items()
                             if nodes.get(node.id) is node}
        return self._file_of

    def file_name(self, node_id: str) -> str:
        """The slot of node ``node_id`` (KeyError if unknown): its canonical file name when
        that slot holds it, so a mark right after a cold open derives no map."""
        if self._file_of is None:
            node = self.nodes[node_id]
            name = node.filename()
            held = self.files.get(name)
            if held is not None and held[1] is node:
                return name
        return self.file_of[node_id]

    # --- derived views ------------------------------------------------------------------------
    def _rebuild_shape(self) -> None:
        order = list(self.nodes.values())
        order.sort(key=_seq)
        if len({n.seq for n in order}) != len(order):  # two files share a seq: name decides
            file_of = self.file_of
            order.sort(key=lambda n: (n.seq, file_of[n.id]))
        self._order = order
        self._first_conv_seq = next((n.seq for n in order if _opens_chain(n)), None)
        self._first_conv_known = True
        self._edges = None
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

        Memoised sparsely: the start of each walk and every ROOT_MEMO_STRIDE-th node on it,
        so a later walk from anywhere on (or joining) a walked line stops within that many
        steps, and the first walk of a cold open builds no map of every node. A node's
        predecessor only changes through ``_reshape``, which clears the memo, and appending
        never changes an existing node's root. Needs no seq order: a cold read that walks
        one branch sorts nothing.
        """
        memo, nodes = self._root_memo, self.nodes
        memo_get, node_get = memo.get, nodes.get
        path: list[str] = []
        append = path.append
        rootless = ROOT not in nodes  # "ROOT" with no ROOT node ends a line
        cur = node_id
        for _ in range(len(nodes) + 1):
            root = memo_get(cur)
            if root is not None:
                break
            node = node_get(cur)
            if node is None:
                root = cur
                break
            append(cur)
            pred = node.predecessor
            if not pred or cur == ROOT or (rootless and pred == ROOT):
                root = cur
                break
            cur = pred
        else:  # more steps than nodes: a cycle
            root = self._cycle_entry(node_id)
        memo.update(dict.fromkeys(path[::ROOT_MEMO_STRIDE], root))
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
        """The seq of the session's first turn (None before one): one pass over the nodes
        after a change of shape, no sort."""
        if not self._first_conv_known:
            self._first_conv_seq = min((n.seq for n in self.nodes.values() if _opens_chain(n)),
                                       default=None)
            self._first_conv_known = True
        return self._first_conv_seq

    @property
    def head(self) -> str | None:
        h = self.meta.get("head_id", self.meta.get("last_node_id"))
        return h if isinstance(h, str) and h else None

    def ids(self) -> Iterable[str]:
        return self.nodes.keys()
