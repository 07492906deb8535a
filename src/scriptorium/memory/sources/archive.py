"""The evidence archive on disk: append-only v2 writes and cached reads.

Writes validate the whole batch first (ids, fields, path collisions, every target file parsing
complete) and only then replace files, each atomically. Reads cache each parsed file under
(path, mtime_ns, size, inode), so a write path that looks up hundreds of citations parses each
file once; a cached file costs one ``lstat`` (the per-component symlink check runs when a file
is (re)read), and only the most recently used files stay cached. Callers that write hold the workspace write lock; this class does not lock.

Paths below the root are handled as strings, never as ``Path`` objects: pathlib interns every
part of every path it makes, and a ``write --all`` meets new archive files in every session.
"""

from __future__ import annotations

import os
import posixpath
import stat
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ...errors import CorruptFile, InvalidInput, ReasonCode
from ...fsutil import atomic_write_bytes, fsync_dir
from .ids import (SOURCES_DIR, V2_DIR, SourceIdError, fold_name, is_anchor, is_v2_safe_id,
                  legacy_path, split_source_id, v2_path)
from .legacy import read_legacy
from .model import Frame, SourceRecord
from .v2 import V2Parse, append_separator, check_record, parse_v2, read_text, render_v2_file, \
    render_v2_frames


# Parsed archive files kept (least recently used dropped): a write --all over thousands of
# sessions must not hold every session's archive in memory.
MAX_CACHED_FILES = 64


class SourceArchiveError(CorruptFile):
    """An archive file we must not append to (invalid or truncated, or not a plain file)."""

    code = ReasonCode.SOURCE_ARCHIVE_INVALID


class SourcePathCollision(InvalidInput):
    """Two archive paths of a batch (or a batch path and an existing entry) differ only by
    case or Unicode normalisation: on some filesystems they would be the same file."""

    code = ReasonCode.SOURCE_PATH_COLLISION


@dataclass
class _Parsed:
    key: tuple[int, int, int]
    v2: V2Parse | None
    frames: list[Frame]
    by_id: dict[str, Frame]
    by_anchor: dict[str, Frame]


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


def _is_v2_rel(rel: str) -> bool:
    parts = rel.split("/")
    return len(parts) == 4 and parts[0] == SOURCES_DIR and parts[2] == V2_DIR


