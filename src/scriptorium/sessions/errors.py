"""Typed errors of the session store; every message is one line naming session and node."""

from __future__ import annotations

from ..errors import ConcurrentUpdate, CorruptFile, InvalidInput, NotFound, ReasonCode

__all__ = [
    "SessionNotFound", "NodeNotFound", "AppendRefused", "HeadRefused", "BrokenChain",
    "CorruptFile", "InvalidInput", "NotFound", "ConcurrentUpdate",
]


class SessionNotFound(NotFound):
    """The session directory does not exist (or is not a session)."""

    code = ReasonCode.SESSION_NOT_FOUND


class NodeNotFound(NotFound):
    """A node id that is not in the session."""

    code = ReasonCode.NODE_NOT_FOUND


class AppendRefused(InvalidInput):
    """An append that would break the DAG invariants (dangling edge, orphan turn)."""

    code = ReasonCode.APPEND_REFUSED


class HeadRefused(InvalidInput):
    """A head move onto a node that may never be a head (a compaction summary)."""

    code = ReasonCode.HEAD_REFUSED


class BrokenChain(CorruptFile):
    """A predecessor walk met a dangling edge or a cycle: the data is damaged."""

    code = ReasonCode.BROKEN_CHAIN
