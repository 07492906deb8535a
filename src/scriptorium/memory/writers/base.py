"""The writer protocol shared by the embedded and the LLM writers."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from ...config import Settings
from ...errors import InvalidInput
from ...faults import fault_point
from ..records import Record

if TYPE_CHECKING:  # pragma: no cover
    from ..transaction import TransactionResult
    from ..workspace import Workspace


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
    # Where a writer may keep its run log (the workspace runtime dir); None = do not log.
    log_dir: Path | None = None

    @property
    def topics_dir(self) -> Path:
        return self.stage / "topics"


@dataclass
class WriterAudit:
    """What the writer did, for logs and reports (not for deciding what changed)."""

    writer: str
    entries: list[dict[str, Any]] = field(default_factory=list)
    summary: str = ""

    def add(self, tool: str, status: str = "ok", **details: Any) -> None:
        self.entries.append({"tool": tool, "status": status, **details})


class Writer(Protocol):
    """``repair_attempts``: how many fresh runs a rejected commit earns (0 for writers whose
    output cannot change on a retry, like the deterministic embedded writer)."""

    name: str
    repair_attempts: int

    def write(self, request: WriteRequest) -> WriterAudit:
        """Edit ``request.topics_dir``; raise on failure (the write step classifies it)."""
        ...


def make_writer(kind: str, settings: Settings | None = None) -> Writer:
    """The writer named ``kind`` (``embedded`` or ``llm``)."""
    if kind == "embedded":
        from .embedded import EmbeddedWriter

        return EmbeddedWriter()
    if kind == "llm":
        try:
            from .llm import LLMWriter  # type: ignore[import-not-found]
        except ImportError as exc:
            raise InvalidInput(f"the llm writer is not available: {exc}") from None
        return LLMWriter.from_settings(settings or Settings())
    raise InvalidInput(f"unknown writer {kind!r} (embedded or llm)")


def run_writer(workspace: "Workspace", writer: Writer, request: WriteRequest, *,
               refs: Sequence[str], purpose: str, message: str,
               own_blocks: Sequence[str] = ()) -> tuple["TransactionResult", WriterAudit]:
    """Run ``writer`` on a fresh stage of ``workspace`` and install its edits, with ``refs``
    as the only evidence new citations may use.

    A rejected commit earns the writer's ``repair_attempts`` further runs, each on a fresh
    stage and told why (``request.rejection``); once they are spent the rejection is
    COMMIT_REJECTED. A writer without repair runs sees its rejection as it was. Retryable
    errors (the workspace moved under the writer) are raised at once.
    """
    from ..transaction import TransactionError

    attempts = 1 + max(0, int(getattr(writer, "repair_attempts", 0)))
    rejection: str | None = None
    attempt = 0
    while True:
        attempt += 1
        with workspace.begin(allowed_sources=refs, purpose=purpose,
                             own_blocks=own_blocks) as tx:
            audit = writer.write(replace(request, stage=tx.stage, rejection=rejection))
            fault_point("writer-ran")
            try:
                return tx.commit(message), audit
            except TransactionError as exc:
                if exc.retryable or attempts == 1:
                    raise
                if attempt == attempts:
                    raise TransactionError(
                        f"edits rejected again after {attempts - 1} repair run(s): "
                        f"{exc.code}: {exc}",
                        code="COMMIT_REJECTED", retryable=False) from exc
                rejection = f"{exc.code}: {exc}"
