"""The C heap between the sessions of a long write: freed pages handed back to the system.

glibc's malloc keeps what a process frees for its next allocations, and hands back only the
top of its heap. Over a ``write --all`` the heap's free pages end up scattered between live
blocks, so the resident set crept up with the sessions written (+0.7 kB a session from 500 to
2,000 sessions) while what was in use stayed flat. ``malloc_trim(0)`` returns every free page
of every arena (0.1 ms on a 10 MB heap, against some 90 ms a session). Elsewhere than glibc
there is no such call, and nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Callable


def _load_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None on a C library without it (musl, macOS)."""
    name = ctypes.util.find_library("c")
    try:
        fn = getattr(ctypes.CDLL(name), "malloc_trim")
    except (OSError, AttributeError, TypeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_size_t], ctypes.c_int
    return fn


_TRIM = _load_trim()


def give_back() -> bool:
    """Hand the heap's free pages back to the system; False where the C library cannot."""
    if _TRIM is None:
        return False
    _TRIM(0)
    return True
