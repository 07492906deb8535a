"""Low-level reads of a session directory: a descriptor of ``history/`` to scan through, one
node file (fingerprint and bytes, never through a symlink) and the generation token other
processes of ours change after they write. Kept apart so the index holds only bookkeeping."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import Iterator

LOCK_NAME = ".session.lock"  # the session's flock file; its bytes are the generation token
GEN_BYTES = 16

# A node file's fingerprint: (inode, mtime_ns, size) from a stat, or (listed inode, size)
# for a file a cold open read without one (the next full scan checks its ctime).
StatKey = tuple[int, ...]
# A cold open's one read() per node file: larger files (rare) are read on to the end.
FIRST_READ = 1 << 16

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)


def open_dir(path: Path) -> int | None:
    """A descriptor of the directory ``path`` (None when it is missing): a scan lists and
    opens its files through it, so every file comes from the one directory it listed, even
    if ``path`` is replaced meanwhile, and the kernel resolves one name per file, not the
    whole path. A ``path`` that is not a directory raises NotADirectoryError."""
    try:
        return os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return None


def read_node_file(path: str, dir_fd: int | None = None) -> tuple[StatKey, bytes] | None:
    """The fingerprint and bytes of one node file (``path`` relative to ``dir_fd`` when
    given), or None when it vanished or is not a regular file (a symlink is never followed
    out of ``history/``). Raw ``os`` calls: one open, fstat, read and close."""
    fd = _open_node(path, dir_fd)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data = os.read(fd, st.st_size + 1)
        if len(data) > st.st_size:  # it grew since the fstat: read to the end
            data = _read_rest(fd, data)
    finally:
        os.close(fd)
    return (st.st_ino, st.st_mtime_ns, st.st_size), data


def read_listed(entry: os.DirEntry, dir_fd: int) -> bytes | None:
    """The bytes of a node file that a listing of ``dir_fd`` returned, read without a stat
    (a cold open's fingerprint is the listing's inode and the size read, see
    ``SessionIndex._load``): the listing's file type rules out anything but a regular file,
    the open refuses a symlink put in its place since, and only a read that fills
    FIRST_READ or comes back empty pays an ``fstat`` to rule out a device or FIFO swapped
    in. None when the file vanished or is not a regular file."""
    if not entry.is_file(follow_symlinks=False):
        return None
    fd = _open_node(entry.name, dir_fd)
    if fd is None:
        return None
    try:
        data = os.read(fd, FIRST_READ)
        if (len(data) == FIRST_READ or not data) and not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        if len(data) == FIRST_READ:
            data = _read_rest(fd, data)
    except (IsADirectoryError, BlockingIOError):
        return None  # a directory or a FIFO swapped in after the listing
    finally:
        os.close(fd)
    return data


def _open_node(path: str, dir_fd: int | None) -> int | None:
    """A read-only descriptor of a node file, or None when it vanished or is a symlink."""
    try:
        return os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise


def _read_rest(fd: int, head: bytes) -> bytes:
    parts = [head]
    while chunk := os.read(fd, 1 << 16):
        parts.append(chunk)
    return b"".join(parts)


def node_entries(dir_fd: int, stale_from: int, temps: list[str]) -> Iterator[os.DirEntry]:
    """List ``history/`` (through its descriptor) once: yield each node file's entry (a
    ``*.json`` name not hidden) and add the name of each temp file older than
    ``stale_from`` (a dead writer's leftover) to ``temps``; nothing else is looked at."""
    with os.scandir(dir_fd) as it:
        for entry in it:
            name = entry.name
            if name.endswith(".json"):
                if name[0] != ".":
                    yield entry
            elif name[0] == "." and name.endswith(".tmp") and _older_than(entry, stale_from):
                temps.append(name)


def _older_than(entry: os.DirEntry, when_ns: int) -> bool:
    try:
        return entry.stat(follow_symlinks=False).st_mtime_ns < when_ns
    except FileNotFoundError:
        return False


def read_gen(path: Path) -> bytes | None:
    """The generation token, or None before any writer of ours wrote one."""
    try:
        with open(path, "rb") as fh:
            return fh.read(GEN_BYTES) or None  # a fresh lock file: no writer yet
    except FileNotFoundError:
        return None


def write_gen(path: Path) -> bytes:
    """Replace the generation token with a fresh random one (caller holds the lock)."""
    token = os.urandom(GEN_BYTES // 2).hex().encode()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        os.pwrite(fd, token, 0)
    finally:
        os.close(fd)
    return token


