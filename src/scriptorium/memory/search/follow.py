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


def follow_turn(workspace: Any, store: Any, source_id: str) -> dict[str, Any]:
    """:func:`follow`, plus the turn itself from the session store when the source is a session
    turn: ``in_session_store`` says whether the store still holds the node and ``turn`` is its
    message dict. A source neither archived nor in the store is NotFound; a stored turn memory
    has not archived yet comes back with a warning saying so."""
    from ...errors import NotFound, ScriptoriumError

    data = follow(workspace, source_id)
    if data["session_id"] is not None:
        data["in_session_store"] = False
        if store.exists(data["session_id"]):
            try:
                node = store.get_node(data["session_id"], data["node_id"])
            except ScriptoriumError:  # an unknown node is reported, not raised
                node = None
            if node is not None:
                data["in_session_store"] = True
                data["turn"] = node.to_message(data["session_id"])
    if not data["archived"]:
        if not data.get("in_session_store"):
            raise NotFound(f"source {source_id} is neither in the evidence archive nor in the "
                           f"session store")
        data["warnings"] = [f"source {source_id} is not in the evidence archive: memory has "
                            f"not written this turn yet"]
    return data
