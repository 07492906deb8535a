"""A transaction's stage: a plain copy of ``topics/`` that is not copied again every time.

A writer (ours or a third party's) edits ``stage/topics/**.md`` as ordinary files: it may
read any of them, rewrite one in place, replace it by rename, create or delete files. Copying
the whole tree per transaction made a write cost as much as all of memory, and hard links are
not safe (an in-place edit would change the committed file too).

So a process keeps its last stage and reuses it: when a transaction ends, the stage is brought
back to the committed state (only the files the writer changed or the install wrote are
rewritten) and parked; the next transaction takes it, re-copies only the committed files whose
content moved since, and hands it to the writer. Which files moved the topic catalog says
(``changed_since`` the catalog state the stage was last synced to, with their hashes), so
taking a parked stage looks at those files only, not at all of memory. Nothing else writes a
parked stage: it was settled after a full look at what the writer did, and its directory is
renamed between transactions, so a path a finished writer kept no longer leads into it.

What the writer changed is found without reading every file: each staged file is written by
us with its mtime set to a fixed sentinel, and its fingerprint (mtime, ctime, size, inode) is
recorded. Any write through the filesystem sets mtime to the current time and moves ctime; a
rename brings a new inode. A file whose fingerprint differs, or that we staged less than one
timestamp tick ago (a same-tick edit that also restored the mtime would keep it), is read
and compared by hash.

A stage in use is a ``tx-*`` directory (the install journal may name it); a parked one is
renamed ``stage-<pid>``. Both hold an ``owner.json`` naming this process, so a crash leaves
nothing that the cleanup of abandoned stages does not remove.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterable

from ..fsutil import atomic_write_json, real_path_of
from .catalog import TopicCatalog
from .fingerprints import RACY_FINE_NS, Fingerprint, fingerprint, sha256
from .walk import lstat_rel, read_rel

if TYPE_CHECKING:  # pragma: no cover
    from .directory import WorkspaceDir

# The mtime every staged file is given: a writer's edit can only move it to "now".
SENTINEL_NS = 1_000_000_000
PARKED_PREFIX = "stage-"


class StageError(Exception):
    """Something other than a topic file was written into the stage (path, reason)."""

    def __init__(self, rel: str, what: str):
        super().__init__(f"{rel}: {what}")
        self.rel = rel
        self.what = what


@dataclass
class Stage:
    """One stage directory and what we last put in it: rel -> (fingerprint, sha)."""

    dir: Path
    files: dict[str, tuple[Fingerprint, str]] = field(default_factory=dict)
    copied: int = 0  # files written into the stage by the last checkout (tests count them)
    # The catalog state (TopicCatalog.seq) the staged files were last brought to; None: not
    # known (a new stage), so the next sync compares every file.
    synced: int | None = None

    @property
    def root(self) -> Path:
        return self.dir / "stage"

    # -- placing files --------------------------------------------------------------------

    def put(self, rel: str, data: bytes) -> None:
        # a string path: a Path would intern the topic's name again (fsutil.safe_path)
        path = os.path.join(self.root, rel)
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        try:
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode) or stat.S_ISDIR(st.st_mode):
                _remove(Path(path))
        except OSError:
            pass
        with open(path, "wb") as fh:
            fh.write(data)
        os.chmod(path, 0o600)
        os.utime(path, ns=(SENTINEL_NS, SENTINEL_NS))
        self.files[rel] = (fingerprint(os.lstat(path)), sha256(data))
        self.copied += 1

    def drop(self, rel: str) -> None:
        self.files.pop(rel, None)
        path = self.root / rel
        try:
            _remove(path)
        except FileNotFoundError:
            pass
        topics = self.root / "topics"
        parent = path.parent
        while parent != topics and topics in parent.parents:
            try:
                parent.rmdir()
            except OSError:
                break
            parent = parent.parent

    # -- what the writer did --------------------------------------------------------------

    def changes(self, only: Iterable[str] | None = None) -> dict[str, bytes | None]:
        """Files whose content differs from what we staged: new bytes, or None if deleted.
        Raises StageError for anything but regular files under ``topics/``. ``only``: the
        paths a writer declared are all it wrote; just those are looked at."""
        topics = self.root / "topics"
        try:
            st = os.lstat(topics)
        except OSError:
            st = None
        if st is None or not stat.S_ISDIR(st.st_mode):
            raise StageError("topics", "the stage's topics/ directory is gone; nothing installed")
        for name in os.listdir(self.root):
            if name != "topics":
                raise StageError(name, "only topics/ may be written (sources/ is append-only "
                                       "and written by the runtime)")
        if only is not None:
            return self._declared(only)
        seen: set[str] = set()
        out: dict[str, bytes | None] = {}
        now = time.time_ns()
        stack = [(str(topics), "topics")]
        while stack:
            directory, rel_dir = stack.pop()
            for entry in os.scandir(directory):
                rel = f"{rel_dir}/{entry.name}"
                if entry.is_symlink():
                    raise StageError(rel, "symlinks may not be written into topics/")
                if entry.is_dir(follow_symlinks=False):
                    stack.append((entry.path, rel))
                    continue
                if not entry.is_file(follow_symlinks=False):
                    raise StageError(rel, "not a regular file")
                seen.add(rel)
                fp = fingerprint(entry.stat(follow_symlinks=False))
                known = self.files.get(rel)
                if known is not None and known[0] == fp and fp[1] + RACY_FINE_NS < now:
                    continue  # (a file we staged within one ctime tick is checked by content)
                with open(entry.path, "rb") as fh:
                    data = fh.read()
                if known is not None and known[1] == sha256(data):
                    continue
                out[rel] = data
        for rel in self.files:
            if rel not in seen:
                out[rel] = None
        return dict(sorted(out.items()))

    def _declared(self, only: Iterable[str]) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        for rel in sorted(set(only)):
            if not rel.startswith("topics/"):
                raise StageError(rel, "only topics/ may be written")
            try:
                st = lstat_rel(self.root, rel)
            except FileNotFoundError:
                if rel in self.files:
                    out[rel] = None
                continue
            if not stat.S_ISREG(st.st_mode) or self._through_symlink(rel):
                raise StageError(rel, "not a regular file reached without a symlink")
            data = read_rel(self.root, rel)
            known = self.files.get(rel)
            if known is None or known[1] != sha256(data):
                out[rel] = data
        return out

    def _through_symlink(self, rel: str) -> bool:
        """Whether a directory on the way from the stage root to ``rel`` is a symlink."""
        parts = [p for p in rel.split("/")[:-1] if p not in ("", ".")]
        return any(os.path.islink(os.path.join(self.root, *parts[:n]))
                   for n in range(1, len(parts) + 1))

    def settle(self, final: dict[str, bytes | None]) -> None:
        """Make the staged files in ``final`` hold these bytes (None: absent)."""
        for rel, data in final.items():
            if data is None:
                self.drop(rel)
            else:
                self.put(rel, data)

    def sync(self, workspace: "WorkspaceDir", catalog: TopicCatalog) -> None:
        """Bring the stage to the committed state the catalog describes, copying only what
        differs: the files the catalog saw change since the last sync, or (a stage whose
        state is not known) every file that differs, strays in the stage included."""
        self.copied = 0
        seq = catalog.seq  # first: a change logged meanwhile is looked at again next time
        changed = catalog.changed_since(self.synced) if self.synced is not None else None
        self.synced = None
        if changed is None:
            self._sync_all(workspace, catalog)
        else:
            for rel in sorted(changed):
                sha = catalog.sha_of(rel)
                known = self.files.get(rel)
                if sha is None:
                    if known is not None:
                        self.drop(rel)
                elif known is None or known[1] != sha:
                    self._copy(workspace, rel)
        self.synced = seq

    def _copy(self, workspace: "WorkspaceDir", rel: str) -> None:
        try:
            data = (workspace.root / rel).read_bytes()
        except OSError:
            return
        self.put(rel, data)

    def _sync_all(self, workspace: "WorkspaceDir", catalog: TopicCatalog) -> None:
        want = catalog.shas()
        try:
            drift = self.changes()
        except StageError:
            drift = None
        if drift is None:  # something odd in the stage: start it again
            shutil.rmtree(self.root, ignore_errors=True)
            self.files = {}
            (self.root / "topics").mkdir(mode=0o700, parents=True)
        else:
            for rel in drift:
                self.files.pop(rel, None)
                if rel not in want:
                    self.drop(rel)
        for rel in [r for r in self.files if r not in want]:
            self.drop(rel)
        for rel, sha in want.items():
            known = self.files.get(rel)
            if known is not None and known[1] == sha:
                continue
            self._copy(workspace, rel)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


# -- the per-process pool -------------------------------------------------------------------------

_POOL: dict[str, Stage] = {}
_POOL_LOCK = threading.Lock()


def _key(workspace: "WorkspaceDir") -> str:
    return f"{os.getpid()}:{real_path_of(workspace, 'runtime_dir')}"


def checkout(workspace: "WorkspaceDir", catalog: TopicCatalog) -> Stage:
    """A stage holding the committed topics (caller holds the write lock): the parked one
    brought up to date, else a new one filled with a full copy."""
    with _POOL_LOCK:
        stage = _POOL.pop(_key(workspace), None)
    name = workspace.runtime_dir / f"tx-{uuid.uuid4().hex[:12]}"
    if stage is not None:
        try:
            if not _owned(stage):
                raise OSError("not ours")
            os.rename(stage.dir, name)
            stage.dir = name
        except OSError:
            stage = None
    if stage is None:
        stage = Stage(name)
        (stage.root / "topics").mkdir(mode=0o700, parents=True)
        atomic_write_json(stage.dir / "owner.json", {"pid": os.getpid(), "tx": stage.dir.name})
    stage.sync(workspace, catalog)
    return stage


def park(workspace: "WorkspaceDir", stage: Stage) -> bool:
    """Keep ``stage`` for the next transaction of this process; False if one is parked
    already (the caller removes this one)."""
    with _POOL_LOCK:
        key = _key(workspace)
        if key in _POOL:
            return False
        parked = workspace.runtime_dir / f"{PARKED_PREFIX}{os.getpid()}"
        try:
            os.rename(stage.dir, parked)
        except OSError:
            return False
        stage.dir = parked
        _POOL[key] = stage
        return True


def _owned(stage: Stage) -> bool:
    try:
        owner = json.loads((stage.dir / "owner.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(owner, dict) and owner.get("pid") == os.getpid()
