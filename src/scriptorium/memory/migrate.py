"""Migration off the legacy position cursor (memory reference §4.1, written-marker note).

An installation written by the old runtime keeps ``cursors: {session: {message_id, ordinal}}``
in runtime.json and no mark on any node, so the marker walk would offer every session in full.
The cursor values are never trusted (the ordinal bug is why they are being replaced). The
archive supplies the candidates instead, under each format's own trust boundary, and only the
candidates a committed topic cites count (archived is not written: a write killed between
archive and install leaves evidence that never reached memory):

- legacy ``sources/openprogram/<pct(session)>.md``: only the first header, at the exact byte
  position after ``# <session>\\n\\n``; any later "header" may be user text copied into a body;
- v2 ``sources/openprogram/_v2/*.md``: only the strict parser's valid prefix.

A candidate is not marked directly: for each one the real DAG path ending at it is read, the
live record filter applied, and only the continuous archived prefix is kept (the first gap
stops that path). Marking an archived branch tip after an unarchived middle would make the
marker walk stop at the tip and lose the middle for good, so migration under-marks on purpose.

Safe prefixes are merged per session and written with ONE metadata batch per session.
``cursors`` leaves runtime.json only after every session's batch succeeded; the counters stay.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, ReasonCode, ScriptoriumError, WriteFailed
from ..sessions.errors import NodeNotFound
from .progress import Progress, Step
from .records import MARK_KEY, PROVIDER, records
from .citations import cited_sources
from .sources import (first_legacy_header, make_source_id, parse_v2, pct_decode, read_text,
                      split_source_id)

if TYPE_CHECKING:  # pragma: no cover
    from .workspace import Workspace
    from .view import MemoryView

MIGRATE_LOCK_TIMEOUT = 10.0


class MigrationError(WriteFailed):
    """A session's marks could not be written; ``cursors`` stays for the next attempt."""

    code = ReasonCode.MIGRATION_FAILED
    retryable = True


@dataclass
class MigrationReport:
    """What one migration run did.

    ``marked``: session -> node ids that carry this workspace's mark because of migration (the
    safe prefix, oldest first). ``skipped``: session -> why nothing was marked there.
    ``unknown_nodes``: session -> candidate node ids the session does not have. ``errors``:
    session -> why its marker write failed (then ``cursors`` is kept).
    """

    migrated: bool = False
    marked: dict[str, list[str]] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    cursors_removed: bool = False
    errors: dict[str, str] = field(default_factory=dict)
    unknown_nodes: dict[str, list[str]] = field(default_factory=dict)

    @property
    def sessions(self) -> list[str]:
        return sorted(set(self.marked) | set(self.skipped) | set(self.errors))

    def to_dict(self) -> dict[str, Any]:
        return {"migrated": self.migrated, "marked": self.marked, "skipped": self.skipped,
                "cursors_removed": self.cursors_removed, "errors": self.errors,
                "sessions": self.sessions, "unknown_nodes": self.unknown_nodes}


# -- the cheap check -----------------------------------------------------------------------


