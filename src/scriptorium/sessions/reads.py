"""Reading a session: meta, head, nodes, branches and their tails, the live tips.

Shared by both session stores: each read runs on the store's fresh graph of the session
(``_reading``), so the answers (and the errors) are the same on either home.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from ..fsutil import check_name
from . import walks
from .errors import NodeNotFound
from .node import Node
from .ops import LockedStore


class ReadOps:
    """Mixed into both session stores."""

    def get_meta(self: LockedStore, sid: str) -> dict[str, Any]:
        """A copy of meta.json (defaults for a history-only session)."""
        with self._reading(sid) as idx:
            meta = json.loads(json.dumps(idx.meta)) if idx.meta_present else {}
            meta.setdefault("id", sid)
            meta.setdefault("title", "")
            meta.setdefault("head_id", idx.head)
            return meta

    def head(self: LockedStore, sid: str) -> str | None:
        with self._reading(sid) as idx:
            return idx.head

    def get_node(self: LockedStore, sid: str, node_id: str) -> Node:
        check_name(node_id, "node id")
        with self._reading(sid) as idx:
            node = idx.nodes.get(node_id)
            if node is None:
                raise NodeNotFound(f"node {node_id} not found in session {sid}")
            return node.copy()

    def get_nodes(self: LockedStore, sid: str) -> list[Node]:
        """Every node, raw and unfiltered, in seq order."""
        with self._reading(sid) as idx:
            return [n.copy() for n in idx.ordered()]

    def branch_view(self: LockedStore, sid: str, head: str | None = None) -> dict[str, Any]:
        """One consistent read for ``session show``: the session head, the tip walked from
        and the branch's message dicts."""
        if head is not None:
            check_name(head, "node id")
        with self._reading(sid) as idx:
            tip = head if head is not None else idx.head
            msgs = [] if tip is None or walks.empty_tip(idx, tip) else [
                n.to_message(sid) for n in walks.branch(idx, sid, tip)]
            return {"session_id": sid, "head_id": idx.head, "tip": tip, "messages": msgs}

    # --- reads --------------------------------------------------------------------------------
    def get_branch(self: LockedStore, sid: str, head: str | None = None) -> list[dict[str, Any]]:
        """The branch ending at ``head`` (default: the session head) as message dicts, oldest
        first; root and rewound nodes dropped, summaries never spliced in."""
        if head is not None:
            check_name(head, "node id")
        with self._reading(sid) as idx:
            h = head if head is not None else idx.head
            if h is None or walks.empty_tip(idx, h):
                return []
            return [n.to_message(sid) for n in walks.branch(idx, sid, h)]

    def branch_tail(self: LockedStore, sid: str, head: str | None = None, *,
                    stop: Callable[[dict[str, Any]], bool]
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The newest part of a branch: the messages after the newest one for which
        ``stop(message)`` is true (all of them if none is), oldest first, with root and
        rewound nodes dropped as in :meth:`get_branch` — plus the message of the node the
        branch starts at (None for an empty session).

        The walk goes back from ``head`` and ends at the first stop, so its cost follows the
        length of the tail, not of the session: memory asks "what is after my last mark?".
        """
        if head is not None:
            check_name(head, "node id")
        with self._reading(sid) as idx:
            h = head if head is not None else idx.head
            if h is None or walks.empty_tip(idx, h):
                return [], None
            tail: list[dict[str, Any]] = []
            for node in walks.walk_back(idx, sid, h):
                if node.is_root or node.rewound:
                    continue
                message = node.to_message(sid)
                if stop(message):
                    break
                tail.append(message)
            tail.reverse()
            root = idx.nodes.get(idx.branch_root(h))
            return tail, (root.to_message(sid) if root is not None else None)

    def list_branches(self: LockedStore, sid: str) -> list[dict[str, Any]]:
        """Every live tip, the head first, then newest (by seq) first."""
        with self._reading(sid) as idx:
            head = idx.head
            found = walks.tips(idx)
            if (head is not None and head in idx.nodes and not idx.nodes[head].is_root
                    and all(n.id != head for n in found)):
                found.append(idx.nodes[head])
            named = idx.meta.get("branches")
            branches: dict[str, Any] = named if isinstance(named, dict) else {}
            rows: list[dict[str, Any]] = []
            for n in found:
                entry = branches.get(n.id)
                name = entry if isinstance(entry, str) else None
                archived, updated = False, n.created_at
                if isinstance(entry, dict):
                    name = entry.get("name") if isinstance(entry.get("name"), str) else None
                    archived = bool(entry.get("archived"))
                    if isinstance(entry.get("updated_at"), (int, float)):
                        updated = entry["updated_at"]
                rows.append({"tip": n.id, "head_msg_id": n.id, "head": n.id == head,
                             "archived": archived, "name": name, "updated_at": updated,
                             "created_at": n.created_at, "seq": n.seq})
            rows.sort(key=lambda r: (not r["head"], -r["seq"]))
            return rows
