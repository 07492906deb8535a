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

It also answers, without touching the files: which topic is on a subject (by file name or
title, :meth:`TopicCatalog.named`: the embedded writer's "extend, don't duplicate"), and
which files changed since a given moment (:meth:`TopicCatalog.changed_since`: a parked stage
copies only those). One refresh is enough per hold of the write lock (``refresh(hold=…)``):
the write step asks twice (already cited? then begin) within one hold.

Footnotes whose target the archive could not resolve are resolved again when the archive's
directories change (evidence archived later), as the search index does.
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import posixpath
import re
import threading
import time
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Iterator, KeysView, Protocol

from ..errors import ScriptoriumError
from ..fsutil import atomic_write_text
from .topics import TopicDoc, parse_topic_bytes
from .walk import markdown_files, sources_signature

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
SAVED_VERSION = 2
LOG_LIMIT = 100_000  # changes remembered for changed_since
SAVE_AFTER = 64  # summaries learnt before the catalog is saved again (and at exit)


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


def slug(text: str) -> str:
    """A subject as a file-name stem: lower case, runs of non-word characters as ``-``."""
    out = re.sub(r"[^\w]+", "-", text.lower(), flags=re.UNICODE).strip("-_")
    return out[:60].strip("-_")


def title_of(data: bytes) -> str:
    """The topic's title: its first line when that is a ``# `` heading, else ""."""
    first = data.split(b"\n", 1)[0]
    return first[2:].decode("utf-8", errors="replace").strip() if first.startswith(b"# ") \
        else ""


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
    title: str = ""

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


def _name_keys(summary: TopicSummary) -> list[str]:
    keys = [f"stem:{posixpath.basename(summary.path)[:-3]}"]
    if slug(summary.title):
        keys.append(f"title:{slug(summary.title)}")
    return keys


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
              resolve: Resolve | None = None, title: str = "") -> TopicSummary:
    """The summary of one parsed topic file (its citations resolved through ``sources``, or
    ``resolve`` when given: a transaction passes the resolutions it already made)."""
    blocks = []
    for block in doc.blocks:
        targets = _targets(doc, block)
        refs, unresolved = _resolved(resolve or sources.resolve_target, doc.path, targets)
        blocks.append(BlockSummary(block.id, tuple(block.ids), block.line, tuple(block.links),
                                   targets, refs, unresolved))
    return TopicSummary(doc.path, sha, fp, checked_ns, tuple(blocks), title)


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
        self._names: dict[str, set[str]] = {}  # "stem:…" / "title:…" (slugged) -> paths
        self._log: list[str] = []             # paths in the order their summaries changed
        self._log_base = 0                    # how many entries were trimmed off the front
        self._fresh_hold: int | None = None   # the lock hold the last refresh ran in
        self.history_seq: int | None = None   # the seq this process last committed to git at
        self.parses = 0                       # files parsed so far (tests count them)
        self.scans = 0                        # walks of topics/ so far (tests count them)

    @classmethod
    def of(cls, workspace: CatalogPlace) -> "TopicCatalog":
        key = f"{os.getpid()}:{os.path.realpath(workspace.root)}"
        with cls._instances_lock:
            catalog = cls._instances.get(key)
            if catalog is None:
                own = getattr(workspace, "new_catalog", None)  # a database home brings its own
                catalog = cls._instances[key] = own() if own is not None else \
                    cls(workspace.root, workspace.sources, workspace.runtime_dir)
                atexit.register(catalog.save, only_if_changed=True)
            return catalog

    # -- keeping it current -------------------------------------------------------------

    def refresh(self, hold: int | None = None) -> "TopicCatalog":
        """Re-read every topic file whose fingerprint (or, when racy, content) changed: one
        ``lstat`` per topic file, so a hand edit between two writes is seen. ``hold``: the
        caller's hold of the write lock (``WorkspaceDir.lock_hold``); a second refresh in
        the same hold is skipped (no writer can have installed in between, and a hand edit
        made in that moment is ordered after this write, as :mod:`.moved` does)."""
        with self._lock:
            if hold is not None and hold == self._fresh_hold:
                return self
            if not self._loaded:
                self._loaded = True
                self._load_saved()
            now = time.time_ns()
            self.scans += 1
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
                    self._files[rel] = TopicSummary(rel, sha, fp, now, old.blocks, old.title)
                    continue
                self._put(summarize(parse_topic_bytes(data, rel, strict=False), self.sources,
                                    sha=sha, fp=fp, checked_ns=now, title=title_of(data)))
                self.parses += 1
                self._unsaved += 1
            self._resolve_again()
            if self._unsaved >= SAVE_AFTER:
                self.save()
            self._fresh_hold = hold
            return self

    def forget_hold(self) -> None:
        """The next refresh walks topics/ whatever hold it runs in (a commit found memory
        moved under it: its retry must see what moved)."""
        self._fresh_hold = None

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
                                   tuple(blocks), summary.title))

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
                                    checked_ns=now, resolve=resolve, title=title_of(body)))
                self._unsaved += 1

    def _put(self, summary: TopicSummary) -> None:
        if summary.path not in self._files:
            self._note(summary.path)
        self._drop(summary.path)
        self._files[summary.path] = summary
        for key in _name_keys(summary):
            self._names.setdefault(key, set()).add(summary.path)
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
        self._note(rel)
        for key in _name_keys(old):
            paths = self._names.get(key)
            if paths is not None:
                paths.discard(rel)
                if not paths:
                    del self._names[key]
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

    def _note(self, rel: str) -> None:
        self._log.append(rel)
        if len(self._log) > LOG_LIMIT:  # older readers of the log start again from scratch
            half = len(self._log) // 2
            del self._log[:half]
            self._log_base += half

    @property
    def seq(self) -> int:
        """How many summary changes the catalog has seen (see :meth:`changed_since`)."""
        return self._log_base + len(self._log)

    def changed_since(self, seq: int) -> set[str] | None:
        """Paths whose summary changed (added, replaced, dropped) since :attr:`seq` was
        ``seq``; None when that is too long ago to tell (the caller compares everything)."""
        with self._lock:
            if seq < self._log_base or seq > self.seq:
                return None
            return set(self._log[seq - self._log_base:])

    # -- saved between processes ---------------------------------------------------------

    def save(self, *, only_if_changed: bool = False) -> None:
        """Write the summaries to ``<runtime>/topic-catalog.json`` so the next process starts
        from them (each is still checked against its file's fingerprint before use)."""
        if self.saved_path is None or (only_if_changed and not self._unsaved):
            return
        with self._lock:
            files = [[s.path, s.sha, list(s.fp), s.checked_ns,
                      [[b.id, b.ids, b.line, b.links, b.targets, b.refs, b.unresolved]
                       for b in s.blocks], s.title] for s in self._files.values()]
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
            for path, sha, fp, checked, blocks, title in saved["files"]:
                self._put(TopicSummary(path, sha, tuple(fp), checked, tuple(
                    BlockSummary(i, tuple(ids), line, tuple(tuple(x) for x in links),
                                 tuple(targets), tuple(refs), bool(unresolved))
                    for i, ids, line, links, targets, refs, unresolved in blocks), str(title)))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            self._files.clear()
            self._cited.clear()
            self._where.clear()
            self._linking.clear()
            self._unresolved.clear()
            self._duplicates.clear()
            self._names.clear()

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

    def has_id(self) -> "KeysView[str]":
        """The committed block ids and aliases as a live view: ``in`` without copying them all
        (a transaction asks under the write lock, so no install changes it meanwhile)."""
        return self._where.keys()

    def named(self, stem: str, title: str) -> list[str]:
        """Topic paths whose file name is ``stem`` (``stem.md``) or whose title slugs to
        ``title`` (:func:`slug`), sorted."""
        with self._lock:
            found = set(self._names.get(f"stem:{stem}", ()))
            if title:
                found |= self._names.get(f"title:{title}", set())
            return sorted(found)

    def blocks(self) -> Iterator[tuple[str, BlockSummary]]:
        for summary in self.summaries():
            for block in summary.blocks:
                yield summary.path, block
