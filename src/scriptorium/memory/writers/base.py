"""The writer protocol shared by the embedded and the LLM writers."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from ...errors import ReasonCode
from ...faults import fault_point
from ...fsutil import safe_path
from ..records import Record

if TYPE_CHECKING:  # pragma: no cover
    from ..catalog import TopicCatalog
    from ..tx_result import TransactionResult
    from ..workspace import Workspace


@dataclass(frozen=True)
class WriteJob:
    """What a writer is asked to do, before any stage exists: the batch and its context.
    :func:`run_writer` turns it into a :class:`WriteRequest` on each fresh stage."""

    batch: Sequence[Record]
    cited: frozenset[str] = frozenset()  # source ids the committed topics already cite
    session_title: str = ""
    # What the conversation opened with (its branch's first turn): a stable subject for a
    # session without a title.
    subject_hint: str = ""
    # Source ids of the turns before the batch on its branch, and whether the head does not
    # follow that branch (see WriteRequest).
    line: frozenset[str] = frozenset()
    side_branch: bool = False
    purpose: str = "write"
    # Where a writer may keep its run log (the workspace runtime dir); None = do not log.
    log_dir: Path | None = None
    # What every run of this job shares, repair runs included (the llm writer keeps the
    # job's deadline here, so a repair run never extends how long the lock waits on a model).
    shared: dict[str, Any] = field(default_factory=dict, compare=False)

    def on_stage(self, stage: Path, rejection: str | None = None,
                 catalog: "TopicCatalog | None" = None) -> "WriteRequest":
        return WriteRequest(batch=self.batch, stage=stage, cited=self.cited,
                            session_title=self.session_title, subject_hint=self.subject_hint,
                            line=self.line, side_branch=self.side_branch,
                            purpose=self.purpose, rejection=rejection, log_dir=self.log_dir,
                            shared=self.shared, catalog=catalog)


@dataclass
class WriteRequest:
    """Everything a writer may use. ``stage`` holds ``topics/``; nothing else is writable."""

    batch: Sequence[Record]
    stage: Path
    cited: frozenset[str] = frozenset()  # the batch's source ids committed topics already cite
    session_title: str = ""
    # What the conversation opened with (its branch's first turn): a stable subject for a
    # session without a title.
    subject_hint: str = ""
    # Source ids of the turns before the batch on its branch: what a later turn of the batch
    # may correct (claims citing anything else are on another line and are left standing).
    line: frozenset[str] = frozenset()
    # The batch is on a branch the session's head does not follow: its values are
    # alternatives, so they neither supersede committed claims nor change the current state.
    side_branch: bool = False
    purpose: str = "write"
    # Set on a repair run: why the transaction rejected the previous attempt's edits.
    rejection: str | None = None
    log_dir: Path | None = None  # where a writer may keep its run log; None = do not log
    shared: dict[str, Any] = field(default_factory=dict)  # see WriteJob.shared
    # What the committed topics hold (the stage starts equal to them): asks like "which
    # topic is on this subject?" without reading the stage. None outside a transaction.
    catalog: "TopicCatalog | None" = None
    # Workspace paths ("topics/…") written through write_topic (see declares_edits).
    written: set[str] = field(default_factory=set)

    @property
    def topics_dir(self) -> Path:
        return self.stage / "topics"

    def write_topic(self, rel: str, text: str) -> None:
        """Write ``topics/<rel>`` in the stage and remember it was written (see
        :func:`declares_edits`)."""
        path = safe_path(self.topics_dir, rel, "topic path")  # not a Path: see safe_path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(text)
        self.written.add(f"topics/{rel}")


def _said_by_its_write(writer: object, promise: str) -> bool:
    """``promise`` as the class that defines ``writer``'s ``write`` says it (False when it
    does not): a subclass that overrides ``write`` may work in other ways, so it must say
    so again itself."""
    for klass in type(writer).__mro__:
        if "write" in vars(klass):
            return bool(vars(klass).get(promise, False))
    return False


def declares_edits(writer: object) -> bool:
    """Does ``writer`` edit the stage only through :meth:`WriteRequest.write_topic`? Then the
    transaction looks at those files only, instead of at every staged file
    (``declares_edits = True`` on the class that defines ``write``)."""
    return _said_by_its_write(writer, "declares_edits")


def finds_topics_by_catalog(writer: object) -> bool:
    """Does ``writer`` reach an existing topic only through ``request.catalog`` (and the
    files it writes)? Then a PostgreSQL worker's stage may leave the topic files its mirror
    does not hold in the database (``finds_topics_by_catalog = True`` on the class that
    defines ``write``); any other writer may read any staged file, which then holds them
    all."""
    return _said_by_its_write(writer, "finds_topics_by_catalog")


@dataclass
class WriterAudit:
    """What the writer did, for logs and reports (not for deciding what changed)."""

    writer: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""

    def add(self, tool: str, status: str = "ok", **details: Any) -> None:
        self.entries.append({"tool": tool, "status": status, **details})


class Writer(Protocol):
    """What the write path needs of a writer. ``name`` is how reports name it;
    ``repair_attempts`` is how many fresh runs a rejected commit earns (0 for writers whose
    output cannot change on a retry, like the deterministic embedded writer).

    Writers are found by name through the ``scriptorium.writers`` entry-point group (see
    :mod:`.registry`); each entry point is a callable taking
    :class:`~scriptorium.config.Settings` and returning a Writer."""

    name: str
    repair_attempts: int

    def write(self, request: WriteRequest) -> WriterAudit:
        """Edit ``request.topics_dir``; raise on failure (the write step classifies it)."""
        ...


def run_writer(workspace: "Workspace", writer: Writer, job: WriteJob, *,
               refs: Sequence[str], message: str,
               own_blocks: Sequence[str] = ()) -> tuple["TransactionResult", WriterAudit]:
    """Run ``writer`` on ``job`` in a fresh stage of ``workspace`` and install its edits, with ``refs``
    as the only evidence new citations may use.

    A rejected commit earns the writer's ``repair_attempts`` further runs, each on a fresh
    stage and told why (``request.rejection``); once they are spent the rejection is
    COMMIT_REJECTED. A writer without repair runs sees its rejection as it was. Retryable
    errors (the workspace moved under the writer) are raised at once.
    """
    from ..transaction import TransactionError

    attempts = 1 + max(0, int(writer.repair_attempts))
    rejection: str | None = None
    attempt = 0
    while True:
        attempt += 1
        with workspace.begin(allowed_sources=refs, purpose=job.purpose,
                             own_blocks=own_blocks) as tx:
            request = job.on_stage(tx.stage, rejection, tx.catalog)
            audit = writer.write(request)
            fault_point("writer-ran")
            try:
                return tx.commit(message, only=request.written if declares_edits(writer)
                                 else None), audit
            except TransactionError as exc:
                if exc.retryable or attempts == 1:
                    raise
                if attempt == attempts:
                    raise TransactionError(
                        f"edits rejected again after {attempts - 1} repair run(s): "
                        f"{exc.code}: {exc}",
                        code=ReasonCode.COMMIT_REJECTED, retryable=False) from exc
                rejection = f"{exc.code}: {exc}"
