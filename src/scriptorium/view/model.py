"""The data behind ``scriptorium view``: one session's DAG as JSON, with what memory did.

Every node of the session (nothing filtered) becomes one entry: its parent edge, role, text,
metadata, the *state* memory gives it, its fork kind, the head/tip marks, and the topic blocks
that cite it. Live branches carry why they are still pending (:mod:`..memory.pending_reasons`).
The page draws this model and nothing else, so a test can check the page against the store.

States: ``written`` (marked by this workspace), ``pending`` (a turn memory records, not marked
by this workspace), and the turns memory never takes: ``tool`` (tool rows), ``runtime``
(runtime notices), ``summary`` (compaction summaries), ``other`` (the root, blank or rewound
turns, context rows).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..errors import NotFound
from ..fsutil import check_name
from ..memory.citations import block_sources
from ..memory.pending_reasons import pending_reasons
from ..memory.records import MARK_KEY, PROVIDER, message_text
from ..sessions.node import Node

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.writing import Memory

MODEL_VERSION = 1
# Node text kept in the page: enough to read a turn; a tool dump of megabytes is cut.
TEXT_LIMIT = 4000
STATES = ("written", "pending", "tool", "runtime", "summary", "other")


def node_state(node: Node, message: dict[str, Any], workspace_id: str) -> str:
    """What memory did with this node (see the module docstring)."""
    if node.is_summary:  # one rule for nodes and messages (sessions.kinds)
        return "summary"
    if node.is_root or node.is_context or node.is_attach:
        return "other"
    if node.role == "code":
        return "tool"
    if node.is_runtime:
        return "runtime"
    if not node.conversational or not message_text(message.get("content")).strip():
        return "other"
    if message.get(MARK_KEY) == workspace_id:
        return "written"
    return "other" if node.rewound else "pending"


def fork_kind(node: Node) -> str:
    """How this node came to be, from its own metadata: retry, edit, sub-agent, summary."""
    md = node.metadata
    if md.get("edit_of"):
        return "edit"
    if node.is_spawn_root:
        return "sub-agent"
    if md.get("forked_from"):
        return "retry"
    if node.is_summary:
        return "summary"
    return ""


def _parents(nodes: list[Node]) -> tuple[list[int], list[str]]:
    """Each node's parent index (-1: none) and edge kind: the conversation edge
    (predecessor) when it names a node here, else the sub-call edge (caller)."""
    where = {n.id: i for i, n in enumerate(nodes)}
    parents, vias = [], []
    for n in nodes:
        if n.predecessor and n.predecessor in where and n.predecessor != n.id:
            parents.append(where[n.predecessor])
            vias.append("pred")
        elif n.caller and n.caller in where and n.caller != n.id:
            parents.append(where[n.caller])
            vias.append("caller")
        else:
            parents.append(-1)
            vias.append("")
    return _break_cycles(parents), vias


def _break_cycles(parents: list[int]) -> list[int]:
    """A damaged store may hold a predecessor cycle; cut it so the page still draws."""
    state = [0] * len(parents)  # 0 unseen, 1 on the current path, 2 done
    for start in range(len(parents)):
        path, i = [], start
        while i != -1 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = parents[i]
        if i != -1 and state[i] == 1:
            parents[i] = -1
        for j in path:
            state[j] = 2
    return parents


def _citations(memory: "Memory", session_id: str) -> tuple[dict[str, list[int]], list[dict],
                                                            dict[str, str]]:
    """node id -> indexes into the cited block list, the blocks, and the text of every topic
    that cites this session (so the page links into topics without a server)."""
    ws = memory.workspace
    prefix = f"{PROVIDER}/{session_id}/"
    by_node: dict[str, list[int]] = {}
    blocks: list[dict] = []
    topics: dict[str, str] = {}
    for doc in ws.topic_docs(strict=False):
        for block in doc.blocks:
            nodes = [s[len(prefix):] for s in block_sources(ws, doc, block)
                     if s.startswith(prefix)]
            if not nodes:
                continue
            for node_id in nodes:
                by_node.setdefault(node_id, []).append(len(blocks))
            blocks.append({"path": doc.path, "block_id": block.id, "line": block.line,
                           "headings": list(block.headings), "text": block.text})
            if doc.path not in topics:
                topics[doc.path] = (ws.root / doc.path).read_text(encoding="utf-8",
                                                                  errors="replace")
    return by_node, blocks, topics


def session_model(memory: "Memory", session_id: str, *,
                  text_limit: int = TEXT_LIMIT) -> dict[str, Any]:
    """The JSON model of ``session_id`` the page draws. Read-only (as ``memory status``, it
    may create the workspace identity on first use)."""
    check_name(session_id, "session id")
    store = memory.store
    if not store.exists(session_id):
        raise NotFound(f"unknown session {session_id!r}")
    meta = store.get_meta(session_id)
    nodes = store.get_nodes(session_id)
    head = store.head(session_id)
    workspace_id = memory.workspace_id
    rows = store.list_branches(session_id)
    live = [r["tip"] for r in rows if not r.get("archived")]
    reasons = pending_reasons(memory, session_id, live)
    cites, blocks, topics = _citations(memory, session_id)
    parents, vias = _parents(nodes)
    where = {n.id: i for i, n in enumerate(nodes)}

    first_child: dict[int, int] = {}  # parent -> its oldest child on the conversation edge
    for i in range(len(nodes)):
        if parents[i] != -1 and vias[i] == "pred":
            first_child.setdefault(parents[i], i)  # nodes come in seq order
    out_nodes = []
    for i, node in enumerate(nodes):
        message = node.to_message(session_id)
        text = (node.text() if node.role == "code"
                else message_text(message.get("content")) or node.text())
        kind = fork_kind(node)
        if not kind and vias[i] == "pred" and first_child.get(parents[i], i) != i:
            kind = "branch"  # a later line from the same turn (``session add --after``)
        mark = node.metadata.get(MARK_KEY)
        out_nodes.append({
            "id": node.id, "parent": parents[i], "via": vias[i],
            "role": message["role"], "state": node_state(node, message, workspace_id),
            "fork": kind, "rewound": node.rewound,
            "mark": mark if isinstance(mark, str) else None,
            "seq": node.seq, "created_at": node.created_at, "name": node.name or "",
            "chars": len(text), "text": text[:text_limit],
            "meta": node.metadata, "cites": cites.get(node.id, []),
        })
    branches = []
    for row in rows:
        if row["tip"] not in where:
            continue
        reason = reasons.get(row["tip"])
        described = reason.to_dict() if reason else None
        if described is not None:  # the page walks tip -> oldest pending: no id list per line
            ids = described.pop("pending_ids")
            described["pending_from"] = where.get(ids[0], -1) if ids else -1
        branches.append({
            "tip": where[row["tip"]], "head": row["head"], "archived": bool(row.get("archived")),
            "name": row.get("name"), "reason": described,
        })
    counts = {state: 0 for state in STATES}
    for entry in out_nodes:
        counts[entry["state"]] += 1
    return {
        "version": MODEL_VERSION,
        "generated_at": time.time(),
        "session": {"id": session_id, "title": str(meta.get("title") or ""),
                    "created_at": meta.get("created_at"), "updated_at": meta.get("updated_at"),
                    "head": where.get(head, -1) if head else -1},
        "workspace_id": workspace_id,
        "trigger_tokens": memory.settings.trigger_tokens,
        "counts": counts,
        "nodes": out_nodes,
        "branches": branches,
        "blocks": blocks,
        "topics": topics,
    }
