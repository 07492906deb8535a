"""The head-move log: every head move any process makes through the store, told to the others.

In-process subscribers hear a move through :meth:`SessionStore.subscribe`. Other processes (the
memory watcher) read this log instead of scanning every session, so memory is told when a
branch stops moving rather than polling for it.

Layout: ``<sessions>/.scriptorium/events/<first seq, 12 digits>.jsonl``, one JSON line per move,
``{"seq", "session_id", "old", "new", "at"}``, seq strictly increasing across segments.

- **Crash-safe.** An append is one ``write`` of whole lines to an ``O_APPEND`` file under
  ``append.lock`` (flock, dies with its process), then ``fdatasync``. A kill mid-write can
  leave a torn last line: readers skip a line that does not parse, and the next appender starts
  with a newline so the torn bytes never join a good line.
- **Bounded.** A segment holds :data:`SEGMENT_EVENTS` moves; the appender that opens a new
  segment deletes all but the newest :data:`KEEP_SEGMENTS`.
- **Woken, not ticking.** :meth:`LogReader.wait` blocks on an inotify watch of the directory
  (Linux), so a waiting reader costs nothing until a move is appended; elsewhere, or when inotify
  cannot be had, it wakes on a timer and :meth:`LogReader.poll` costs two ``stat`` calls.
- **Never the only record.** The log tells a reader *where to look*; what is pending is always
  computed from the sessions and their marks. A reader that was down longer than the log keeps
  (or finds a line lost) learns it (``complete`` is false) and makes one full poll.

The directory name ``.scriptorium`` holds no ``meta.json`` or ``history/``, so it is never
listed as a session, and the store refuses it as a session id.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ..fsutil import FileLock

EVENTS_DIR = Path(".scriptorium") / "events"
RESERVED_SESSION_ID = ".scriptorium"
SEGMENT_EVENTS = 10_000
KEEP_SEGMENTS = 4
_TAIL_BYTES = 4096
_SUFFIX = ".jsonl"


@dataclass(frozen=True)
class HeadMove:
    """One announced move: the head of ``session_id`` went from ``old`` to ``new`` at ``at``."""

    seq: int
    session_id: str
    old: str | None
    new: str | None
    at: float


def _parse(line: bytes) -> HeadMove | None:
    try:
        row = json.loads(line)
        move = HeadMove(int(row["seq"]), str(row["session_id"]), row.get("old"),
                        row.get("new"), float(row["at"]))
    except (ValueError, KeyError, TypeError):
        return None  # a torn or foreign line: skipped, never fatal
    if not (move.old is None or isinstance(move.old, str)) or \
            not (move.new is None or isinstance(move.new, str)):
        return None
    return move


class HeadMoveLog:
    """The log under ``<sessions root>/.scriptorium/events``."""

    def __init__(self, sessions_root: Path):
        self.dir = Path(sessions_root) / EVENTS_DIR
        self._lock = FileLock(self.dir / "append.lock", timeout=None, what="head-move log")

    # -- segments ----------------------------------------------------------------------------

    def segments(self) -> list[tuple[int, Path]]:
        """(first seq, path) of every segment, oldest first."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        out = []
        for name in names:
            stem = name[: -len(_SUFFIX)]
            if name.endswith(_SUFFIX) and stem.isdigit():
                path = self.dir / name
                if not path.is_symlink():
                    out.append((int(stem), path))
        return sorted(out)

    @staticmethod
    def _last_seq(first: int, path: Path) -> tuple[int, bool]:
        """The newest seq in a segment (``first - 1`` when empty) and whether the file ends
        mid-line (a torn write)."""
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - _TAIL_BYTES))
            tail = fh.read()
        torn = bool(tail) and not tail.endswith(b"\n")
        for line in reversed(tail.split(b"\n")):
            move = _parse(line) if line else None
            if move is not None:
                return move.seq, torn
        if size > _TAIL_BYTES:  # no whole line in the tail: read the file once
            for line in reversed(path.read_bytes().split(b"\n")):
                move = _parse(line) if line else None
                if move is not None:
                    return move.seq, torn
        return first - 1, torn

    def last_seq(self) -> int:
        segs = self.segments()
        return self._last_seq(*segs[-1])[0] if segs else 0

    # -- writing -----------------------------------------------------------------------------

    def append(self, moves: Iterable[tuple[str, str | None, str | None]], at: float) -> None:
        """Announce ``(session, old head, new head)`` moves, in order."""
        moves = list(moves)
        if not moves:
            return
        if self.dir.is_symlink():
            from ..errors import InvalidInput

            raise InvalidInput(f"refusing to write through a symlink: {self.dir}")
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._lock:
            segs = self.segments()
            if segs:
                first, path = segs[-1]
                last, torn = self._last_seq(first, path)
            else:
                first, path, last, torn = 1, self.dir / f"{1:012d}{_SUFFIX}", 0, False
            if last - first + 1 >= SEGMENT_EVENTS:
                first, path, torn = last + 1, self.dir / f"{last + 1:012d}{_SUFFIX}", False
                for _, old in segs[: max(0, len(segs) + 1 - KEEP_SEGMENTS)]:
                    old.unlink(missing_ok=True)
            lines = [json.dumps({"seq": last + i, "session_id": sid, "old": old, "new": new,
                                 "at": at}, separators=(",", ":"))
                     for i, (sid, old, new) in enumerate(moves, start=1)]
            data = ("\n" if torn else "") + "\n".join(lines) + "\n"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, data.encode("utf-8"))
                os.fdatasync(fd)
            finally:
                os.close(fd)

    # -- reading -----------------------------------------------------------------------------

    def reader(self, after: int = 0) -> "LogReader":
        return LogReader(self, after)

    def waker(self) -> "Waker":
        """What a follower blocks on between reads (inotify on this log's directory)."""
        return Waker(self)


