"""ChatGPT data exports: ``conversations.json`` (a JSON array), or the export zip holding it.

Each conversation becomes a session ``chatgpt-<conversation id>``. Its tree is ``mapping``:
``{node id: {message, parent, children}}``; node ids are kept. What each node becomes (see
docs/importers.md): user text and assistant text addressed to everyone (``recipient: all``)
-> turns; assistant messages addressed to a tool (``recipient`` = ``python``, ``web.run``…),
``tool`` replies, code, reasoning and system/context messages -> rows; the empty root ->
a tree position. Regenerated answers and edited prompts are sibling turns: forks. The head is
``current_node`` (its turn). Children are visited in ``create_time`` order.

The array is read one conversation at a time (never the whole export at once), and a
conversation whose ``update_time`` equals the one imported last time is skipped unread.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import IO, Any, Iterator

from ..errors import InvalidInput
from .graph import Item, SessionGraph, scrub
from .ids import session_id
from .ledger import FileState
from .run import FileReport, Importer

KIND = "chatgpt"
CHUNK = 1 << 16
TEXT_TYPES = ("text", "multimodal_text")


def iter_array(stream: IO[str], where: str) -> Iterator[dict]:
    """The objects of a top-level JSON array, one at a time (memory: one element)."""
    decoder = json.JSONDecoder()
    buf = ""
    pos = 0
    started = False
    eof = False

    def fill() -> bool:
        nonlocal buf, pos, eof
        chunk = stream.read(CHUNK)
        if not chunk:
            eof = True
            return False
        buf = buf[pos:] + chunk
        pos = 0
        return True

    while True:
        while pos < len(buf) and buf[pos] in " \t\r\n,":
            if buf[pos] == "," and not started:
                raise InvalidInput(f"{where}: not a JSON array of conversations")
            pos += 1
        if pos >= len(buf):
            if not fill():
                raise InvalidInput(f"{where}: ends before the array is closed")
            continue
        if not started:
            if buf[pos] != "[":
                raise InvalidInput(f"{where}: not a JSON array of conversations")
            started = True
            pos += 1
            continue
        if buf[pos] == "]":
            return
        try:
            obj, end = decoder.raw_decode(buf, pos)
        except ValueError as exc:
            if eof or not fill():
                raise InvalidInput(f"{where}: invalid JSON near character {exc.pos}") from None
            continue
        if end == len(buf) and not eof:  # a number or literal may go on in the next chunk
            if fill():
                continue
        pos = end
        if isinstance(obj, dict):
            yield obj


def _text(content: dict) -> str:
    parts = content.get("parts")
    if isinstance(parts, list):
        return "\n".join(p for p in parts if isinstance(p, str) and p)
    for key in ("text", "result"):
        if isinstance(content.get(key), str):
            return content[key]
    return ""


def _dict(value: Any) -> dict:
    """``value`` if it is an object, else an empty one (an export of an unexpected shape
    loses that field, never the import)."""
    return value if isinstance(value, dict) else {}


def items(conv: dict) -> Iterator[Item]:
    """The conversation's nodes, parents before children (children by create_time)."""
    mapping = {k: v for k, v in _dict(conv.get("mapping")).items() if isinstance(v, dict)}

    def when(nid: str) -> float:
        t = _dict(mapping[nid].get("message")).get("create_time")
        return float(t) if isinstance(t, (int, float)) else 0.0

    def parent_of(node: dict) -> str | None:
        parent = node.get("parent")
        return parent if isinstance(parent, str) and parent in mapping else None

    roots = [nid for nid, node in mapping.items() if parent_of(node) is None]
    stack = sorted(roots, key=when, reverse=True)
    seen: set[str] = set()
    while stack:
        nid = stack.pop()
        if nid in seen:
            continue
        seen.add(nid)
        node = mapping[nid]
        yield _item(nid, parent_of(node), node.get("message"))
        children = node.get("children") if isinstance(node.get("children"), list) else []
        kids = [k for k in children if isinstance(k, str) and k in mapping and k not in seen]
        stack.extend(sorted(kids, key=when, reverse=True))


