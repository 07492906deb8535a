"""How a source's ids become ours: session ids and node ids, deterministically.

Session ids are ``<prefix>-<source id lowercased>`` (``cc-``, ``pi-``, ``codex-``,
``chatgpt-``): lowercase so two sources can never produce ids that differ only by case (the
store refuses those on case-insensitive file systems), prefixed so formats never collide. Node
ids are the source's own ids, kept as they are when they are safe file-name material; anything
else (a character outside ``[A-Za-z0-9._-]``, over 100 characters, or a name the store gives a
meaning: ``ROOT``, ``summary_…``, ``.``/``..``) becomes ``h-`` + 24 hex of its sha256, the same
every run, so a re-import finds the node it made last time.
"""

from __future__ import annotations

import hashlib
import re

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
_SAFE_SESSION = re.compile(r"^[a-z0-9][a-z0-9._-]{0,79}$")

PREFIX = {"claude-code": "cc", "pi": "pi", "codex": "codex", "chatgpt": "chatgpt"}


def digest(text: str, n: int = 24) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def node_id(source_id: object) -> str:
    """Our node id for a source message id (stable, safe, never a reserved name)."""
    text = str(source_id)
    if _SAFE.match(text) and text != "ROOT" and not text.startswith("summary_"):
        return text
    return "h-" + digest(text)


def session_id(kind: str, source_id: object) -> str:
    """Our session id for a source session/conversation id of format ``kind``."""
    prefix = PREFIX[kind]
    text = str(source_id).strip().lower()
    if not _SAFE_SESSION.match(text):
        text = digest(text, 32)
    return f"{prefix}-{text}"