class LogReader:
    """Follows the log from seq ``after``: :meth:`poll` returns the moves appended since, each
    once, reading only the bytes added (one ``stat`` when nothing changed)."""

    def __init__(self, log: HeadMoveLog, after: int = 0):
        self.log = log
        self.seq = after
        self.complete = True  # false once moves after ``seq`` were rotated away unread
        self._path: Path | None = None
        self._offset = 0
        self._listing = -1

    def poll(self) -> list[HeadMove]:
        if self._path is not None and self._unchanged():
            return []
        return self._read()

    def _unchanged(self) -> bool:
        """Two ``stat`` calls: the segment being read has not grown and no segment was added
        or removed (which changes the directory's mtime)."""
        try:
            size = self._path.stat().st_size if self._path is not None else -1
            listing = self.log.dir.stat().st_mtime_ns
        except FileNotFoundError:
            return False
        return size == self._offset and listing == self._listing

    def _read(self) -> list[HeadMove]:
        try:
            self._listing = self.log.dir.stat().st_mtime_ns  # before listing: never miss one
        except FileNotFoundError:
            return []
        segs = self.log.segments()
        if not segs:
            return []
        if segs[0][0] > self.seq + 1:
            self.complete = False  # the moves in between were rotated away
        out: list[HeadMove] = []
        for i, (first, path) in enumerate(segs):
            upto = segs[i + 1][0] if i + 1 < len(segs) else None
            if upto is not None and upto <= self.seq + 1:
                continue  # wholly read already
            start = self._offset if path == self._path else 0
            try:
                with path.open("rb") as fh:
                    fh.seek(start)
                    data = fh.read()
            except FileNotFoundError:
                self.complete = False
                continue
            end = data.rfind(b"\n") + 1  # a line still being written is read next time
            for line in data[:end].split(b"\n"):
                move = _parse(line) if line else None
                if move is not None and move.seq > self.seq:
                    if move.seq != self.seq + 1 and self.seq:
                        self.complete = False  # a lost line: the caller polls once
                    out.append(move)
                    self.seq = move.seq
            self._path, self._offset = path, start + end
        return out


# -- waking up when the log changes (inotify on Linux, a timer elsewhere) ---------------------------

_IN_MODIFY, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x2, 0x80, 0x100, 0x200
_IN_NONBLOCK, _IN_CLOEXEC = 0o4000, 0o2000000


def _inotify(directory: Path) -> int | None:
    """An inotify descriptor watching ``directory`` for appends and new segments, or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            return None
        mask = _IN_MODIFY | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
        if libc.inotify_add_watch(fd, os.fsencode(directory), mask) < 0:
            os.close(fd)
            return None
        return int(fd)
    except (OSError, AttributeError):
        return None


class Waker:
    """Blocks until the log directory changes, a wake descriptor is readable, or a timeout."""

    def __init__(self, log: HeadMoveLog):
        self.log = log
        self._fd: int | None = None
        self._tried = False

    @property
    def notified(self) -> bool:
        """True when waits end on the OS's notification (else only on their timeout)."""
        self.open()
        return self._fd is not None

    def open(self) -> None:
        """Start watching (once): a change after this ends the next wait."""
        if self._tried:
            return
        self._tried = True
        if self.log.dir.is_symlink():
            return
        try:
            self.log.dir.mkdir(parents=True, exist_ok=True)
        except OSError:
            return
        self._fd = _inotify(self.log.dir)

    def wait(self, timeout: float, wake_fds: Sequence[int] = ()) -> None:
        self.open()
        fds = [*wake_fds, *([self._fd] if self._fd is not None else [])]
        if not fds:
            select.select([], [], [], max(0.0, timeout))
            return
        ready, _, _ = select.select(fds, [], [], max(0.0, timeout))
        for fd in ready:
            try:
                os.read(fd, 65536)  # drain: the next wait blocks again
            except (BlockingIOError, OSError):
                pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
