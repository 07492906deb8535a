"""What a workspace's runtime dir keeps besides the lock: the counters of ``runtime.json``
(loaded tolerantly, so a broken file never stops writing) and the ``generation`` counter
every install moves (readers learn that memory changed without a stat per topic file).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GENERATION_FILE = "generation"


@dataclass
class RuntimeState:
    """Counters kept in ``<runtime>/runtime.json``. ``cursors`` is the legacy per-session
    position cursor, readable only so migration can retire it (None once retired)."""

    creation_order: dict[str, int] = field(default_factory=dict)
    write_commits_since_global: int = 0
    local_batches: int = 0
    local_tokens: int = 0
    last_global_at: str | None = None
    cursors: dict[str, Any] | None = None

    @classmethod
    def from_obj(cls, obj: Any) -> "RuntimeState":
        """Tolerant: anything that is not an object gives defaults; bad fields are dropped."""
        state = cls()
        if not isinstance(obj, dict):
            return state
        order = obj.get("creation_order")
        if isinstance(order, dict):
            state.creation_order = {k: v for k, v in order.items()
                                    if isinstance(k, str) and _count(v) is not None}
        for name in ("write_commits_since_global", "local_batches", "local_tokens"):
            value = _count(obj.get(name))
            if value is not None:
                setattr(state, name, value)
        if isinstance(obj.get("last_global_at"), str):
            state.last_global_at = obj["last_global_at"]
        if isinstance(obj.get("cursors"), dict):
            state.cursors = obj["cursors"]
        return state

    def to_obj(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "creation_order": dict(self.creation_order),
            "write_commits_since_global": self.write_commits_since_global,
            "local_batches": self.local_batches,
            "local_tokens": self.local_tokens,
            "last_global_at": self.last_global_at,
        }
        if self.cursors is not None:
            out["cursors"] = self.cursors
        return out

    def dumps(self) -> str:
        return json.dumps(self.to_obj(), ensure_ascii=False, indent=2) + "\n"


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def read_generation(runtime_dir: Path) -> int | None:
    """The install counter of the workspace whose runtime dir this is (None: none yet)."""
    try:
        with open(os.path.join(runtime_dir, GENERATION_FILE), "rb") as fh:
            return int(fh.read(32))
    except (OSError, ValueError):
        return None
