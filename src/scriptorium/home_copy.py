"""``scriptorium home copy SRC DST``: move a whole home between engines (a directory home
and a PostgreSQL home, either way) without losing anything.

What is kept: the memory workspace's id (the value of every mark), every install of its
history (git commits ↔ revision rows, replayed in order with their messages), the final
topics, the evidence archive, the counters and the blocked-branch report (a branch blocked in
SRC stays blocked in DST until a write there succeeds); every session with its nodes (ids,
edges, metadata, so the marks), head and meta; the import ledger (what each source file
contributed, so an import after the copy reads only what is new; a PostgreSQL home's file
rows are per host: this host's go down to a directory home, see
:mod:`~scriptorium.importers.ledger_copy`). Not copied: the search index (derived data,
each engine has its own): DST's is rebuilt from the copied topics and archive; and any file
in SRC's memory directory that is not memory scriptorium keeps (another program's, such as
the reference system's ``recent_events.jsonl``): the report names each one.

Order matters for a crash: identity, then memory, then sessions, then the import ledger.
Marks arrive after memory, so a copy stopped half way never has a mark in DST for memory DST
does not hold yet (a write in DST meanwhile redoes turns, never skips them); the ledger
arrives after every node it describes, in one transaction, so an import in DST never skips
a line whose node is not there. Every part is resumable: installs DST already
replayed (by position and message), sessions DST already holds whole, nodes it already
has, are skipped, so running the copy again finishes it. The copy ends by comparing both
homes (:func:`compare`); any difference is reported and the command fails. Fault points
``home-copy-revision`` (after each install replayed), ``home-copy-session`` (a session
created in DST, its nodes not yet copied) and ``home-copy-ledger`` (inside the ledger's
transaction, a table written) let tests kill a real copy between steps.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .config import resolve_location
from .errors import InvalidInput, NotFound
from .faults import fault_point
from .importers.ledger_copy import Tables, copy_ledger, ledger_digest, open_tables
from .postgres.url import parse_home_url
from .memory.search import rebuild as rebuild_index
from .memory.writing import Memory

MEMORY_COPY_MESSAGE = "home copy: the archive and counters as the source holds them"


@dataclass
class CopyReport:
    """What one copy did and what the final comparison found."""

    source: str
    destination: str
    workspace_id: str | None = None
    revisions_copied: int = 0
    revisions_skipped: int = 0
    files_copied: int = 0
    blocked_branches: int = 0
    sessions_copied: int = 0
    sessions_skipped: int = 0
    nodes_copied: int = 0
    ledger_rows: int = 0
    not_copied: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "destination": self.destination,
                "workspace_id": self.workspace_id, "revisions_copied": self.revisions_copied,
                "revisions_skipped": self.revisions_skipped, "files_copied": self.files_copied,
                "blocked_branches": self.blocked_branches, "search_index": "rebuilt",
                "sessions_copied": self.sessions_copied,
                "sessions_skipped": self.sessions_skipped, "nodes_copied": self.nodes_copied,
                "import_ledger_rows": self.ledger_rows, "not_copied": self.not_copied, "verified": self.verified,
                "problems": self.problems}


def copy_home(src: Path | str, dst: Path | str,
              progress: Callable[[str], None] | None = None) -> CopyReport:
    """Copy the home ``src`` into ``dst`` (see the module docstring). ``dst`` must be empty
    or hold an earlier, interrupted copy of ``src``."""
    if str(src) == str(dst):
        raise InvalidInput("home copy: source and destination are the same home")
    _require(src)
    with Memory.open(src, create=False) as source, Memory.open(dst) as dest:
        report = CopyReport(source.workspace.location, dest.workspace.location)
        source_id = source.workspace._read_workspace_id()  # noqa: SLF001 - never create one
        if source_id is not None:
            dest.workspace.adopt_workspace_id(source_id)
        report.workspace_id = source_id
        report.not_copied = foreign_files(source)
        _copy_memory(source, dest, report)
        for row in source.store.list_sessions():
            _copy_session(source, dest, row["session_id"], report)
            if progress:
                progress(row["session_id"])
        with _ledger(source, create=False) as src, _ledger(dest, create=True) as dst:
            report.ledger_rows = copy_ledger(src, dst)
        report.problems = compare(source, dest)
    return report


@contextmanager
def _ledger(memory: Memory, *, create: bool) -> Iterator[Tables]:
    """The import ledger of ``memory``'s home (see :mod:`.importers.ledger_copy`)."""
    tables = open_tables(memory.home, getattr(memory.store, "pg", None), create=create)
    try:
        yield tables
    finally:
        tables.close()


def _require(home: Path | str) -> None:
    """The source must exist: copying a home nobody made would create an empty one."""
    where = resolve_location(home)
    if isinstance(where, str):
        from .postgres.connect import home_exists

        if not home_exists(where):
            raise NotFound(f"home copy: no home at {parse_home_url(where).display}")
    elif not where.is_dir():
        raise NotFound(f"home copy: no home at {where}")


def _kept(name: str) -> bool:
    """Is ``name`` memory that every home keeps (a topic, the archive, the counters)?"""
    return name.startswith(("topics/", "sources/")) or name == "runtime.json"


def _names(memory: Memory) -> dict[str, str]:
    """Every file of the memory revision under the name every home uses -> its own path."""
    ws = memory.workspace
    return {("runtime.json" if rel == f"{ws.runtime_name}/runtime.json" else rel): rel
            for rel in ws.revision_files()}


