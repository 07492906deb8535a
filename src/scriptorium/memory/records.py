"""Which turns memory takes in, which of them are still owed, and how they are batched.

``records`` reduces one branch (the message dicts ``SessionStore.get_branch`` returns) to the
turns memory records. ``unwritten`` is the whole bookkeeping read of the written-marker design:
walk from the end, stop at the first record marked *for this workspace*. ``first_batch`` takes
the oldest pending turns up to the token threshold, which is what keeps the marks a prefix.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InvalidInput
from ..redact import redact
from ..sessions.kinds import is_runtime, is_spawn_root, message_is_summary
from ..tokens import count_tokens
from .sources import SourceRecord
from .sources.ids import normalize_speaker, speaker_label

MARK_KEY = "memory_written_scriptorium"
PROVIDER = "openprogram"  # provider name of session turns, kept for compatibility
_ROLES = frozenset({"user", "assistant"})


@dataclass(frozen=True)
class Record:
    """One conversational turn that memory records."""

    session_id: str
    node_id: str
    role: str
    content: str
    timestamp: float | str | None
    ordinal: int  # position in the list records() was given (informational)
    mark: str | None  # value of the mark on the node, whatever workspace wrote it
    tokens: int
    provider: str = PROVIDER  # other providers appear only when backfilling archived sources
    # How the turn came to be, for writers that say so: "edit" (an edited earlier message),
    # "retry" (a regenerated reply), "spawn" (the task a sub-agent was given), "sub-agent"
    # (a later turn of that sub-agent's branch), or "" for an ordinary turn.
    origin: str = ""
    # The node's own speaker identity (metadata ``speaker_id`` / ``speaker_display``, as the
    # reference system writes them); empty when the turn has none and its role says who spoke.
    speaker_id: str = ""
    speaker_display: str = ""

    @property
    def speaker(self) -> str:
        """Who said it, as the archive labels it: ``display (id)``, display, id, else role."""
        return speaker_label(self.role, self.speaker_id, self.speaker_display)

    @property
    def speaker_name(self) -> str:
        """Who said it, for prose: the display name, else the id, else "" (use the role)."""
        return normalize_speaker(self.speaker_display) or normalize_speaker(self.speaker_id)

    @property
    def source_id(self) -> str:
        return f"{self.provider}/{self.session_id}/{self.node_id}"

    def marked_for(self, workspace_id: str) -> bool:
        return self.mark == workspace_id

    def iso_time(self) -> str:
        """The turn's time as local ISO-8601 with offset (strings pass through)."""
        return iso_time(self.timestamp)

    def day(self) -> str:
        """``YYYY-MM-DD`` of the turn, or ``undated``."""
        text = self.iso_time()
        return text[:10] if len(text) >= 10 and text[4] == "-" and text[7] == "-" else "undated"


def iso_time(value: float | str | None) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return _dt.datetime.fromtimestamp(float(value)).astimezone().isoformat()
        except (OverflowError, OSError, ValueError):
            return ""
    return ""


def message_text(content: Any) -> str:
    """A message's text: a string, or the LF-joined non-empty text blocks of a block list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping) and block.get("type") == "text":
                text = block.get("text")
                if isinstance(text, str) and text:
                    parts.append(text)
        return "\n".join(parts)
    return ""


def is_record(message: Mapping[str, Any]) -> bool:
    """Does memory record this message? User/assistant turns with text, minus runtime turns,
    compaction summaries and the root."""
    return (message.get("role") in _ROLES and message.get("display") != "root"
            and not is_runtime(message) and not message_is_summary(message)
            and bool(message_text(message.get("content")).strip()))


def records(session_id: str, branch: Sequence[Mapping[str, Any]], *,
            in_sub_agent: bool = False) -> list[Record]:
    """The turns of ``branch`` that memory records, oldest first.

    Dropped: roles other than user/assistant (tool rows), runtime turns, compaction summaries,
    the root, and turns whose text is blank. A recorded turn without an id is an error: an id
    is never invented, because the mark must land on the node the turn came from.
    ``in_sub_agent``: the list is the tail of a branch that a spawn root opened.
    """
    out: list[Record] = []
    for ordinal, message in enumerate(branch):
        origin = _origin(message, in_sub_agent)
        in_sub_agent = in_sub_agent or origin == "spawn"
        if not is_record(message):
            continue
        text = redact(message_text(message.get("content")))  # the store keeps the original
        node_id = message.get("id")
        if not isinstance(node_id, str) or not node_id.strip():
            raise InvalidInput(f"session {session_id}: a {message.get('role')} turn at position "
                               f"{ordinal} has no id; memory never invents one")
        mark = message.get(MARK_KEY)
        out.append(Record(
            session_id=session_id,
            node_id=node_id,
            role=str(message["role"]),
            content=text,
            timestamp=message.get("timestamp", message.get("created_at")),
            ordinal=ordinal,
            mark=mark if isinstance(mark, str) else None,
            tokens=max(1, count_tokens(text)),
            origin=origin,
            speaker_id=redact(_text_field(message.get("speaker_id"))),
            speaker_display=redact(_text_field(message.get("speaker_display"))),
        ))
    return out


def _text_field(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def _origin(message: Mapping[str, Any], in_sub_agent: bool) -> str:
    if is_spawn_root(message):
        return "spawn"
    if in_sub_agent:
        return "sub-agent"
    if message.get("edit_of"):
        return "edit"
    if message.get("forked_from"):
        return "retry"
    return ""


def unwritten(recs: Sequence[Record], workspace_id: str) -> list[Record]:
    """The trailing run of ``recs`` that no mark of ``workspace_id`` covers, oldest first.

    A mark naming another workspace is no mark: a session copied in from elsewhere is written
    from the start, and a restored backup keeps its own marks. A branch with no mark at all is
    owed in full ("reprocess rather than go silent").
    """
    out: list[Record] = []
    for record in reversed(recs):
        if record.marked_for(workspace_id):
            break
        out.append(record)
    out.reverse()
    return out


def first_batch(pending: Sequence[Record], trigger_tokens: int) -> list[Record]:
    """The oldest pending records that together reach ``trigger_tokens`` (or all of them)."""
    total = 0
    for index, record in enumerate(pending):
        total += record.tokens
        if total >= trigger_tokens:
            return list(pending[: index + 1])
    return list(pending)


def total_tokens(recs: Iterable[Record]) -> int:
    return sum(r.tokens for r in recs)


def to_source_record(record: Record) -> SourceRecord:
    """The evidence a write archives for ``record`` (provider ``openprogram``, as the
    reference names session turns)."""
    return SourceRecord(provider="openprogram", thread=record.session_id,
                        message=record.node_id, role=record.role, content=record.content,
                        timestamp=record.iso_time(), speaker_id=record.speaker_id,
                        speaker_display=record.speaker_display)
