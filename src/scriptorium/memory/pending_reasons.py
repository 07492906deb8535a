"""Why a live branch still owes turns to memory: one function every reader asks.

``memory status`` lists what a branch owes; people also want to know *why* it is still owed:
the per-turn write waits for the threshold, a one-turn retry is a rejected reply that waits,
the last write failed and will not be retried by itself, or the workspace still carries legacy
cursors. The rules live here, once, so the page (``scriptorium view``), status and the report
after a write (``Memory.still_pending``) follow the write path when its rules change
(side-branch rule, per-branch failure records): change :func:`_why`, and every reader follows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

from .records import MARK_KEY, Record, is_record, records, total_tokens
from .side_branches import ARCHIVED, AT_BOUNDARY, FAILURE, REJECTED_REPLY
from .watcher import STATE_FILE as WATCHER_STATE

if TYPE_CHECKING:  # pragma: no cover
    from .view import MemoryView


@dataclass
class PendingReason:
    """Why one branch still owes ``turns`` turns: a stable ``code`` and a sentence."""

    code: str  # nothing_pending | migration_pending | failed_write | rejected_reply |
    #            below_threshold | due; right after a write also failure (that write failed),
    #            archived_branch, session_boundary (the per-turn path leaves side branches)
    message: str
    turns: int = 0
    tokens: int = 0
    threshold: int = 0
    failure: dict[str, Any] | None = None
    pending_ids: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "turns": self.turns,
                "tokens": self.tokens, "threshold": self.threshold, "failure": self.failure,
                "pending_ids": list(self.pending_ids)}


def recorded_failures(memory: "MemoryView") -> dict[str, dict[str, Any]]:
    """session id -> the last non-retryable write failure the runtime recorded for it.

    Read tolerantly: this is a diagnosis, so an unreadable state file means "none known",
    never an error that hides the rest of the answer.
    """
    path = memory.workspace.runtime_dir / WATCHER_STATE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    failures = data.get("failures") if isinstance(data, dict) else None
    if not isinstance(failures, dict):
        return {}
    return {sid: f for sid, f in failures.items()
            if isinstance(sid, str) and isinstance(f, dict) and f.get("reason_code")}


@dataclass(frozen=True)
class AfterWrite:
    """The report right after a write: which path ran (``boundary``: the forced,
    session-boundary write) and its failure (None when it succeeded)."""

    boundary: bool
    failure: dict[str, Any] | None = None


def _why(memory: "MemoryView", session_id: str, tip: str, pending: Sequence[Record], *,
         is_head: bool, failure: dict[str, Any] | None, migration: bool, now: float,
         archived: bool = False, after: AfterWrite | None = None) -> PendingReason:
    threshold = memory.settings.trigger_tokens
    tokens = total_tokens(pending)
    base: dict[str, Any] = {"turns": len(pending), "tokens": tokens, "threshold": threshold,
                            "pending_ids": [r.node_id for r in pending]}
    if not pending:
        return PendingReason("nothing_pending", "every turn of this branch is in memory", **base)
    if after is not None and after.failure is not None:
        return PendingReason(FAILURE, f"this write failed: {after.failure.get('reason_code')}: "
                                      f"{after.failure.get('message', '')}",
                             failure=dict(after.failure), **base)
    if archived:
        return PendingReason(ARCHIVED, "an archived branch: memory does not write it", **base)
    if migration:
        return PendingReason("migration_pending",
                             "the workspace still carries legacy position cursors: the next "
                             "write (or `memory migrate`) marks what memory already holds",
                             **base)
    if failure is not None:
        return PendingReason(
            "failed_write",
            f"the last write of this session failed for good: {failure.get('reason_code')}: "
            f"{failure.get('message', '')} — retried once the session or the configuration "
            f"changes, or with `memory watch --retry-failed`",
            failure=dict(failure), **base)
    reached = tokens >= threshold
    if is_head:
        newest = max((r.timestamp for r in pending if isinstance(r.timestamp, (int, float))),
                     default=None)
        idle = newest is not None and now - newest >= memory.settings.idle_allowance_seconds
        if reached or idle:
            why = (f"it reached the threshold ({tokens} of {threshold} tokens)" if reached
                   else "its newest turn is older than the idle allowance")
            return PendingReason("due", f"due: {why}; the next write (per turn or at the "
                                        f"session boundary) takes it", **base)
        return PendingReason(
            "below_threshold",
            f"below the threshold ({tokens} of {threshold} tokens): the per-turn write waits; "
            f"the session-boundary write takes the head whatever it holds", **base)
    if after is not None and not after.boundary:
        return PendingReason(AT_BOUNDARY, "an off-head line: the per-turn write leaves it to "
                                          "the session-boundary write", **base)
    # the write path's own rule for off-head lines (``[memory] side_branches``)
    due, held = memory.side_branch_due(session_id, tip, list(pending))
    if due:
        rule = memory.settings.side_branches
        why = (f"it reached the threshold ({tokens} of {threshold} tokens)" if reached
               else f"the side-branch rule {rule!r} takes this line whatever it holds")
        return PendingReason("due", f"due at the next session-boundary write: {why}", **base)
    if held == REJECTED_REPLY:
        return PendingReason(
            "rejected_reply",
            f"a rejected reply: an off-head line holding only assistant turns after its fork "
            f"point ({tokens} tokens) waits until it reaches the threshold ({threshold})",
            **base)
    return PendingReason(
        "below_threshold",
        f"below the threshold ({tokens} of {threshold} tokens): the session-boundary write "
        f"takes off-head lines only once they reach it", **base)


def pending_by_tip(memory: "MemoryView", session_id: str,
                   tips: Sequence[str]) -> dict[str, list[Record]]:
    """tip -> ``memory.pending(session_id, tip)`` for many tips at once.

    Each tip walks back (as ``Memory.pending`` does) but also stops at a node an earlier walk
    passed; from there on its backlog is that walk's, so lines that share an unwritten trunk
    cost the trunk once, not once per tip (a session never written, with a hundred forks).
    """
    workspace_id = memory.workspace_id
    # node -> (a backlog through it, how many of its records, how many messages, up to it)
    seen: dict[str, tuple[list[Record], int, int]] = {}
    out: dict[str, list[Record]] = {}
    for tip in tips:
        joined: list[str] = []

        def stop(message: dict) -> bool:
            if message.get(MARK_KEY) == workspace_id and is_record(message):
                return True
            if message.get("id") in seen:
                joined.append(message["id"])
                return True
            return False

        tail, root = memory.store.branch_tail(session_id, tip, stop=stop)
        spawned = bool(root) and not root.get("rewound") and (
            root.get("spawn_branch_root") is True or root.get("source") == "agent_spawn")
        in_sub_agent = spawned and (bool(joined) or not tail or tail[0].get("id") != root.get("id"))
        inherited: list[Record] = []
        walked = 0
        if joined:
            backlog, length, walked = seen[joined[0]]
            inherited = backlog[:length]
        own = [replace(r, ordinal=r.ordinal + walked)  # positions as one whole walk gives
               for r in records(session_id, tail, in_sub_agent=in_sub_agent)]
        backlog = inherited + own
        count = len(inherited)
        recorded = {r.node_id for r in own}
        for message in tail:
            walked += 1
            if message.get("id") in recorded:
                count += 1
            seen.setdefault(message["id"], (backlog, count, walked))
        out[tip] = backlog
    return out


def pending_reasons(memory: "MemoryView", session_id: str, tips: Sequence[str] | None = None, *,
                    after: AfterWrite | None = None) -> dict[str, PendingReason]:
    """tip -> why that branch of ``session_id`` still owes turns. Default: every live tip,
    the head first. ``after``: the report right after that write, over every branch
    (archived ones too, in the store's order), judged by that write's outcome instead of the
    recorded failures. Read-only."""
    from .migrate import has_cursors

    head = memory.store.head(session_id)
    archived: set[str] = set()
    if after is not None and tips is None:
        rows = memory.store.list_branches(session_id)
        tips = [row["tip"] for row in rows]
        archived = {row["tip"] for row in rows if row.get("archived")}
    wanted = [t for t in (tips if tips is not None else memory.live_tips(session_id)) if t]
    failure = recorded_failures(memory).get(session_id) if after is None else None
    if failure is not None and "updated_at" in failure and \
            failure["updated_at"] != memory.store.get_meta(session_id).get("updated_at"):
        failure = None  # the session moved on since: the watcher offers it again
    migration = has_cursors(memory.workspace)
    now = memory.clock()
    return {tip: _why(memory, session_id, tip, pending, is_head=tip == head, failure=failure,
                      migration=migration, now=now, archived=tip in archived, after=after)
            for tip, pending in pending_by_tip(memory, session_id, wanted).items()}