class SourceArchive:
    """``workspace_root/sources``: write v2 frames, read v2 and legacy frames."""

    def __init__(self, workspace_root: Path, tmp_dir: Path | None = None):
        self.root = Path(workspace_root)
        self.tmp_dir = Path(tmp_dir) if tmp_dir is not None else None
        self._cache: OrderedDict[str, _Parsed] = OrderedDict()
        self._root_str = str(self.root)
        self.written: set[str] = set()  # files replaced since the workspace's last commit

    # ------------------------------------------------------------------ reading

    def _abs(self, rel: str) -> str:
        return os.path.join(self._root_str, *rel.split("/"))

    def _plain_stat(self, rel: str) -> os.stat_result | None:
        """lstat of a regular file reached through no symlink at all, else None."""
        cur = self._root_str
        st = None
        for part in rel.split("/"):
            if part in ("", ".", ".."):
                return None
            cur = os.path.join(cur, part)
            try:
                st = os.lstat(cur)
            except (OSError, ValueError):
                return None
            if stat.S_ISLNK(st.st_mode):
                return None
        if st is None or not stat.S_ISREG(st.st_mode):
            return None
        return st

    def _load(self, rel: str) -> _Parsed | None:
        hit = self._cache.get(rel)
        if hit is not None:
            # One lstat answers a cached file: a directory swapped for a symlink leads to
            # another inode (a miss, checked in full below) or to this very file.
            try:
                st = os.lstat(os.path.join(self._root_str, rel))
            except (OSError, ValueError):
                st = None
            if st is not None and stat.S_ISREG(st.st_mode) and \
                    hit.key == (st.st_mtime_ns, st.st_size, st.st_ino):
                self._cache.move_to_end(rel)
                return hit
        st = self._plain_stat(rel)
        if st is None:
            self._cache.pop(rel, None)
            return None
        try:
            data = _read(self._abs(rel))
        except OSError:
            return None
        text = read_text(data)
        if _is_v2_rel(rel):
            v2 = parse_v2(text, rel)
            frames = v2.frames
        else:
            v2, frames = None, read_legacy(text, rel)
        return self._remember(rel, st, v2, frames)

    def _remember(self, rel: str, st: os.stat_result, v2: V2Parse | None,
                  frames: list[Frame]) -> _Parsed:
        by_id: dict[str, Frame] = {}
        by_anchor: dict[str, Frame] = {}
        for f in frames:
            by_id.setdefault(f.source_id, f)
            by_anchor.setdefault(f.anchor, f)
        parsed = _Parsed((st.st_mtime_ns, st.st_size, st.st_ino), v2, frames, by_id, by_anchor)
        self._cache[rel] = parsed
        self._cache.move_to_end(rel)
        while len(self._cache) > MAX_CACHED_FILES:  # memory follows the work, not the home
            self._cache.popitem(last=False)
        return parsed

    def file_status(self, rel_path: str) -> V2Parse:
        """Strict parse of one v2 file (status/verify). A missing file is incomplete."""
        parsed = self._load(rel_path) if _is_v2_rel(rel_path) else None
        if parsed is None or parsed.v2 is None:
            return V2Parse([], False, f"{rel_path}: not a readable v2 archive file")
        return parsed.v2

    def _v2_frame(self, source_id: str) -> Frame | None:
        if not is_v2_safe_id(source_id):
            return None
        try:
            parsed = self._load(v2_path(source_id))
        except SourceIdError:
            return None
        return parsed.by_id.get(source_id) if parsed else None

    def _legacy_frame(self, source_id: str) -> Frame | None:
        try:
            split_source_id(source_id)
            parsed = self._load(legacy_path(source_id))
        except SourceIdError:
            return None
        return parsed.by_id.get(source_id) if parsed else None

    def lookup(self, source_id: str) -> Frame | None:
        """The valid v2 frame of ``source_id``, else its legacy record, else None."""
        if not isinstance(source_id, str):
            return None
        return self._v2_frame(source_id) or self._legacy_frame(source_id)

    def _source_files(self) -> list[str]:
        base = self.root / SOURCES_DIR
        out: list[str] = []
        try:
            if stat.S_ISLNK(os.lstat(base).st_mode):
                return []
        except OSError:
            return []
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.endswith(".md"):
                    out.append(f"{rel_dir}/{name}")
        return sorted(out)

    def iter_frames(self) -> Iterator[Frame]:
        """Every frame under ``sources/`` in (path, line) order; legacy copies of v2 ids dropped."""
        loaded = [(rel, self._load(rel)) for rel in self._source_files()]
        v2_ids = {f.source_id for rel, p in loaded if p and p.v2 is not None for f in p.frames}
        for rel, parsed in loaded:
            if parsed is None:
                continue
            for f in parsed.frames:
                if f.version == "v2" or f.source_id not in v2_ids:
                    yield f

    def damaged_files(self) -> list[tuple[str, V2Parse]]:
        """The v2 files under ``sources/`` that do not parse complete (garbage appended, a
        frame cut short, a broken marker), each with its parse: no write may append to them."""
        out = []
        for rel in self._source_files():
            if _is_v2_rel(rel):
                status = self.file_status(rel)
                if not status.complete:
                    out.append((rel, status))
        return out

    def cut_to_valid_prefix(self, rel: str, keep_dir: Path) -> int:
        """Cut a damaged v2 file back to its valid frames, first copying the whole file to
        ``keep_dir/rel`` (nothing is lost). A file with no valid frame is removed (the next
        write starts it again). Returns the number of valid frames kept. Caller holds the
        workspace write lock."""
        parsed = self._load(rel)
        if parsed is None or parsed.v2 is None or parsed.v2.complete:
            raise SourceArchiveError(f"{rel}: not a damaged v2 archive file")
        data = _read(self._abs(rel))
        keep = Path(keep_dir) / rel
        keep.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_bytes(keep, data)
        frames = parsed.frames
        if not frames:
            os.unlink(self._abs(rel))
            fsync_dir(os.path.dirname(self._abs(rel)))
            self.written.add(rel)
            self._cache.pop(rel, None)
            return 0
        lines = read_text(data).split("\n")
        prefix = "\n".join(lines[:frames[-1].end_line])
        check = parse_v2(prefix, rel)
        if not check.complete or len(check.frames) != len(frames):
            raise SourceArchiveError(f"{rel}: the valid prefix does not parse on its own "
                                     f"({check.error}); repair it by hand")
        self._replace(rel, prefix)
        return len(frames)

    # ------------------------------------------------------------------ links

    def resolve_target(self, topic_path: str, target: str) -> str | None:
        """Source id cited by a footnote target written in ``topic_path``, or None.

        A target is a relative link ``…/sources/…/x.md#source-<16hex>`` (path taken literally,
        resolved from the topic file's directory) whose anchor exists in that file, or a plain
        handle: a v2-safe id that exists in the archive.
        """
        if not isinstance(target, str) or not isinstance(topic_path, str) or not target:
            return None
        link, sep, frag = target.partition("#")
        if sep and link.endswith(".md") and is_anchor(frag):
            rel = posixpath.normpath(posixpath.join(posixpath.dirname(topic_path), link))
            if rel.startswith(SOURCES_DIR + "/") and ".." not in rel.split("/"):
                parsed = self._load(rel)
                frame = parsed.by_anchor.get(frag) if parsed else None
                if frame is not None:
                    return frame.source_id
        if is_v2_safe_id(target) and self.lookup(target) is not None:
            return target
        return None

    def canonical_link(self, topic_path: str, source_id: str) -> str | None:
        """Relative link from ``topic_path`` to the frame (v2 if valid there, else legacy)."""
        frame = self.lookup(source_id)
        if frame is None:
            return None
        start = posixpath.dirname(topic_path) or "."
        return f"{posixpath.relpath(frame.path, start)}#{frame.anchor}"

    # ------------------------------------------------------------------ writing

    def archive(self, records: list[SourceRecord]) -> list[str]:
        """Append the records not yet in a valid v2 frame; return the ids newly written.

        Order: records sorted by (provider, thread, input order), grouped by file. Everything
        is checked before the first byte is written: ids and fields, path collisions, and that
        each existing target parses complete (else SourceArchiveError, nothing written).
        """
        records = list(records)
        ids = [check_record(r) for r in records]
        order = sorted(range(len(records)),
                       key=lambda k: (records[k].provider, records[k].thread, k))
        groups: dict[str, list[tuple[str, SourceRecord]]] = {}
        for k in order:
            groups.setdefault(v2_path(ids[k]), []).append((ids[k], records[k]))
        self._check_collisions(list(groups))

        plans: list[tuple[str, str, list[str], V2Parse]] = []
        for rel, items in groups.items():
            parsed = self._load(rel)
            if parsed is None and os.path.exists(self._abs(rel)) or \
                    os.path.islink(self._abs(rel)):
                raise SourceArchiveError(f"source archive {rel} is not a plain file")
            existing_ids = set(parsed.by_id) if parsed else set()
            if parsed is not None and not parsed.v2.complete:  # type: ignore[union-attr]
                raise SourceArchiveError(f"invalid or truncated v2 archive {rel}: "
                                         f"{parsed.v2.error}")  # type: ignore[union-attr]
            new: list[SourceRecord] = []
            new_ids: list[str] = []
            for sid, rec in items:
                if sid in existing_ids:
                    continue
                existing_ids.add(sid)
                new.append(rec)
                new_ids.append(sid)
            if not new:
                continue
            if parsed is None:
                text = render_v2_file(new)
            else:
                old = read_text(_read(self._abs(rel)))
                text = old + append_separator(old, parsed.v2) + render_v2_frames(new)  # type: ignore[arg-type]
            check = parse_v2(text, rel)
            got = [f.source_id for f in check.frames]
            if not check.complete or got[len(got) - len(new_ids):] != new_ids:
                raise SourceArchiveError(f"refusing to write {rel}: the result would not parse "
                                         f"({check.error})")
            plans.append((rel, text, new_ids, check))

        written: list[str] = []
        for rel, text, new_ids, check in plans:
            self._replace(rel, text, check)
            written.extend(new_ids)
        return written

    def _check_collisions(self, rels: list[str]) -> None:
        """Refuse target paths (and their directory prefixes) that collide under NFC+casefold,
        with each other or with what already exists on disk."""
        seen: dict[tuple[str, ...], str] = {}
        for rel in rels:
            parts = rel.split("/")
            for depth in range(1, len(parts) + 1):
                key = tuple(fold_name(p) for p in parts[:depth])
                exact = "/".join(parts[:depth])
                prev = seen.setdefault(key, exact)
                if prev != exact:
                    raise SourcePathCollision(f"source archive paths {prev} and {exact} collide "
                                              "under case folding")
        listed: dict[str, list[str]] = {}
        for rel in rels:
            parts = rel.split("/")
            for depth in range(1, len(parts) + 1):
                parent = "/".join(parts[: depth - 1])
                if parent not in listed:
                    listed[parent] = self._entries(parent)
                entry = _folded_twin(listed[parent], parts[depth - 1])
                if entry is not None:
                    where = f"{parent}/{entry}" if parent else entry
                    raise SourcePathCollision(f"source archive path {rel} collides with "
                                              f"existing {where} under case folding")

    def _entries(self, parent: str) -> list[str]:
        """The names in the archive directory ``parent`` ("" is the workspace root), for the
        collision check (an archive kept elsewhere answers from its own index)."""
        try:
            return os.listdir(self._abs(parent) if parent else self.root)
        except OSError:
            return []

    def _replace(self, rel: str, text: str, parsed: V2Parse | None = None) -> None:
        """Replace ``rel`` with ``text``; ``parsed`` (the strict parse of ``text``, made to
        check it) is kept as the cached reading of the new file, so the lookups that follow
        a write do not parse it again."""
        target = self._abs(rel)
        self._makedirs(os.path.dirname(target))
        if self.tmp_dir is not None:
            self.tmp_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(target, text.encode("utf-8", errors="surrogateescape"),
                           tmp_dir=self.tmp_dir)
        self.written.add(rel)
        self._cache.pop(rel, None)
        st = self._plain_stat(rel) if parsed is not None else None
        if st is not None:
            self._remember(rel, st, parsed, parsed.frames)  # type: ignore[union-attr]

    def _makedirs(self, path: str) -> None:
        """Create missing directories (0700) between the root and ``path`` (a directory
        below it), refusing to walk through a symlink."""
        root = self._root_str
        os.makedirs(root, exist_ok=True)
        missing: list[str] = []
        cur = path
        while not os.path.exists(cur) and cur != root:
            missing.append(cur)
            cur = os.path.dirname(cur)
        check = path
        while check != root and check != os.path.dirname(check):
            if os.path.islink(check):
                raise SourceArchiveError(f"refusing to write through symlink {check}")
            check = os.path.dirname(check)
        for d in reversed(missing):
            os.mkdir(d, mode=0o700)
            fsync_dir(os.path.dirname(d))


def _folded_twin(entries: list[str], name: str) -> str | None:
    """The entry other than ``name`` that folds to the same key (:func:`fold_name`), if any.
    A thread's directory lists every archived thread, so this runs over the whole archive
    at each batch: an ASCII entry is folded by ``lower()`` (NFC leaves it as it is and
    ``casefold`` lowers only A-Z), and only the others pay for Unicode normalisation."""
    key = fold_name(name)
    for entry in entries:
        if entry != name and (entry.lower() if entry.isascii() else fold_name(entry)) == key:
            return entry
    return None
