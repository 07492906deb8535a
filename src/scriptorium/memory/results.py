"""What a write reports: per batch (:class:`StepResult`) and per session (:class:`SessionResult`).

Kept apart from the write path so the modules that read results (the watcher, reports) need
not import the write path itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .failures import Failure
from .side_branches import PendingBranch


@dataclass
class StepResult:
    """One batch handed to the writer."""

    # the batch's node ids, oldest first (not its records: a result outlives its batch, and
    # a write of many sessions must not keep every turn's text until it ends)
    batch_ids: list[str]
    tip: str | None = None  # the branch tip whose walk offered this batch
    marked: list[str] = field(default_factory=list)
    changed_files: list[str] = field(default_factory=list)
    created_blocks: list[str] = field(default_factory=list)
    failure: Failure | None = None
    note: str = ""
    warnings: list[str] = field(default_factory=list)  # e.g. the history was not committed


@dataclass
class SessionResult:
    """What one session's write did: batches tried, nodes marked, the failure if any."""

    session_id: str
    steps: list[StepResult] = field(default_factory=list)
    failure: Failure | None = None
    note: str = ""
    # what the session still owes after the write (filled by Memory.write), and why
    pending: list[PendingBranch] | None = None

    @property
    def marked(self) -> list[str]:
        return [node for step in self.steps for node in step.marked]

    @property
    def changed_files(self) -> list[str]:
        return sorted({f for step in self.steps for f in step.changed_files})

    @property
    def warnings(self) -> list[str]:
        return list(dict.fromkeys(w for step in self.steps for w in step.warnings))

    def to_dict(self) -> dict[str, Any]:
        warnings = self.warnings
        return {"session_id": self.session_id, "batches": len(self.steps),
                "marked": self.marked, "changed_files": self.changed_files,
                "failure": self.failure.to_dict() if self.failure else None,
                **({"note": self.note} if self.note else {}),
                **({"warnings": warnings} if warnings else {}),
                **({"pending": [p.to_dict() for p in self.pending]}
                   if self.pending is not None else {})}
