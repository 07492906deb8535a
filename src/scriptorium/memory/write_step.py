"""One write step: memory takes in one batch of a branch's turns once and marks only what
it wrote (:meth:`~scriptorium.memory.writing.Memory.write_batch` runs it).

The step goes in the only order a crash cannot turn into an omission:

1. lock the workspace for this session's step (short timeout: a busy lock is a retryable
   CONCURRENT_UPDATE; see ``step_lock``: a database home lets other sessions' steps run);
2. archive the batch as evidence (append-only, idempotent, so a replay changes nothing);
3. the writer edits a staged copy and the transaction installs it whole or not at all;
4. mark exactly the batch on its session nodes, only when the install changed a topic file
   (or, on a redo after a crash, when memory already cites every turn of the batch).

A writer that raises, is rejected or changes nothing marks nothing, and the step reports a
reason code and whether retrying can help.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..errors import ReasonCode
from ..faults import fault_point
from ..redact import redact
from ..sessions import SessionStore
from .citations import cited_sources
from .failures import Failure, classify
from .records import MARK_KEY, PROVIDER, Record, is_record, message_text, to_source_record
from .results import StepResult
from .transaction import StaleTransaction
from .writers import WriteJob, run_writer

if TYPE_CHECKING:  # pragma: no cover
    from .view import MemoryView

WRITE_LOCK_TIMEOUT = 1.0
INSTALL_ATTEMPTS = 3  # writer runs per batch when concurrent installs keep moving its topics


def write_batch(memory: "MemoryView", session_id: str, batch: Sequence[Record],
                tip: str | None = None, own_blocks: Sequence[str] = ()) -> StepResult:
    """Archive, write and mark one batch (see the module docstring for the order).
    ``own_blocks``: paragraphs earlier batches of this run created (the writer may
    remove those; any other paragraph citing turns outside the batch it must keep)."""
    step = StepResult(batch_ids=[r.node_id for r in batch], tip=tip)
    if not batch:
        step.note = "empty batch"
        return step
    workspace, store = memory.workspace, memory.store
    try:
        with workspace.step_lock(session_id, timeout=WRITE_LOCK_TIMEOUT), \
                _reported(memory, session_id, tip, step):
            stranded, opening = _would_strand(store, memory.workspace_id, session_id, batch)
            if stranded:
                step.failure = Failure(ReasonCode.STALE_BATCH, True,
                    f"session {session_id}: marking this batch would strand "
                    f"{len(stranded)} unwritten turn(s) before it (from {stranded[0]}); "
                    f"the branch changed since the batch was taken")
                return step
            workspace.sources.archive([to_source_record(r) for r in batch])
            fault_point("after-archive")
            refs = [r.source_id for r in batch]
            cited = cited_sources(workspace, refs)
            title = redact(str(store.get_meta(session_id).get("title") or ""))
            line, side_branch = _line_of(store, session_id, batch, tip)
            job = WriteJob(batch=list(batch), cited=frozenset(cited), session_title=title,
                           subject_hint=opening, line=line, side_branch=side_branch,
                           log_dir=workspace.runtime_dir)
            for attempt in range(INSTALL_ATTEMPTS):
                try:
                    result, audit = run_writer(
                        workspace, memory.writer, job, refs=refs, own_blocks=own_blocks,
                        message=f"memory: write {len(batch)} turn(s) of {session_id}")
                    break
                except StaleTransaction:
                    # another session's install moved a topic this one wrote (only where
                    # steps run at once, see step_lock): write again on a fresh stage
                    if attempt + 1 == INSTALL_ATTEMPTS:
                        raise
            step.changed_files = list(result.changed_files)
            step.warnings = list(result.warnings)
            step.created_blocks = list(result.created_blocks)
            if not step.changed_files:
                if not all(ref in cited for ref in refs):
                    step.failure = Failure(ReasonCode.WRITER_NO_PROGRESS, False,
                        f"the {memory.writer.name} writer changed no topic file "
                        f"({audit.summary or 'no reason given'})")
                    return step
                step.note = "already cited: a redo after an interrupted write"
            fault_point("before-mark")
            store.merge_node_metadata_batch(
                session_id, {r.node_id: {MARK_KEY: memory.workspace_id} for r in batch})
            fault_point("after-mark")
            step.marked = [r.node_id for r in batch]
    except Exception as exc:  # every failure is reported, none is swallowed silently
        step.failure = classify(exc)
    return step


@contextlib.contextmanager
def _reported(memory: "MemoryView", session_id: str, tip: str | None,
              step: StepResult) -> Iterator[None]:
    """Inside the workspace lock: any exception of the step becomes ``step.failure``, and
    the branch's blocked record follows the outcome (a non-retryable failure is kept for
    ``memory status`` and ``verify``; a success clears it)."""
    try:
        yield
    except Exception as exc:  # every failure is reported, none is swallowed silently
        step.failure = classify(exc)
    at = _dt.datetime.fromtimestamp(memory.clock(), _dt.timezone.utc).isoformat(
        timespec="seconds")
    try:
        memory.blocked.note(session_id, tip, step.failure, step.batch_ids, step.marked, at)
    except OSError:
        pass  # a report that cannot be saved never turns a write into a failure


def _line_of(store: SessionStore, session_id: str, batch: Sequence[Record],
             tip: str | None) -> tuple[frozenset[str], bool]:
    """The source ids of the turns before ``batch`` on its branch (what a later turn may
    correct), and whether that branch is off the session's head (its values are then
    alternatives, not corrections of the head's)."""
    in_batch = {r.node_id for r in batch}
    line = frozenset(f"{PROVIDER}/{session_id}/{m['id']}"
                     for m in store.get_branch(session_id, batch[-1].node_id)
                     if isinstance(m.get("id"), str) and m["id"] not in in_batch)
    return line, tip is not None and tip != store.head(session_id)


def _would_strand(store: SessionStore, workspace_id: str, session_id: str,
                  batch: Sequence[Record]) -> tuple[list[str], str]:
    """The unmarked turn right before the batch on its branch, if any (caller holds the
    lock), and the text the branch opened with (a subject for untitled sessions).

    A batch is taken before the workspace lock; by the time the lock is held another
    process may have taken marks back (``memory verify --repair`` takes back every mark
    from a gap onward). Marking the batch then would put a mark after an unmarked turn: a
    gap that strands that turn for good. The turn just before the batch tells: a repair
    unmarks it too, and a pending batch always starts right after a marked turn. Only that
    one turn is read (the walk stops there), and a gap deeper in the branch — which
    verify reports — does not hold every later write back.
    """
    in_batch = {r.node_id for r in batch}
    before: list[dict[str, Any]] = []

    def stop(message: dict[str, Any]) -> bool:
        if message.get("id") not in in_batch and is_record(message):
            before.append(message)
            return True
        return False

    _, root = store.branch_tail(session_id, batch[-1].node_id, stop=stop)
    opening = redact(message_text(root.get("content"))) if root else ""
    if before and before[0].get(MARK_KEY) != workspace_id:
        return [str(before[0]["id"])], opening
    return [], opening
