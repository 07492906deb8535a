"""Filesystem primitives every writer uses: atomic replace, cross-process locks, safe names.

One atomic writer for every file (unique temp name in the same directory, fsync, rename,
fsync the directory), so no reader ever sees a torn file and a crash leaves either the old
or the new bytes. Many files in one durable step: fsbatch.py.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
import threading
import time
import unicodedata
from pathlib import Path
from typing import Any, Iterator
from weakref import WeakKeyDictionary

from .errors import ConcurrentUpdate, CorruptFile, InvalidInput

_FORBIDDEN_IN_NAMES = ("/", "\\", "\x00")
MAX_NAME_BYTES = 255  # one path component on every common filesystem


def _shown(value: str, limit: int = 60) -> str:
    """``repr`` of a value for a one-line error, cut short when it is long."""
    return repr(value) if len(value) <= limit else repr(value[:limit]) + f"… ({len(value)} chars)"


def check_name(value: object, what: str = "id") -> str:
    """Return ``value`` if it is safe as one path component, else raise InvalidInput.

    Refuses non-strings, the empty string, ``.``, ``..``, anything containing ``/``, ``\\``
    or NUL, text that is not valid Unicode, and names longer than one file name may be
    (255 bytes of UTF-8): ids from users or from data must never escape their directory.
    """
    if not isinstance(value, str):
        raise InvalidInput(f"invalid {what}: expected a string, got {type(value).__name__}")
    if value in ("", ".", ".."):
        raise InvalidInput(f"invalid {what} {value!r}: must not be empty, '.' or '..'")
    for ch in _FORBIDDEN_IN_NAMES:
        if ch in value:
            raise InvalidInput(f"invalid {what} {_shown(value)}: must not contain {ch!r}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidInput(f"invalid {what} {_shown(value)}: not valid Unicode") from None
    if size > MAX_NAME_BYTES:
        raise InvalidInput(f"invalid {what} {_shown(value)}: {size} bytes long, at most "
                           f"{MAX_NAME_BYTES} fit in a file name")
    return value


def name_key(name: str) -> str:
    """The form under which two names are the same file on a case-insensitive or
    normalising filesystem (macOS, Windows): NFC, then casefold."""
    return unicodedata.normalize("NFC", name).casefold()


def check_text(value: object, what: str = "text") -> None:
    """Refuse text a node file or an archive frame cannot hold faithfully: a NUL byte or a
    lone surrogate, in a string or anywhere inside a JSON-like value."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise InvalidInput(f"invalid {what}: contains a NUL byte")
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidInput(f"invalid {what}: not valid Unicode (a lone surrogate)") \
                    from None
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)


def refuse_symlink(path: Path | str, what: str = "path") -> None:
    """Raise InvalidInput when ``path`` is a symlink: we never write through one."""
    if os.path.islink(path):
        raise InvalidInput(f"refusing to write through symlink {what} {path}")


_REAL: "WeakKeyDictionary[Any, dict[str, str]]" = WeakKeyDictionary()
_REAL_LOCK = threading.Lock()


def real_path_of(owner: Any, attr: str) -> str:
    """``os.path.realpath`` of ``owner.<attr>``, resolved once per owner object, for objects
    whose paths never change (a workspace's root and runtime dir): resolving costs a
    ``stat`` per path component, which every write and query would pay to find its shared
    catalog, index or stage. An owner no weak reference can name is resolved every time."""
    with _REAL_LOCK:
        try:
            known = _REAL.setdefault(owner, {})
        except TypeError:
            return os.path.realpath(getattr(owner, attr))
        if attr not in known:
            known[attr] = os.path.realpath(getattr(owner, attr))
        return known[attr]


def safe_join(root: Path, relpath: str, what: str = "path") -> Path:
    """Join ``relpath`` under ``root`` and refuse anything that would land outside it."""
    return Path(safe_path(root, relpath, what))


def safe_path(root: Path | str, relpath: str, what: str = "path") -> str:
    """:func:`safe_join` as a string: a ``Path`` interns each part of it in CPython 3.11,
    so a long write that joined each topic's name through one took a new slot of the
    interpreter's string table each time (see benchmarks/README, bench_write_all_rss)."""
    if not isinstance(relpath, str) or relpath == "" or "\x00" in relpath:
        raise InvalidInput(f"invalid {what} {relpath!r}")
    if os.path.isabs(relpath) or relpath.startswith("\\"):
        raise InvalidInput(f"invalid {what} {relpath!r}: must be relative")
    root_real = os.path.realpath(root)
    target = os.path.realpath(os.path.join(root_real, relpath))
    if target != root_real and not target.startswith(root_real + os.sep):
        raise InvalidInput(f"invalid {what} {relpath!r}: escapes {root}")
    return target


_CACHE = threading.local()


