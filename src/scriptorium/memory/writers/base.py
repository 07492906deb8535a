"""The writer protocol shared by the embedded and the LLM writers."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, Sequence

from ...config import Settings
from ...errors import InvalidInput
from ..records import Record


@dataclass
class WriteRequest:
    """Everything a writer may use. ``stage`` holds ``topics/``; nothing else is writable."""

    batch: Sequence[Record]
    stage: Path
    cited: frozenset[str] = frozenset()  # source ids the committed topics already cite
    session_title: str = ""
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
