"""Typed errors of the session store; every message is one line naming session and node."""

from __future__ import annotations

from ..errors import ConcurrentUpdate, CorruptFile, InvalidInput, NotFound

__all__ = [
    "SessionNotFound", "NodeNotFound", "AppendRefused", "HeadRefused", "BrokenChain",
    "CorruptFile", "InvalidInput", "NotFound", "ConcurrentUpdate",
]


class SessionNotFound(NotFound):
    """The session directory does not exist (or is not a session)."""

    code = "SESSION_NOT_FOUND"


class NodeNotFound(NotFound):
    """A node id that is not in the session."""

    code = "NODE_NOT_FOUND"


class AppendRefused(InvalidInput):
    """An append that would break the DAG invariants (dangling edge, orphan turn)."""

    code = "APPEND_REFUSED"


class HeadRefused(InvalidInput):
    """A head move onto a node that may never be a head (a compaction summary)."""

    code = "HEAD_REFUSED"


class BrokenChain(CorruptFile):
    """A predecessor walk met a dangling edge or a cycle: the data is damaged."""

    code = "BROKEN_CHAIN"
