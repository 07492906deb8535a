"""Where the PostgreSQL search index gets its documents: any home that can list its memory
files, fingerprint them cheaply and hand over their parsed documents.

The index (:mod:`.pg_index`) does not care whether topics live in files or in tables; it asks
a :class:`DocumentSource`. :class:`DirectorySource` serves a workspace directory (a directory
home, or a mirror of one); :class:`PgFilesSource` serves a PostgreSQL workspace's
``memory_files`` rows, inside the install's own transaction when given its connection.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any, Iterable, Protocol

from ..walk import markdown_files, sources_signature
from ..runtime_state import read_generation
from ..sources import Frame
from .documents import TOP, Document, file_documents as _file_documents, kind_of, speaker_keys
from .resolve import Resolver


class DocumentSource(Protocol):
    """What the index needs of a home's memory (paths are workspace-relative, ``topics/...``
    and ``sources/...``)."""

    def generation(self) -> int | None:
        """The install counter: moves at every install (None: nothing installed yet)."""

    def archive_signature(self) -> str:
        """Changes whenever evidence is archived (citations that did not resolve may now)."""

    def fingerprints(self, kind: str) -> dict[str, str]:
        """Every file of ``kind`` (``topic``/``source``) -> a cheap value that changes when
        the file does."""

    def documents(self, rel: str, resolver: Resolver | None = None
                  ) -> tuple[list[Document], int, str] | None:
        """``rel``'s documents, how many of its citations did not resolve, and its
        fingerprint; None when it is gone. ``resolver``: one made by :meth:`resolver` for
        the update at hand (the archive files it reads are parsed once for all files)."""

    def resolver(self) -> Resolver:
        """A footnote resolver for one update (see :class:`.resolve.Resolver`)."""


def file_documents(rel: str, data: bytes, archive: Any, resolver: Resolver | None = None
                   ) -> tuple[list[Document], int]:
    """The documents of one memory file as the SQLite index makes them: a topic's claims
    (footnotes resolved by ``resolver``, or else through ``archive``: ``resolve_target`` and
    ``lookup``, as :class:`~scriptorium.memory.sources.SourceArchive` offers), a source
    file's frames."""
    if resolver is not None:
        return _file_documents(rel, data, resolver.resolve, resolver.trusted,
                               resolver.speakers)
    found: dict[str, Frame | None] = {}

    def frame(sid: str) -> Frame | None:
        if sid not in found:
            found[sid] = archive.lookup(sid)
        return found[sid]

    def trusted(sid: str) -> bool | None:
        f = frame(sid)
        return None if f is None else bool(f.trusted)

    def speakers(sid: str) -> list[str]:
        f = frame(sid)
        return [] if f is None else speaker_keys(f)

    return _file_documents(rel, data, archive.resolve_target, trusted, speakers)


class DirectorySource:
    """The memory files of a workspace directory. The fingerprint is the file's stat
    (mtime, ctime, size, inode): an install rewrites files by rename, so it always moves;
    the install hook re-indexes the files it names regardless."""

    def __init__(self, workspace: Any) -> None:
        self.root = Path(workspace.root)
        self.runtime_dir = Path(workspace.runtime_dir)
        self.archive = workspace.sources

    def generation(self) -> int | None:
        return read_generation(self.runtime_dir)

    def archive_signature(self) -> str:
        return hashlib.sha256(repr(sources_signature(self.root)).encode()).hexdigest()

    def fingerprints(self, kind: str) -> dict[str, str]:
        return {rel: _stat_key(st) for rel, st in markdown_files(self.root, TOP[kind]).items()}

    def resolver(self) -> Resolver:
        return Resolver(self.archive)

    def documents(self, rel: str, resolver: Resolver | None = None
                  ) -> tuple[list[Document], int, str] | None:
        found = _regular_file(self.root, rel)
        if found is None:
            return None
        try:
            data = (self.root / rel).read_bytes()
        except OSError:
            return None
        docs, unresolved = file_documents(rel, data, self.archive, resolver)
        return docs, unresolved, _stat_key(found)


def _regular_file(root: Path, rel: str) -> os.stat_result | None:
    """The lstat of ``root/rel`` when it is a memory file reached without a symlink or
    ``..`` (what :func:`markdown_files` would list), else None."""
    parts = rel.split("/")
    if kind_of(rel) is None or any(p in ("", ".", "..") for p in parts):
        return None
    path = str(root)
    try:
        for part in parts:
            path = os.path.join(path, part)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                return None
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) else None


def _stat_key(st: Any) -> str:
    return f"{st.st_mtime_ns}:{st.st_ctime_ns}:{st.st_size}:{st.st_ino}"


def wanted_paths(paths: Iterable[str], kinds: Iterable[str]) -> list[str]:
    """The memory files among ``paths`` (as a transaction reports them) of ``kinds``."""
    kinds = set(kinds)
    return sorted({p for p in (str(p).replace("\\", "/") for p in paths)
                   if kind_of(p) in kinds})


class PgFilesSource:
    """The memory files of a PostgreSQL workspace: rows of ``memory_files`` (path, content,
    version), the home's generation in ``memory_state`` (the tables of the ``memory``
    migration component). Footnotes resolve through ``workspace.sources`` (the workspace's
    archive). With ``conn`` every read goes through that connection, so an install can index
    the rows it has written but not yet committed, in its own transaction."""

    def __init__(self, workspace: Any, conn: Any | None = None) -> None:
        self.workspace = workspace
        self.conn = conn

    def _rows(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        if self.conn is not None:
            return list(self.conn.execute(sql, params).fetchall())
        with self.workspace.pg.connection() as conn:
            return list(conn.execute(sql, params).fetchall())

    # the install counter as SQL, so a query reads it with the index state (one round trip)
    GENERATION_SQL = "SELECT generation FROM memory_state"

    def generation(self) -> int | None:
        rows = self._rows(self.GENERATION_SQL)
        return int(rows[0][0]) if rows else None

    def archive_signature(self) -> str:
        [(count, newest)] = self._rows(
            "SELECT count(*), coalesce(max(version), 0) FROM memory_files "
            "WHERE starts_with(path, 'sources/')")
        return f"{count}:{newest}"

    def fingerprints(self, kind: str) -> dict[str, str]:
        return {path: str(version) for path, version in self._rows(
            "SELECT path, version FROM memory_files WHERE starts_with(path, %s) AND "
            "content IS NOT NULL", (TOP[kind] + "/",)) if kind_of(path) == kind}

    def resolver(self) -> Resolver:
        return Resolver(self.workspace.sources)

    def documents(self, rel: str, resolver: Resolver | None = None
                  ) -> tuple[list[Document], int, str] | None:
        if kind_of(rel) is None:
            return None
        rows = self._rows("SELECT content, version FROM memory_files WHERE path = %s", (rel,))
        if not rows or rows[0][0] is None:
            return None
        docs, unresolved = file_documents(rel, bytes(rows[0][0]), self.workspace.sources,
                                          resolver)
        return docs, unresolved, str(rows[0][1])
