"""The three write paths (per turn, session boundary, one branch) and the loop of
``write --all``: each takes a branch's pending turns batch by batch through
:func:`~.write_step.write_batch` (via ``memory.write_batch``), and
:class:`~scriptorium.memory.writing.Memory` delegates its ``write_*`` methods here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Iterator

from .. import heap
from ..errors import ScriptoriumError
from ..timefmt import epoch as _epoch
from .failures import classify
from .records import first_batch, total_tokens
from .results import SessionResult
from .search import settle

if TYPE_CHECKING:  # pragma: no cover
    from .view import MemoryView


def write_turn(memory: "MemoryView", session_id: str) -> SessionResult:
    """Per-turn path: the head branch only, when its pending turns reach the threshold or
    its newest pending turn is older than the idle allowance."""
    out = SessionResult(session_id)
    memory.migrate_if_needed()
    pending = memory.pending(session_id)
    if not pending:
        return out
    settings = memory.settings
    batch = first_batch(pending, settings.trigger_tokens)
    newest = max((t for t in (_epoch(r.timestamp) for r in batch) if t is not None),
                 default=None)
    idle = newest is not None and memory.clock() - newest >= settings.idle_allowance_seconds
    if total_tokens(batch) < settings.trigger_tokens and not idle:
        out.note = "below the threshold"
        return out
    step = memory.write_batch(session_id, batch, memory.store.head(session_id))
    out.steps.append(step)
    out.failure = step.failure
    return out


def write_session(memory: "MemoryView", session_id: str) -> SessionResult:
    """Session-boundary path (forced): the head branch whatever it holds, then every other
    live tip the ``side_branches`` policy says is due. Shared prefixes are written once,
    because each walk stops at the marks the earlier branches left."""
    out = SessionResult(session_id)
    memory.migrate_if_needed()
    for index, tip in enumerate(memory.live_tips(session_id)):
        if not write_tip(memory, out, session_id, tip, force=index == 0):
            break
    return out


def write_branch(memory: "MemoryView", session_id: str, tip: str) -> SessionResult:
    """Write the branch ending at ``tip`` if it qualifies: for a branch the head just left
    (the watcher is told of the move and need not wait for the session to go quiet)."""
    out = SessionResult(session_id)
    memory.migrate_if_needed()
    write_tip(memory, out, session_id, tip, force=False)
    return out


def write_tip(memory: "MemoryView", out: SessionResult, session_id: str, tip: str | None, *,
              force: bool) -> bool:
    """Write the branch ending at ``tip`` batch by batch (whatever it holds when
    ``force``, else while it qualifies); False after a failure, which ``out`` records."""
    while True:
        pending = memory.pending(session_id, tip)
        if not pending:
            return True
        if not force and not memory.side_branch_due(session_id, tip, pending)[0]:
            return True
        own = [b for done in out.steps for b in done.created_blocks]
        step = memory.write_batch(session_id, first_batch(
            pending, memory.settings.trigger_tokens), tip, own)
        out.steps.append(step)
        if step.failure:
            out.failure = step.failure
            return False


def write_each(memory: "MemoryView", ids: list[str], force: bool,
               progress: Callable[[str], None] | None) -> Iterator[SessionResult]:
    """Write the sessions ``ids`` one at a time (``force``: the session-boundary path, else
    the per-turn one), each result with what its branches still owe, as soon as it is done;
    a session whose write fails reports it and the others are still written. Between
    sessions the search index gives back the pages the write cached (:func:`.search.settle`)
    and the heap its free memory (:mod:`scriptorium.heap`), so what the loop holds follows
    one session, not the home."""
    for n, sid in enumerate(ids, 1):
        try:
            result = memory.write_session(sid) if force else memory.write_turn(sid)
        except ScriptoriumError as exc:
            result = SessionResult(sid, failure=classify(exc))
        try:
            result.pending = memory.still_pending(sid, boundary=force, failure=result.failure)
        except ScriptoriumError:
            result.pending = None  # the failure above already says why
        settle(memory.workspace)
        heap.give_back(collect=n % heap.COLLECT_EVERY == 0)
        if progress:
            progress(sid)
        yield result
