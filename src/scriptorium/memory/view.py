"""What the upkeep modules (status, verify, migrate, the watcher, pending reasons) and the
write paths need of a :class:`~scriptorium.memory.writing.Memory`, as a Protocol: they depend
on this, not on the front door above them, so no import runs upward.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

from ..config import Settings
from ..sessions import SessionStore
from .failures import BlockedBranches, Failure
from .records import Record
from .results import SessionResult, StepResult
from .side_branches import PendingBranch
from .workspace import Workspace
from .writers import Writer


class MemoryView(Protocol):
    """The parts of a Memory that its upkeep operations use."""

    store: SessionStore
    workspace: Workspace
    settings: Settings
    blocked: BlockedBranches
    clock: Callable[[], float]

    @property
    def workspace_id(self) -> str: ...

    @property
    def writer(self) -> Writer: ...

    def pending(self, session_id: str, tip: str | None = None) -> list[Record]: ...

    def branch_qualifies(self, session_id: str, tip: str | None) -> bool: ...

    def write_branch(self, session_id: str, tip: str) -> SessionResult: ...

    def side_branch_due(self, session_id: str, tip: str | None,
                        pending: list[Record]) -> tuple[bool, str]: ...

    def branch_records(self, session_id: str, tip: str | None = None) -> list[Record]: ...

    def live_tips(self, session_id: str) -> list[str | None]: ...

    def session_status(self, session_id: str) -> dict[str, Any]: ...

    def write_session(self, session_id: str) -> SessionResult: ...

    def write_turn(self, session_id: str) -> SessionResult: ...

    def write_batch(self, session_id: str, batch: Sequence[Record], tip: str | None = None,
                    own_blocks: Sequence[str] = ()) -> StepResult: ...

    def still_pending(self, session_id: str, *, boundary: bool = True,
                      failure: Failure | None = None) -> list[PendingBranch]: ...

    def migrate_if_needed(self) -> None: ...
