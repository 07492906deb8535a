"""One DAG node: the on-disk schema, its file name, the message projection and the predicates
the walks use.

The schema is the reference store's (DESIGN §3) so existing installations open unchanged;
unknown top-level keys are kept and written back, so a rewrite never drops a field.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from ..errors import CorruptFile, InvalidInput
from ..fsutil import check_name, check_text, json_object
from . import kinds

ROOT = "ROOT"
CHAIN_CALLERS = ("", ROOT)

# Top-level keys of a node file, in the order they are written.
NODE_FIELDS = ("id", "created_at", "seq", "role", "name", "input", "output", "caller",
               "predecessor", "reads", "metadata")

_FIELD_SET = frozenset(NODE_FIELDS)
# the ``extra`` of every parsed node without unknown keys: one shared, read-only mapping
_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})

_ROLE_IN = {"user": "user", "assistant": "llm", "llm": "llm", "system": "llm",
            "tool": "code", "code": "code"}
_ROLE_OUT = {"user": "user", "llm": "assistant", "code": "tool"}
_ROLE_LETTER = {"user": "u", "llm": "l", "code": "c"}
_NAME_RE = re.compile(r"^(\d+)-")

# Message-dict keys that are not metadata when a message comes in.
_MESSAGE_KEYS = frozenset({"id", "role", "content", "output", "predecessor", "caller", "name",
                           "input", "created_at", "timestamp", "seq", "session_id", "reads",
                           "metadata", "token_model", "function", "extra"})


def new_id(nbytes: int = 6) -> str:
    """A fresh node/session id: ``2*nbytes`` hex characters."""
    return uuid.uuid4().hex[: 2 * nbytes]


def normalize_role(role: Any) -> str:
    """Map message roles (user/assistant/tool, also llm/code/system) to node roles."""
    if not isinstance(role, str) or role not in _ROLE_IN:
        raise InvalidInput(f"invalid role {role!r}: expected user, assistant or tool")
    return _ROLE_IN[role]


@dataclass(slots=True)
class Node:
    """A node as stored in ``history/<seq>-<r>-<id>.json``."""

    id: str
    created_at: float = 0.0
    seq: int = -1
    role: str = "user"
    name: str = ""
    input: Any = None
    output: Any = ""
    caller: str = ""
    predecessor: str | None = None
    reads: list = field(default_factory=list)
    metadata: dict = field(default_factory=dict)
    extra: Mapping[str, Any] = field(default_factory=dict)  # unknown top-level keys, kept

    # --- serialisation -------------------------------------------------------------------
    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in NODE_FIELDS}
        for k, v in self.extra.items():
            d.setdefault(k, v)
        return d

    def dumps(self) -> bytes:
        return json.dumps(self.to_json(), ensure_ascii=False).encode("utf-8")

    def filename(self) -> str:
        letter = _ROLE_LETTER.get(self.role, "x")
        return f"{self.seq:08d}-{letter}-{self.id}.json"

    def copy(self) -> "Node":
        """A copy whose metadata can be changed without touching the cached node."""
        return Node(self.id, self.created_at, self.seq, self.role, self.name, self.input,
                    self.output, self.caller, self.predecessor, list(self.reads),
                    dict(self.metadata), dict(self.extra))

    # --- predicates the walks use ---------------------------------------------------------
    @property
    def conversational(self) -> bool:
        return self.role in ("user", "llm")

    @property
    def chain_level(self) -> bool:
        return (self.caller or "") in CHAIN_CALLERS

    @property
    def is_root(self) -> bool:
        return self.metadata.get("display") == "root"

    @property
    def is_runtime(self) -> bool:
        return kinds.is_runtime(self.metadata)

    @property
    def is_summary(self) -> bool:
        return kinds.is_summary(self.metadata, self.id, self.name)

    @property
    def is_context(self) -> bool:
        nm = self.name if isinstance(self.name, str) else ""
        mnm = self.metadata.get("name")
        return nm.startswith("context/") or (isinstance(mnm, str) and mnm.startswith("context/"))

    @property
    def is_attach(self) -> bool:
        md = self.metadata
        return md.get("function") == "attach" or self.name == "attach"

    @property
    def is_spawn_root(self) -> bool:
        return kinds.is_spawn_root(self.metadata)

    @property
    def rewound(self) -> bool:
        return bool(self.metadata.get("rewound"))

    # --- projection -------------------------------------------------------------------------
    def text(self) -> str:
        """The node's output as text (JSON for non-strings)."""
        if isinstance(self.output, str):
            return self.output
        if self.output is None:
            return ""
        return json.dumps(self.output, ensure_ascii=False)

    def to_message(self, session_id: str) -> dict:
        """The message dict readers receive (reference §2.4): metadata spread on top."""
        msg: dict[str, Any] = {
            "id": self.id,
            "session_id": session_id,
            "role": _ROLE_OUT.get(self.role, self.role),
            "content": self.output,
            "predecessor": self.predecessor or "",
            "caller": self.caller or "",
            "timestamp": self.created_at,
            "seq": self.seq,
        }
        if self.role == "llm":
            msg["token_model"] = self.name
        elif self.role == "code":
            msg["function"] = self.name
            if not isinstance(self.output, str):
                msg["content"] = self.text()
            msg["extra"] = json.dumps({"tool_use": {
                "name": self.name, "arguments": self.input, "caller": self.caller or "",
                "tool_call_id": self.metadata.get("tool_call_id", "")}}, ensure_ascii=False)
        msg.update(self.metadata)
        return msg


