"""Backfill: write the archived trusted sources that no topic cites (memory reference §4.3).

Evidence can sit in ``sources/`` without any topic citing it: the old runtime archived turns
before writing them, a writer run may have failed after the archive step, and the legacy
archive was never re-read. Backfill hands those sources to the writer in token-budgeted
batches, each through the normal transaction with ONLY that batch as allowed evidence.

It works from memory's own files alone. It never opens the session store and never adds or
removes a mark: a mark says "handed to the writer from the session", which backfill is not.
Candidates are recomputed after each batch, so a rerun after a failed batch resumes at the
first source that is still uncited, and a second run finds nothing and changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import InvalidInput
from ..tokens import count_tokens
from .citations import cited_sources
from .progress import Progress, Step
from .records import Record
from .sources import Frame, split_source_id
from .failures import classify
from .workspace import Workspace
from .writers import WriteJob, Writer, run_writer

BACKFILL_LOCK_TIMEOUT = 5.0
DEFAULT_BUDGET_TOKENS = 16_000


@dataclass
class BackfillReport:
    """``status``: ok (nothing left), incomplete (a batch made no progress), failed (a batch
    raised or was rejected; earlier batches stay installed). ``candidates``: uncited trusted
    sources at the start; ``processed``: how many of them topics cite at the end;
    ``remaining``: uncited trusted sources at the end; ``batches``: installed batches."""

    status: str = "ok"
    candidates: int = 0
    processed: int = 0
    remaining: int = 0
    revision: str = ""
    batches: int = 0
    failure: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "candidates": self.candidates,
                "processed": self.processed, "remaining": self.remaining,
                "revision": self.revision, "batches": self.batches, "failure": self.failure}


@dataclass(frozen=True)
class Candidate:
    """One uncited trusted source and what it costs in a batch."""

    frame: Frame
    tokens: int

    @property
    def source_id(self) -> str:
        return self.frame.source_id


def candidates(workspace: Workspace) -> list[Candidate]:
    """Trusted archived sources no committed topic cites, ordered by (file, line, id).

    ``iter_frames`` already drops legacy copies of ids that have a valid v2 frame; the first
    frame of an id wins.
    """
    cited = cited_sources(workspace)
    seen: set[str] = set()
    out: list[Candidate] = []
    for frame in workspace.sources.iter_frames():
        ref = frame.source_id
        if not frame.trusted or ref in cited or ref in seen:
            continue
        seen.add(ref)
        out.append(Candidate(frame, max(1, count_tokens(frame.text))))
    out.sort(key=lambda c: (c.frame.path, c.frame.line, c.source_id))
    return out


def next_batch(pending: Sequence[Candidate], budget_tokens: int) -> list[Candidate]:
    """The greedy prefix whose token sum stays within the budget, all from one conversation
    (provider and thread), so each is filed under its own subject; never empty."""
    batch: list[Candidate] = []
    total = 0
    for item in pending:
        if batch and (total + item.tokens > budget_tokens
                      or _thread(item) != _thread(batch[0])):
            break
        batch.append(item)
        total += item.tokens
    return batch


def _thread(item: Candidate) -> tuple[str, str]:
    provider, thread, _ = split_source_id(item.source_id)
    return provider, thread


def to_record(frame: Frame, ordinal: int = 0) -> Record:
    """A writer input row for an archived source (the session store is never consulted)."""
    provider, thread, message = split_source_id(frame.source_id)
    display = frame.speaker_display or ("" if frame.label in ("user", "assistant")
                                        else frame.label)
    return Record(session_id=thread, node_id=message,
                  role="assistant" if frame.label == "assistant" else "user",
                  content=frame.content, timestamp=frame.timestamp or None, ordinal=ordinal,
                  mark=None, tokens=max(1, count_tokens(frame.text)), provider=provider,
                  speaker_id=frame.speaker_id or "", speaker_display=display)


def opening(workspace: Any, path: str) -> str:
    """What the conversation archived in ``path`` opened with: its subject when untitled."""
    frames = workspace.sources.file_status(path).frames
    return frames[0].content if frames else ""


def _write_batch(workspace: Workspace, writer: Writer, batch: list[Candidate],
                 cited: frozenset[str]) -> None:
    """One restricted transaction for ``batch`` (see :func:`~.writers.run_writer`)."""
    refs = [c.source_id for c in batch]
    rows = [to_record(c.frame, k) for k, c in enumerate(batch)]
    run_writer(workspace, writer,
               WriteJob(batch=rows, cited=cited, purpose="backfill",
                        subject_hint=opening(workspace, batch[0].frame.path),
                        log_dir=workspace.runtime_dir),
               refs=refs, message=f"memory: backfill {len(refs)} source(s)")


def check_budget(budget_tokens: object) -> int:
    """The batch budget, refused unless it is a whole number of tokens >= 1."""
    if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens < 1:
        raise InvalidInput(f"backfill budget must be a whole number of tokens >= 1, "
                           f"got {budget_tokens!r}")
    return budget_tokens


def backfill(workspace: Workspace, writer: Writer, *,
             budget_tokens: int = DEFAULT_BUDGET_TOKENS,
             progress: Progress | None = None) -> BackfillReport:
    """Write every uncited trusted source, batch by batch, holding the workspace lock (5 s).

    A busy lock raises ConcurrentUpdate; a failing batch ends the run with status ``failed``
    and installs nothing of that batch. (The front door is :meth:`Memory.backfill`.)
    """
    check_budget(budget_tokens)
    report = BackfillReport()
    with workspace.lock(timeout=BACKFILL_LOCK_TIMEOUT):
        pending = candidates(workspace)
        start = {c.source_id for c in pending}
        report.candidates = len(pending)
        while pending:
            batch = next_batch(pending, budget_tokens)
            before = {c.source_id for c in pending}
            if progress is not None:
                progress(Step(f"batch {report.batches + 1}: {len(batch)} source(s)",
                              len(start - before), len(start)))
            try:
                _write_batch(workspace, writer, batch, frozenset(cited_sources(workspace)))
            except Exception as exc:  # reported; earlier batches stay installed
                report.status, report.failure = "failed", classify(exc).to_dict()
                pending = candidates(workspace)
                break
            report.batches += 1
            pending = candidates(workspace)
            if {c.source_id for c in pending} == before:
                report.status = "incomplete"  # no progress: the writer cited none of them
                break
        left = {c.source_id for c in pending}
        report.processed = len(start - left)
        if progress is not None:
            progress(Step(f"{report.processed} source(s) written", report.processed, len(start)))
        report.remaining = len(pending)
        if report.status == "ok" and pending:
            report.status = "incomplete"
        report.revision = workspace.revision()
    return report
