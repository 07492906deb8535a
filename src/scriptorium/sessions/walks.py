"""Read-only walks over one session's index: a branch (predecessor walk) and its live tips.

Pure functions of a :class:`~.graph.NodeGraph`, so they can be tested and reasoned about apart
from locking and files.
"""

from __future__ import annotations

from typing import Iterator

from .errors import BrokenChain, NodeNotFound
from .graph import NodeGraph
from .node import ROOT, Node


def empty_tip(idx: NodeGraph, tip: str | None) -> bool:
    """No branch to walk from ``tip``: none, or ``ROOT`` (a session rewound to its start; the
    reference writes the sentinel even when no ROOT node was seeded)."""
    return tip is None or (tip == ROOT and (ROOT not in idx.nodes or idx.nodes[ROOT].is_root))


def legal_start(idx: NodeGraph, node: Node) -> bool:
    """May a walk end at ``node`` although it has no predecessor? (reference §3.3)"""
    if node.is_spawn_root or node.is_root or not node.conversational:
        return True
    if "covers_ids" in node.metadata or node.metadata.get("caller_session"):
        return True
    if not node.chain_level:
        return True  # a sub-call subtree root (the append invariant lets it in)
    first = idx.first_conversational_seq()
    return first is None or node.seq <= first


def walk_back(idx: NodeGraph, sid: str, head: str) -> Iterator[Node]:
    """Nodes from ``head`` back to a legal terminus, head first, nothing filtered; lazy, so a
    caller that stops early never pays for the rest of a long branch.

    A dangling predecessor or a cycle is damage, not an end: it raises BrokenChain when the
    walk reaches it.
    """
    node = idx.nodes.get(head)
    if node is None:
        raise NodeNotFound(f"node {head} not found in session {sid}")
    seen: set[str] = set()
    while True:
        if node.id in seen:
            raise BrokenChain(f"session {sid}: predecessor cycle through node {node.id}")
        seen.add(node.id)
        yield node
        pred = node.predecessor
        if pred:
            if pred == ROOT:
                root = idx.nodes.get(ROOT)
                if root is None or node.id == ROOT:
                    return  # "ROOT" with no ROOT node is a legal terminus
                node = root
                continue
            nxt = idx.nodes.get(pred)
            if nxt is None:
                raise BrokenChain(
                    f"session {sid}: node {node.id} has a dangling predecessor {pred}")
            node = nxt
            continue
        if legal_start(idx, node):
            return
        raise BrokenChain(f"session {sid}: node {node.id} has no predecessor and is not a "
                          f"first turn, spawn root or summary")


def raw_chain(idx: NodeGraph, sid: str, head: str) -> list[Node]:
    """Nodes from ``head`` back to a legal terminus, head first, nothing filtered."""
    return list(walk_back(idx, sid, head))


def branch(idx: NodeGraph, sid: str, head: str) -> list[Node]:
    """The branch ending at ``head``, oldest first, without root and rewound nodes."""
    chain = raw_chain(idx, sid, head)
    chain.reverse()
    return [n for n in chain if not n.is_root and not n.rewound]


def _caller_ok(idx: NodeGraph, node: Node) -> bool:
    """A node hung on a real caller counts only if that caller is a turn (spawn roots)."""
    if node.chain_level:
        return True
    caller = idx.nodes.get(node.caller)
    return caller is None or caller.conversational  # unknown locally: cross-session spawn


def _conv_child(idx: NodeGraph, node: Node) -> bool:
    """Could ``node`` continue its predecessor's line? (runtime handled by the caller)"""
    return (node.conversational and not node.is_root and not node.is_attach
            and not node.is_context and not node.is_summary and not node.rewound
            and _caller_ok(idx, node))


def is_candidate(idx: NodeGraph, node: Node, merged: set[str]) -> bool:
    """May ``node`` be reported as a branch tip at all?"""
    return (node.conversational and not node.is_root and not node.is_summary
            and not node.is_context and not node.is_attach and not node.is_runtime
            and not node.rewound and node.id not in merged and _caller_ok(idx, node))


def continued(idx: NodeGraph) -> set[str]:
    """Ids whose line goes on: a non-runtime conversational child, or a runtime child that
    itself (transitively) goes on. Runtime notices are transparent for tip detection."""
    done: set[str] = set()
    queue: list[Node] = []
    for node in idx.ordered():
        pred = node.predecessor
        if pred and pred not in done and _conv_child(idx, node) and not node.is_runtime:
            done.add(pred)
            parent = idx.nodes.get(pred)
            if parent is not None:
                queue.append(parent)
    # propagate upward through runtime notices: if a notice goes on, so does its parent
    while queue:
        node = queue.pop()
        if node.is_runtime and _conv_child(idx, node):
            pred = node.predecessor
            if pred and pred not in done:
                done.add(pred)
                parent = idx.nodes.get(pred)
                if parent is not None:
                    queue.append(parent)
    return done


def tips(idx: NodeGraph) -> list[Node]:
    """Every live tip (reference §3.4, minus rewound tips and runtime-only continuations)."""
    merged = set(idx.meta.get("merged_heads") or [])
    going_on = continued(idx)
    return [n for n in idx.ordered()
            if n.id not in going_on and is_candidate(idx, n, merged)]
