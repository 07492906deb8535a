"""The memory workspace directory: layout, identity, the write lock, runtime state,
revision, topics and the install hooks. :class:`~.workspace.Workspace` adds opening
(crash recovery) and transactions on top; modules below the transaction use this.

Layout (memory reference §1)::

    topics/**.md          the memory itself (the only files writers edit)
    sources/              append-only evidence (scriptorium.memory.sources)
    .scriptorium/         runtime dir (legacy name .nativemem/ kept when it exists):
        workspace-id      "w-" + 8 hex, the value of every mark this workspace makes
        write.lock        flock target serialising every writer, across processes
        runtime.json      counters (tolerant load: a broken file never stops writing)
        install.json      the install journal of an interrupted transaction (if any)
        history-commits   commits since the last packing and the last full staging
        generation        a counter every install moves: readers (search) learn that memory
                          changed without a stat per topic file
        tx-<id>/          a transaction's stage, new files and backups
    .git/                 private history: one commit per installed transaction
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import InvalidInput, ScriptoriumError
from ..fsutil import atomic_write_bytes, atomic_write_text, refuse_symlink, regular_files, safe_join
from ..gitrepo import GitDamaged, GitRepo, PackPolicy
from .failures import BlockedBranches
from .runtime_state import GENERATION_FILE, RuntimeState, parse_runtime, read_generation, \
    with_created
from .sources import SourceArchive
from .topics import Block, TopicDoc, parse_topic_bytes
from .tx_result import TransactionResult
from .write_lock import process_lock

log = logging.getLogger(__name__)

RUNTIME_NAME = ".scriptorium"
LEGACY_RUNTIME_NAME = ".nativemem"
TOPICS_DIR = "topics"
SOURCES_DIR = "sources"
PACK_LOOSE_BYTES = 128 * 1024  # loose objects that make a commit pack the history
PACK_EVERY = 20   # ... or commits since the last packing (see _pack_if_due)
FULL_STAGE_EVERY = 20  # commits between two stagings of all of topics/ and sources/
WORKSPACE_ID_RE = re.compile(r"w-[0-9a-f]{8}")
GIT_EXCLUDE = ["/.scriptorium*", "/.nativemem*"]
# Opening may have to wait for a crashed install's recovery or another opener's git init.
OPEN_LOCK_TIMEOUT = 10.0
IDENTITY_LOCK_TIMEOUT = 10.0


# -- the workspace ------------------------------------------------------------------------------


class WorkspaceDir:
    """One memory workspace directory. Cheap to construct; every read goes to disk."""

    #: where memory lives: "directory" here; a subclass that keeps the files as a mirror of
    #: a database says which (readers that need an engine of their own, search, look at it)
    engine = "directory"

    def __init__(self, root: Path):
        self.root = Path(root)
        legacy = self.root / LEGACY_RUNTIME_NAME
        self.runtime_name = LEGACY_RUNTIME_NAME if legacy.is_dir() else RUNTIME_NAME
        self.runtime_dir = self.root / self.runtime_name
        self.topics_dir = self.root / TOPICS_DIR
        self.sources_dir = self.root / SOURCES_DIR
        self.git = GitRepo(self.root, name="scriptorium memory", email="memory@scriptorium.local")
        self.sources = SourceArchive(self.root, tmp_dir=self.runtime_dir)
        self._workspace_id: str | None = None
        self._history_synced = False  # has this object's last commit staged everything?
        self._install_hooks: list[Callable[["WorkspaceDir", "TransactionResult"], None]] = []

    # -- opening ----------------------------------------------------------------------------

    def git_needs_init(self) -> bool:
        """Is the history missing, or a half-made ``.git`` holding nothing to keep? (One that
        holds history is left alone: every install then warns, see :meth:`ensure_git`.)"""
        return self.git.repairable()

    def ensure_git(self) -> None:
        """Start (or re-create, when it holds no history) the workspace's git history (caller
        holds the lock). A damaged history that holds commits is never discarded and never
        stops memory: installs stand and each reports the failed commit as a warning."""
        if self.git_needs_init():
            try:
                self.git.ensure(exclude=GIT_EXCLUDE,
                                initial_message="memory: initialize history")
            except GitDamaged:  # it changed under us; the install's commit reports it
                pass

    def check_layout(self) -> None:
        """Refuse a workspace whose ``topics/``, ``sources/`` or runtime directory is a
        symlink: everything we write must stay inside the workspace."""
        for path in (self.topics_dir, self.sources_dir, self.runtime_dir):
            refuse_symlink(path, "workspace directory")

    def _has_stages(self) -> bool:
        try:
            return any(name.startswith("tx-") for name in os.listdir(self.runtime_dir))
        except OSError:
            return False

    @property
    def journal_path(self) -> Path:
        return self.runtime_dir / "install.json"

    # -- identity -----------------------------------------------------------------------------

    @property
    def workspace_id(self) -> str:
        """``w-`` + 8 hex, created on first use; one durable value however many threads and
        processes ask at once the first time (they serialise on the write lock)."""
        if self._workspace_id is None:
            found = self._read_workspace_id()
            if found is None:
                with self.lock(timeout=IDENTITY_LOCK_TIMEOUT):
                    found = self._read_workspace_id()
                    if found is None:
                        found = "w-" + uuid.uuid4().hex[:8]
                        self.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
                        atomic_write_text(self.runtime_dir / "workspace-id", found + "\n")
            self._workspace_id = found
        return self._workspace_id

    def _read_workspace_id(self) -> str | None:
        try:
            text = (self.runtime_dir / "workspace-id").read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        return text if WORKSPACE_ID_RE.fullmatch(text) else None

    # -- the write lock -------------------------------------------------------------------------

    @contextmanager
    def lock(self, timeout: float | None = 1.0) -> Iterator[None]:
        """Hold ``<runtime>/write.lock``: exclusive across processes and threads, re-entrant in
        the thread that holds it. Busy after ``timeout`` ⇒ ConcurrentUpdate (retryable)."""
        self.check_layout()
        self.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = process_lock(self.runtime_dir / "write.lock")
        lock.acquire(timeout)
        try:
            yield
        finally:
            lock.release()

    @property
    def locked_here(self) -> bool:
        """True when the calling thread holds the write lock."""
        return process_lock(self.runtime_dir / "write.lock").held_here

    def lock_hold(self) -> int | None:
        """Which unbroken hold of the write lock the calling thread is in (None: it holds
        none). Equal values at two moments mean the lock was never released in between, so
        no other writer ran."""
        lock = process_lock(self.runtime_dir / "write.lock")
        return lock.holds if lock.held_here else None

    # -- runtime.json ---------------------------------------------------------------------------

    @property
    def runtime_path(self) -> Path:
        return self.runtime_dir / "runtime.json"

    def runtime_bytes(self) -> bytes | None:
        """``runtime.json`` as it is on disk (None: missing or unreadable)."""
        try:
            return self.runtime_path.read_bytes()
        except OSError:
            return None

    def load_runtime(self) -> RuntimeState:
        """Missing, unreadable, not JSON or not an object ⇒ defaults (never raises: a raising
        load would stop this workspace writing forever)."""
        return parse_runtime(self.runtime_bytes())

    def runtime_with_created(self, created: Sequence[str]) -> bytes:
        """The ``runtime.json`` an install creating ``created`` writes: those blocks ranked
        after the rest, spliced into the file's bytes (cost follows ``created``)."""
        return with_created(self.runtime_bytes(), created)

    def save_runtime(self, state: RuntimeState) -> None:
        self.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic_write_text(self.runtime_path, state.dumps())

    # -- generation ----------------------------------------------------------------------------

    @property
    def generation_path(self) -> Path:
        return self.runtime_dir / GENERATION_FILE

    def generation(self) -> int | None:
        return read_generation(self.runtime_dir)

    def bump_generation(self) -> int:
        """Move the install counter (caller holds the write lock). A hint, not a record: a
        crash before it moves is caught by the readers' periodic full check."""
        value = (self.generation() or 0) + 1
        atomic_write_text(self.generation_path, f"{value}\n", durable=False)
        return value

    # -- history ---------------------------------------------------------------------------------

    def commit_history(self, message: str, changed: Sequence[str]) -> str | None:
        """The git commit of one install (caller holds the lock); None when nothing changed.

        It stages by name the topic files the install ``changed`` and the archive files this
        object wrote since its last commit, so git neither walks nor stats all of memory.
        Everything under ``topics/`` and ``sources/`` (``add -A``: a hand edit, evidence
        another process archived) is staged by this object's first commit, by every
        ``FULL_STAGE_EVERY``-th commit and by the commit after a failed one. The commit
        stands even when packing it fails (see :meth:`_pack_if_due`)."""
        since_full = self._history_count()
        full = not self._history_synced or since_full + 1 >= FULL_STAGE_EVERY
        self._history_synced = False
        if full:
            sha = self.git.commit_all(message, paths=["topics", "sources"])
        else:
            sha = self.git.commit_paths(message, sorted({*changed, *self.sources.written}))
        self.sources.written.clear()
        self._history_synced = True
        if sha:
            self._pack_if_due()
            atomic_write_text(self.runtime_dir / "history-commits",
                              f"{0 if full else since_full + 1}\n", durable=False)
        return sha

    def _history_count(self) -> int:
        """Commits since the last full staging (the last number of ``history-commits``:
        an older version wrote the commits since packing before it, now counted in .git)."""
        try:
            text = (self.runtime_dir / "history-commits").read_text(encoding="ascii").split()
            return int(text[-1])
        except (OSError, ValueError, IndexError):
            return 0

    def _pack_if_due(self) -> None:
        """Keep the git history about as big as the text it holds (caller holds the lock),
        by the packing policy session histories share (:meth:`GitRepo.pack_if_due`).

        Git stores each commit's changed files whole (compressed) until they are packed as
        deltas: a topic or an archive file that grows by a batch per write, and the tree of
        the flat ``sources/<provider>/_v2/`` directory (one entry per session, a fixed
        layout), would each cost their whole size per commit. So the loose objects are
        packed, and packs merged geometrically (see ``GitRepo.repack``), once they hold
        ``PACK_LOOSE_BYTES`` (a batch of a long session into a big archive: every commit or
        two) or ``PACK_EVERY`` commits after the last packing (small writes: a packing, a
        git run of tens of ms, is paid for many of them). A pack holds the first version of
        each of its objects whole; the merges turn the versions in recent packs into
        deltas. A failed packing is logged; the commit stands and the next one packs."""
        try:
            self.git.pack_if_due(PackPolicy(every=PACK_EVERY, loose_bytes=PACK_LOOSE_BYTES))
        except (ScriptoriumError, OSError) as exc:
            log.warning("memory history committed but not packed (%s); the next commit "
                        "packs it", exc)

    # -- revision -------------------------------------------------------------------------------

    def is_internal(self, rel: str) -> bool:
        """Runtime paths hidden from listings and from the revision (runtime.json aside)."""
        first = rel.split("/", 1)[0]
        if first == ".git":
            return True
        for name in (RUNTIME_NAME, LEGACY_RUNTIME_NAME):
            if first == name or first.startswith(name + "-"):
                return True
        return False

    def revision_files(self) -> list[str]:
        """Workspace-relative paths the revision covers, sorted."""
        out: list[str] = []
        if not self.root.is_dir():
            return out
        for dirpath, dirnames, filenames in os.walk(self.root, followlinks=False):
            rel_dir = os.path.relpath(dirpath, self.root)
            rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/") + "/"
            dirnames[:] = sorted(d for d in dirnames if not self.is_internal(rel_dir + d)
                                 and not os.path.islink(os.path.join(dirpath, d)))
            for name in filenames:
                rel = rel_dir + name
                if self.is_internal(rel) or os.path.islink(os.path.join(dirpath, name)):
                    continue
                out.append(rel)
        runtime_json = f"{self.runtime_name}/runtime.json"
        path = self.root / runtime_json
        if path.is_file() and not path.is_symlink():
            out.append(runtime_json)
        return sorted(out)

    def revision(self) -> str:
        """First 32 hex of SHA-256 over the sorted files (path NUL bytes NUL), internal paths
        excluded except runtime.json. Equal revisions mean nobody changed memory."""
        digest = hashlib.sha256()
        for rel in self.revision_files():
            try:
                data = (self.root / rel).read_bytes()
            except OSError:
                continue  # vanished while walking; a later re-check sees the difference
            digest.update(os.fsencode(rel) + b"\0" + data + b"\0")
        return digest.hexdigest()[:32]

    # -- topics -----------------------------------------------------------------------------------

    def topic_paths(self) -> list[str]:
        """Workspace-relative paths of every regular ``topics/**.md`` (no symlinks), sorted."""
        return regular_files(self.root, self.topics_dir, ".md")

    def read_topic(self, rel: str, *, strict: bool = True) -> TopicDoc:
        return parse_topic_bytes((self.root / rel).read_bytes(), rel, strict=strict)

    def topic_docs(self, *, strict: bool = True) -> list[TopicDoc]:
        """Every topic file parsed (strict: the first broken rule raises TopicFormatError)."""
        return [self.read_topic(rel, strict=strict) for rel in self.topic_paths()]

    def find_block(self, block_id: str) -> tuple[TopicDoc, Block] | None:
        """The block whose id or alias is ``block_id`` (files parsed leniently, so one broken
        file does not hide the others)."""
        for doc in self.topic_docs(strict=False):
            block = doc.block(block_id)
            if block is not None:
                return doc, block
        return None

    # -- seams a database-backed workspace overrides ------------------------------------------

    def publish(self, writes: dict[str, bytes | None], message: str, created: list[str],
                removed: list[str], base: Any) -> str | None:
        """Make an install durable somewhere besides these files, before they move (caller
        holds the lock; ``base``: the :meth:`snapshot` the transaction began from). Here the
        files are memory itself, so there is nothing to do (None); a workspace mirroring a
        database commits ``writes`` there and returns its label."""
        return None

    @contextmanager
    def step_lock(self, session_id: str, timeout: float | None = 1.0) -> Iterator[None]:
        """What one write step of ``session_id`` holds from archive to mark. Here: the whole
        workspace (one writer at a time); a database home lets writers of different
        sessions run at once and checks each install against what it began from."""
        with self.lock(timeout):
            yield

    @property
    def location(self) -> str:
        """Where this memory lives, for messages."""
        return str(self.root)

    def refresh(self, *, full: bool = False) -> None:
        """Bring these files up to what memory holds. A directory is memory itself, so
        there is nothing to do; a database's mirror pulls what other writers installed."""

    def blocked_branches(self) -> BlockedBranches:
        """Where the last non-retryable failure per branch is kept (the runtime dir)."""
        return BlockedBranches(self.runtime_dir)

    # -- copies between homes ----------------------------------------------------------------

    def adopt_workspace_id(self, workspace_id: str) -> None:
        """Take ``workspace_id`` as this workspace's identity (a home copy: the marks it
        brings name it). Refused when this workspace already has another one."""
        if not WORKSPACE_ID_RE.fullmatch(workspace_id):
            raise InvalidInput(f"not a workspace id: {workspace_id!r}")
        with self.lock(timeout=IDENTITY_LOCK_TIMEOUT):
            found = self._read_workspace_id()
            if found is None:
                atomic_write_text(self.runtime_dir / "workspace-id", workspace_id + "\n")
            elif found != workspace_id:
                raise InvalidInput(f"{self.location} is the memory of workspace {found}, not "
                                   f"{workspace_id}: copy into an empty home")
            self._workspace_id = workspace_id

    def history(self) -> list[tuple[str, dict[str, bytes | None]]]:
        """Every install that changed a topic, oldest first: ``(message, {path: bytes or
        None when deleted})``."""
        return [(message, files) for _, message, files in self.git.revisions([TOPICS_DIR])
                if files]

    def replay(self, message: str, files: dict[str, bytes | None]) -> None:
        """Write ``files`` (memory paths; None: delete) as one install of this history
        (caller holds the lock): a home copy replays the other home's installs."""
        for rel, data in sorted(files.items()):
            target = safe_join(self.root, rel, "memory path")
            if not rel.startswith((TOPICS_DIR + "/", SOURCES_DIR + "/")) \
                    and rel != f"{self.runtime_name}/runtime.json":
                raise InvalidInput(f"{rel}: not a memory path")
            if data is None:
                target.unlink(missing_ok=True)
            else:
                target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                atomic_write_bytes(target, data)
        self.ensure_git()
        self.git.commit_all(message, paths=[TOPICS_DIR, SOURCES_DIR])
        self.bump_generation()

    # -- transactions -------------------------------------------------------------------------

    def add_install_hook(self, fn: Callable[["WorkspaceDir", "TransactionResult"], None]) -> None:
        """Call ``fn(workspace, result)`` after each successful install (a failing hook is
        reported in ``result.warnings`` and never undoes the install). Adding the same hook
        twice registers it once."""
        if fn not in self._install_hooks:
            self._install_hooks.append(fn)

    @property
    def install_hooks(self) -> list[Callable[["WorkspaceDir", "TransactionResult"], None]]:
        return list(self._install_hooks)