@contextlib.contextmanager
def cache_writes() -> Iterator[None]:
    """Inside: this thread's atomic writes and directory flushes skip fsync. For files that
    are only a cache of a durable store elsewhere (a database home's mirror directory, which
    a crash throws away): waiting for the disk there buys nothing."""
    outer = getattr(_CACHE, "on", False)
    _CACHE.on = True
    try:
        yield
    finally:
        _CACHE.on = outer


def _syncing() -> bool:
    return not getattr(_CACHE, "on", False)


def fsync_file(fd: int) -> None:
    """Flush an open file to disk (not inside :func:`cache_writes`)."""
    if _syncing():
        os.fsync(fd)


def fsync_dir(path: Path | str) -> None:
    """Flush a directory entry so a rename survives power loss (not inside
    :func:`cache_writes`)."""
    if not _syncing():
        return
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path | str, data: bytes, mode: int = 0o600, *,
                       durable: bool = True, tmp_dir: Path | None = None) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, then rename). The temp file goes
    in ``tmp_dir`` when given (it must be on the same filesystem), else next to ``path``.
    Works on the path as a string: a ``Path`` made here would intern each of its parts
    (pathlib does), and a write per session would churn CPython's interned-string table."""
    path = os.fspath(path)
    parent = os.path.dirname(path) or "."
    refuse_symlink(path)
    refuse_symlink(parent, "directory")
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=tmp_dir if tmp_dir is not None else parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if durable and _syncing():
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    if durable:
        fsync_dir(parent)


def atomic_write_text(path: Path | str, text: str, mode: int = 0o600, *, durable: bool = True,
                      tmp_dir: Path | None = None) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), mode, durable=durable, tmp_dir=tmp_dir)


def atomic_write_json(path: Path, obj: Any, *, indent: int | None = None, mode: int = 0o600,
                      durable: bool = True) -> None:
    if indent is None:
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    else:
        text = json.dumps(obj, ensure_ascii=False, indent=indent)
    atomic_write_text(path, text, mode, durable=durable)


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """``data`` parsed as one JSON object; anything else (not UTF-8, not JSON, not an object)
    is a CorruptFile naming ``what`` ("corrupt <what>: why")."""
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFile(f"corrupt {what}: {exc}") from None
    if not isinstance(obj, dict):
        raise CorruptFile(f"corrupt {what}: not a JSON object")
    return obj


def regular_files(root: Path, base: Path, suffix: str = "") -> list[str]:
    """Root-relative POSIX paths of the regular files under ``base`` ending in ``suffix``,
    sorted; symlinks (to files or directories) are never followed or listed."""
    out: list[str] = []
    if not base.is_dir() or base.is_symlink():
        return out
    for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
        dirnames[:] = [d for d in dirnames if not os.path.islink(os.path.join(dirpath, d))]
        for name in filenames:
            full = os.path.join(dirpath, name)
            if name.endswith(suffix) and not os.path.islink(full) and os.path.isfile(full):
                out.append(os.path.relpath(full, root).replace(os.sep, "/"))
    return sorted(out)


def open_lock_file(path: Path) -> int:
    """Open (creating) a lock file for ``flock``; a symlink or a non-file there is refused
    with one line naming the path (never followed, never a traceback)."""
    refuse_symlink(path.parent, "directory")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InvalidInput(f"refusing to lock through symlink {path}") from None
        if exc.errno in (errno.EISDIR, errno.ENXIO, errno.ENOTDIR):
            raise CorruptFile(f"lock file {path} is not a regular file; remove it") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise CorruptFile(f"lock file {path} is not a regular file; remove it")
    return fd


class FileLock:
    """An exclusive cross-process lock on a file (``flock``), with an optional timeout.

    ``timeout=None`` waits forever; on timeout raises :class:`ConcurrentUpdate` (retryable).
    Reentrant within one object: nested ``with`` blocks on the same instance are counted.
    The lock dies with the process, so a SIGKILL never leaves a stale lock behind.
    """

    def __init__(self, path: Path, timeout: float | None = None, what: str = "lock",
                 poll: float = 0.01):
        self.path = Path(path)
        self.timeout = timeout
        self.what = what
        self.poll = poll
        self._fd: int | None = None
        self._depth = 0

    def acquire(self) -> None:
        if self._fd is not None:
            self._depth += 1
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_lock_file(self.path)
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | (0 if deadline is None else fcntl.LOCK_NB))
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                        raise
                    if time.monotonic() >= deadline:  # type: ignore[operator]
                        raise ConcurrentUpdate(
                            f"{self.what} is busy ({self.path}); another writer holds it"
                        ) from None
                    time.sleep(self.poll)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        self._depth = 1

    @property
    def held(self) -> bool:
        """True while some ``acquire`` on this object is not yet released."""
        return self._fd is not None

    def release(self) -> None:
        if self._fd is None:
            return
        self._depth -= 1
        if self._depth > 0:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
