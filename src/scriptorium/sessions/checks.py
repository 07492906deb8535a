"""What the session store refuses before it writes: new session ids that could not live
beside the existing ones, and an explicit node id reused for different content.

Kept apart from the store so the rules are read (and documented, README "Input rules") in one
place; the store calls them under its locks.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import quote

from ..errors import InvalidInput
from ..fsutil import MAX_NAME_BYTES, name_key
from .node import Node


@dataclass
class Added:
    """What :meth:`SessionStore.add` did. ``created`` is False for the identical retry of an
    append that is already stored; ``warnings`` name what failed after the node was durable
    (the per-turn git commit: the turn is stored, its history is not)."""

    node_id: str
    head_id: str | None
    created: bool
    warnings: list[str] = field(default_factory=list)


def check_new_session_id(root: Path, sid: str, is_session: Callable[[str], bool]) -> None:
    """The rule for a new session id: it must fit, percent-encoded, in one file name (memory
    archives a session's turns under ``<pct(id)>.md``), and no existing session id may equal
    it under case folding and Unicode normalisation: on macOS and Windows the two would be one
    directory, and memory could never archive both."""
    check_session_id_length(sid)
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return
    key = name_key(sid)
    for name in names:
        if name != sid and name_key(name) == key and is_session(name):
            raise same_name_clash(sid, name)


def check_session_id_length(sid: str) -> None:
    """The first half of :func:`check_new_session_id`, for stores that are not directories:
    a memory archive of the session must still fit in one file name on any home."""
    encoded = len(quote(sid, safe="")) + len(".md")
    if encoded > MAX_NAME_BYTES:
        raise InvalidInput(f"invalid session id {sid[:40]!r}…: too long once percent-encoded "
                           f"for memory's archive ({encoded} bytes, at most {MAX_NAME_BYTES})")


def same_name_clash(sid: str, existing: str) -> InvalidInput:
    """The error for a new id equal to an existing one under case folding/normalisation."""
    return InvalidInput(f"session id {sid!r} differs from existing session {existing!r} "
                        f"only by case or Unicode normalisation; choose another id")


def check_same(sid: str, existing: Node, node: Node, named_predecessor: bool) -> None:
    """An explicit id that is already stored must be the identical retry, not new content."""
    differs = [what for what, a, b in (("role", existing.role, node.role),
                                       ("text", existing.output, node.output))
               if a != b]
    if named_predecessor and existing.predecessor != node.predecessor:
        differs.append("predecessor")
    if differs:
        raise InvalidInput(f"session {sid}: node id {node.id} already exists with a different "
                           f"{' and '.join(differs)}; choose another --id")