def node_from_message(msg: dict, *, default_predecessor: str | None) -> tuple[Node, bool]:
    """Build an unsaved node from a message dict; also say whether it named a predecessor.

    Unknown keys become metadata; a ``metadata.predecessor`` copy is dropped (the edge lives
    only in the top-level field).
    """
    if not isinstance(msg, dict):
        raise InvalidInput(f"invalid message: expected a dict, got {type(msg).__name__}")
    node_id = msg.get("id")
    if node_id is None:
        node_id = new_id()
    check_name(node_id, "node id")
    role = normalize_role(msg.get("role", "user"))
    metadata: dict[str, Any] = {}
    if isinstance(msg.get("metadata"), dict):
        metadata.update(msg["metadata"])
    extra = msg.get("extra")
    if isinstance(extra, str):
        try:
            extra = json.loads(extra)
        except ValueError:
            extra = None
    if isinstance(extra, dict):
        metadata.update(extra)
    for k, v in msg.items():
        if k not in _MESSAGE_KEYS:
            metadata[k] = v
    if msg.get("role") == "system":
        metadata.setdefault("role", "system")
    metadata.pop("predecessor", None)

    caller = msg.get("caller") or ""
    if not isinstance(caller, str):
        raise InvalidInput(f"invalid caller {caller!r} for node {node_id}")
    if caller not in CHAIN_CALLERS:
        check_name(caller, "caller id")
    named = "predecessor" in msg
    if named:
        pred = msg["predecessor"]
        if pred == "":
            pred = None
    elif caller not in CHAIN_CALLERS:
        pred = None  # a sub-call hangs on its caller, not on the chain
    else:
        pred = default_predecessor
    if pred is not None:
        check_name(pred, "predecessor id")

    content = msg["content"] if "content" in msg else msg.get("output", "")
    check_text(content, f"content of node {node_id}")
    check_text(metadata, f"metadata of node {node_id}")
    name = msg.get("name") or msg.get("token_model") or msg.get("function") or ""
    created = msg.get("created_at") or msg.get("timestamp") or time.time()
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        raise InvalidInput(f"invalid created_at {created!r} for node {node_id}")
    reads = msg.get("reads") or []
    if not isinstance(reads, list):
        raise InvalidInput(f"invalid reads for node {node_id}: expected a list")
    node = Node(id=node_id, created_at=float(created), seq=-1, role=role,
                name=name if isinstance(name, str) else str(name), input=msg.get("input"),
                output=content, caller=caller, predecessor=pred, reads=list(reads),
                metadata=metadata)
    return node, named


def parse_node(data: bytes, path: Path | str) -> Node:
    """Parse one history file; any damage is a CorruptFile naming the file (``path`` is only
    used for messages and the seq fallback, so a cold scan can pass the plain string)."""
    return node_from_json(json_object(data, f"node file {path}"), path)


def node_from_json(raw: dict, path: Path | str) -> Node:
    """A node from its parsed JSON object (a node file's, or a database row's); damage is a
    CorruptFile naming ``path`` (where the node was read from)."""
    node_id = raw.get("id")
    try:
        check_name(node_id, "node id")
    except InvalidInput as exc:
        raise CorruptFile(f"corrupt node file {path}: {exc}") from None
    seq = raw.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        m = _NAME_RE.match(os.path.basename(path))
        if not m:
            raise CorruptFile(f"corrupt node file {path}: no valid seq")
        seq = int(m.group(1))
    pred = raw.get("predecessor")
    if pred == "":
        pred = None
    caller = raw.get("caller") or ""
    if (pred is not None and not isinstance(pred, str)) or not isinstance(caller, str):
        raise CorruptFile(f"corrupt node file {path}: predecessor/caller must be strings")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise CorruptFile(f"corrupt node file {path}: metadata is not an object")
    role = raw.get("role", "user")
    role = _ROLE_IN.get(role, role) if isinstance(role, str) else "user"
    created = raw.get("created_at")
    if not isinstance(created, (int, float)) or isinstance(created, bool):
        created = 0.0
    name = raw.get("name") or ""
    reads = raw.get("reads") or []
    extra = _NO_EXTRA if _FIELD_SET.issuperset(raw) else {
        k: v for k, v in raw.items() if k not in _FIELD_SET}
    return Node(id=node_id, created_at=float(created), seq=seq, role=role,
                name=name if isinstance(name, str) else str(name), input=raw.get("input"),
                output=raw.get("output", ""), caller=caller, predecessor=pred,
                reads=reads if isinstance(reads, list) else [], metadata=metadata, extra=extra)
