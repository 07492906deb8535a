"""Import bookkeeping kept inside the home: what was read from each source file, and each
imported session's graph state.

``home/imports/<kind>.json`` maps a source file's absolute path to its size, mtime, inode,
the byte offset and line count read so far, a hash of its first bytes and the session it
feeds. A re-run stats each file and skips it when size and mtime are unchanged, so a run
with nothing new opens no source file and no session. A file that shrank, or whose first
bytes changed, was rewritten in place and is read again from the start.

Every write is atomic (temp file, fsync, rename) and happens after the nodes it describes
are durable, so a crash costs a re-read that finds every node already stored. Nothing is
written outside ``home/imports``, and a symlink there is refused rather than followed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..errors import CorruptFile, InvalidInput
from ..fsutil import atomic_write_json, check_name

HEAD_BYTES = 4096
VERSION = 1


@dataclass
class FileState:
    """What an earlier run read of one source file."""

    size: int = 0
    mtime_ns: int = 0
    inode: int = 0
    offset: int = 0
    lines: int = 0
    head: str = ""  # sha256 of the first min(offset, HEAD_BYTES) bytes
    session_id: str = ""
    parse: dict = field(default_factory=dict)  # the format parser's state at ``offset``


def head_hash(path: Path, upto: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read(min(upto, HEAD_BYTES))).hexdigest()


def _safe_dir(path: Path) -> Path:
    if path.is_symlink():
        raise InvalidInput(f"refusing to write import bookkeeping through a symlink: {path}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _load_json(path: Path) -> dict:
    if path.is_symlink():
        raise InvalidInput(f"refusing to read import bookkeeping through a symlink: {path}")
    try:
        data = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise CorruptFile(f"corrupt import bookkeeping {path}: {exc}") from None
    if not isinstance(data, dict):
        raise CorruptFile(f"corrupt import bookkeeping {path}: not a JSON object")
    return data


class Ledger:
    """The per-file bookkeeping of one source format."""

    def __init__(self, home: Path, kind: str):
        self.root = Path(home) / "imports"
        self.path = self.root / f"{kind}.json"
        for where in (self.root, self.root / "state"):
            if where.is_symlink():
                raise InvalidInput(f"refusing to use import bookkeeping through a symlink: "
                                   f"{where}")
        raw = _load_json(self.path)
        files = raw.get("files") if isinstance(raw.get("files"), dict) else {}
        self.files: dict[str, FileState] = {}
        for key, row in files.items():
            if isinstance(row, dict):
                known = {k: v for k, v in row.items() if k in FileState.__dataclass_fields__}
                self.files[key] = FileState(**known)

    def get(self, path: Path) -> FileState | None:
        return self.files.get(str(path))

    def unchanged(self, path: Path, st: os.stat_result) -> bool:
        """True when size and mtime match the last run: nothing to read."""
        old = self.files.get(str(path))
        return (old is not None and old.size == st.st_size and old.mtime_ns == st.st_mtime_ns
                and old.inode == st.st_ino)

    def put(self, path: Path, state: FileState) -> None:
        self.files[str(path)] = state
        self.save()

    def save(self) -> None:
        _safe_dir(self.root)
        atomic_write_json(self.path, {"version": VERSION, "files": {
            k: asdict(v) for k, v in sorted(self.files.items())}})

    # --- per-session graph state ----------------------------------------------------------
    def state_path(self, sid: str) -> Path:
        return self.root / "state" / f"{check_name(sid, 'session id')}.json"

    def load_state(self, sid: str) -> dict:
        return _load_json(self.state_path(sid))

    def save_state(self, sid: str, state: dict) -> None:
        path = self.state_path(sid)
        _safe_dir(self.root)
        _safe_dir(path.parent)
        atomic_write_json(path, state)
