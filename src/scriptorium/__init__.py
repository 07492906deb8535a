"""scriptorium: exactly-once, branch-aware long-term memory for agent conversations.

The library is the product; :mod:`scriptorium.cli` is a thin view of it. The public names are
importable from here (typed; this package ships ``py.typed``)::

    from scriptorium import Memory, SessionStore, search

Everything else is internal and may change between releases.
"""

from __future__ import annotations

from .errors import (ConcurrentUpdate, CorruptFile, InvalidInput, NotFound, ReasonCode,
                     ScriptoriumError, WriteFailed)
from .memory.search import Hit, search
from .memory.workspace import Workspace
from .memory.writers import WriteJob, WriteRequest, Writer, WriterAudit
from .memory.writing import Memory, SessionResult, StepResult
from .sessions import SessionStore

__version__ = "0.1.0"

__all__ = [
    "__version__",
    # the front door and what it works on
    "Memory", "SessionStore", "Workspace", "search", "Hit", "SessionResult", "StepResult",
    # errors: one family per exit code, one registry of reason codes
    "ScriptoriumError", "InvalidInput", "NotFound", "CorruptFile", "ConcurrentUpdate",
    "WriteFailed", "ReasonCode",
    # bring your own writer (registered under the ``scriptorium.writers`` entry points)
    "Writer", "WriteRequest", "WriteJob", "WriterAudit",
]