def _raw_runtime(workspace: "Workspace") -> dict | None:
    try:
        data = json.loads(workspace.runtime_path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def has_cursors(workspace: "Workspace") -> bool:
    """Does runtime.json still carry the legacy ``cursors`` key? Raw read, no lock; anything
    unreadable counts as no (the tolerant load would drop it anyway)."""
    data = _raw_runtime(workspace)
    return data is not None and "cursors" in data


def _cursor_sessions(workspace: "Workspace") -> list[str]:
    """The session names the cursors mention (their values are never used)."""
    cursors = (_raw_runtime(workspace) or {}).get("cursors")
    return [k for k in cursors if isinstance(k, str)] if isinstance(cursors, dict) else []


# -- candidates from the archive -----------------------------------------------------------


def _plain_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _plain_md_files(directory: Path) -> list[Path]:
    """Regular ``*.md`` files directly in ``directory`` (no symlinks), sorted by name."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    out = [Path(e.path) for e in entries
           if e.name.endswith(".md") and e.is_file(follow_symlinks=False)]
    return sorted(out, key=lambda p: p.name)


def _read(path: Path) -> str | None:
    try:
        return read_text(path.read_bytes())
    except OSError:
        return None


def archive_candidates(workspace_root: Path) -> dict[str, list[str]]:
    """session -> candidate node ids (legacy first header, then v2 valid prefix), each once.

    Nothing under a symlink is read: the archive is the runtime's own tree.
    """
    out: dict[str, dict[str, None]] = {}
    sources = Path(workspace_root) / "sources"
    base = sources / PROVIDER
    if not (_plain_dir(sources) and _plain_dir(base)):
        return {}
    for path in _plain_md_files(base):
        try:
            session = pct_decode(path.name[:-3])
        except (UnicodeError, ValueError):
            continue
        text = _read(path)
        node = first_legacy_header(text, session) if text is not None else None
        if node is not None:
            out.setdefault(session, {})[node] = None
    v2_dir = base / "_v2"
    if _plain_dir(v2_dir):
        for path in _plain_md_files(v2_dir):
            text = _read(path)
            if text is None:
                continue
            for frame in parse_v2(text, f"sources/{PROVIDER}/_v2/{path.name}").frames:
                provider, thread, node = split_source_id(frame.source_id)
                if provider == PROVIDER:
                    out.setdefault(thread, {})[node] = None
    return {session: list(nodes) for session, nodes in out.items()}


def cited_candidates(workspace: "Workspace",
                     candidates: dict[str, list[str]]) -> dict[str, list[str]]:
    """The archive candidates some committed topic cites. The archive is written before the
    writer runs, so a write killed between the two leaves archived turns that memory never
    took in: only a citation proves a turn reached memory (marking an uncited one would
    hide it from every later write). Turns a writer folded into another's paragraph are
    written again: under-marking costs a redo, over-marking loses a turn."""
    cited = cited_sources(workspace)
    out = {}
    for session, nodes in candidates.items():
        kept = [n for n in nodes if make_source_id(PROVIDER, session, n) in cited]
        if kept:
            out[session] = kept
    return out


# -- safe prefixes -------------------------------------------------------------------------


def safe_prefix(store: Any, session_id: str, candidates: list[str]) -> tuple[list[str], list[str]]:
    """(node ids to mark, oldest first; candidate ids the session does not have).

    For every candidate: the real DAG path ending at it, the live record filter, and the run of
    records from the first one that are all candidates. Candidates already seen on a walked
    path are skipped: the path ending at them is a prefix of that path, so it adds nothing.
    Walking newest candidates first makes that the common case (one walk per branch).
    """
    wanted = set(candidates)
    safe: dict[str, int] = {}
    seen: set[str] = set()
    unknown: list[str] = []
    for node in reversed(candidates):
        if node in seen:
            continue
        try:
            branch = store.get_branch(session_id, head=node)
        except (NodeNotFound, InvalidInput):  # no such node, or a name no node can have
            unknown.append(node)
            continue
        seen.update(str(m.get("id")) for m in branch)
        for record in records(session_id, branch):
            if record.node_id not in wanted:
                break  # the first gap stops this path
            safe.setdefault(record.node_id, record.ordinal)
    unknown.reverse()
    return sorted(safe, key=lambda n: (safe[n], n)), unknown


# -- the run -------------------------------------------------------------------------------


def migrate(memory: "MemoryView", progress: Progress | None = None) -> MigrationReport:
    """Run the migration if runtime.json still has ``cursors`` (else report migrated=False).

    Holds the workspace lock (10 s) for the run. A session whose marker batch raises is
    reported under ``errors`` and keeps ``cursors`` in runtime.json for the next attempt;
    sessions already marked stay marked.
    """
    workspace, store = memory.workspace, memory.store
    report = MigrationReport()
    if not has_cursors(workspace):
        return report
    with workspace.lock(timeout=MIGRATE_LOCK_TIMEOUT):
        if not has_cursors(workspace):  # another process finished it while we waited
            return report
        report.migrated = True
        workspace_id = workspace.workspace_id
        workspace.recover()  # a crashed install is finished or rolled back before we look
        candidates = cited_candidates(workspace, archive_candidates(workspace.root))
        for session_id in _cursor_sessions(workspace):
            if session_id not in candidates:
                report.skipped[session_id] = "no candidates in the archive"
        for number, session_id in enumerate(sorted(candidates)):
            if progress is not None:
                progress(Step(f"session {session_id}", number, len(candidates)))
            _migrate_session(store, session_id, candidates[session_id], workspace_id, report)
        if progress is not None:
            progress(Step("marks written", len(candidates), len(candidates)))
        if not report.errors:
            _drop_cursors(workspace)
            report.cursors_removed = True
    return report


def _migrate_session(store: Any, session_id: str, candidates: list[str], workspace_id: str,
                     report: MigrationReport) -> None:
    try:
        known = store.exists(session_id)
    except InvalidInput as exc:
        report.skipped[session_id] = f"invalid session id: {exc}"
        return
    if not known:
        report.skipped[session_id] = "unknown session"
        return
    try:
        nodes, unknown = safe_prefix(store, session_id, candidates)
    except ScriptoriumError as exc:  # an unreadable session is written from the start
        report.skipped[session_id] = f"unreadable session: {exc}"
        return
    if unknown:
        report.unknown_nodes[session_id] = unknown
    if not nodes:
        report.skipped[session_id] = (
            "unknown nodes" if unknown and len(unknown) == len(candidates)
            else "no continuous archived prefix")
        return
    try:
        marks = {n.id: n.metadata.get(MARK_KEY) for n in store.get_nodes(session_id)}
        # nodes already carrying this mark are left alone: a rerun touches no node file
        patches = {n: {MARK_KEY: workspace_id} for n in nodes if marks.get(n) != workspace_id}
        if patches:
            store.merge_node_metadata_batch(session_id, patches)  # ONE batch per session
    except Exception as exc:  # reported; cursors stay so the next run retries
        report.errors[session_id] = (str(exc) if isinstance(exc, ScriptoriumError)
                                     else f"{type(exc).__name__}: {exc}")
        return
    report.marked[session_id] = nodes


def _drop_cursors(workspace: "Workspace") -> None:
    """Re-save runtime.json through the tolerant load: ``cursors`` goes, counters stay."""
    state = workspace.load_runtime()
    state.cursors = None
    workspace.save_runtime(state)


def migrate_if_needed(memory: "MemoryView") -> MigrationReport | None:
    """The write paths' hook: None (no lock taken) when there is nothing to migrate.

    Raises MigrationError when a session's marker write failed: pending work computed before
    the marks exist would re-offer archived turns, so no write may proceed.
    """
    if not has_cursors(memory.workspace):
        return None
    report = migrate(memory)
    if report.errors:
        session, why = next(iter(sorted(report.errors.items())))
        raise MigrationError(f"migration off the position cursor failed for session "
                             f"{session}: {why} (cursors kept for retry)")
    return report
