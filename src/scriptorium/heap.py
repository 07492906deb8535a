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

The other side of it: while a bulk load (a cold session open, a search index build) makes
objects by the hundred thousand and no garbage cycles, the collector is paused
(:func:`gc_paused`); its passes would only re-walk the growing heap.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
from typing import Callable, Iterator

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


@contextlib.contextmanager
def gc_paused(bulk: bool) -> Iterator[None]:
    """Pause the cyclic garbage collector while a bulk load creates many objects and no
    garbage cycles: otherwise its passes re-walk the growing heap (a fifth of a cold open's
    time, a tenth of a search index build's).

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
