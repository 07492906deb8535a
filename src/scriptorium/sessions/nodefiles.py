"""Low-level reads of a session directory: a descriptor of ``history/`` to scan through, one
node file (fingerprint and bytes, never through a symlink), the generation token other
processes of ours change after they write, and a pause of the cyclic GC for bulk loads. Kept
apart so the index holds only bookkeeping."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import stat
from pathlib import Path
from typing import Iterator

LOCK_NAME = ".session.lock"  # the session's flock file; its bytes are the generation token
GEN_BYTES = 16

StatKey = tuple[int, int, int]

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
    out of ``history/``). Raw ``os`` calls: one open, fstat, read and close, the least a cold
    open can do per file."""
    try:
        fd = os.open(path, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        data = os.read(fd, st.st_size + 1)
        if len(data) > st.st_size:  # it grew since the fstat: read to the end
            parts = [data]
            while chunk := os.read(fd, 1 << 16):
                parts.append(chunk)
            data = b"".join(parts)
    finally:
        os.close(fd)
    return (st.st_ino, st.st_mtime_ns, st.st_size), data


def older_than(entry: os.DirEntry, when_ns: int) -> bool:
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


@contextlib.contextmanager
def gc_paused(bulk: bool) -> Iterator[None]:
    """Pause the cyclic garbage collector while a bulk load creates objects that all stay
    alive: otherwise its passes re-walk the growing heap (a fifth of a cold open's time).

    On the way out the objects made meanwhile are moved to the oldest generation as they
    are (``freeze`` + ``unfreeze``, no traversal): else the first allocation after
    ``enable`` would walk every one of them once more only to find them all alive. Skipped
    when the program froze objects itself (``unfreeze`` would thaw them)."""
    pause = bulk and gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause:
            if gc.get_freeze_count() == 0:
                gc.freeze()
                gc.unfreeze()
            gc.enable()
