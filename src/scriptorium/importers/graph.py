"""From a source's tree to our DAG: the mapping every format shares.

A format parser turns each source line or message into an :class:`Item` that names its tree
parent by *source* id. :class:`SessionGraph` decides what each item becomes in our store:

- ``turn`` (a human prompt, an assistant text): a chain node, ``role`` user or llm, whose
  predecessor is the nearest turn above it in the source tree (``"ROOT"`` when there is none).
  Lines that are not turns sit between turns in the source tree; skipping over them is what
  keeps parallel tool calls, progress lines and hook lines from looking like forks. Two turns
  with one predecessor *are* a fork (a rewind, an edit, a regeneration), and are counted.
- ``row`` (a tool call, a tool result, thinking, harness and system lines): a ``code`` node
  hung by ``caller`` on the nearest turn above it, off the chain: kept, never written to memory.
- ``pass`` (progress lines, bookkeeping entries): no node; only remembered as a tree position,
  so a child of it still finds its turn.
- ``summary`` (a compaction summary): an llm node named ``context/summary`` whose
  ``covers_ids`` are the turns of the chain it summarises since the previous summary on that
  line (named in ``previous_summary``); the conversation after it continues from the last
  covered turn, so the covered turns stay on the branch and in memory.
- a ``sidechain`` turn whose parent is not itself in the sidechain opens a spawned sub-agent
  branch: no predecessor, ``caller`` = the turn that started it, ``spawn_branch_root``.

The graph's own state (tree position of every source id, chain predecessors, which turns
already have a child, links between files) is saved in the home after each source file, so an
incremental run needs neither the source's old lines nor the store's node texts.
"""

from __future__ import annotations

import re

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..sessions import Node
from ..sessions.bulk import BulkAppender
from .ids import node_id
from .ledger import SessionState

SUMMARY_NAME = "context/summary"


@dataclass
class Item:
    """One source message, in the shared vocabulary (see the module docstring)."""

    id: str | None
    kind: str  # turn | row | pass | summary
    parent: str | None = None  # source id of the tree parent
    role: str = "user"  # turns: user | llm
    text: Any = ""
    name: str = ""
    input: Any = None
    created_at: float | None = None
    metadata: dict = field(default_factory=dict)
    sidechain: bool = False
    spawn_caller: str | None = None  # source id of the line that started this sidechain
    keep_from: str | None = None  # summaries: source id of the first turn NOT covered
    key: str | None = None  # a content key that survives an id rewrite (pi migrations)
    skip: str = ""  # pass items: the reason counted in the report


class Names:
    """One of a session's small string maps (aliases, content keys, links), in the ledger."""

    def __init__(self, state: SessionState, space: str):
        self.state, self.space = state, space

    def get(self, key: str, default: str | None = None) -> str | None:
        value = self.state.name(self.space, key)
        return default if value is None else value

    def __setitem__(self, key: str, value: str) -> None:
        self.state.set_name(self.space, key, value)

    def setdefault(self, key: str, value: str) -> str:
        current = self.get(key)
        if current is None:
            self[key] = value
            return value
        return current


