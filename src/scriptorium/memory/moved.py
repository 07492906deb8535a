"""Did memory move between a transaction's begin and its commit? (CONCURRENT_UPDATE)

Hashing or stat'ing every memory file twice per transaction made each write cost as much as
all of memory. What begin saw is instead taken from what it already had: the topic catalog's
file states (refreshed at begin: fingerprint and hash per topic file), the archive's directory
mtimes (every archive write replaces a file by rename), ``runtime.json``'s fingerprint, the
install counter, and which hold of the write lock it ran under.

At commit, under the lock:

- the lock was released since begin (another writer may have installed or archived): every
  topic file's fingerprint is checked against begin's (a racy one by hash), and the archive,
  ``runtime.json`` and the install counter too;
- the lock was held from begin to commit (the write path holds it around the whole step):
  no writer that takes the lock can have moved memory, so only a hand edit can have, and only
  a hand edit of a file this commit replaces would be lost: those files are checked (plus
  ``runtime.json`` and the counter). A hand edit of another file is ordered after the
  install, as if made a moment later, and the next transaction's catalog refresh sees it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable

from .catalog import TopicCatalog
from .fingerprints import Fingerprint, fingerprint, is_racy, sha256
from .catalog_db import FileState
from .walk import markdown_files, sources_signature

if TYPE_CHECKING:  # pragma: no cover
    from .directory import WorkspaceDir


def _fp(path: str) -> Fingerprint | None:
    try:
        return fingerprint(os.lstat(path))
    except OSError:
        return None


def _unchanged(path: str, summary: FileState | None,
               st: os.stat_result | None = None) -> bool:
    """Does the file at ``path`` (its lstat ``st`` when known) still hold what ``summary``
    (None: no file) describes?"""
    fp = fingerprint(st) if st is not None else _fp(path)
    if summary is None or fp is None:
        return summary is None and fp is None
    if fp != summary.fp:
        return False
    if not is_racy(fp, summary.checked_ns):
        return True
    try:
        with open(path, "rb") as fh:
            return sha256(fh.read()) == summary.sha
    except OSError:
        return False


@dataclass(frozen=True)
class BeginState:
    """What a transaction's begin saw (taken under the write lock, after the catalog
    refresh); :meth:`moved` answers at commit whether memory moved since."""

    lock_hold: int | None
    topics: dict[str, FileState]
    sources: tuple
    runtime: Fingerprint | None
    generation: int | None

    @classmethod
    def take(cls, ws: "WorkspaceDir", catalog: TopicCatalog) -> "BeginState":
        return cls(ws.lock_hold(), catalog.file_states(), sources_signature(ws.root),
                   _fp(str(ws.runtime_path)), ws.generation())

    def moved(self, ws: "WorkspaceDir") -> bool:
        """True when memory moved since begin (caller holds the lock): in full when the lock
        was released in between, else the counters only (see the module docstring)."""
        if ws.generation() != self.generation or _fp(str(ws.runtime_path)) != self.runtime:
            return True
        if self.lock_hold is not None and ws.lock_hold() == self.lock_hold:
            return False
        if sources_signature(ws.root) != self.sources:
            return True
        disk = markdown_files(ws.root, "topics")
        if disk.keys() != self.topics.keys():
            return True
        root = str(ws.root)
        return not all(_unchanged(os.path.join(root, rel), self.topics[rel], st)
                       for rel, st in disk.items())

    def overwritten(self, ws: "WorkspaceDir", replaced: Iterable[str]) -> bool:
        """True when a topic file the commit would replace changed since begin (a hand edit
        the install would lose)."""
        root = str(ws.root)
        return not all(_unchanged(os.path.join(root, rel), self.topics.get(rel))
                       for rel in replaced)
