"""The per-process cache of one session: nodes by id, seq order, children by edge, meta.

It is derived data, always rebuildable from the node files, and never a second source of
truth. Freshness across processes rests on three cheap checks, so a read or an append costs
O(1) when nothing foreign happened and never re-lists ``history/`` for its own writes:

* the **generation** token in ``.session.lock``: every writer of ours changes it (under the
  session lock) after it changed the session, so another process of ours is always noticed;
* one ``stat`` of ``history/`` and of ``meta.json``: a writer that does not take our lock (the
  reference store) changes the directory's mtime, and rewrites ``meta.json`` (a new inode) on
  every append;
* after our own append, the index learns the new node and adopts the directory fingerprint
  (only if nothing else changed the directory since the refresh; marks never adopt it).
  That adoption could hide an unlocked writer's change in the same clock tick, so every
  ``len(files) // 16`` (at least 32) adoptions one full scan re-checks: amortised O(1).

A full scan lists the directory once, compares each file's ``(inode, mtime_ns, size)`` with
what was parsed and re-parses only new or changed files (every writer replaces files by
rename, so a rewrite changes the file's inode). A cold open stats no file: its fingerprint
is (listed inode, size read), and the next full scan trusts it only with a ctime older than
that open (``_load``). Coarse file-system clocks can give two writes
the same mtime; like git's "racily clean" rule, a fingerprint whose mtime is too close to when
it was observed is not trusted, so the next refresh looks again (comparing bytes for files).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from ..errors import CorruptFile
from ..fsutil import json_object
from ..heap import gc_paused
from .graph import NodeGraph
from .node import Node, parse_node
from .nodefiles import (LOCK_NAME, StatKey, node_entries, open_dir, read_gen, read_listed,
                        read_node_file, write_gen)

# A fingerprint observed less than this long after its mtime may hide a same-tick write.
RACY_NS = 100_000_000
# Own-write adoptions allowed between two full scans: max(MIN_UNVERIFIED, files // 16).
MIN_UNVERIFIED = 32
# A temp file in history/ older than this is a dead writer's leftover (a live one renames
# its temp file within milliseconds); younger ones may belong to a writer without our lock.
STALE_TEMP_NS = 60 * 10**9


class SessionIndex(NodeGraph):
    """In-memory view of one session directory; always rebuildable from disk."""

    def __init__(self, sid: str, sdir: Path):
        super().__init__(sid)
        self.dir = sdir
        self.hist = sdir / "history"
        self.meta_path = sdir / "meta.json"
        self.gen_path = sdir / LOCK_NAME
        # files whose fingerprint may hide a same-tick rewrite -> the bytes we last parsed
        self._racy: dict[str, bytes] = {}
        self._gen: bytes | None = None
        self._dir_fp: tuple[int, int] | None = None
        self._dir_racy = True
        self._meta_fp: StatKey | None = None
        self._meta_racy = True
        self._synced_once = False
        self._own_changes = False  # this process wrote under the lock since the last seal
        self._adoptable: bool | None = None  # None: no own write into history/ yet
        self._unverified = 0  # own-write adoptions since the last full scan
        self._loaded_before = 0  # a cold open's fingerprints trust older ctimes only
        self.stale_temps: list[str] = []  # old temp files the last scan saw in history/
        # what the next git commit must stage: the paths known to have changed, or
        # everything (``stage_all``) until this process has committed once or after a
        # file vanished
        self.uncommitted: set[str] = set()
        self.stage_all = True
        self.commits_since_full = 0
        # counters for tests and benchmarks
        self.scans = 0
        self.parses = 0

    # --- refresh -----------------------------------------------------------------------------
    def refresh(self) -> bool:
        """Bring the cache up to date with disk; return True when anything was re-read."""
        now = time.time_ns()
        gen = read_gen(self.gen_path)
        dir_fp = self._stat_dir()
        try:
            mt = os.stat(self.meta_path)
            meta_fp: StatKey | None = (mt.st_ino, mt.st_mtime_ns, mt.st_size)
        except FileNotFoundError:
            meta_fp = None
        first = not self._synced_once
        changed = False
        if first or meta_fp != self._meta_fp or self._meta_racy:
            meta_changed = self._load_meta(meta_fp)
            changed |= meta_changed
            # a meta.json we did not write: the reference store rewrites it on every append
            foreign_meta = meta_changed and meta_fp != self._meta_fp
            self._meta_fp = meta_fp
            self._meta_racy = meta_fp is not None and meta_fp[1] >= now - RACY_NS
        else:
            foreign_meta = False
        budget = max(MIN_UNVERIFIED, len(self.files) // 16)
        if (first or gen != self._gen or dir_fp != self._dir_fp or self._dir_racy
                or foreign_meta or self._unverified >= budget):
            changed |= self._scan(now, dir_fp is not None)
            self._dir_fp = dir_fp
            self._dir_racy = dir_fp is not None and dir_fp[1] >= now - RACY_NS
        elif self._racy:
            changed |= self._recheck_recent(now)
        self._gen = gen
        self._synced_once = True
        return changed

    def _scan(self, now: int, present: bool) -> bool:
        """List ``history/`` once (through one descriptor of it); read and parse only new or
        changed files. An index that holds no file yet loads them all in one pass."""
        self.scans += 1
        self._unverified = 0
        try:
            dfd = open_dir(self.hist) if present else None
        except NotADirectoryError:
            raise CorruptFile(f"session {self.sid}: {self.hist} is not a directory "
                              f"(move it aside to open the session)") from None
        try:
            if not self.files:
                return self._load(dfd, now)
            return self._rescan(dfd, now)
        finally:
            if dfd is not None:
                os.close(dfd)

    def _load(self, dfd: int | None, now: int) -> bool:
        """The cold open: each listed node file read at once and parsed, and indexed by id
        in the same pass: one open, read and parse per file, no stat and nothing sorted (the
        seq order is built when a read asks for it; reading in name or inode order instead
        of the listing's measured slower).

        Each file's fingerprint is (listed inode, size read): a writer replaces a node file
        by rename (a new inode), and any other change since is caught by the next full scan,
        which stats every file anyway: it keeps a file whose inode last changed (ctime: any
        write, even one that puts the mtime back) before this load, by RACY_NS for coarse
        clocks, and re-reads any other (``_unchanged``). A file changed in place within
        RACY_NS of this load is so seen at the next full scan, not at the next refresh."""
        files: dict[str, tuple[StatKey, Node]] = {}
        nodes: dict[str, Node] = {}
        clash = False
        temps: list[str] = []
        prefix = os.path.join(self.hist, "")
        max_seq = -1
        self._loaded_before = now - RACY_NS
        if dfd is not None:
            with gc_paused(bulk=True):
                for entry in node_entries(dfd, now - STALE_TEMP_NS, temps):
                    data = read_listed(entry, dfd)
                    if data is None:
                        continue  # vanished, or not a regular file: never followed
                    name = entry.name
                    node = parse_node(data, prefix + name)
                    files[name] = ((entry.inode(), len(data)), node)
                    if nodes.setdefault(node.id, node) is not node:
                        clash = True  # two files claim one id: resolved below (rare)
                    if node.seq > max_seq:
                        max_seq = node.seq
        self.parses += len(files)
        self.files, self._racy, self.stale_temps = files, {}, temps
        if not files:
            return False
        if clash:
            self._reindex_ids()
        else:
            self._indexed(nodes, None, max_seq)
        self.stage_all = True
        return True

    def _rescan(self, dfd: int | None, now: int) -> bool:
        """Compare each listed file's ``(inode, mtime_ns, size)`` with what was parsed;
        re-read and re-parse only new or changed (or racily clean) files."""
        files = self.files
        seen: set[str] = set()
        temps: list[str] = []
        changed = False
        racy: dict[str, bytes] = {}
        racy_from = now - RACY_NS
        prefix = os.path.join(self.hist, "")
        if dfd is not None:
            for entry in node_entries(dfd, now - STALE_TEMP_NS, temps):
                name = entry.name
                old = files.get(name)
                if old is not None:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    if name not in self._racy and self._unchanged(old[0], st, entry):
                        seen.add(name)
                        if len(old[0]) == 2:  # a cold open's: the full fingerprint now
                            files[name] = ((st.st_ino, st.st_mtime_ns, st.st_size), old[1])
                        continue
                got = read_node_file(name, dfd)
                if got is None:
                    continue  # vanished, or not a regular file: never followed
                key, data = got
                seen.add(name)
                if key[1] >= racy_from:
                    racy[name] = data
                if old is not None and old[0] == key and self._racy.get(name) == data:
                    continue  # racily clean, but the bytes prove it unchanged
                changed |= self._take(name, key, data, prefix + name)
        gone = [n for n in files if n not in seen] if len(seen) != len(files) else []
        for name in gone:
            del files[name]
        if gone:
            self._reindex_ids()
            self.stage_all = True
            changed = True
        self._racy = racy
        self.stale_temps = temps
        return changed

    def _unchanged(self, old: StatKey, st: os.stat_result, entry: os.DirEntry) -> bool:
        """Is a listed file (``st`` its stat) still the one parsed under ``old``? A cold
        open's (inode, size) fingerprint also needs the inode's last change (ctime) from
        before that open read it, by RACY_NS for coarse file-system clocks."""
        if len(old) == 2:
            return (old == (entry.inode(), st.st_size)
                    and st.st_ctime_ns < self._loaded_before)
        return old == (st.st_ino, st.st_mtime_ns, st.st_size)

    def _take(self, name: str, key: StatKey, data: bytes, path: str) -> bool:
        """Parse a new or re-read node file and teach the index; True when its content
        changed (a changed file is staged for the next commit)."""
        old = self.files.get(name)
        node = parse_node(data, path)
        self.parses += 1
        changed = old is None or old[1].to_json() != node.to_json()
        if changed and not self.stage_all:
            self.uncommitted.add("history/" + name)
        self._put(name, key, node)
        return changed

    def _recheck_recent(self, now: int) -> bool:
        """Re-check only the files written within the racy window (an in-place rewrite in
        the same tick keeps the directory's mtime): O(recent writes), not O(session)."""
        changed = False
        for name, data in list(self._racy.items()):
            old = self.files.get(name)
            path = os.path.join(self.hist, name)
            got = read_node_file(path)
            if got is None:
                return self._scan(now, True)  # vanished or replaced: the scan sorts it out
            key, now_data = got
            if old is None or old[0] != key or now_data != data:
                changed |= self._take(name, key, now_data, path)
            if key[1] >= now - RACY_NS:
                self._racy[name] = now_data
            else:
                del self._racy[name]  # out of the window: its fingerprint is trusted now
        return changed

    def _load_meta(self, fp: StatKey | None) -> bool:
        if fp is None:
            changed = self.meta_present
            self.meta, self.meta_present = {}, False
            return changed
        try:
            data = self.meta_path.read_bytes()
        except FileNotFoundError:
            self.meta, self.meta_present = {}, False
            return True
        meta = json_object(data, f"meta file {self.meta_path}")
        changed = meta != self.meta or not self.meta_present
        if changed:
            self.uncommitted.add("meta.json")
        self.meta, self.meta_present = meta, True
        return changed

    def record_own_write(self, name: str, node: Node, data: bytes) -> None:
        """Adopt a node file this process just wrote under the session lock: the index
        learns the node from the bytes it wrote, with one ``stat`` of that file."""
        try:
            # a string path: ``Path / name`` would intern the name (CPython 3.11's pathlib
            # interns every part), one new entry in the interpreter's table per node marked
            st = os.stat(os.path.join(self.hist, name))
            key = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            return
        self._put(name, key, node)
        self._racy[name] = data
        self._own_changes = True
        self.uncommitted.add("history/" + name)

    def forget_own_write(self) -> None:
        """A node file this process wrote was taken back (its add failed after it): the
        next refresh re-lists ``history/`` and drops it."""
        self._dir_fp, self._adoptable = None, False

    def record_own_meta(self, meta: dict) -> None:
        """Adopt meta.json as this process just wrote it (the fingerprint stays racy, so the
        next refresh re-reads the small file and compares it)."""
        self.meta, self.meta_present = meta, True
        self._meta_racy = True
        self._own_changes = True
        self.uncommitted.add("meta.json")

    def seal(self) -> None:
        """End of a locked write that changed the session: publish a new generation token
        (so other processes of ours re-check) and adopt the directory fingerprint our own
        writes produced, so the next refresh does not re-list ``history/`` for them (a write
        that only touched meta.json leaves the fingerprint alone)."""
        if not self._own_changes:
            return
        self._own_changes = False
        self._gen = write_gen(self.gen_path)
        adopt, self._adoptable = self._adoptable, None
        if adopt:
            self._dir_fp = self._stat_dir()
            self._dir_racy = False
            self._unverified += 1

    def before_own_history_write(self) -> None:
        """Called under the lock before this operation's first write into ``history/``: the
        directory fingerprint may be adopted at the seal only if nothing else changed the
        directory since the refresh (otherwise the next refresh scans)."""
        if self._adoptable is None:
            self._adoptable = self._stat_dir() == self._dir_fp

    def _stat_dir(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.hist)
        except FileNotFoundError:
            return None
        return (st.st_ino, st.st_mtime_ns)
