"""Replacing many files in one durable step: the marker's write path (a batch of node files).

Per file, an atomic replace costs an fsync of the new bytes, a rename and an fsync of the
directory. A batch shares the two syncs instead, in this order, so a crash at any point leaves
every file whole, with its old bytes or its new ones:

1. write every new file under a temp name in its target's directory;
2. make all their bytes durable in one step: an fsync per file, all issued at once from a
   thread pool, so a journalling filesystem commits them together (one journal commit on
   ext4, not one per file); nothing is renamed until every one has returned;
3. rename each over its target, in batch order (a rename never exposes a partial file, and
   the bytes it exposes are already on disk: no target can come back empty or torn after a
   crash, and a crash mid-way leaves a prefix of the batch replaced);
4. fsync each distinct directory once, so the renames are durable when this returns.

Why not ``syncfs(2)`` by default: it is one call, but it writes back every dirty page of the
filesystem, and at marking time that includes what the memory transaction, git and the
search index just wrote: measured in the embedded write path (600-turn batch, load 17), the
durable step took 0.53-0.91 s with syncfs against 0.21-0.30 s with the fsyncs issued
together. ``SCRIPTORIUM_SYNCFS=1`` (read at import) opts in, on Linux >= 5.8 only, where
syncfs reports write-back errors as fsync does.

Before step 3 each old file gets a second name (a hard link, ``.<name>.<pid>-<n>.old.tmp``),
so the rename itself frees nothing: freeing a replaced file's blocks is the slow part of a
replace on ext4 (measured here: 1-2 ms per file, against 0.03 ms for the rename). The second
names are removed on FREEING_THREADS threads while the renames go on, and joined before this
returns, so no work outlives the call. One left by a killed process is an ordinary stale temp
file (``*.tmp``: never listed as a node, ignored by git, swept by the next scan of its
directory) and holds only bytes its file already replaced.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import itertools
import os
import platform
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Sequence

from .fsutil import fsync_dir, refuse_symlink

_WRITE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                | getattr(os, "O_CLOEXEC", 0))
_names = itertools.count()  # temp names: pid + counter, unique without a random draw
FREEING_THREADS = 4  # old files freed at once (each free waits on the journal)
SYNCFS_MIN = 4  # below this many files, an fsync each is as cheap as one syncfs


def _load_syncfs() -> Callable[[int], int] | None:
    """libc's ``syncfs`` where it reports write-back errors (Linux >= 5.8), else None."""
    if platform.system() != "Linux":
        return None
    try:
        major, minor = (int(x) for x in platform.release().split(".")[:2])
        if (major, minor) < (5, 8):
            return None
        fn = ctypes.CDLL(None, use_errno=True).syncfs
    except (ValueError, OSError, AttributeError):
        return None
    fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
    return fn


_SYNCFS = _load_syncfs()
USE_SYNCFS = os.environ.get("SCRIPTORIUM_SYNCFS") == "1"  # see the module docstring


def sync_files(fds: Sequence[int], one_filesystem: bool = True) -> None:
    """Make the bytes written through ``fds`` durable in one step (see the module docstring);
    ``one_filesystem``: they are known to share one (else each is fsynced)."""
    if USE_SYNCFS and _SYNCFS is not None and one_filesystem and len(fds) >= SYNCFS_MIN:
        if _SYNCFS(fds[0]) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"syncfs: {os.strerror(err)}")
        return
    if len(fds) > 1:
        with ThreadPoolExecutor(max_workers=min(8, len(fds))) as pool:
            list(pool.map(os.fsync, fds))
    elif fds:
        os.fsync(fds[0])


def _create_temp(parent: str, name: str, tag: str) -> tuple[int, str]:
    """A new file ``.<name>.<pid>-<n>.<tag>.tmp`` beside its target (O_EXCL: never an
    existing file or a symlink); a name taken by a dead process falls back to a random one."""
    tmp = os.path.join(parent, f".{name}.{os.getpid():x}-{next(_names):x}.{tag}.tmp")
    try:
        return os.open(tmp, _WRITE_FLAGS, 0o600), tmp
    except FileExistsError:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=f".{tag}.tmp", dir=parent)
        return fd, tmp


def atomic_write_many(items: Sequence[tuple[Path | str, bytes]], mode: int = 0o600, *,
                      before_rename: Callable[[], None] | None = None,
                      after_rename: Callable[[int], None] | None = None) -> None:
    """Replace several files in one durable step (see the module docstring).
    ``before_rename()`` runs once every new file is durable
    and ``after_rename(i)`` after the i-th rename (named crash points use them)."""
    targets = [os.fspath(p) for p, _ in items]
    parents = list(dict.fromkeys(os.path.dirname(t) for t in targets))
    for parent in parents:
        refuse_symlink(parent, "directory")  # refused before anything is written
    for target in targets:
        refuse_symlink(target)
    staged: list[str] = []
    fds: list[int] = []
    try:
        for target, (_, data) in zip(targets, items):
            fd, tmp = _create_temp(os.path.dirname(target), os.path.basename(target), "new")
            fds.append(fd)
            staged.append(tmp)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
        sync_files(fds, one_filesystem=len(parents) == 1)
    except BaseException:
        for tmp in staged:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    finally:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
    done = 0
    with ThreadPoolExecutor(max_workers=FREEING_THREADS) as freeing:
        try:
            if before_rename is not None:
                before_rename()
            for i, (tmp, target) in enumerate(zip(staged, targets)):
                old = _retire(target)
                try:
                    os.replace(tmp, target)
                except BaseException:
                    if old is not None:
                        _unlink(old)
                    raise
                done = i + 1
                if old is not None:
                    freeing.submit(_unlink, old)
                if after_rename is not None:
                    after_rename(i)
        except BaseException:
            for tmp in staged[done:]:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            raise
        finally:
            for parent in dict.fromkeys(os.path.dirname(t) for t in targets[:done]):
                fsync_dir(Path(parent))


def _unlink(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _retire(target: str) -> str | None:
    """A second name for ``target``'s current file, so the rename over it frees no blocks
    (the freeing threads do); None when there is nothing to keep (no file, links refused)."""
    parent, name = os.path.split(target)
    old = os.path.join(parent, f".{name}.{os.getpid():x}-{next(_names):x}.old.tmp")
    try:
        # never follow a symlink where the platform lets us say so (the target was refused
        # if it is one)
        os.link(target, old, follow_symlinks=os.link not in os.supports_follow_symlinks)
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.EEXIST, errno.EPERM, errno.EMLINK, errno.EXDEV,
                         errno.ENOTSUP, errno.EOPNOTSUPP):
            return None
        raise
    return old
