"""Low-level reads of a session directory: one node file (fingerprint and bytes, never
through a symlink), the generation token other processes of ours change after they write, and
a pause of the cyclic GC for bulk loads. Kept apart so the index holds only bookkeeping."""

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


def read_node_file(path: str) -> tuple[StatKey, bytes] | None:
    """The fingerprint and bytes of one node file, or None when it vanished or is not a
    regular file (a symlink is never followed out of ``history/``). Raw ``os`` calls: one
    open, fstat, read and close, the least a cold open can do per file."""
    try:
        fd = os.open(path, _READ_FLAGS)
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
    alive: otherwise its passes re-walk the growing heap (a fifth of a cold open's time)."""
    pause = bulk and gc.isenabled()
    if pause:
        gc.disable()
    try:
        yield
    finally:
        if pause:
            gc.enable()