def _memory_files(memory: Memory) -> dict[str, bytes]:
    """Every memory file (topics, archive, counters) under the names every home uses."""
    root = memory.workspace.root
    return {name: (root / rel).read_bytes() for name, rel in _names(memory).items()
            if _kept(name)}


def foreign_files(memory: Memory) -> list[str]:
    """Files in the memory directory that are not memory scriptorium keeps (not copied)."""
    return sorted(name for name in _names(memory) if not _kept(name))


def _copy_memory(source: Memory, dest: Memory, report: CopyReport) -> None:
    """Replay the installs DST lacks, then bring the archive and counters over."""
    src_ws, dst_ws = source.workspace, dest.workspace
    with dst_ws.lock(timeout=10.0):
        done = dst_ws.history()
        wanted = src_ws.history()
        if [m for m, _ in done] != [m for m, _ in wanted[:len(done)]]:
            if _memory_files(source) != _memory_files(dest):
                raise InvalidInput(f"home copy: {dst_ws.location} holds memory with a history "
                                   "of its own; copy into an empty home")
        report.revisions_skipped = min(len(done), len(wanted))
        for message, files in wanted[len(done):]:
            dst_ws.replay(message, files)
            report.revisions_copied += 1
            fault_point("home-copy-revision")
        have, want = _memory_files(dest), _memory_files(source)
        changes: dict[str, bytes | None] = {rel: data for rel, data in want.items()
                                            if have.get(rel) != data}
        changes.update({rel: None for rel in have if rel not in want})
        if changes:
            dst_ws.replay(MEMORY_COPY_MESSAGE, {
                (f"{dst_ws.runtime_name}/runtime.json" if rel == "runtime.json" else rel): data
                for rel, data in changes.items()})
        report.files_copied = len(changes)
        blocked = src_ws.blocked_branches().load()
        dst_ws.blocked_branches().adopt(blocked)
        report.blocked_branches = sum(len(tips) for tips in blocked.values())
        rebuild_index(dst_ws)  # built from the copied files: an index updated install by
        # install would have resolved citations before the archive arrived (it comes last)


def _node_rows(memory: Memory, sid: str) -> list[dict[str, Any]]:
    rows = []
    for node in memory.store.get_nodes(sid):
        row = node.to_json()
        row.pop("seq", None)  # the destination numbers its own writes
        rows.append(row)
    return rows


def _copy_session(source: Memory, dest: Memory, sid: str, report: CopyReport) -> None:
    meta = source.store.get_meta(sid)
    nodes = source.store.get_nodes(sid)
    if dest.store.exists(sid) and _node_rows(dest, sid) == _node_rows(source, sid) \
            and dest.store.head(sid) == meta.get("head_id"):
        report.sessions_skipped += 1
        return
    dest.store.create_session(sid, title=str(meta.get("title") or ""))
    fault_point("home-copy-session")
    with dest.store.bulk(sid) as bulk:
        for node in nodes:
            if bulk.append(node.copy()):
                report.nodes_copied += 1
        bulk.set_head(meta.get("head_id"))
        bulk.update_meta(**{k: v for k, v in meta.items() if k not in ("id", "head_id")})
    have = {n.id: n.metadata for n in dest.store.get_nodes(sid)}
    patch = {n.id: dict(n.metadata) for n in nodes if have.get(n.id) != n.metadata}
    if patch:  # nodes an interrupted copy left, whose marks moved since
        dest.store.merge_node_metadata_batch(sid, patch)
    report.sessions_copied += 1


def compare(source: Memory, dest: Memory) -> list[str]:
    """Every difference between two homes that a copy must not leave, one line each."""
    problems = []
    src_id = source.workspace._read_workspace_id()  # noqa: SLF001
    dst_id = dest.workspace._read_workspace_id()  # noqa: SLF001
    if src_id is not None and src_id != dst_id:
        problems.append(f"workspace id {dst_id} is not {src_id}")
    with dest.workspace.lock(timeout=10.0):  # a database home's mirror catches up
        pass
    src_files, dst_files = _memory_files(source), _memory_files(dest)
    for rel in sorted(set(src_files) | set(dst_files)):
        if src_files.get(rel) != dst_files.get(rel):
            problems.append(f"memory file {rel} differs")
    if source.workspace.blocked_branches().load() != dest.workspace.blocked_branches().load():
        problems.append("the blocked-branch report differs")
    src_log = [m for m, _ in source.workspace.history()]
    dst_log = [m for m, _ in dest.workspace.history()]
    if dst_log[:len(src_log)] != src_log:
        problems.append(f"history: {len(src_log)} install(s) in the source, the destination "
                        f"replays {len(dst_log)} of its own")
    with _ledger(source, create=False) as src, _ledger(dest, create=False) as dst:
        want, have = ledger_digest(src), ledger_digest(dst)
        for table in want:
            if want[table] != have[table]:
                problems.append(f"import ledger: {table} rows differ ({want[table][0]} in "
                                f"the source, {have[table][0]} in the destination)")
    for row in source.store.list_sessions():
        sid = row["session_id"]
        if not dest.store.exists(sid):
            problems.append(f"session {sid} is missing")
        elif _node_rows(dest, sid) != _node_rows(source, sid):
            problems.append(f"session {sid}: nodes or marks differ")
        elif dest.store.head(sid) != source.store.head(sid):
            problems.append(f"session {sid}: head differs")
    return problems
