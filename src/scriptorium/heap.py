"""The heap between the sessions of a long write: freed memory handed back to the system.

Over a ``write --all`` the resident set crept up with the sessions written while what was in
use stayed flat: glibc's malloc keeps what a process frees for its next allocations and hands
back only the top of its heap, so its free pages end up scattered between live blocks; and
CPython keeps freed objects on its free lists, whose pools hold their arenas, until a full
collection empties them. Measured in one process, with ``malloc_trim(0)`` after each
session the resident set between sessions still rose +0.9 kB a session from 400 to 1,300
sessions; with a full collection every ``COLLECT_EVERY`` sessions too, +0.4 kB.

``malloc_trim(0)`` returns every free page of every arena (0.1 ms on a 10 MB heap, against
some 90 ms a session); a full collection costs 10-25 ms, so it runs once in
``COLLECT_EVERY`` sessions (as much as after every one, measured). Elsewhere than glibc there
is no trim, and only the collection is done.
"""

from __future__ import annotations

import ctypes
import gc
from typing import Callable

COLLECT_EVERY = 32  # sessions between two full collections in a long write


def _load_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS). Looked up
    in the C library already loaded, as ``fsbatch`` finds ``syncfs``: ``find_library``
    would run ``ldconfig`` at every start of the CLI (2 ms)."""
    try:
        fn = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_TRIM = _load_trim()


def give_back(*, collect: bool = False) -> bool:
    """Hand the heap's free pages back to the system, after a full collection with
    ``collect``; False where the C library cannot trim."""
    if collect:
        gc.collect()
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
