"""Appending and moving the head: the write operations every session store shares.

Each runs inside the store's locked write (:class:`~.ops.LockedStore`): the directory store's
file lock, the PostgreSQL store's row lock in a transaction. Only the primitives differ (how a
node and the session's meta are stored); the rules (idempotence by id, the append invariant,
the chain-extension rule for the head, the activity clock) are written once, here.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..fsutil import check_name
from .checks import Added, check_same
from .errors import AppendRefused, HeadRefused, NodeNotFound
from .graph import NodeGraph
from .node import CHAIN_CALLERS, ROOT, Node, node_from_message
from .ops import LockedStore, Op

log = logging.getLogger(__name__)


def next_activity(prev: object) -> float:
    """The session's new ``updated_at``: now, but always later than ``prev`` (the activity
    clock must move on every append, even when the wall clock did not)."""
    now = time.time()
    if isinstance(prev, (int, float)) and now <= prev:
        now = prev + 1e-6
    return now


class AppendOps:
    """Mixed into both session stores."""

    def append_message(self: LockedStore, sid: str, msg: dict[str, Any], *,
                       commit: bool | None = None) -> str:
        """Append one message as a node; idempotent by id. ``commit=None`` commits a git turn
        when the node completes one (a chain-level assistant reply to a user turn). A failed
        commit does not undo the stored node: it is logged (see :meth:`add` to receive it)."""
        return self._add(sid, msg, None, commit, strict=False).node_id

    def add(self: LockedStore, sid: str, msg: dict[str, Any], *, after: str | None = None,
            commit: bool | None = None) -> Added:
        """Append ``msg`` (after the head, or as a fork after ``after``) and say what happened.

        Unlike :meth:`append_message`, an id that is already stored with a different role or
        text is refused (InvalidInput); the identical retry adds nothing (``created`` False)
        and commits the history a failed commit left behind."""
        return self._add(sid, msg, after, commit, strict=True)

    def _add(self: LockedStore, sid: str, msg: dict[str, Any], after: str | None,
             commit: bool | None, *,
             strict: bool) -> Added:
        if after is not None:
            check_name(after, "node id")
            msg = dict(msg, predecessor=after)
        with self._writing(sid) as op:
            if after is not None and after != ROOT and after not in op.idx.nodes:
                raise NodeNotFound(f"node {after} not found in session {sid}")
            node, named = node_from_message(
                msg, default_predecessor=after or op.idx.head or ROOT)
            existing = op.idx.nodes.get(node.id)
            if strict and existing is not None:
                check_same(sid, existing, node, named)
            created = self._append_locked(op, node, advance=after is None)
            if after is not None:
                self._move_head(op, node.id)
            if created or strict:
                self._maybe_commit(op, op.idx.nodes[node.id], commit)
            head = op.idx.head
        for warning in op.warnings:
            log.warning("%s", warning)
        return Added(node.id, head, created, op.warnings)

    def append_after(self: LockedStore, sid: str, after: str, msg: dict[str, Any], *,
                     commit: bool | None = None) -> str:
        """Append ``msg`` as a child of ``after`` and make it the head (a fork)."""
        return self._add(sid, msg, after, commit, strict=False).node_id

    def _append_locked(self: LockedStore, op: Op, node: Node, *, advance: bool = True) -> bool:
        """Validate and write ``node`` (lock held, index fresh); False if the id exists.

        Head advance is the chain-extension rule: a chain-level node (caller ``""`` or
        ``"ROOT"``; summaries and the root excepted) whose predecessor is the head, or any
        chain-level node when there is no head. Forks move the head explicitly.
        """
        idx, sid = op.idx, op.sid
        if node.id in idx.nodes:
            return False
        pred = node.predecessor
        if pred and pred != ROOT and pred not in idx.nodes:
            raise AppendRefused(
                f"session {sid}: predecessor {pred} of node {node.id} does not exist")
        caller = node.caller or ""
        if (caller not in CHAIN_CALLERS and caller not in idx.nodes
                and not node.metadata.get("caller_session")):
            raise AppendRefused(f"session {sid}: caller {caller} of node {node.id} does not exist")
        self._check_invariant(idx, sid, node)
        node.seq = idx.max_seq + 1
        self._store_node(op, node)
        meta = self._meta_for_write(idx)
        meta["updated_at"] = next_activity(meta.get("updated_at"))
        head = idx.head
        if (advance and node.chain_level and not node.is_summary and not node.is_root
                and (head is None or node.predecessor == head)):
            meta["head_id"] = node.id
            op.events.append((sid, head, node.id))
        try:
            self._write_meta(idx, meta)
        except OSError:  # a full disk: the add fails, so it stores nothing
            self._unstore_node(op, node)
            raise
        return True

    def _unstore_node(self: LockedStore, op: Op, node: Node) -> None:
        """Take back the node an add stored before it failed. A store that writes a node and
        its meta in one transaction has nothing to take back (the directory store does)."""


    # --- head ---------------------------------------------------------------------------------
    def set_head(self: LockedStore, sid: str, node_id: str | None) -> None:
        """THE head move: refuses unknown nodes and summaries, announces (sid, old, new)."""
        if node_id is not None:
            check_name(node_id, "node id")
        with self._writing(sid) as op:
            self._move_head(op, node_id)

    def _move_head(self: LockedStore, op: Op, node_id: str | None) -> None:
        idx = op.idx
        if node_id is not None:
            node = idx.nodes.get(node_id)
            if node is None:
                raise NodeNotFound(f"node {node_id} not found in session {op.sid}")
            if node.is_summary:
                raise HeadRefused(f"session {op.sid}: node {node_id} is a compaction summary "
                                  f"and cannot be the head")
        old = idx.head
        if old == node_id and idx.meta_present:
            return
        meta = self._meta_for_write(idx)
        meta["head_id"] = node_id
        self._write_meta(idx, meta)
        if old != node_id:
            op.events.append((op.sid, old, node_id))

    @staticmethod
    def _check_invariant(idx: NodeGraph, sid: str, node: Node) -> None:
        """Reference §3.2: a top-level turn with no predecessor must be the first turn,
        a spawn root, a summary or the root."""
        if node.role not in ("user", "llm"):
            return
        if node.role == "user" and node.input is not None:
            return  # an ask_user answer
        if not node.chain_level or node.predecessor:
            return
        if node.is_root or node.is_spawn_root or "covers_ids" in node.metadata:
            return
        if idx.first_conversational_seq() is not None:
            raise AppendRefused(f"session {sid}: node {node.id} has no predecessor and is not "
                                f"the first turn, a spawn root, a summary or the root")
