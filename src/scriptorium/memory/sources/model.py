"""The two values the archive deals in: a record to archive and a frame read back."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .ids import make_source_id


@dataclass(frozen=True)
class SourceRecord:
    """One turn to archive. ``meta=None`` means the default trusted metadata."""

    provider: str
    thread: str
    message: str
    role: str
    content: str
    timestamp: str = ""
    speaker_id: str = ""
    speaker_display: str = ""
    meta: dict[str, Any] | None = None

    @property
    def source_id(self) -> str:
        return make_source_id(self.provider, self.thread, self.message)


@dataclass(frozen=True)
class Frame:
    """One parsed record (v2 or legacy). ``path`` is workspace-relative, ``line`` 0-based."""

    source_id: str
    anchor: str
    path: str
    line: int
    timestamp: str
    label: str
    content: str
    speaker_id: str | None
    meta: dict[str, Any] | None
    trusted: bool
    version: str
    speaker_display: str | None = None
    speaker_trusted: bool = False
    speaker_hint: str | None = None     # legacy retrieval-only "[Name (id)]" body prefix
    end_line: int = field(default=0, compare=False)   # 0-based line after the record

    @property
    def text(self) -> str:
        """The record line as written (``[ts] label: content``); what token budgets count."""
        return f"[{self.timestamp}] {self.label}: {self.content}"
