"""A conversation line: every node a reader standing at one tip can count as "said here".

The line of a tip H is derived from the DAG alone (no format change):

- the conversation ancestors of H (the predecessor walk back to its start), H included;
- a compaction summary on that walk brings the turns it ``covers_ids`` with it: they were
  said on this line, the summary only restates them;
- a line that starts at a sub-agent's spawn root continues at the spawning node (the caller),
  because the sub-agent was started from that point of the conversation;
- the branches of sub-agents spawned from any node of the line belong to it too: the work was
  done on behalf of this line, it is not an alternative to it;
- rewound nodes are not on any line (the user rolled them back), though walks pass through.

Everything else in the session is off the line: another branch. :func:`divergence` says
where such a node leaves the line (the last shared turn) and what opened its branch.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Iterable, Iterator

from ..fsutil import check_name
from .errors import NodeNotFound
from .graph import NodeGraph
from .node import CHAIN_CALLERS, Node
from .walks import walk_back



@dataclass(frozen=True)
class Line:
    """The nodes on the line ending at ``tip`` (see the module docstring)."""

    session_id: str
    tip: str
    nodes: frozenset[str]

    def __contains__(self, node_id: object) -> bool:
        return node_id in self.nodes


@dataclass(frozen=True)
class Divergence:
    """Where node ``node_id`` leaves a line.

    ``fork_point``: the last node of the line on the way back from ``node_id`` (None when the
    branch shares no turn with the line, e.g. an edited first message). ``opening``: the first
    node of the other branch. ``kind``: ``edit`` / ``retry`` (the branch opened by editing or
    retrying ``of``), ``edited`` / ``retried`` (the original line, replaced on this line by
    ``of``), ``spawn`` (a sub-agent spawned from ``of``), ``rewound``, ``fork`` (any other
    fork) or ``missing`` (the node is not in the session any more).
    """

    node_id: str
    fork_point: str | None
    opening: str | None
    kind: str
    of: str | None = None


def _up(idx: NodeGraph, sid: str, start: str) -> Iterator[Node]:
    """Nodes from ``start`` back through predecessors, continuing at the caller of a
    same-session spawn root; raises BrokenChain on a damaged walk."""
    seen: set[str] = set()
    current: str | None = start
    while current is not None and current not in seen:
        last: Node | None = None
        for node in walk_back(idx, sid, current):
            seen.add(node.id)
            last = node
            yield node
        current = None
        if last is not None and last.is_spawn_root and last.caller not in CHAIN_CALLERS \
                and last.caller in idx.nodes:
            current = last.caller


def compute_line(idx: NodeGraph, sid: str, tip: str) -> Line:
    """The line ending at ``tip`` (O(line length + sub-agent branches on it))."""
    members: set[str] = set()
    for node in _up(idx, sid, tip):
        if not node.is_root and not node.rewound:
            members.add(node.id)
        if node.is_summary and not node.rewound:
            covered = node.metadata.get("covers_ids")
            for cid in covered if isinstance(covered, list) else ():
                other = idx.nodes.get(cid) if isinstance(cid, str) else None
                if other is not None and not other.rewound:
                    members.add(other.id)
    _add_spawned(idx, members)
    return Line(sid, tip, frozenset(members))


def _add_spawned(idx: NodeGraph, members: set[str]) -> None:
    """Add every sub-agent branch spawned from a member (and theirs, transitively)."""
    queue = list(members)
    while queue:
        node_id = queue.pop()
        for child_id in (*idx.children_by_caller(node_id), *idx.children_by_pred(node_id)):
            child = idx.nodes.get(child_id)
            if child is None or child_id in members or child.rewound \
                    or not child.is_spawn_root or not child.conversational:
                continue
            subtree = [child_id]
            while subtree:
                sub_id = subtree.pop()
                sub = idx.nodes.get(sub_id)
                if sub is None or sub_id in members or sub.rewound:
                    continue
                members.add(sub_id)
                queue.append(sub_id)
                subtree.extend(idx.children_by_pred(sub_id))


def divergence(idx: NodeGraph, sid: str, line: Line, node_id: str) -> Divergence:
    """Where ``node_id`` (a node off ``line``) leaves it; see :class:`Divergence`."""
    if node_id not in idx.nodes:
        return Divergence(node_id, None, None, "missing")
    opening: Node | None = None
    fork: str | None = None
    for node in _up(idx, sid, node_id):
        if node.id in line.nodes:
            fork = node.id
            break
        if not node.is_root:
            opening = node
    if opening is None:
        return Divergence(node_id, fork, None, "fork")
    md = opening.metadata
    if opening.rewound:
        return Divergence(node_id, fork, opening.id, "rewound")
    if opening.is_spawn_root:
        caller = opening.caller if opening.caller not in CHAIN_CALLERS else opening.predecessor
        return Divergence(node_id, fork, opening.id, "spawn", caller or None)
    if isinstance(md.get("edit_of"), str):
        return Divergence(node_id, fork, opening.id, "edit", md["edit_of"])
    if isinstance(md.get("forked_from"), str):
        return Divergence(node_id, fork, opening.id, "retry", md["forked_from"])
    for sibling in idx.children_by_pred(opening.predecessor or ""):
        smd = idx.nodes[sibling].metadata if sibling in idx.nodes else {}
        if sibling in line.nodes and opening.id in (smd.get("edit_of"), smd.get("forked_from")):
            kind = "edited" if smd.get("edit_of") == opening.id else "retried"
            return Divergence(node_id, fork, opening.id, kind, sibling)
    return Divergence(node_id, fork, opening.id, "fork")


LINE_CACHE_SIZE = 256
_Cache = OrderedDict[tuple[str, str], tuple[NodeGraph, int, Line]]


class LineOps:
    """Mixed into SessionStore: lines and divergences, read under the store's read path."""

    _lines: _Cache

    @staticmethod
    def new_cache() -> _Cache:
        return OrderedDict()

    def _forget_lines(self, sid: str) -> None:
        """Drop the cached lines of a session whose index the store let go (each entry
        holds the index it was computed on)."""
        for key in [k for k in list(self._lines) if k[0] == sid]:
            self._lines.pop(key, None)

    def line(self, sid: str, tip: str | None = None) -> Line:
        """The conversation line ending at ``tip`` (default: the head). Cached per
        (session, tip) until the session's graph changes (the index's ``generation``), so
        asking again on a long session costs the index refresh (two ``stat`` calls), not a
        walk. Unknown session or tip: NotFound; a damaged walk: BrokenChain."""
        with self._reading(sid) as idx:
            return self._line_locked(idx, sid, _tip(idx, sid, tip))

    def divergences(self, sid: str, tip: str | None,
                    node_ids: Iterable[str]) -> dict[str, Divergence]:
        """For each of ``node_ids`` off the line ending at ``tip``: where it leaves it."""
        with self._reading(sid) as idx:
            line = self._line_locked(idx, sid, _tip(idx, sid, tip))
            return {n: divergence(idx, sid, line, n) for n in node_ids if n not in line.nodes}

    def _line_locked(self, idx: NodeGraph, sid: str, tip: str) -> Line:
        key = (sid, tip)
        cached = self._lines.get(key)
        if cached is not None and cached[0] is idx and cached[1] == idx.generation:
            self._lines.move_to_end(key)
            return cached[2]
        line = compute_line(idx, sid, tip)
        self._lines[key] = (idx, idx.generation, line)
        while len(self._lines) > LINE_CACHE_SIZE:
            self._lines.popitem(last=False)
        return line


def _tip(idx: NodeGraph, sid: str, tip: str | None) -> str:
    if tip is not None:
        check_name(tip, "node id")
    chosen = tip if tip is not None else idx.head
    if chosen is None:
        raise NodeNotFound(f"session {sid} has no head turn yet")
    if chosen not in idx.nodes:
        raise NodeNotFound(f"node {chosen} not found in session {sid}")
    return chosen
