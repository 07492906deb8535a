"""The workspace write lock inside one process: threads exclude each other (re-entrant in the
thread that holds it) and a flock on the lock file excludes other processes.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from ..errors import ConcurrentUpdate
from ..fsutil import FileLock


class _ProcessLock:
    """One per lock file per process: threads exclude each other (a thread may re-enter),
    and the flock excludes other processes."""

    def __init__(self, path: Path):
        self.path = path
        self.rlock = threading.RLock()
        self.depth = 0
        self.holds = 0  # outermost acquisitions so far: names one unbroken hold
        self.file: FileLock | None = None

    def acquire(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.rlock.acquire(timeout=-1 if timeout is None else max(0.0, timeout)):
            raise ConcurrentUpdate(f"memory workspace is busy: another writer in this process "
                                   f"holds {self.path}")
        try:
            if self.depth == 0:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                lock = FileLock(self.path, timeout=remaining, what="memory workspace write lock")
                lock.acquire()
                self.file = lock
                self.holds += 1
            self.depth += 1
        except BaseException:
            self.rlock.release()
            raise

    def release(self) -> None:
        self.depth -= 1
        if self.depth == 0 and self.file is not None:
            self.file.release()
            self.file = None
        self.rlock.release()

    @property
    def held_here(self) -> bool:
        return self.depth > 0 and self.rlock._is_owned()  # type: ignore[attr-defined]


_LOCKS: dict[tuple[int, str], _ProcessLock] = {}
_LOCKS_GUARD = threading.Lock()


def process_lock(path: Path) -> _ProcessLock:
    """The one lock object of this process for the lock file at ``path``."""
    # a forked child gets its own lock object; the file name itself is not resolved, so a
    # symlinked lock file is refused by FileLock instead of followed
    key = (os.getpid(), os.path.join(os.path.realpath(path.parent), path.name))
    with _LOCKS_GUARD:
        lock = _LOCKS.get(key)
        if lock is None:
            lock = _LOCKS[key] = _ProcessLock(Path(key[1]))
        return lock
