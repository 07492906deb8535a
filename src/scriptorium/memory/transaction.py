"""The whole-or-nothing topic transaction (memory reference §3.9).

``Workspace.begin()`` stages a copy of ``topics/`` in the runtime dir (reused between
transactions, so only files that changed are copied: see scriptorium.memory.stage); a writer
edits ``stage/topics/**.md`` and nothing else. What the committed tree holds (ids, citations,
block links) comes from the topic catalog (scriptorium.memory.catalog), so a commit reads and
parses only the files the writer changed. ``commit()`` then, under the workspace write lock:

1. checks that memory did not move since ``begin`` (⇒ CONCURRENT_UPDATE, the only retryable
   rejection; how, without stat'ing all of memory: scriptorium.memory.moved);
2. refuses anything written outside ``topics/`` (READ_ONLY_PATH: sources are append-only and
   written by the runtime only);
3. normalises the changed files (ids are given here, never by writers), parses them strictly
   and checks the tree (INVALID_TOPIC_FORMAT);
4. checks every footnote source resolves (MISSING_SOURCE) and that every source a block cites
   for the first time is a trusted source this transaction was given as evidence
   (NOT_EVIDENCE);
5. installs the changed files through a journal (``<runtime>/install.json``: prepared → move
   the old files to a backup → move the new ones in → committed → drop the backup), so a crash
   at any point is finished or rolled back by the next ``Workspace.open``, never a mix;
6. makes exactly one git commit (the changed files and the evidence archived for it ride
   along: ``WorkspaceDir.commit_history``) and runs the install hooks.

Crash points are named (``fault_point``) so tests can kill a real process in the middle.
"""

from __future__ import annotations

import shutil
import uuid
from typing import TYPE_CHECKING, Iterable

from ..errors import ReasonCode
from .catalog import TopicCatalog
from .commit_plan import DELETING_PURPOSES, CommitPlan, read_or_none
from .tx_result import TransactionResult
from .install import done_install, install_files, journal_dir, recover_install
from .moved import BeginState
from .stage import StageError, checkout, park
from .tx_errors import StaleTransaction, TransactionError

if TYPE_CHECKING:  # pragma: no cover
    from .directory import WorkspaceDir

# importable from here as before: what a transaction raises, and its install
__all__ = ["Transaction", "TransactionError", "StaleTransaction", "DELETING_PURPOSES",
           "install_files", "done_install", "recover_install"]


class Transaction:
    """A stage of topics/ and the commit that installs it (see the module docstring)."""

    def __init__(self, workspace: "WorkspaceDir", allowed_sources: Iterable[str] = (),
                 purpose: str = "write", own_blocks: Iterable[str] = ()):
        self.workspace = workspace
        self.allowed_sources = frozenset(allowed_sources)
        self.purpose = purpose
        self.own_blocks = frozenset(own_blocks)  # created earlier in this run: may go
        self.id = uuid.uuid4().hex[:12]
        self.closed = False
        self._settled = False
        with workspace.lock():
            recover_install(workspace)
            workspace.ensure_git()  # damaged history: the install's commit will warn
            self.catalog = TopicCatalog.of(workspace).refresh(hold=workspace.lock_hold())
            # what the commit checks memory against; a database home (which checks each
            # file it writes inside its own transaction instead) brings its own
            begin = getattr(workspace, "begin_state", None)
            self.base = begin(self.catalog) if begin is not None \
                else BeginState.take(workspace, self.catalog)
            self._stage = checkout(workspace, self.catalog)
        self.dir = self._stage.dir
        self.stage = self._stage.root

    # -- context manager ------------------------------------------------------------------------

    def __enter__(self) -> "Transaction":
        return self

    def __exit__(self, *exc: object) -> None:
        self.discard()

    def discard(self) -> None:
        """Drop the writer's edits; nothing is installed. Safe to call twice. The stage is
        brought back to the committed files and kept for this process's next transaction;
        a stage an interrupted install still needs (the journal names it: its backups live
        there) is left for recovery."""
        if self.closed:
            return
        self.closed = True
        ws = self.workspace
        if journal_dir(ws) == self.dir.name:
            return
        if not self._settled:
            try:
                edits = self._stage.changes()
                self._stage.settle({rel: read_or_none(ws.root, rel) for rel in edits})
                self._settled = True
            except (OSError, StageError):
                pass
        if not (self._settled and park(ws, self._stage)):
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- commit -------------------------------------------------------------------------------------

    def commit(self, message: str, only: Iterable[str] | None = None) -> TransactionResult:
        """Validate the stage and install it whole or not at all; see the module docstring.
        ``only``: the writer declared these stage paths ("topics/…") are all it wrote, so
        only they are looked at (see ``writers.base.declares_edits``)."""
        if self.closed:
            raise TransactionError("transaction already committed or discarded")
        ws = self.workspace
        try:
            with ws.lock():
                ws.recover()
                if self.base.moved(ws):
                    raise self._stale()
                plan = CommitPlan(self)
                plan.build(only)
                if not plan.writes:
                    self._settle(plan)
                    return TransactionResult(workspace=ws)
                if self.base.overwritten(ws, plan.writes):
                    raise self._stale()
                result = plan.install(message)
                self._settle(plan)
        finally:
            self.discard()
            self.catalog.forget_recent()  # summaries kept for this commit's many questions
        for hook in ws.install_hooks:
            try:
                hook(ws, result)
            except Exception as exc:  # a hook (e.g. the search index) never undoes an install
                result.warnings.append(f"install hook {getattr(hook, '__name__', hook)!r} "
                                       f"failed: {exc}")
        return result

    def _settle(self, plan: "CommitPlan") -> None:
        """Bring the stage to what is now committed (only the files this commit saw change)."""
        try:
            self._stage.settle(plan.after)
            self._settled = True
        except OSError:
            pass


    def _stale(self) -> "TransactionError":
        """Memory moved under this transaction: the retry's begin must look at topics/ again
        even in the same lock hold (see ``TopicCatalog.refresh``)."""
        self.catalog.forget_hold()
        return TransactionError("workspace changed while the writer was running (revision "
                                "moved); retry on a fresh stage",
                                code=ReasonCode.CONCURRENT_UPDATE)
