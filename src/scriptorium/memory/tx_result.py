"""What an install changed: the one record every install hook receives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class Revisioned(Protocol):
    """The workspace a result asks for its revision (computed only when first asked for)."""

    def revision(self) -> str: ...


@dataclass
class TransactionResult:
    """What an install changed (every install hook receives it)."""

    changed_files: list[str] = field(default_factory=list)   # "topics/…", sorted
    created_blocks: list[str] = field(default_factory=list)
    removed_blocks: list[str] = field(default_factory=list)
    commit: str | None = None
    warnings: list[str] = field(default_factory=list)        # a failed hook or git commit
    workspace: "Revisioned | None" = field(default=None, repr=False, compare=False)
    _revision: str | None = field(default=None, repr=False, compare=False)
    # path -> (sha-256, parse, bytes) of each installed topic: install hooks need not hash or
    # parse it again
    parsed: dict[str, tuple[str, Any, bytes]] = field(default_factory=dict, repr=False,
                                                      compare=False)

    @property
    def revision(self) -> str:
        """The workspace revision after this transaction. It hashes every memory file, so it
        is computed when first asked for, not on every write."""
        if self._revision is None:
            self._revision = self.workspace.revision() if self.workspace is not None else ""
        return self._revision

    def to_dict(self) -> dict[str, Any]:
        return {"changed_files": self.changed_files, "created_blocks": self.created_blocks,
                "removed_blocks": self.removed_blocks, "revision": self.revision,
                "commit": self.commit, "warnings": self.warnings}
