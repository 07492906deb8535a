"""Operations that reshape a session: retry, edit, rewind, spawn and compaction.

A fork is never a new node type: the new node takes the same predecessor as the node it
replaces, so one predecessor gets several conversational children (reference §3.6). Each
operation runs under the session lock as one unit (append, head move, commit) so another
process never sees the new node without its head move.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import InvalidInput
from ..fsutil import check_name, check_text
from . import walks
from .checks import check_same
from .errors import NodeNotFound, SessionNotFound
from .kinds import SUMMARY_NAME
from .node import ROOT, Node, new_id

from .ops import LockedStore, Op

SUMMARY_PREFIX = "[Previous conversation summary]\n"


def _text(text: Any, what: str) -> str:
    if not isinstance(text, str):
        raise InvalidInput(f"invalid {what}: expected a string, got {type(text).__name__}")
    check_text(text, what)
    return text


def _get(op: Op, node_id: str) -> Node:
    node = op.idx.nodes.get(check_name(node_id, "node id"))
    if node is None:
        raise NodeNotFound(f"node {node_id} not found in session {op.sid}")
    return node


def _append_new(store: LockedStore, op: Op, node: Node) -> bool:
    """Append ``node`` (head not advanced); False for the identical retry of a call with the
    same explicit ``node_id``, InvalidInput when that id holds other content."""
    existing = op.idx.nodes.get(node.id)
    if existing is not None:
        check_same(op.sid, existing, node, named_predecessor=True)
    return store._append_locked(op, node, advance=False)


class ForkOps:
    """Mixed into SessionStore; every method takes the session lock once."""

    def retry(self: LockedStore, sid: str, reply_id: str, text: str, *,
              node_id: str | None = None) -> str:
        """A new sibling of assistant reply ``reply_id`` (same predecessor); it becomes the head."""
        text = _text(text, "retry text")
        if node_id is not None:
            check_name(node_id, "node id")
        with self._writing(sid) as op:
            reply = _get(op, reply_id)
            if reply.role != "llm" or reply.is_summary or reply.is_root:
                raise InvalidInput(f"session {sid}: node {reply_id} is not an assistant reply")
            md: dict[str, Any] = {"forked_from": reply_id}
            if reply.metadata.get("caller_session"):
                md["caller_session"] = reply.metadata["caller_session"]
            node = Node(id=node_id or new_id(), created_at=time.time(), role="llm",
                        name=reply.name, output=text, caller=reply.caller,
                        predecessor=reply.predecessor, metadata=md)
            created = _append_new(self, op, node)
            self._move_head(op, node.id)
            if created:
                self._maybe_commit(op, node, None)
            return node.id

    def edit(self: LockedStore, sid: str, user_node_id: str, text: str, *,
             node_id: str | None = None) -> str:
        """A new sibling of user message ``user_node_id`` with new text; it becomes the head.
        Editing the first turn forks at ``"ROOT"``."""
        text = _text(text, "edit text")
        if node_id is not None:
            check_name(node_id, "node id")
        with self._writing(sid) as op:
            src = _get(op, user_node_id)
            if src.role != "user" or src.is_root or src.is_runtime:
                raise InvalidInput(f"session {sid}: node {user_node_id} is not a user message")
            md: dict[str, Any] = {"forked_from": src.id, "edit_of": src.id}
            caller, pred = src.caller, src.predecessor
            if pred is None and not src.chain_level:
                # a spawn root: the edit is another root on the same spawner
                for key in ("spawn_branch_root", "source", "caller_session"):
                    if key in src.metadata:
                        md[key] = src.metadata[key]
            else:
                pred = pred or ROOT
            node = Node(id=node_id or new_id(), created_at=time.time(), role="user",
                        output=text, caller=caller, predecessor=pred, metadata=md)
            _append_new(self, op, node)
            self._move_head(op, node.id)
            return node.id

    def rewind(self: LockedStore, sid: str, target_id: str) -> dict:
        """Retire the active chain from the head back to ``target_id`` (and the sub-call
        subtrees hanging on it): stamp them ``rewound``, move the head to the target's
        predecessor, commit "rewind"."""
        with self._writing(sid) as op:
            idx = op.idx
            target = _get(op, target_id)
            if target.is_root:
                raise InvalidInput(f"session {sid}: node {target_id} is the root, not a turn")
            head = idx.head
            if head is None:
                raise InvalidInput(f"session {sid} has no head; nothing to rewind")
            chain = walks.raw_chain(idx, sid, head)
            pos = next((i for i, n in enumerate(chain) if n.id == target_id), None)
            if pos is None:
                raise InvalidInput(
                    f"session {sid}: node {target_id} is not on the active chain (head {head})")
            marks: set[str] = set()
            stack = [n.id for n in chain[: pos + 1]]
            segment = set(stack)
            while stack:
                nid = stack.pop()
                if nid in marks:
                    continue
                marks.add(nid)
                stack.extend(idx.children_by_caller(nid))
                if nid not in segment:  # inside a sub-call subtree: follow its own chain too
                    stack.extend(idx.children_by_pred(nid))
            now = time.time()
            stamped = []
            for node in idx.ordered():
                if node.id in marks and not node.is_root and not node.rewound:
                    stamped.append(node.id)
            self._rewrite_metadata_locked(
                op, {nid: {"rewound": True, "rewound_at": now} for nid in stamped})
            # As the reference: the head goes to the target's predecessor, which for a first
            # turn is the seeded ROOT node (null only when the session has no ROOT node).
            pred = target.predecessor
            new_head = pred if pred and pred in idx.nodes else None
            self._move_head(op, new_head)
            if self.git:
                self._commit(op, "rewind", soft=True)
            out = {"new_head_id": new_head, "nodes_rewound": stamped,
                   "user_text": target.text() if target.role == "user" else ""}
            if op.warnings:
                out["warnings"] = list(op.warnings)
            return out

    def spawn(self: LockedStore, sid: str, caller: str, text: str, *,
              node_id: str | None = None, register_head: bool = False,
              caller_session: str | None = None) -> str:
        """Open a spawn branch: a user root with no predecessor hung on ``caller``.

        Same-session by default (the caller must exist; the head stays where it is). With
        ``caller_session`` the caller lives in that other session and is not checked here.
        """
        text = _text(text, "spawn text")
        check_name(caller, "caller id")
        if node_id is not None:
            check_name(node_id, "node id")
        md: dict[str, Any] = {"source": "agent_spawn", "spawn_branch_root": True}
        if caller_session is not None:
            check_name(caller_session, "caller session id")
            if not self.exists(caller_session):
                raise SessionNotFound(f"caller session {caller_session} not found under "
                                      f"{self.root}")
            md["caller_session"] = caller_session
        with self._writing(sid) as op:
            if caller_session is None:
                _get(op, caller)
            node = Node(id=node_id or new_id(), created_at=time.time(), role="user",
                        output=text, caller=caller, predecessor=None, metadata=md)
            _append_new(self, op, node)
            if register_head:
                self._move_head(op, node.id)
            return node.id

    def compact(self: LockedStore, sid: str, covers_ids: list[str], text: str, *,
                node_id: str | None = None) -> str:
        """Append a compaction summary of a contiguous chain segment as a sibling of its
        first node (no clone, no edge rewrite, no head move)."""
        text = _text(text, "summary text")
        if not isinstance(covers_ids, list) or not covers_ids:
            raise InvalidInput(f"session {sid}: covers_ids must be a non-empty list of node ids")
        for cid in covers_ids:
            check_name(cid, "covered node id")
        if len(set(covers_ids)) != len(covers_ids):
            raise InvalidInput(f"session {sid}: covers_ids repeats a node")
        if node_id is not None:
            check_name(node_id, "node id")
        with self._writing(sid) as op:
            covered = [_get(op, cid) for cid in covers_ids]
            for prev, cur in zip(covered, covered[1:]):
                if cur.predecessor != prev.id:
                    raise InvalidInput(f"session {sid}: covers_ids is not a contiguous chain "
                                       f"segment ({cur.id} does not follow {prev.id})")
            for n in covered:
                if n.is_summary or n.is_root or not n.conversational or not n.chain_level:
                    raise InvalidInput(f"session {sid}: node {n.id} is not a chain turn "
                                       f"and cannot be summarised")
            first = covered[0]
            body = text if text.startswith(SUMMARY_PREFIX) else SUMMARY_PREFIX + text
            node = Node(id=node_id or f"summary_{new_id(5)}",
                        created_at=first.created_at - 1e-6, role="llm", name=SUMMARY_NAME,
                        output=body, caller="", predecessor=first.predecessor,
                        metadata={"covers_ids": list(covers_ids), "compaction": True,
                                  "source": "compaction", "type": "compactionSummary"})
            created = _append_new(self, op, node)
            if created:
                meta = self._meta_for_write(op.idx)
                meta.update({"_last_summary_id": node.id, "_last_summary_text": text,
                             "_last_compacted_at": time.time()})
                self._write_meta(op.idx, meta)
            return node.id
