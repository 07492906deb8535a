"""pi coding-agent sessions (``~/.pi/agent/sessions/--<cwd>--/<time>_<uuid>.jsonl``).

The first line is the header (``type: session``, ``id``). In format v2/v3 every entry has an
``id`` and a ``parentId``; v1 entries have neither and follow each other. What each entry
becomes (see docs/importers.md): user messages and assistant text -> turns; ``toolCall``
blocks, ``toolResult``, ``bashExecution`` and custom messages -> tool rows; ``compaction`` ->
a compaction summary covering the turns before ``firstKeptEntryId`` (v1:
``firstKeptEntryIndex``); ``branch_summary`` -> a row; model/thinking changes, labels and
extension state -> tree positions only.

Ids. v2/v3 ids are kept. v1 entries get ``e-`` + a hash of (entry position, type, role,
timestamps). pi migrates a v1 file by rewriting it in place with fresh random ids; the ledger
sees the rewrite (its first bytes change) and reads the file again, and every entry whose
content key (the same position/type/role/timestamps) is already imported is mapped onto the
node it made the first time instead of being added again. The new random ids are remembered
as aliases, so entries appended after the migration attach to the right nodes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from ..timefmt import epoch
from .claude_code import block_text
from .graph import Item, SessionGraph
from .ids import digest, session_id

KIND = "pi"
DEFAULT_PATH = "~/.pi/agent/sessions"
PASS_TYPES = ("model_change", "thinking_level_change", "label", "session_info", "custom")


def _header(path: Path) -> dict | None:
    with open(path, "rb") as fh:
        for raw in fh:
            if raw.strip():
                try:
                    obj = json.loads(raw)
                except (ValueError, UnicodeDecodeError):
                    return None
                return obj if isinstance(obj, dict) and obj.get("type") == "session" else None
    return None


class PiParser:
    kind = KIND

    def session_of(self, path: Path) -> str | None:
        header = _header(path)
        if header is None or not header.get("id"):
            return None
        return session_id(KIND, header["id"])

    def title_of(self, path: Path) -> str:
        header = _header(path) or {}
        return str(header.get("cwd") or path.stem)

    def finish(self, graph: SessionGraph) -> None:
        leaf = graph.file.get("last")
        if leaf is not None:
            graph.set_head(leaf)

    def items(self, graph: SessionGraph, obj: dict, lineno: int) -> Iterator[Item]:
        kind = obj.get("type")
        if kind == "session":
            graph.file["v"] = obj.get("version") or 1
            graph.file["ordinal"] = 0
            graph.file.pop("last", None)
            for key in ("branchedFrom", "parentSession"):
                if obj.get(key):
                    graph.file[key] = obj[key]
            yield Item(None, "pass", skip="header")
            return
        ordinal = graph.file.get("ordinal", 0)
        graph.file["ordinal"] = ordinal + 1
        msg = obj.get("message") if isinstance(obj.get("message"), dict) else {}
        role = msg.get("role")
        key = digest(f"{ordinal}|{kind}|{role}|{msg.get('timestamp')}|{obj.get('timestamp')}")
        has_ids = isinstance(obj.get("id"), str) and obj["id"]
        eid = obj["id"] if has_ids else f"e-{key[:16]}"
        if has_ids:
            parent = obj.get("parentId") if isinstance(obj.get("parentId"), str) else None
        else:
            parent = graph.file.get("last")
            graph.file.setdefault("ord", {})[str(ordinal)] = eid
        graph.file["last"] = eid
        base: dict[str, Any] = {"created_at": epoch(obj.get("timestamp")), "key": key}
        md: dict[str, Any] = {"source_type": kind}
        if kind == "message":
            yield from self._message(eid, parent, msg, md, base)
        elif kind == "compaction":
            keep = obj.get("firstKeptEntryId")
            if keep is None and isinstance(obj.get("firstKeptEntryIndex"), int):
                keep = graph.file.get("ord", {}).get(str(obj["firstKeptEntryIndex"]))
            md.update({k: obj[k] for k in ("tokensBefore", "details", "fromHook") if k in obj})
            yield Item(eid, "summary", parent=parent, text=str(obj.get("summary") or ""),
                       keep_from=keep, metadata=md, **base)
        elif kind in ("branch_summary", "custom_message"):
            md.update({k: obj[k] for k in ("fromId", "details", "customType") if k in obj})
            text = obj.get("summary") if kind == "branch_summary" else block_text(obj.get("content"))
            yield Item(eid, "row", parent=parent, name=kind, text=text or "", metadata=md, **base)
        else:
            yield Item(eid, "pass", parent=parent, skip=f"type:{kind}", **base)

    def _message(self, eid: str, parent: str | None, msg: dict, md: dict,
                 base: dict) -> Iterator[Item]:
        role = msg.get("role")
        content = msg.get("content")
        if role == "user":
            yield Item(eid, "turn", parent=parent, role="user", text=block_text(content),
                       metadata=md, **base)
            return
        if role == "assistant":
            blocks = content if isinstance(content, list) else []
            text = block_text(content)
            calls = [b for b in blocks if isinstance(b, dict) and b.get("type") == "toolCall"]
            md.update({k: msg[k] for k in ("stopReason", "errorMessage", "provider")
                       if k in msg})
            model = str(msg.get("model") or "")
            first = eid
            if text.strip():
                yield Item(eid, "turn", parent=parent, role="llm", text=text, name=model,
                           metadata=md, **base)
            elif not calls:
                yield Item(eid, "row", parent=parent, name="empty",
                           text=block_text(content, ("thinking",)), metadata=md, **base)
                return
            else:
                first = None
            for k, call in enumerate(calls):
                row_id = eid if first is None and k == 0 else f"{eid}.{k}"
                yield Item(row_id, "row", parent=parent if row_id == eid else eid,
                           name=str(call.get("name") or "toolCall"),
                           input=call.get("arguments"), text="",
                           metadata=dict(md, tool_call_id=call.get("id")),
                           created_at=base["created_at"], key=f"{base['key']}.{k}")
            return
        if role == "toolResult":
            md.update({"tool_call_id": msg.get("toolCallId"), "is_error": bool(msg.get("isError"))})
            yield Item(eid, "row", parent=parent, name=str(msg.get("toolName") or "toolResult"),
                       text=block_text(content), metadata=md, **base)
            return
        if role == "bashExecution":
            md.update({k: msg[k] for k in ("exitCode", "cancelled", "truncated") if k in msg})
            yield Item(eid, "row", parent=parent, name="bash", input=msg.get("command"),
                       text=str(msg.get("output") or ""), metadata=md, **base)
            return
        yield Item(eid, "row", parent=parent, name=str(role or "message"),
                   text=block_text(content) or str(msg.get("summary") or ""), metadata=md, **base)


def discover(paths: list[Path]) -> list[Path]:
    from .run import walk

    return walk(paths, ".jsonl")
