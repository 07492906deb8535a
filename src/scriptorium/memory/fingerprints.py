"""Has this file changed since I read it? A file's fingerprint, and when to trust it.

The topic catalog and the search index both keep, per file they derived something from, the
file's fingerprint (mtime, ctime, size, inode) and its content hash. A different fingerprint
means the file changed. The same fingerprint is trusted only once the file is old enough:
timestamps have coarse granularity (a kernel tick), so a file rewritten in place within one
tick at the same size keeps its fingerprint. As git does for its index ("racy clean"), a file
whose mtime is that close to when it was read is checked by content hash as well.
"""

from __future__ import annotations

import hashlib
import os

Fingerprint = tuple[int, int, int, int]  # (mtime_ns, ctime_ns, size, inode)

# How long after it was read a fingerprint may still hide a same-tick rewrite. Filesystems
# with sub-second timestamps tick at most every few ms (a kernel jiffy); whole-second ones
# (FAT keeps 2 s) need the long window.
RACY_NS = 3_000_000_000
RACY_FINE_NS = 100_000_000


def fingerprint(st: os.stat_result) -> Fingerprint:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino)


def is_racy(fp: Fingerprint, checked_ns: int) -> bool:
    """True when a file with this fingerprint may have changed since ``checked_ns`` without
    its fingerprint showing it."""
    mtime = fp[0]
    window = RACY_NS if mtime % 1_000_000_000 == 0 else RACY_FINE_NS
    return mtime + window >= checked_ns


def sha256(data: bytes) -> str:
    """The content hash kept beside a fingerprint."""
    return hashlib.sha256(data).hexdigest()
