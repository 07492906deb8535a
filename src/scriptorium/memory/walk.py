"""Walking memory's directories the way every reader of it must: no symlink followed, names
that are not UTF-8 skipped, and the archive's few directory mtimes as its change signal."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger(__name__)


def read_rel(root: Path, rel: str) -> bytes:
    """The bytes of ``root/rel``. Opened by a string path, as :func:`lstat_rel` stats one:
    building a ``Path`` would intern each part of ``rel`` (CPython 3.11's pathlib), one more
    entry of the interpreter's string table each time a long write reads a topic again."""
    with open(os.path.join(root, rel), "rb") as f:
        return f.read()


def lstat_rel(root: Path, rel: str) -> os.stat_result:
    """``lstat`` of ``root/rel`` (see :func:`read_rel`)."""
    return os.lstat(os.path.join(root, rel))


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
