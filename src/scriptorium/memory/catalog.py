"""What the committed topics hold, kept current instead of re-parsed: the topic catalog.

A write asks "which turns does memory already cite?", and its transaction asks which block
ids exist, where each lives, which sources each block cites and which block links point where.
Parsing every topic file to answer that made every batch cost as much as all of memory. The
catalog keeps a small summary per topic file (block ids, lines, block links, footnote targets
and the source ids they resolve to: no text), so those answers cost a dictionary lookup.

It is derived and never trusted blindly: before use it compares each file's fingerprint
(mtime, ctime, size, inode) with the one it summarised and re-reads what changed, so a hand
edit outside any transaction is seen. As git does for its index, a file modified within a
timestamp tick of when it was summarised ("racily clean") is also checked by content hash.
A transaction hands it the files it installed (:meth:`TopicCatalog.installed`), already
parsed, so the next batch re-reads nothing.

The summaries are saved in the runtime dir (``topic-catalog.json``) after a cold build and
when the process exits, so a new process checks fingerprints instead of parsing everything.

Footnotes whose target the archive could not resolve are resolved again when the archive's
directories change (evidence archived later), as the search index does.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import logging
import os
import stat
import threading
import time
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, Protocol

from ..errors import ScriptoriumError
from ..fsutil import atomic_write_text
from .topics import TopicDoc, parse_topic_bytes

if TYPE_CHECKING:  # pragma: no cover
    from .sources import SourceArchive


class CatalogPlace(Protocol):
    """Where a catalog lives: what it needs of the workspace directory (which imports this
    module, so it is named by what it provides, not imported)."""

    root: Path
    runtime_dir: Path
    sources: "SourceArchive"

# A fingerprint this close to the moment it was taken may hide a same-tick rewrite (see the
# module docstring); whole-second filesystems need the long window.
RACY_NS = 3_000_000_000
RACY_FINE_NS = 100_000_000

Fingerprint = tuple[int, int, int, int]
SAVED_FILE = "topic-catalog.json"
SAVED_VERSION = 1
SAVE_AFTER = 64  # summaries learnt before the catalog is saved again (and at exit)

log = logging.getLogger(__name__)


def fingerprint(st: os.stat_result) -> Fingerprint:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def is_racy(fp: Fingerprint, checked_ns: int) -> bool:
    """True when a file with this fingerprint may have changed since ``checked_ns`` without
    its fingerprint showing it."""
    mtime = fp[0]
    window = RACY_NS if mtime % 1_000_000_000 == 0 else RACY_FINE_NS
    return mtime + window >= checked_ns


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def markdown_files(root: Path, top: str) -> dict[str, os.stat_result]:
    """Every ``*.md`` under ``root/top`` reached without a symlink, with its lstat."""
    out: dict[str, os.stat_result] = {}
    try:
        if not stat.S_ISDIR(os.lstat(os.path.join(root, top)).st_mode):
            return out
    except OSError:
        return out
    stack = [(os.path.join(root, top), top)]
    while stack:
        directory, rel = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            try:
                entry.name.encode("utf-8")
            except UnicodeEncodeError:  # not a name a topic path or a link can hold
                log.warning("skipping %s: its name is not valid UTF-8", os.fsencode(entry.path))
                continue
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, f"{rel}/{entry.name}"))
                elif entry.name.endswith(".md") and entry.is_file(follow_symlinks=False):
                    out[f"{rel}/{entry.name}"] = entry.stat(follow_symlinks=False)
            except OSError:
                continue
    return out


def sources_signature(root: Path) -> tuple[tuple[str, int], ...]:
    """The mtimes of ``sources/``, its provider and ``_v2`` directories. The archive replaces
    files by rename, so any archive write changes one of them: a few ``stat`` calls tell
    whether citations that did not resolve are worth resolving again."""
    base = os.path.join(root, "sources")
    out: list[tuple[str, int]] = []
    try:
        out.append(("", os.lstat(base).st_mtime_ns))
        entries = list(os.scandir(base))
    except OSError:
        return tuple(out)
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                out.append((entry.name, entry.stat(follow_symlinks=False).st_mtime_ns))
                out.append((entry.name + "/_v2",
                            os.lstat(os.path.join(entry.path, "_v2")).st_mtime_ns))
        except OSError:
            continue
    return tuple(sorted(out))


@dataclass(frozen=True)
class BlockSummary:
    """The parts of a block the write path needs (field names match ``topics.Block`` so
    ``validate_tree`` reads either)."""

    id: str
    ids: tuple[str, ...]
    line: int
    links: tuple[tuple[str, str], ...]
    targets: tuple[str, ...]      # footnote link targets, in citation order
    refs: tuple[str, ...]         # the source ids they resolve to, each once
    unresolved: bool


@dataclass(frozen=True)
class TopicSummary:
    path: str
    sha: str
    fp: Fingerprint
    checked_ns: int
    blocks: tuple[BlockSummary, ...]

    @property
    def unresolved(self) -> bool:
        return any(b.unresolved for b in self.blocks)

    @cached_property
    def refs_by_id(self) -> dict[str, frozenset[str]]:
        """Block id or alias -> the sources the blocks answering to it cite."""
        out: dict[str, set[str]] = {}
        for block in self.blocks:
            for block_id in block.ids:
                out.setdefault(block_id, set()).update(block.refs)
        return {k: frozenset(v) for k, v in out.items()}


def _targets(doc: TopicDoc, block) -> tuple[str, ...]:
    out: list[str] = []
    for fid in dict.fromkeys(block.citations):
        evidence = doc.evidence.get(fid)
        if evidence is not None:
            out.extend(link.target for link in evidence.sources)
    return tuple(out)


Resolve = Callable[[str, str], "str | None"]  # (topic path, footnote target) -> source id


def _resolved(resolve: Resolve, path: str,
              targets: tuple[str, ...]) -> tuple[tuple[str, ...], bool]:
    refs: list[str] = []
    unresolved = False
    for target in targets:
        ref = resolve(path, target)
        if ref is None:
            unresolved = True
        elif ref not in refs:
            refs.append(ref)
    return tuple(refs), unresolved


def summarize(doc: TopicDoc, sources: "SourceArchive", *, sha: str = "",
              fp: Fingerprint = (0, 0, 0, 0), checked_ns: int = 0,
              resolve: Resolve | None = None) -> TopicSummary:
    """The summary of one parsed topic file (its citations resolved through ``sources``, or
    ``resolve`` when given: a transaction passes the resolutions it already made)."""
    blocks = []
    for block in doc.blocks:
        targets = _targets(doc, block)
        refs, unresolved = _resolved(resolve or sources.resolve_target, doc.path, targets)
        blocks.append(BlockSummary(block.id, tuple(block.ids), block.line, tuple(block.links),
                                   targets, refs, unresolved))
    return TopicSummary(doc.path, sha, fp, checked_ns, tuple(blocks))


class TopicCatalog:
    """The summaries of one workspace's committed topics (see the module docstring). Shared
    per process and workspace through :meth:`of`; safe to use from several threads."""

    _instances: dict[str, "TopicCatalog"] = {}
    _instances_lock = threading.Lock()

    def __init__(self, root: Path, sources: "SourceArchive", runtime_dir: Path | None = None):
        self.root = Path(root)
        self.sources = sources
        self.saved_path = Path(runtime_dir) / SAVED_FILE if runtime_dir is not None else None
        self._loaded = False
        self._unsaved = 0                     # summaries learnt since the last save
        self._lock = threading.RLock()
        self._files: dict[str, TopicSummary] = {}
        self._cited: Counter[str] = Counter()
        self._where: dict[str, list[str]] = {}  # block id or alias -> topic paths holding it
        self._sources_seen: tuple | None = None
        self._linking: set[str] = set()       # files holding at least one block link
        self._unresolved: set[str] = set()    # files with a footnote the archive lacked
        self._duplicates: set[str] = set()    # ids more than one file holds (a broken tree)
        self.parses = 0                       # files parsed so far (tests count them)

    @classmethod
    def of(cls, workspace: CatalogPlace) -> "TopicCatalog":
        key = f"{os.getpid()}:{os.path.realpath(workspace.root)}"
        with cls._instances_lock:
            catalog = cls._instances.get(key)
            if catalog is None:
                catalog = cls._instances[key] = cls(workspace.root, workspace.sources,
                                                    workspace.runtime_dir)
                atexit.register(catalog.save, only_if_changed=True)
            return catalog

    # -- keeping it current -------------------------------------------------------------

    def refresh(self) -> "TopicCatalog":
        """Re-read every topic file whose fingerprint (or, when racy, content) changed."""
        with self._lock:
            if not self._loaded:
                self._loaded = True
                self._load_saved()
            now = time.time_ns()
            disk = markdown_files(self.root, "topics")
            for rel in [r for r in self._files if r not in disk]:
                self._drop(rel)
            for rel, st in disk.items():
                old = self._files.get(rel)
                fp = fingerprint(st)
                if old is not None and old.fp == fp and not is_racy(fp, old.checked_ns):
                    continue
                try:
                    data = (self.root / rel).read_bytes()
                except OSError:
                    self._drop(rel)
                    continue
                sha = sha256(data)
                if old is not None and old.sha == sha:
                    self._files[rel] = TopicSummary(rel, sha, fp, now, old.blocks)
                    continue
                self._put(summarize(parse_topic_bytes(data, rel, strict=False), self.sources,
                                    sha=sha, fp=fp, checked_ns=now))
                self.parses += 1
                self._unsaved += 1
            self._resolve_again()
            if self._unsaved >= SAVE_AFTER:
                self.save()
            return self

    def _resolve_again(self) -> None:
        """Footnotes that did not resolve may resolve now that more evidence is archived."""
        signature = sources_signature(self.root)
        if signature == self._sources_seen:
            return
        self._sources_seen = signature
        for summary in [self._files[rel] for rel in sorted(self._unresolved)]:
            blocks = []
            for b in summary.blocks:
                refs, unresolved = _resolved(self.sources.resolve_target, summary.path,
                                             b.targets) \
                    if b.unresolved else (b.refs, False)
                blocks.append(BlockSummary(b.id, b.ids, b.line, b.links, b.targets, refs,
                                           unresolved))
            self._put(TopicSummary(summary.path, summary.sha, summary.fp, summary.checked_ns,
                                   tuple(blocks)))

    def installed(self, docs: dict[str, TopicDoc | None], data: dict[str, bytes | None],
                  resolve: Resolve | None = None) -> None:
        """Learn what a transaction just installed (``None``: the file was deleted), without
        reading it back (``resolve``: the transaction's own footnote resolutions). Caller
        holds the workspace write lock."""
        with self._lock:
            now = time.time_ns()
            for rel, doc in docs.items():
                body = data.get(rel)
                if doc is None or body is None:
                    self._drop(rel)
                    continue
                try:
                    st = os.lstat(self.root / rel)
                except OSError:
                    self._drop(rel)
                    continue
                self._put(summarize(doc, self.sources, sha=sha256(body), fp=fingerprint(st),
                                    checked_ns=now, resolve=resolve))
                self._unsaved += 1

    def _put(self, summary: TopicSummary) -> None:
        self._drop(summary.path)
        self._files[summary.path] = summary
        if any(block.links for block in summary.blocks):
            self._linking.add(summary.path)
        if summary.unresolved:
            self._unresolved.add(summary.path)
        for block in summary.blocks:
            self._cited.update(block.refs)
            for block_id in block.ids:
                paths = self._where.setdefault(block_id, [])
                if summary.path not in paths:
                    paths.append(summary.path)
                if len(paths) > 1:
                    self._duplicates.add(block_id)

    def _drop(self, rel: str) -> None:
        old = self._files.pop(rel, None)
        if old is None:
            return
        self._linking.discard(rel)
        self._unresolved.discard(rel)
        for block in old.blocks:
            self._cited.subtract(block.refs)
            for ref in block.refs:
                if self._cited[ref] <= 0:
                    del self._cited[ref]
            for block_id in block.ids:
                paths = self._where.get(block_id)
                if paths is not None and rel in paths:
                    paths.remove(rel)
                    if len(paths) < 2:
                        self._duplicates.discard(block_id)
                    if not paths:
                        del self._where[block_id]

    # -- saved between processes ---------------------------------------------------------

    def save(self, *, only_if_changed: bool = False) -> None:
        """Write the summaries to ``<runtime>/topic-catalog.json`` so the next process starts
        from them (each is still checked against its file's fingerprint before use)."""
        if self.saved_path is None or (only_if_changed and not self._unsaved):
            return
        with self._lock:
            files = [[s.path, s.sha, list(s.fp), s.checked_ns,
                      [[b.id, b.ids, b.line, b.links, b.targets, b.refs, b.unresolved]
                       for b in s.blocks]] for s in self._files.values()]
            try:
                atomic_write_text(self.saved_path, json.dumps(
                    {"version": SAVED_VERSION, "files": files}, ensure_ascii=False,
                    separators=(",", ":")), durable=False)
                self._unsaved = 0
            except (OSError, ScriptoriumError):  # e.g. a symlinked runtime dir is refused
                pass  # derived: the next process parses what it must

    def _load_saved(self) -> None:
        if self.saved_path is None:
            return
        try:
            saved = json.loads(self.saved_path.read_bytes())
            if saved.get("version") != SAVED_VERSION:
                return
            for path, sha, fp, checked, blocks in saved["files"]:
                self._put(TopicSummary(path, sha, tuple(fp), checked, tuple(
                    BlockSummary(i, tuple(ids), line, tuple(tuple(x) for x in links),
                                 tuple(targets), tuple(refs), bool(unresolved))
                    for i, ids, line, links, targets, refs, unresolved in blocks)))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            self._files.clear()
            self._cited.clear()
            self._where.clear()
            self._linking.clear()
            self._unresolved.clear()
            self._duplicates.clear()

    # -- answers --------------------------------------------------------------------------

    def summaries(self) -> list[TopicSummary]:
        with self._lock:
            return [self._files[rel] for rel in sorted(self._files)]

    def by_path(self) -> dict[str, TopicSummary]:
        """A copy of the summaries by path (they are immutable: what the tree held now)."""
        with self._lock:
            return dict(self._files)

    def summary(self, rel: str) -> TopicSummary | None:
        return self._files.get(rel)

    def paths(self) -> list[str]:
        with self._lock:
            return sorted(self._files)

    def cited(self, refs: Iterable[str] | None = None) -> set[str]:
        """The source ids some committed block cites (only among ``refs`` when given)."""
        with self._lock:
            if refs is None:
                return set(self._cited)
            return {ref for ref in refs if self._cited.get(ref, 0) > 0}

    def where(self, block_id: str) -> str | None:
        """The topic file holding the block with this id or alias."""
        paths = self._where.get(block_id)
        return paths[0] if paths else None

    def paths_of(self, block_id: str) -> list[str]:
        """Every topic file holding a block with this id or alias (two: a duplicate)."""
        return list(self._where.get(block_id, ()))

    def duplicates(self) -> list[str]:
        with self._lock:
            return sorted(self._duplicates)

    def links(self) -> list[tuple[str, str, str, int]]:
        """Every block link of the tree: (file, linked path, linked id, line of the block)."""
        with self._lock:
            return [(rel, path, bid, block.line) for rel in sorted(self._linking)
                    for block in self._files[rel].blocks for path, bid in block.links]

    def refs_of(self, block_id: str) -> set[str]:
        """The sources committed blocks answering to ``block_id`` cite."""
        out: set[str] = set()
        for rel in self._where.get(block_id, ()):
            out |= self._files[rel].refs_by_id.get(block_id, frozenset())
        return out

    def ids(self) -> set[str]:
        with self._lock:
            return set(self._where)

    def blocks(self) -> Iterator[tuple[str, BlockSummary]]:
        for summary in self.summaries():
            for block in summary.blocks:
                yield summary.path, block
