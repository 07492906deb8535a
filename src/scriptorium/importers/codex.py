"""OpenAI Codex CLI rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-…-<thread>.jsonl``).

A rollout is a linear log of one thread: ``{timestamp, type, payload}`` lines with no ids and
no parent pointers, so each item follows the one before it, and its id is derived from its
line number and a hash of its timestamp and type (the file is only ever appended to).

What each line becomes (see docs/importers.md): the human turn arrives twice, as
``response_item/message`` role user and as ``event_msg/user_message`` (and assistant text as
``response_item/message`` role assistant and ``event_msg/agent_message``): the first of a pair
becomes the turn and its twin is skipped as a duplicate. Harness context sent as a user message
(``<environment_context>``, AGENTS.md, …) and developer messages are rows, as are reasoning,
function/custom tool calls and their outputs. A ``compacted`` line is a compaction summary over
the chain so far (its ``replacement_history`` repeats items already imported and is dropped).
``event_msg/thread_rolled_back {num_turns}`` (Esc-Esc backtrack) makes the next turn a fork
from before the last ``num_turns`` user turns. A sub-agent rollout
(``source.subagent.thread_spawn.parent_thread_id``) is imported into its parent's session as a
spawned branch, hung on the parent's latest ``spawn_agent`` call when one was imported before it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Iterator

from ..timefmt import epoch
from .claude_code import block_text
from .graph import Item, SessionGraph
from .ids import digest, session_id

KIND = "codex"
DEFAULT_PATH = "~/.codex/sessions"
CONTEXT_PREFIXES = ("<environment_context>", "<user_instructions>", "# AGENTS.md",
                    "<permissions", "<INSTRUCTIONS>", "<user_shell_command>", "<turn_aborted>")
_SCRUBBED = re.compile(r"\[REDACTED_[A-Z]+ (len=\d+ sha=[0-9a-f]+)\]")
SKIPPED_EVENTS = ("token_count", "agent_reasoning", "task_started", "task_complete",
                  "turn_aborted", "context_compacted", "agent_reasoning_section_break")


def _meta(path: Path) -> dict | None:
    with open(path, "rb") as fh:
        for raw in fh:
            try:
                obj = json.loads(raw)
            except (ValueError, UnicodeDecodeError):
                return None
            if isinstance(obj, dict) and obj.get("type") == "session_meta":
                return obj.get("payload") if isinstance(obj.get("payload"), dict) else None
            return None
    return None


def _parent_thread(meta: dict) -> str | None:
    source = meta.get("source")
    if isinstance(source, dict):
        spawn = (source.get("subagent") or {}).get("thread_spawn") or {}
        if isinstance(spawn, dict) and spawn.get("parent_thread_id"):
            return str(spawn["parent_thread_id"])
    return None


def _pair_key(text: str) -> str:
    """Text as both twins carry it (the owner-scrubbed fixtures differ only in a label)."""
    return digest(_SCRUBBED.sub(r"\1", text.strip()), 16)


class CodexParser:
    kind = KIND

    def session_of(self, path: Path) -> str | None:
        meta = _meta(path)
        if meta is None or not meta.get("id"):
            return None
        return session_id(KIND, _parent_thread(meta) or meta["id"])

    def title_of(self, path: Path) -> str:
        meta = _meta(path) or {}
        return str(meta.get("cwd") or path.stem)

    def finish(self, graph: SessionGraph) -> None:
        if not graph.file.get("sub"):
            last = graph.file.get("last")
            if last is not None:
                graph.set_head(last)

    def items(self, graph: SessionGraph, obj: dict, lineno: int) -> Iterator[Item]:
        kind = obj.get("type")
        payload = obj.get("payload") if isinstance(obj.get("payload"), dict) else {}
        sub = payload.get("type")
        created = epoch(obj.get("timestamp"))
        stamp = obj.get("timestamp")
        iid = f"l{lineno:06d}-" + digest(f"{stamp}|{kind}|{sub}", 8)
        if kind == "session_meta":
            parent_thread = _parent_thread(payload)
            if parent_thread and lineno == 1:
                graph.file["sub"] = str(payload.get("id"))
                graph.file["last"] = None
            yield Item(None, "pass", skip="session_meta")
            return
        side = bool(graph.file.get("sub"))
        spawn = "last_spawn" if side else None
        base: dict[str, Any] = {"created_at": created, "sidechain": side, "spawn_caller": spawn}
        parent = graph.file.get("last")
        md: dict[str, Any] = {"source_type": f"{kind}/{sub}" if sub else str(kind)}
        item: Item | None = None
        if kind == "response_item" and sub == "message":
            role = payload.get("role")
            text = block_text(payload.get("content"), ("input_text", "output_text", "text"))
            if payload.get("phase"):
                md["phase"] = payload["phase"]
            parts = [b.get("text") for b in payload.get("content") or []
                     if isinstance(b, dict) and isinstance(b.get("text"), str)]
            if role == "user" and not text.lstrip().startswith(CONTEXT_PREFIXES):
                item = self._twin(graph, "user", text, iid, parent, md, base, "response", parts)
            elif role == "assistant":
                item = self._twin(graph, "llm", text, iid, parent, md, base, "response", parts)
            else:
                item = Item(iid, "row", parent=parent, name=f"{role}_message", text=text,
                            metadata=md, **base)
        elif kind == "event_msg" and sub in ("user_message", "agent_message"):
            role = "user" if sub == "user_message" else "llm"
            item = self._twin(graph, role, str(payload.get("message") or ""), iid, parent, md,
                              base, "event")
        elif kind == "event_msg" and sub == "thread_rolled_back":
            self._rollback(graph, payload.get("num_turns"))
            yield Item(None, "pass", skip="event:thread_rolled_back")
            return
        elif kind == "response_item":
            item = self._tool(iid, parent, sub, payload, md, base, graph)
        elif kind == "compacted":
            md["replacement_items"] = len(payload.get("replacement_history") or [])
            item = Item(iid, "summary", parent=parent, text=str(payload.get("message") or ""),
                        metadata=md, **base)
        else:
            yield Item(None, "pass", skip=f"{kind}:{sub}" if sub else f"type:{kind}")
            return
        if item is None:
            return
        graph.file["last"] = item.id
        if item.kind == "turn" and item.role == "user" and not side:
            graph.file.setdefault("users", []).append(item.id)
        yield item

    def _twin(self, graph: SessionGraph, role: str, text: str, iid: str, parent: str | None,
              md: dict, base: dict, origin: str, parts: list[str] | None = None) -> Item | None:
        """The first of a response_item/event_msg pair is the turn; its twin is skipped.
        A response message may carry more blocks than the event (attachments): the event
        matches the whole text or any one block."""
        keys = {f"{role}:{_pair_key(t)}" for t in [text, *(parts or [])] if t.strip()}
        waiting = graph.file.setdefault("twins", {})
        if any(waiting.get(k) not in (None, origin) for k in keys):
            waiting.clear()
            graph.skipped[f"duplicate_{role}_text"] += 1
            return None
        waiting.clear()  # a twin only ever follows closely: forget older ones
        waiting.update({k: origin for k in keys})
        if not text.strip():
            return Item(iid, "row", parent=parent, name="empty", metadata=md, **base)
        return Item(iid, "turn", parent=parent, role=role, text=text, metadata=md, **base)

    def _tool(self, iid: str, parent: str | None, sub: Any, payload: dict, md: dict,
              base: dict, graph: SessionGraph) -> Item:
        if payload.get("call_id"):
            md["tool_call_id"] = payload["call_id"]
        if sub in ("function_call_output", "custom_tool_call_output"):
            out = payload.get("output")
            text = out if isinstance(out, str) else json.dumps(out, ensure_ascii=False)
            return Item(iid, "row", parent=parent, name="tool_result", text=text, metadata=md,
                        **base)
        if sub == "reasoning":
            summary = payload.get("summary")
            return Item(iid, "row", parent=parent, name="reasoning",
                        text=block_text(summary, ("summary_text", "text")), metadata=md, **base)
        name = str(payload.get("name") or sub or "item")
        args = payload.get("arguments", payload.get("input", payload.get("action")))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass
        if "spawn" in name and graph.anchor(parent):
            graph.links["last_spawn"] = graph.anchor(parent) or ""  # the turn that spawned
        return Item(iid, "row", parent=parent, name=name, input=args, metadata=md, **base)

    def _rollback(self, graph: SessionGraph, num_turns: Any) -> None:
        users = graph.file.get("users") or []
        if not isinstance(num_turns, int) or num_turns <= 0 or not users:
            return
        n = min(num_turns, len(users))
        target = users[-n]
        graph.file["users"] = users[:-n]
        pred = graph.st.pred(target) or ""
        graph.file["last"] = pred if pred and pred != "ROOT" else None


def discover(paths: list[Path]) -> list[Path]:
    from .run import walk

    return [p for p in walk(paths, ".jsonl") if p.name.startswith("rollout-")] or \
        walk(paths, ".jsonl")
