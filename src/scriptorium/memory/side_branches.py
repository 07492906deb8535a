"""Which off-head branches the session-boundary write takes, and why a turn still waits.

The head's branch is written at the boundary whatever it holds. Another live branch used to
wait until its unwritten turns reached the batch threshold (16,000 tokens), so a sub-agent's
report or a four-turn line left by an edit stayed pending forever. The default policy,
``conversation``, writes a side branch below the threshold when it is a line somebody went
down — at least one pending *user* turn after its fork point from the head's line — or a
sub-agent's branch. A branch that is only a retried reply (assistant turns after the fork,
no user turn) is a reply somebody rejected, and keeps waiting for the threshold.
``threshold`` is the old rule; ``all`` writes every side branch at every boundary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Sequence

from ..sessions.lines import Divergence
from .records import Record, total_tokens

BELOW_THRESHOLD = "below_threshold"   # waits until its unwritten turns reach a batch
REJECTED_REPLY = "rejected_reply"     # a retried reply only: waits for the threshold
AT_BOUNDARY = "session_boundary"      # per-turn path: other branches wait for the boundary
ARCHIVED = "archived_branch"          # archived branches are not written
FAILURE = "failure"                   # a write of this session failed; retried next time


@dataclass
class PendingBranch:
    """What one live branch still owes memory after a write, and why it waits."""

    tip: str
    head: bool
    turns: list[str]
    tokens: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"tip": self.tip, "head": self.head, "pending_turns": len(self.turns),
                "pending_tokens": self.tokens, "pending_ids": list(self.turns),
                "reason": self.reason}


def side_branch_due(pending: Sequence[Record], head_line: Collection[str],
                    divergence: Divergence | None, policy: str,
                    trigger_tokens: int) -> tuple[bool, str]:
    """Should the boundary write take this side branch now? (yes, "") or (no, reason)."""
    if total_tokens(pending) >= trigger_tokens or policy == "all":
        return True, ""
    sub_agent = (divergence is not None and divergence.kind == "spawn") or any(
        r.origin in ("spawn", "sub-agent") for r in pending)
    own = [r for r in pending if r.node_id not in head_line]  # after the fork point
    if policy == "conversation" and (sub_agent or any(r.role == "user" for r in own)):
        return True, ""
    if own and not sub_agent and all(r.role == "assistant" for r in own):
        return False, REJECTED_REPLY
    return False, BELOW_THRESHOLD
