"""The memory workspace: :class:`~.directory.WorkspaceDir` (layout, identity, the write lock,
runtime state, revision; the layout is drawn there) plus opening and transactions.

Opening a workspace finishes a committed install or rolls back a prepared one, so a crash in
the middle of an install is never seen as a mix of old and new files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..errors import ConcurrentUpdate
from .directory import (GIT_EXCLUDE, IDENTITY_LOCK_TIMEOUT, LEGACY_RUNTIME_NAME,
                        OPEN_LOCK_TIMEOUT, PACK_EVERY, RUNTIME_NAME, SOURCES_DIR, TOPICS_DIR,
                        WORKSPACE_ID_RE, WorkspaceDir)
from .runtime_state import GENERATION_FILE, RuntimeState
from .transaction import Transaction, recover_install
from .tx_result import TransactionResult

__all__ = ["GENERATION_FILE", "GIT_EXCLUDE", "IDENTITY_LOCK_TIMEOUT", "LEGACY_RUNTIME_NAME",
           "OPEN_LOCK_TIMEOUT", "PACK_EVERY", "RUNTIME_NAME", "RuntimeState", "SOURCES_DIR",
           "TOPICS_DIR", "TransactionResult", "WORKSPACE_ID_RE", "WorkspaceDir", "Workspace"]


class Workspace(WorkspaceDir):
    """One memory workspace: the directory, opened (a crash's install finished or rolled
    back) and able to stage transactions. Cheap to construct; every read goes to disk."""

    @classmethod
    def open(cls, root: Path | str, *, create: bool = True) -> "Workspace":
        """Open (and with ``create`` lay out) the workspace at ``root``; finish or roll back an
        install a crash interrupted; with ``create``, start the git history lazily."""
        ws = cls(Path(root))
        ws.check_layout()
        if create:
            for path in (ws.root, ws.topics_dir, ws.sources_dir, ws.runtime_dir):
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
        needs_git = create and ws.git_needs_init()
        journal = ws.journal_path.exists()
        if needs_git or journal or (create and ws._has_stages()):
            try:
                with ws.lock(timeout=OPEN_LOCK_TIMEOUT if needs_git else 0.2):
                    ws.recover()
                    if create:
                        ws.ensure_git()
            except ConcurrentUpdate:
                if needs_git:
                    raise
                # others may go on: the lock holder recovers before it installs anything
        return ws

    def recover(self) -> str | None:
        """Finish or roll back an interrupted install (caller holds the lock). Returns what
        was done ("finished"/"rolled back") or None."""
        return recover_install(self)

    def begin(self, allowed_sources: Iterable[str] = (), purpose: str = "write",
              own_blocks: Iterable[str] = ()) -> "Transaction":
        """Stage a copy of topics/ for a writer; see scriptorium.memory.transaction.
        ``own_blocks``: paragraphs this run created earlier, which the write may remove."""
        return Transaction(self, allowed_sources=allowed_sources, purpose=purpose,
                           own_blocks=own_blocks)
