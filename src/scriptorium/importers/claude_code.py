"""Claude Code transcripts (``~/.claude/projects/<slug>/<session>.jsonl``) -> our sessions.

The tree is ``uuid`` / ``parentUuid``; what each line becomes (see docs/importers.md):

- ``user`` with human text -> a user turn; ``user`` with ``tool_result`` blocks -> a tool row;
  harness text (``isMeta``, ``<command-…>``, ``<local-command-…>``, ``[Request interrupted…``)
  -> a row named ``harness``; ``isCompactSummary`` -> a compaction summary covering the chain
  before its ``compact_boundary``.
- ``assistant`` (one content block per line in 2.x, several in 1.0.x): text -> an llm turn;
  each ``tool_use`` block -> a tool row; ``thinking`` / blank text -> a row.
- ``system`` -> a row (``compact_boundary`` is a tree position whose parent is its
  ``logicalParentUuid``, so the conversation after a compaction continues the same line).
- ``progress`` and every other line with a ``uuid`` -> a tree position only (``agent_progress``
  copies sub-agent messages that the sub-agent's own file holds).
- lines without ``uuid`` (``summary``, ``file-history-snapshot``, ``queue-operation``, …) are
  counted as skipped by type; ``summary`` gives an untitled session its title.

Sub-agents: ``isSidechain`` lines open a spawned branch. Its caller is the turn above the
``Task``/``Agent`` tool call that started it, found through ``toolUseResult.agentId`` or
``agent_progress`` (2.x files ``agent-<id>.jsonl``), or through the prompt text (1.0.x inline
runs). Compaction-agent runs (``agent-acompact-…``) are kept as runtime turns: their summary
restates turns memory takes from their own nodes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from ..timefmt import epoch
from .graph import Item, SessionGraph
from .ids import digest, session_id

KIND = "claude-code"
HARNESS_PREFIXES = ("<command-", "<local-command-", "[Request interrupted", "<bash-",
                    "<user-memory-input>", "Caveat: The messages below")
TASK_TOOLS = ("Task", "Agent")
DEFAULT_PATH = "~/.claude/projects"


def block_text(content: Any, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of a message: a string, or the LF-joined text of its blocks of ``kinds``."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, dict) and block.get("type") in kinds:
            text = block.get("text")
            if text is None:
                text = block.get("thinking")
            if text is None and "content" in block:
                text = block_text(block["content"])
            if isinstance(text, str) and text:
                parts.append(text)
        elif isinstance(block, str) and "text" in kinds:
            parts.append(block)
    return "\n".join(parts)


_COMMAND = re.compile(r"<command-name>\s*([^<]*?)\s*</command-name>")
_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)


def _command(text: str) -> str | None:
    """A slash command the user typed (``/init``, ``/review 12``), as the user typed it."""
    if not text.lstrip().startswith(("<command-", "<command-message>")):
        return None
    name = _COMMAND.search(text)
    if not name:
        return None
    args = _ARGS.search(text)
    return f"{name.group(1)} {args.group(1).strip()}".strip() if args else name.group(1)


def _first_lines(path: Path, limit: int = 200) -> Iterator[dict]:
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh):
            if n >= limit:
                return
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                continue
            if isinstance(obj, dict):
                yield obj


class ClaudeCodeParser:
    kind = KIND

    def session_of(self, path: Path) -> str | None:
        for obj in _first_lines(path):
            sid = obj.get("sessionId")
            if isinstance(sid, str) and sid:
                return session_id(KIND, sid)
        return session_id(KIND, path.stem) if path.stem else None

    def title_of(self, path: Path) -> str:
        for obj in _first_lines(path):
            if obj.get("type") in ("summary", "custom-title", "ai-title"):
                text = obj.get("summary") or obj.get("title") or obj.get("customTitle")
                if isinstance(text, str) and text.strip():
                    return text.strip()
            if obj.get("type") == "user" and not obj.get("isSidechain") and not obj.get("isMeta"):
                text = block_text((obj.get("message") or {}).get("content")).strip()
                text = _command(text) or text
                if text and not text.startswith(HARNESS_PREFIXES):
                    return text.splitlines()[0]
        return ""

    def finish(self, graph: SessionGraph) -> None:
        leaf = graph.file.pop("leaf", None)
        if leaf is not None:
            graph.set_head(leaf)

    # --- lines ----------------------------------------------------------------------------
    def items(self, graph: SessionGraph, obj: dict, lineno: int) -> Iterator[Item]:
        kind = obj.get("type")
        uid = obj.get("uuid")
        if not isinstance(uid, str) or not uid:
            yield Item(None, "pass", skip=f"type:{kind}")
            return
        parent = obj.get("parentUuid") if isinstance(obj.get("parentUuid"), str) else None
        side = bool(obj.get("isSidechain"))
        agent = obj.get("agentId") if isinstance(obj.get("agentId"), str) else None
        base = {"created_at": epoch(obj.get("timestamp")), "sidechain": side}
        md: dict[str, Any] = {"source_type": kind}
        if agent:
            md["agent_id"] = agent
        if not side:
            graph.file["leaf"] = uid
        if kind == "user":
            yield from self._user(graph, obj, uid, parent, md, base, agent)
        elif kind == "assistant":
            yield from self._assistant(graph, obj, uid, parent, md, base, agent)
        elif kind == "system":
            if obj.get("subtype") == "compact_boundary":
                logical = obj.get("logicalParentUuid")
                yield Item(uid, "pass", parent=logical if isinstance(logical, str) else parent,
                           skip="compact_boundary", **base)
                return
            text = obj.get("content")
            md.update({k: obj[k] for k in ("subtype", "level", "toolUseID") if k in obj})
            yield Item(uid, "row", parent=parent, name=f"system/{obj.get('subtype') or 'hook'}",
                       text=text if isinstance(text, str) else json.dumps(text), metadata=md,
                       **base)
        else:
            if kind == "progress":
                self._progress_link(graph, obj)
            yield Item(uid, "pass", parent=parent, skip=f"type:{kind}", **base)

    def _runtime(self, agent: str | None, md: dict) -> dict:
        if agent and agent.startswith("acompact"):
            md["display"] = "runtime"  # the compaction agent: restates covered turns
        return md

    def _user(self, graph: SessionGraph, obj: dict, uid: str, parent: str | None, md: dict,
              base: dict, agent: str | None) -> Iterator[Item]:
        content = (obj.get("message") or {}).get("content")
        if obj.get("isCompactSummary"):
            yield Item(uid, "summary", parent=parent, text=block_text(content), metadata=md,
                       **base)
            return
        results = [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] \
            if isinstance(content, list) else []
        if results:
            ids = [b.get("tool_use_id") for b in results]
            md.update({"tool_call_id": ids[0] if len(ids) == 1 else ids,
                       "is_error": any(bool(b.get("is_error")) for b in results)})
            extra = obj.get("toolUseResult")
            linked = isinstance(extra, dict) and isinstance(extra.get("agentId"), str)
            if linked:
                md["spawned_agent"] = extra["agentId"]
                tool_anchor = graph.links.get(f"tool:{ids[0]}") or graph.anchor(parent)
                if tool_anchor:
                    graph.links[f"agent:{extra['agentId']}"] = tool_anchor
            yield Item(uid, "row", parent=parent, name="tool_result",
                       text=block_text(results, ("tool_result",)), metadata=md, **base)
            return
        text = block_text(content)
        command = _command(text) if not obj.get("isMeta") else None
        if command:
            md["command"] = text
            text = command
        elif obj.get("isMeta") or not text.strip() or text.lstrip().startswith(HARNESS_PREFIXES):
            yield Item(uid, "row", parent=parent, name="harness", text=text, metadata=md, **base)
            return
        spawn = None
        if base["sidechain"] and (parent is None or not graph.known(parent)):
            spawn = f"agent:{agent}" if agent else f"prompt:{digest(text.strip())}"
            if not graph.links.get(spawn) and parent is not None:
                spawn = None  # a parent in another file (the compaction agent): hang on it
        yield Item(uid, "turn", parent=parent, role="user", text=text, spawn_caller=spawn,
                   metadata=self._runtime(agent, md), **base)

    def _assistant(self, graph: SessionGraph, obj: dict, uid: str, parent: str | None,
                   md: dict, base: dict, agent: str | None) -> Iterator[Item]:
        message = obj.get("message") or {}
        content = message.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        model = message.get("model") if isinstance(message.get("model"), str) else ""
        if isinstance(message.get("id"), str):
            md["message_id"] = message["id"]
        text = block_text(blocks)
        calls = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
        head = uid
        if text.strip():
            spawn = None
            if base["sidechain"] and (parent is None or not graph.known(parent)) and agent:
                spawn = f"agent:{agent}"
            yield Item(uid, "turn", parent=parent, role="llm", text=text, name=model,
                       spawn_caller=spawn, metadata=self._runtime(agent, dict(md)), **base)
        elif not calls:
            other = [b.get("type") for b in blocks if isinstance(b, dict)]
            name = "thinking" if "thinking" in other else "empty"
            yield Item(uid, "row", parent=parent, name=name,
                       text=block_text(blocks, ("thinking",)), metadata=dict(md), **base)
            return
        else:
            head = None
        for k, call in enumerate(calls):
            row_id = uid if head is None and k == 0 else f"{uid}.{k}"
            call_md = dict(md, tool_call_id=call.get("id"))
            yield Item(row_id, "row", parent=uid if row_id != uid else parent,
                       name=str(call.get("name") or "tool_use"), input=call.get("input"),
                       text="", metadata=call_md, **base)
            if isinstance(call.get("id"), str):
                if call.get("name") in TASK_TOOLS:
                    anchor = graph.anchor(row_id)
                    if anchor:
                        graph.links[f"tool:{call['id']}"] = anchor
                        prompt = (call.get("input") or {}).get("prompt")
                        if isinstance(prompt, str):
                            graph.links[f"prompt:{digest(prompt.strip())}"] = anchor

    def _progress_link(self, graph: SessionGraph, obj: dict) -> None:
        data = obj.get("data") if isinstance(obj.get("data"), dict) else {}
        if data.get("type") == "agent_progress" and isinstance(data.get("agentId"), str):
            tool = graph.links.get(f"tool:{obj.get('parentToolUseID')}")
            if tool:
                graph.links.setdefault(f"agent:{data['agentId']}", tool)


def discover(paths: list[Path]) -> list[Path]:
    """Transcripts under ``paths``: main files first, then sub-agent files, so a sub-agent
    finds the turn that started it in the same run."""
    from .run import walk

    files = walk(paths, ".jsonl")
    return sorted(files, key=lambda p: (p.name.startswith("agent-"), str(p)))