class SessionGraph:
    """One imported session: its graph state (in the ledger) and the appender writing it."""

    def __init__(self, state: SessionState, kind: str):
        self.sid = state.sid
        self.kind = kind
        self.st = state
        self.alias = Names(state, "alias")  # source id -> stored id (rewritten files)
        self.keys = Names(state, "key")  # content key -> stored id
        self.links = Names(state, "link")  # format links (agent ids, prompts) -> anchor
        self.extra: dict[str, Any] = state.extra
        self.file: dict[str, Any] = {}  # the parser's state for the file being read
        self.bulk: BulkAppender | None = None
        self.added = 0
        self.forks = 0
        self.dangling = 0
        self.skipped: Counter = Counter()
        self.last_main: str | None = None  # last non-sidechain tree position seen

    # --- resolving source ids -------------------------------------------------------------
    def stored(self, source_id: str | None) -> str | None:
        if source_id is None:
            return None
        return self.alias.get(source_id) or node_id(source_id)

    def anchor(self, source_id: str | None) -> str | None:
        """The turn a source id hangs under (itself for a turn); None above the first turn."""
        sid = self.stored(source_id)
        entry = self.st.pos(sid) if sid else None
        return entry[0] if entry else None

    def known(self, source_id: str | None) -> bool:
        sid = self.stored(source_id)
        return bool(sid) and self.st.pos(sid) is not None

    def _sidechain(self, stored_id: str | None) -> bool:
        entry = self.st.pos(stored_id) if stored_id else None
        return bool(entry and entry[1])

    def chain(self, tip: str | None) -> tuple[list[str], str | None]:
        """Turn ids from ``tip`` back to the first turn of the line, or to the last turn an
        earlier summary covers, oldest first; and that earlier summary's id."""
        out: list[str] = []
        seen: set[str] = set()
        cur = tip
        while cur and cur != "ROOT" and cur not in seen:
            earlier = self.st.name("covered", cur)
            if earlier is not None:
                out.reverse()
                return out, earlier
            pred = self.st.pred(cur)
            if pred is None:
                break
            seen.add(cur)
            out.append(cur)
            cur = pred
        out.reverse()
        return out, None

    # --- adding ---------------------------------------------------------------------------
    def add(self, item: Item) -> None:
        """Map ``item`` and append its node (idempotent by id)."""
        assert self.bulk is not None, "open the graph's appender first"
        if item.kind == "pass":
            if item.id is not None:
                stored = self.stored(item.id)
                if self.st.pos(stored) is None:
                    parent = self.stored(item.parent)
                    self.st.set_pos(stored, self.anchor(item.parent),
                                    item.sidechain or self._sidechain(parent))
            self.skipped[item.skip or "pass"] += 1
            self._track(item)
            return
        assert item.id is not None
        stored = self.stored(item.id)
        if item.key is not None:
            prior = self.keys.get(item.key)
            if prior is not None and prior != stored:
                self.alias[item.id] = prior  # the same message under a new id (rewritten file)
                self.skipped["already_imported"] += 1
                self._track(item)
                return
            self.keys[item.key] = stored
        if self.st.pos(stored) is not None:
            self.skipped["already_imported"] += 1
            self._track(item)
            return
        if item.parent is not None and not self.known(item.parent):
            # the parent is in no file read so far: the item starts a line of its own
            item.metadata.setdefault("source_parent_missing", item.parent)
            self.dangling += 1
        node = self._node(item, stored)
        # The mapping above also rebuilds the graph state of a node an interrupted run
        # stored without saving that state; such a node is not written again.
        if self.bulk.append(node):
            self.added += 1
        else:
            self.skipped["already_imported"] += 1
        self._track(item)

    def _track(self, item: Item) -> None:
        if not item.sidechain and item.id is not None:
            self.last_main = item.id

    def _node(self, item: Item, stored: str) -> Node:
        md = dict(item.metadata)
        md["imported_from"] = self.kind
        if stored != item.id:
            md["source_id"] = item.id
        if item.sidechain:
            md["sidechain"] = True
        created = item.created_at if item.created_at is not None else time.time()
        parent = self.stored(item.parent)
        anchor = self.anchor(item.parent)
        if item.kind == "row":
            self.st.set_pos(stored, anchor, item.sidechain or self._sidechain(parent))
            return Node(id=stored, created_at=created, role="code", name=item.name or "row",
                        input=item.input, output=item.text, caller=anchor or "",
                        predecessor=None, metadata=md)
        if item.kind == "summary":
            covers, earlier = self.chain(anchor)
            if item.keep_from is not None:
                keep = self.stored(item.keep_from)
                if keep in covers:
                    covers = covers[: covers.index(keep)]
            if not covers:  # nothing before it: keep the text as a row
                item.kind = "row"
                item.name = "compaction"
                return self._node(item, stored)
            self.st.set_pos(stored, anchor, item.sidechain)
            self.st.set_name("covered", covers[-1], stored)
            md.update({"covers_ids": covers, "compaction": True, "source": "compaction",
                       "type": "compactionSummary"})
            if earlier is not None:
                md["previous_summary"] = earlier
            return Node(id=stored, created_at=created, role="llm", name=SUMMARY_NAME,
                        output=item.text, caller="", predecessor=self.st.pred(covers[0]) or None,
                        metadata=md)
        # a turn
        role = "llm" if item.role in ("llm", "assistant") else "user"
        caller, pred = "", anchor or "ROOT"
        opens_spawn = item.sidechain and (anchor is None or not self._sidechain(anchor))
        if opens_spawn:
            spawner = anchor
            if item.spawn_caller is not None:
                spawner = self.anchor(item.spawn_caller) or self.links.get(item.spawn_caller)
            caller, pred = spawner or "", None
            md.update({"source": "agent_spawn", "spawn_branch_root": True})
            if spawner is None:
                md["spawn_caller_unknown"] = True
        else:
            if self.st.has_kid(pred):
                self.forks += 1
            self.st.add_kid(pred)
        self.st.set_pos(stored, stored, item.sidechain)
        self.st.set_pred(stored, pred or "")
        return Node(id=stored, created_at=created, role=role, name=item.name, input=None,
                    output=item.text, caller=caller, predecessor=pred, metadata=md)

    def set_head(self, source_id: str | None) -> None:
        """Make the turn above ``source_id`` (the source's current leaf) the head."""
        assert self.bulk is not None
        target = self.anchor(source_id)
        if target is not None and self.bulk.has(target) and target != self.bulk.head:
            self.bulk.set_head(target)


_SURROGATE = re.compile("[\ud800-\udfff]")


def scrub(value: Any) -> tuple[Any, int]:
    """``value`` (a decoded JSON value) with every lone surrogate replaced by U+FFFD, and how
    many there were.

    A source's JSON may escape half a surrogate pair (``"\\ud800"``, a damaged or cut
    string); Python decodes it into a str no file can hold as UTF-8. Importers scrub each
    object as they decode it (:func:`has_lone_surrogate_escape` says when it is needed): the
    rest of the message is kept and the count is reported, instead of the import failing."""
    if isinstance(value, str):
        return _SURROGATE.subn("\ufffd", value) if _SURROGATE.search(value) else (value, 0)
    if isinstance(value, dict):
        total, out = 0, {}
        for key, item in value.items():
            (key, a), (item, b) = scrub(key), scrub(item)
            out[key], total = item, total + a + b
        return (out, total) if total else (value, 0)
    if isinstance(value, list):
        pairs = [scrub(item) for item in value]
        total = sum(n for _, n in pairs)
        return ([v for v, _ in pairs], total) if total else (value, 0)
    return value, 0


# a surrogate escape, or a surrogate's own UTF-8-style bytes (json.loads decodes bytes with
# "surrogatepass", so those become lone surrogates too)
_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}|\xed[\xa0-\xbf]")


def has_lone_surrogate_escape(raw: bytes) -> bool:
    """Could this JSON line decode to a lone surrogate? (A valid escaped pair decodes whole,
    and :func:`scrub` then replaces nothing.) Cheap: most lines have none, and only those
    that do are walked."""
    return _ESCAPE.search(raw) is not None