def _item(nid: str, parent: str | None, msg: Any) -> Item:
    if not isinstance(msg, dict):
        return Item(nid, "pass", parent=parent, skip="empty_node")
    author = _dict(msg.get("author"))
    role = author.get("role")
    content = _dict(msg.get("content"))
    ctype = content.get("content_type")
    text = _text(content)
    created = msg.get("create_time") if isinstance(msg.get("create_time"), (int, float)) else None
    recipient = msg.get("recipient") if isinstance(msg.get("recipient"), str) else "all"
    md: dict[str, Any] = {"content_type": ctype, "author_role": role}
    if _dict(msg.get("metadata")).get("is_visually_hidden_from_conversation"):
        md["hidden"] = True
    if role == "user" and ctype in TEXT_TYPES and text.strip():
        return Item(nid, "turn", parent=parent, role="user", text=text, metadata=md,
                    created_at=created)
    if role == "assistant" and recipient == "all" and ctype in TEXT_TYPES and text.strip():
        model = _dict(msg.get("metadata")).get("model_slug") or ""
        return Item(nid, "turn", parent=parent, role="llm", text=text, name=str(model),
                    metadata=md, created_at=created)
    if role == "assistant" and recipient != "all":
        md["tool_call"] = True
    name = author.get("name") or (recipient if recipient != "all" else None) or role or "node"
    return Item(nid, "row", parent=parent, name=str(name), text=text,
                input=content if not text else None, metadata=md, created_at=created)


def _open(path: Path) -> tuple[IO[str], Any]:
    """The export's conversations.json as text (from the zip without extracting)."""
    if zipfile.is_zipfile(path):
        archive = zipfile.ZipFile(path)
        names = [n for n in archive.namelist()
                 if n.rsplit("/", 1)[-1] == "conversations.json"]
        if not names:
            archive.close()
            raise InvalidInput(f"{path}: the zip holds no conversations.json")
        raw = archive.open(min(names, key=len))
        return io.TextIOWrapper(raw, encoding="utf-8"), archive
    return open(path, encoding="utf-8"), None


class ChatGPTImporter(Importer):
    """One export file -> one session per conversation."""

    def import_file(self, path: Path) -> FileReport:
        report = FileReport(str(path))
        try:
            self._import(path, report)
        except InvalidInput as exc:
            report.errors.append(str(exc))
        except (OSError, zipfile.BadZipFile, UnicodeDecodeError) as exc:
            report.errors.append(f"{path}: cannot read: {exc}")
        return report

    def _import(self, path: Path, report: FileReport) -> None:
        st = os.stat(path)
        if self.ledger.unchanged(path, st):
            report.unchanged = True
            return
        stream, archive = _open(path)
        try:
            for conv in iter_array(stream, str(path)):
                self.ledger.begin()  # one transaction per conversation
                try:
                    self._conversation(conv, report)
                    self.ledger.commit()
                except BaseException:
                    self.ledger.rollback()
                    raise
        finally:
            stream.close()
            if archive is not None:
                archive.close()
        self.ledger.begin()
        self.ledger.put(path, FileState(size=st.st_size, mtime_ns=st.st_mtime_ns,
                                        inode=st.st_ino))
        self.ledger.commit()

    def _conversation(self, conv: dict, report: FileReport) -> None:
        conv, replaced = scrub(conv)  # lone surrogates (see graph.scrub)
        report.replaced_characters += replaced
        cid = conv.get("conversation_id") or conv.get("id")
        if not isinstance(cid, str) or not cid:
            report.skipped["conversation_without_id"] += 1
            return
        sid = session_id(KIND, cid)
        stamp = conv.get("update_time")
        if self.store.exists(sid) and self.ledger.session(sid).extra.get(
                "update_time") == stamp:
            report.sessions.append(sid)
            report.skipped["unchanged_conversation"] += 1
            return
        created = self.open_session(sid, str(conv.get("title") or ""), report)

        def feed(graph: SessionGraph) -> None:
            for item in items(conv):
                graph.add(item)
            current = conv.get("current_node")
            if isinstance(current, str) and graph.known(current):
                graph.set_head(current)
            else:
                graph.set_head(graph.last_main)
            graph.extra["update_time"] = stamp

        self.run_graph(sid, report, created, feed)
