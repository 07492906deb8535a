"""Following a search result back to the conversation turn it came from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sources import split_source_id

if TYPE_CHECKING:  # pragma: no cover
    from ..workspace import Workspace

SESSION_PROVIDER = "openprogram"  # session turns are archived under this provider


def follow(workspace: "Workspace", source_id: str) -> dict[str, Any]:
    """Where a cited source id came from: for a session turn, ``session_id`` and ``node_id``
    (``openprogram/<session>/<node>``); for other providers those two are None. ``archived``
    tells whether the archive holds the turn, and if so its text, time, speaker and file.

    A malformed id is InvalidInput; an id the archive does not hold is still followed (the
    id alone names the session and node), with ``archived: False``.
    """
    provider, thread, message = split_source_id(source_id)
    is_turn = provider == SESSION_PROVIDER
    out: dict[str, Any] = {
        "source_id": source_id, "provider": provider, "thread": thread, "message": message,
        "session_id": thread if is_turn else None, "node_id": message if is_turn else None,
        "archived": False}
    frame = workspace.sources.lookup(source_id)
    if frame is not None:
        out.update({"archived": True, "path": frame.path, "anchor": frame.anchor,
                    "line": frame.line + 1, "timestamp": frame.timestamp, "label": frame.label,
                    "content": frame.content, "trusted": bool(frame.trusted)})
    return out

