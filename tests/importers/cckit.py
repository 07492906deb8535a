"""Hand-built Claude Code transcripts in the documented line format (docs/importers.md):
forks made by a rewind, an edit or a regeneration, which no licensed real file contains."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION = "5e55f00d-0000-4000-8000-000000000001"


class Transcript:
    """Builds lines of one session file; ``write`` appends them to disk."""

    def __init__(self, path: Path, session: str = SESSION):
        self.path = path
        self.session = session
        self.lines: list[dict] = []
        self.clock = 0

    def _env(self, uid: str, parent: str | None, kind: str, **extra: Any) -> dict:
        self.clock += 1
        line = {"parentUuid": parent, "isSidechain": False, "userType": "external",
                "cwd": "/w", "sessionId": self.session, "version": "2.1.39", "type": kind,
                "uuid": uid, "timestamp": f"2026-01-01T00:{self.clock // 60:02d}:"
                                          f"{self.clock % 60:02d}.000Z"}
        line.update(extra)
        self.lines.append(line)
        return line

    def user(self, uid: str, parent: str | None, text: str, **extra: Any) -> dict:
        return self._env(uid, parent, "user", message={"role": "user", "content": text},
                         **extra)

    def assistant(self, uid: str, parent: str | None, text: str, mid: str | None = None,
                  **extra: Any) -> dict:
        return self._env(uid, parent, "assistant", message={
            "id": mid or f"msg_{uid}", "role": "assistant", "model": "claude-x",
            "content": [{"type": "text", "text": text}]}, **extra)

    def tool_use(self, uid: str, parent: str, tool_id: str, mid: str, name: str = "Bash",
                 **inp: Any) -> dict:
        return self._env(uid, parent, "assistant", message={
            "id": mid, "role": "assistant", "model": "claude-x",
            "content": [{"type": "tool_use", "id": tool_id, "name": name,
                         "input": inp or {"command": "ls"}}]})

    def tool_result(self, uid: str, parent: str, tool_id: str, out: str = "ok",
                    **extra: Any) -> dict:
        return self._env(uid, parent, "user", message={"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_id, "content": out}]}, **extra)

    def progress(self, uid: str, parent: str | None, **data: Any) -> dict:
        return self._env(uid, parent, "progress", data=data or {"type": "hook_progress"})

    def compaction(self, boundary: str, summary: str, logical_parent: str,
                   text: str = "This session is being continued from a previous "
                               "conversation. Summary: we set up the parser.") -> None:
        self._env(boundary, None, "system", subtype="compact_boundary",
                  content="Conversation compacted", logicalParentUuid=logical_parent,
                  compactMetadata={"trigger": "manual", "preTokens": 1000})
        self.user(summary, boundary, text, isCompactSummary=True,
                  isVisibleInTranscriptOnly=True)

    def raw(self, obj: dict) -> None:
        self.lines.append(obj)

    def write(self) -> Path:
        """Append the lines built since the last write."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as fh:
            for line in self.lines:
                fh.write(json.dumps(line) + "\n")
        self.lines = []
        return self.path
