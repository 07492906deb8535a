"""SessionStore: the DAG session store on disk (DESIGN §3, store reference §3–§4).

Every write (append, node rewrite, head move, meta write) happens under one per-session
cross-process lock (``flock`` on ``<sid>/.session.lock``), after refreshing the cache from
disk, so idempotence, seq assignment and head-advance decisions see every other process's
writes, and a node rewrite always merges into the bytes on disk. Reads take no file lock:
every file is replaced atomically, so a reader sees the old or the new version, never a mix.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

from ..errors import CorruptFile, InvalidInput, ScriptoriumError
from ..fsutil import (FileLock, atomic_write_bytes, atomic_write_json, atomic_write_text,
                      check_name, check_text, json_object)
from . import walks
from .announce import HeadAnnouncer, HeadListener
from .checks import Added, check_new_session_id, check_same
from .commits import GITIGNORE, CommitOps
from .errors import AppendRefused, HeadRefused, NodeNotFound, SessionNotFound
from .events import RESERVED_SESSION_ID, HeadMoveLog
from .forks import ForkOps
from .lines import LineOps
from .index import SessionIndex
from .marks import MarkOps
from .node import CHAIN_CALLERS, ROOT, Node, new_id, node_from_message
from .nodefiles import LOCK_NAME
from .ops import Op

if TYPE_CHECKING:  # pragma: no cover
    from .bulk import BulkAppender

log = logging.getLogger(__name__)

class SessionStore(ForkOps, LineOps, MarkOps, CommitOps, HeadAnnouncer):
    """All sessions under ``root`` (= ``<home>/sessions``)."""

    lock_timeout: float = 60.0

    def __init__(self, root: Path, *, git: bool = True):
        self.root = Path(root)
        self.git = git  # False skips per-turn commits (tests, benchmarks of the bare store)
        self.events = HeadMoveLog(self.root)  # head moves, told to other processes
        self._indexes: dict[str, SessionIndex] = {}
        self._tlocks: dict[str, threading.RLock] = {}
        self._flocks: dict[str, FileLock] = {}
        self._guard = threading.Lock()
        self._listeners: list[HeadListener] = []
        self._lines = LineOps.new_cache()

    @classmethod
    def from_home(cls, home: Path, **kw: Any) -> "SessionStore":
        return cls(Path(home) / "sessions", **kw)

    # --- plumbing ----------------------------------------------------------------------------
    def _dir(self, sid: str) -> Path:
        if sid == RESERVED_SESSION_ID:
            raise InvalidInput(f"invalid session id {sid!r}: reserved for the store's own files")
        return self.root / check_name(sid, "session id")

    def exists(self, sid: str) -> bool:
        """True when ``<root>/<sid>`` is a real session directory (meta.json or history/)."""
        d = self._dir(sid)
        if d.is_symlink() or not d.is_dir():
            return False
        return (d / "meta.json").is_file() or (d / "history").is_dir()

    def _require(self, sid: str) -> Path:
        if not self.exists(sid):
            raise SessionNotFound(f"session {sid} not found under {self.root}")
        return self.root / sid

    def _locks(self, sid: str) -> tuple[threading.RLock, FileLock]:
        with self._guard:
            tl = self._tlocks.get(sid)
            if tl is None:
                tl = self._tlocks[sid] = threading.RLock()
                self._flocks[sid] = FileLock(self.root / sid / LOCK_NAME,
                                             timeout=self.lock_timeout,
                                             what=f"session {sid} lock")
            return tl, self._flocks[sid]

    def _index(self, sid: str) -> SessionIndex:
        with self._guard:
            idx = self._indexes.get(sid)
            if idx is None:
                idx = self._indexes[sid] = SessionIndex(sid, self.root / sid)
            return idx

    @contextlib.contextmanager
    def _reading(self, sid: str) -> Iterator[SessionIndex]:
        self._require(sid)
        tl, _ = self._locks(sid)
        with tl:
            idx = self._index(sid)
            idx.refresh()
            yield idx

    @contextlib.contextmanager
    def _writing(self, sid: str) -> Iterator[Op]:
        self._require(sid)
        with self._locked(sid) as idx:
            op = Op(sid, idx)
            yield op
            self._log_moves(op.events)
        self._announce(op.events)

    def _log_moves(self, events: list[tuple[str, str | None, str | None]]) -> None:
        """Tell other processes (under the session lock, so one session's moves keep their
        order). The moves are already durable in meta.json: a log that cannot be written costs
        a reader one full poll, never a turn, so it is reported, not raised."""
        if not events:
            return
        try:
            self.events.append(events, time.time())
        except (OSError, ScriptoriumError) as exc:
            log.warning("head-move log not written (%s): watchers find the move by polling", exc)

    @contextlib.contextmanager
    def _locked(self, sid: str) -> Iterator[SessionIndex]:
        """The session lock held, the index fresh; on the way out (even after an error) the
        index seals what this process wrote, so other processes notice it."""
        tl, fl = self._locks(sid)
        with tl, fl:
            idx = self._index(sid)
            idx.refresh()
            self._sweep_temps(idx)
            try:
                yield idx
            finally:
                idx.seal()

    @staticmethod
    def _sweep_temps(idx: SessionIndex) -> None:
        """Under the lock no other writer of ours is mid-write, so a temp file the last scan
        saw in ``history/`` was left by a killed process: remove it."""
        for name in idx.stale_temps:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(idx.hist / name)
        idx.stale_temps = []

    # --- sessions ---------------------------------------------------------------------------
    def create_session(self, session_id: str | None = None, title: str = "", **extra: Any) -> str:
        """Create a session (idempotent: an existing one is left as it is)."""
        sid = new_id() if session_id is None else session_id
        sdir = self._dir(sid)
        if not isinstance(title, str):
            raise InvalidInput(f"invalid title for session {sid}: expected a string")
        check_text(title, f"title of session {sid}")
        if sdir.is_symlink() or (sdir.exists() and not sdir.is_dir()):
            raise InvalidInput(f"session path {sdir} exists and is not a directory")
        self.root.mkdir(parents=True, exist_ok=True)
        if not sdir.exists():
            check_new_session_id(self.root, sid, self.exists)
        sdir.mkdir(exist_ok=True)
        with self._locked(sid) as idx:
            if idx.meta_present:
                if idx.meta.get("id") != sid:  # a copied-in or history-only session
                    self._write_meta(idx, dict(idx.meta, id=sid))
                return sid
            now = time.time()
            meta = {"id": sid, "title": title, "created_at": now, "updated_at": now,
                    "head_id": idx.head, "branches": {}}
            meta.update(extra)
            (sdir / "history").mkdir(exist_ok=True)
            if not (sdir / ".gitignore").exists():
                atomic_write_text(sdir / ".gitignore", GITIGNORE, mode=0o644)
            self._write_meta(idx, meta)
        return sid

    def list_sessions(self) -> list[dict]:
        """One row per session, newest ``updated_at`` first. A session whose meta.json is
        unreadable is listed with ``error`` rather than hiding every other session."""
        rows = []
        try:
            entries = list(os.scandir(self.root))
        except FileNotFoundError:
            return []
        for e in entries:
            try:
                check_name(e.name)
                if not self.exists(e.name):
                    continue
            except InvalidInput:
                continue
            row: dict[str, Any] = {"session_id": e.name, "title": "", "updated_at": 0.0,
                                   "head_id": None}
            try:
                meta = self._read_meta_file(Path(e.path) / "meta.json")
                title, upd, head = meta.get("title"), meta.get("updated_at"), meta.get("head_id")
                row["title"] = title if isinstance(title, str) else ""
                row["updated_at"] = upd if isinstance(upd, (int, float)) else 0.0
                row["head_id"] = head if isinstance(head, str) and head else None
            except CorruptFile as exc:
                row["error"] = str(exc)
            rows.append(row)
        rows.sort(key=lambda r: (r["updated_at"], r["session_id"]), reverse=True)
        return rows

    @staticmethod
    def _read_meta_file(path: Path) -> dict:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return {}
        return json_object(data, f"meta file {path}")

    def get_meta(self, sid: str) -> dict:
        """A copy of meta.json (defaults for a history-only session)."""
        with self._reading(sid) as idx:
            meta = json.loads(json.dumps(idx.meta)) if idx.meta_present else {}
            meta.setdefault("id", sid)
            meta.setdefault("title", "")
            meta.setdefault("head_id", idx.head)
            return meta

    def head(self, sid: str) -> str | None:
        with self._reading(sid) as idx:
            return idx.head

    def _meta_for_write(self, idx: SessionIndex) -> dict:
        if idx.meta_present:
            return dict(idx.meta)
        now = time.time()
        return {"id": idx.sid, "title": "", "created_at": now, "updated_at": now,
                "head_id": idx.head, "branches": {}}

    def _write_meta(self, idx: SessionIndex, meta: dict) -> None:
        atomic_write_json(idx.meta_path, meta)
        idx.record_own_meta(meta)

    # --- nodes ------------------------------------------------------------------------------
    def get_node(self, sid: str, node_id: str) -> Node:
        check_name(node_id, "node id")
        with self._reading(sid) as idx:
            node = idx.nodes.get(node_id)
            if node is None:
                raise NodeNotFound(f"node {node_id} not found in session {sid}")
            return node.copy()

    def get_nodes(self, sid: str) -> list[Node]:
        """Every node, raw and unfiltered, in seq order."""
        with self._reading(sid) as idx:
            return [n.copy() for n in idx.ordered()]

    def append_message(self, sid: str, msg: dict, *, commit: bool | None = None) -> str:
        """Append one message as a node; idempotent by id. ``commit=None`` commits a git turn
        when the node completes one (a chain-level assistant reply to a user turn). A failed
        commit does not undo the stored node: it is logged (see :meth:`add` to receive it)."""
        return self._add(sid, msg, None, commit, strict=False).node_id

    def add(self, sid: str, msg: dict, *, after: str | None = None,
            commit: bool | None = None) -> Added:
        """Append ``msg`` (after the head, or as a fork after ``after``) and say what happened.

        Unlike :meth:`append_message`, an id that is already stored with a different role or
        text is refused (InvalidInput); the identical retry adds nothing (``created`` False)
        and commits the history a failed commit left behind."""
        return self._add(sid, msg, after, commit, strict=True)

    def _add(self, sid: str, msg: dict, after: str | None, commit: bool | None, *,
             strict: bool) -> Added:
        if after is not None:
            check_name(after, "node id")
            msg = dict(msg, predecessor=after)
        with self._writing(sid) as op:
            if after is not None and after != ROOT and after not in op.idx.nodes:
                raise NodeNotFound(f"node {after} not found in session {sid}")
            node, named = node_from_message(
                msg, default_predecessor=after or op.idx.head or ROOT)
            existing = op.idx.nodes.get(node.id)
            if strict and existing is not None:
                check_same(sid, existing, node, named)
            created = self._append_locked(op, node, advance=after is None)
            if after is not None:
                self._move_head(op, node.id)
            if created or strict:
                self._maybe_commit(op, op.idx.nodes[node.id], commit)
            head = op.idx.head
        for warning in op.warnings:
            log.warning("%s", warning)
        return Added(node.id, head, created, op.warnings)

    def bulk(self, sid: str) -> "BulkAppender":
        """Many appends to ``sid`` under one lock, streamed to disk (importers): see
        :mod:`scriptorium.sessions.bulk`."""
        from .bulk import BulkAppender

        return BulkAppender(self, sid)

    def branch_view(self, sid: str, head: str | None = None) -> dict:
        """One consistent read for ``session show``: the session head, the tip walked from
        and the branch's message dicts."""
        if head is not None:
            check_name(head, "node id")
        with self._reading(sid) as idx:
            tip = head if head is not None else idx.head
            msgs = [] if walks.empty_tip(idx, tip) else [
                n.to_message(sid) for n in walks.branch(idx, sid, tip)]
            return {"session_id": sid, "head_id": idx.head, "tip": tip, "messages": msgs}

    def append_after(self, sid: str, after: str, msg: dict, *, commit: bool | None = None) -> str:
        """Append ``msg`` as a child of ``after`` and make it the head (a fork)."""
        return self._add(sid, msg, after, commit, strict=False).node_id

    def _append_locked(self, op: Op, node: Node, *, advance: bool = True) -> bool:
        """Validate and write ``node`` (lock held, index fresh); False if the id exists.

        Head advance is the chain-extension rule: a chain-level node (caller ``""`` or
        ``"ROOT"``; summaries and the root excepted) whose predecessor is the head, or any
        chain-level node when there is no head. Forks move the head explicitly.
        """
        idx, sid = op.idx, op.sid
        if node.id in idx.nodes:
            return False
        pred = node.predecessor
        if pred and pred != ROOT and pred not in idx.nodes:
            raise AppendRefused(
                f"session {sid}: predecessor {pred} of node {node.id} does not exist")
        caller = node.caller or ""
        if (caller not in CHAIN_CALLERS and caller not in idx.nodes
                and not node.metadata.get("caller_session")):
            raise AppendRefused(f"session {sid}: caller {caller} of node {node.id} does not exist")
        self._check_invariant(idx, sid, node)
        node.seq = idx.max_seq + 1
        idx.before_own_history_write()
        idx.hist.mkdir(parents=True, exist_ok=True)
        name = node.filename()
        data = node.dumps()
        atomic_write_bytes(idx.hist / name, data)
        idx.record_own_write(name, node, data)
        meta = self._meta_for_write(idx)
        prev = meta.get("updated_at")
        now = time.time()
        if isinstance(prev, (int, float)) and now <= prev:
            now = prev + 1e-6  # the activity clock must move on every append
        meta["updated_at"] = now
        head = idx.head
        if (advance and node.chain_level and not node.is_summary and not node.is_root
                and (head is None or node.predecessor == head)):
            meta["head_id"] = node.id
            op.events.append((sid, head, node.id))
        self._write_meta(idx, meta)
        return True

    @staticmethod
    def _check_invariant(idx: SessionIndex, sid: str, node: Node) -> None:
        """Reference §3.2: a top-level turn with no predecessor must be the first turn,
        a spawn root, a summary or the root."""
        if node.role not in ("user", "llm"):
            return
        if node.role == "user" and node.input is not None:
            return  # an ask_user answer
        if not node.chain_level or node.predecessor:
            return
        if node.is_root or node.is_spawn_root or "covers_ids" in node.metadata:
            return
        if idx.first_conversational_seq() is not None:
            raise AppendRefused(f"session {sid}: node {node.id} has no predecessor and is not "
                                f"the first turn, a spawn root, a summary or the root")

    # --- head ---------------------------------------------------------------------------------
    def set_head(self, sid: str, node_id: str | None) -> None:
        """THE head move: refuses unknown nodes and summaries, announces (sid, old, new)."""
        if node_id is not None:
            check_name(node_id, "node id")
        with self._writing(sid) as op:
            self._move_head(op, node_id)

    def _move_head(self, op: Op, node_id: str | None) -> None:
        idx = op.idx
        if node_id is not None:
            node = idx.nodes.get(node_id)
            if node is None:
                raise NodeNotFound(f"node {node_id} not found in session {op.sid}")
            if node.is_summary:
                raise HeadRefused(f"session {op.sid}: node {node_id} is a compaction summary "
                                  f"and cannot be the head")
        old = idx.head
        if old == node_id and idx.meta_present:
            return
        meta = self._meta_for_write(idx)
        meta["head_id"] = node_id
        self._write_meta(idx, meta)
        if old != node_id:
            op.events.append((op.sid, old, node_id))

    # --- reads --------------------------------------------------------------------------------
    def get_branch(self, sid: str, head: str | None = None) -> list[dict]:
        """The branch ending at ``head`` (default: the session head) as message dicts, oldest
        first; root and rewound nodes dropped, summaries never spliced in."""
        if head is not None:
            check_name(head, "node id")
        with self._reading(sid) as idx:
            h = head if head is not None else idx.head
            if walks.empty_tip(idx, h):
                return []
            return [n.to_message(sid) for n in walks.branch(idx, sid, h)]

    def branch_tail(self, sid: str, head: str | None = None, *,
                    stop: Callable[[dict], bool]) -> tuple[list[dict], dict | None]:
        """The newest part of a branch: the messages after the newest one for which
        ``stop(message)`` is true (all of them if none is), oldest first, with root and
        rewound nodes dropped as in :meth:`get_branch` — plus the message of the node the
        branch starts at (None for an empty session).

        The walk goes back from ``head`` and ends at the first stop, so its cost follows the
        length of the tail, not of the session: memory asks "what is after my last mark?".
        """
        if head is not None:
            check_name(head, "node id")
        with self._reading(sid) as idx:
            h = head if head is not None else idx.head
            if walks.empty_tip(idx, h):
                return [], None
            tail: list[dict] = []
            for node in walks.walk_back(idx, sid, h):
                if node.is_root or node.rewound:
                    continue
                message = node.to_message(sid)
                if stop(message):
                    break
                tail.append(message)
            tail.reverse()
            root = idx.nodes.get(idx.branch_root(h))
            return tail, (root.to_message(sid) if root is not None else None)

    def list_branches(self, sid: str) -> list[dict]:
        """Every live tip, the head first, then newest (by seq) first."""
        with self._reading(sid) as idx:
            head = idx.head
            found = walks.tips(idx)
            if (head is not None and head in idx.nodes and not idx.nodes[head].is_root
                    and all(n.id != head for n in found)):
                found.append(idx.nodes[head])
            branches = idx.meta.get("branches") if isinstance(idx.meta.get("branches"), dict) else {}
            rows = []
            for n in found:
                entry = branches.get(n.id)
                name = entry if isinstance(entry, str) else None
                archived, updated = False, n.created_at
                if isinstance(entry, dict):
                    name = entry.get("name") if isinstance(entry.get("name"), str) else None
                    archived = bool(entry.get("archived"))
                    if isinstance(entry.get("updated_at"), (int, float)):
                        updated = entry["updated_at"]
                rows.append({"tip": n.id, "head_msg_id": n.id, "head": n.id == head,
                             "archived": archived, "name": name, "updated_at": updated,
                             "created_at": n.created_at, "seq": n.seq})
            rows.sort(key=lambda r: (not r["head"], -r["seq"]))
            return rows
