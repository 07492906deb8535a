"""What kind of turn a node is: the predicates the store and memory share, defined once.

A message (``Node.to_message``) is the node's fields with its metadata spread on top, so every
predicate reads a metadata mapping, plus the node id and name where its rule needs them:
:class:`~.node.Node` passes its own, memory passes a message (``message_kinds``).
"""

from __future__ import annotations

from typing import Any, Mapping

# Turns the runtime writes to itself (sub-agent follow-ups, merge prompts).
RUNTIME_SOURCES = frozenset({"job_followup", "merge_turn"})
# The name a compaction summary node carries.
SUMMARY_NAME = "context/summary"


def is_runtime(md: Mapping[str, Any]) -> bool:
    """A turn the runtime wrote to itself (sub-agent notices, merge prompts)."""
    return md.get("display") == "runtime" or md.get("source") in RUNTIME_SOURCES


def is_summary(md: Mapping[str, Any], node_id: str = "", name: object = None) -> bool:
    """A compaction summary: it restates turns memory takes from their own nodes."""
    return ("covers_ids" in md or md.get("compaction") is True
            or node_id.startswith("summary_")
            or name == SUMMARY_NAME or md.get("name") == SUMMARY_NAME)


def is_spawn_root(md: Mapping[str, Any]) -> bool:
    """The first node of a sub-agent's branch."""
    return md.get("spawn_branch_root") is True or md.get("source") == "agent_spawn"


def message_is_summary(message: Mapping[str, Any]) -> bool:
    """:func:`is_summary` of a message dict (its name is ``token_model`` or ``function``)."""
    node_id = message.get("id")
    return is_summary(message, node_id if isinstance(node_id, str) else "",
                      message.get("token_model") or message.get("function"))
