"""``memory verify``: check the assumption the written mark rests on, and repair it.

The walk that computes what a branch still owes stops at the first turn marked for this
workspace and trusts that every earlier turn is marked too. The written-marker note lists this
as unchecked ("online writes have no general prefix check"): a lost mark strands every turn
older than the next mark, silently. This module checks it, on every live branch of every
session, and ``repair`` re-offers what a gap strands.

Problem kinds (``severity`` "error" makes ``ok`` false, "info" does not):

* ``gap`` (error): on a live branch, an unmarked turn is followed later by a marked one. The
  walk stops at that later mark, so the unmarked turns before it (``stranded``) are never
  offered. Repair takes this workspace's marks back from the first gap onward on the branch
  (and again on any branch that then shows a gap, until none does), so the ordinary walk offers
  those turns again; a later write re-marks the turns memory already cites without writing
  them twice (the write step's "already cited" redo).
* ``marked_not_archived`` (error): a turn marked for this workspace has no archived evidence.
  The mark claims a write whose evidence is gone (a restored or damaged workspace), so nothing
  in memory can cite it. Repair takes that mark back (and so whatever it strands).
* ``marked_not_cited`` (info): a marked turn no topic block cites and none ever did. A mark
  means "handed to the writer", not "cited": a writer may fold five turns into one paragraph
  citing one of them. It is reported so a reader can see it, it does not make ``ok`` false,
  and repair leaves it.
* ``citation_lost`` (error): a marked turn no topic cites now although one did (the workspace
  history added a line citing it): a hand edit, a restored copy or a bad writer removed its
  paragraph, and no write would ever offer the turn again. Repair takes its mark back (and so
  whatever that strands), so the next write writes it again.
* ``blocked`` (error): a live branch whose last write failed for a reason a retry cannot fix
  (``reason_code``, ``hint``: what the user can do); every later turn of it waits behind the
  failed batch. A successful write on the branch clears it.
* ``archive_invalid`` (error): an evidence file that does not parse complete (garbage
  appended, a frame cut short): every later write of its session fails. ``source_missing``
  (error): a footnote cites evidence the archive does not hold (a deleted file). Repair cuts
  the file back to its valid frames (a copy of the damaged file is kept under
  ``<runtime>/damaged-sources/``) and archives again, from the session store, every turn a
  topic cites that the archive lost (:mod:`.verify_archive`).
* ``topic_invalid`` (error): a topic file breaks the format (strict parse).
* ``session_unreadable`` (error): a session whose branches cannot be walked (a dangling
  predecessor, a corrupt node file); nothing about its marks can be said.
* ``interrupted_install`` (error): an install journal is pending (a crash mid-install); the
  next writer, or ``repair``, finishes or rolls it back.

Without ``repair`` nothing is written. Both run under the workspace write lock, because every
marker (the write path, migration) marks under it: a check never reads a half-applied mark
batch, and a repair never takes marks back while a write step is putting them on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import NotFound, ScriptoriumError
from .citations import block_sources
from .records import MARK_KEY, Record
from .verify_archive import archive_findings, repair_archive

if TYPE_CHECKING:  # pragma: no cover
    from .workspace import Workspace
    from .view import MemoryView

VERIFY_LOCK_TIMEOUT = 10.0
INFO_KINDS = frozenset({"marked_not_cited"})


@dataclass
class Problem:
    """One finding. ``extra`` carries kind-specific details (``stranded``, ``tips``…)."""

    kind: str
    session_id: str | None
    node_id: str | None
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def severity(self) -> str:
        return "info" if self.kind in INFO_KINDS else "error"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "session_id": self.session_id, "node_id": self.node_id,
                "detail": self.detail, "severity": self.severity, **self.extra}


@dataclass
class VerifyReport:
    """What verify found (``problems``: after repair, when repairing) and what it repaired."""

    workspace_id: str | None
    problems: list[Problem] = field(default_factory=list)
    found: list[Problem] | None = None  # before repair (None when not repairing)
    repaired: list[dict[str, Any]] = field(default_factory=list)
    sessions: int = 0
    branches: int = 0
    marked_turns: int = 0

    @property
    def ok(self) -> bool:
        return not any(p.severity == "error" for p in self.problems)

    def kinds(self, kind: str) -> list[Problem]:
        return [p for p in self.problems if p.kind == kind]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "ok": self.ok, "workspace_id": self.workspace_id,
            "problems": [p.to_dict() for p in self.problems],
            "checked": {"sessions": self.sessions, "branches": self.branches,
                        "marked_turns": self.marked_turns},
        }
        if self.found is not None:
            out["found"] = [p.to_dict() for p in self.found]
            out["repaired"] = list(self.repaired)
        return out


# -- the pure part: one branch, one session ----------------------------------------------------


def branch_gap(recs: list[Record], is_marked) -> tuple[int, list[Record]] | None:
    """(index of the first unmarked record, the stranded records) when an unmarked record is
    followed by a marked one on this branch; None when the marks form a prefix."""
    flags = [bool(is_marked(r)) for r in recs]
    first_unmarked = next((i for i, f in enumerate(flags) if not f), None)
    if first_unmarked is None:
        return None
    last_marked = max((i for i, f in enumerate(flags) if f), default=-1)
    if last_marked < first_unmarked:
        return None
    stranded = [r for r, f in zip(recs[:last_marked], flags[:last_marked]) if not f]
    return first_unmarked, stranded


def marks_to_take_back(branches: Iterable[list[Record]], marked: set[str]) -> list[str]:
    """Node ids whose mark must go so that every branch's marks form a prefix again.

    On each branch every mark from the first unmarked record onward goes; a node shared with
    another branch may open a gap there, so this runs until no branch changes. Returned newest
    first (by branch position), so an interrupted repair only ever shrinks what is stranded.
    """
    branches = [list(b) for b in branches]
    marked = set(marked)
    taken: dict[str, int] = {}
    changed = True
    while changed:
        changed = False
        for recs in branches:
            gap = branch_gap(recs, lambda r: r.node_id in marked)
            if gap is None:
                continue
            start = gap[0]
            for pos in range(start, len(recs)):
                node = recs[pos].node_id
                if node in marked:
                    marked.discard(node)
                    taken[node] = max(taken.get(node, -1), pos)
                    changed = True
    return sorted(taken, key=lambda n: -taken[n])


# -- reading a workspace -----------------------------------------------------------------------


def _workspace_id(ws: "Workspace") -> str | None:
    """This workspace's id, or None if it has none yet: verify never creates the identity
    (without one, no mark on any node can be this workspace's)."""
    return ws._read_workspace_id()  # noqa: SLF001 - same package; the property would create it


def _citations(ws: "Workspace") -> tuple[set[str], list[Problem]]:
    """Cited source ids (lenient parse, so one broken file hides nothing else) and one
    ``topic_invalid`` problem per file that breaks the format."""
    cited: set[str] = set()
    problems: list[Problem] = []
    for doc in ws.topic_docs(strict=False):
        if doc.problems:
            first = doc.problems[0]
            problems.append(Problem("topic_invalid", None, None,
                                    f"{first.path}:{first.line}: {first.what}",
                                    {"path": doc.path}))
        for block in doc.blocks:
            cited.update(block_sources(ws, doc, block))
    return cited, problems


@dataclass
class _SessionView:
    branches: dict[str, list[Record]]  # tip -> records
    problems: list[Problem]


def _check_session(memory: "MemoryView", sid: str, ws_id: str | None, cited: set[str],
                   *, count: VerifyReport | None = None) -> _SessionView:
    view = _SessionView({}, [])
    try:
        tips = [t for t in memory.live_tips(sid) if t is not None]
        for tip in tips:
            view.branches[tip] = memory.branch_records(sid, tip)
    except ScriptoriumError as exc:
        view.problems.append(Problem("session_unreadable", sid, None, str(exc)))
        view.branches = {}
        return view
    if count is not None:
        count.branches += len(view.branches)
    if ws_id is None:
        return view
    gaps: dict[str, Problem] = {}
    for tip, recs in view.branches.items():
        found = branch_gap(recs, lambda r: r.marked_for(ws_id))
        if found is None:
            continue
        start, stranded = found
        node = recs[start].node_id
        problem = gaps.get(node)
        if problem is None:
            last = max(i for i, r in enumerate(recs) if r.marked_for(ws_id))
            problem = gaps[node] = Problem(
                "gap", sid, node,
                f"{len(stranded)} unmarked turn(s) before the mark on {recs[last].node_id}: "
                f"the walk stops at that mark and never offers them",
                {"stranded": [r.node_id for r in stranded], "tips": []})
        problem.extra["tips"].append(tip)
        for r in stranded:
            if r.node_id not in problem.extra["stranded"]:
                problem.extra["stranded"].append(r.node_id)
    view.problems.extend(gaps.values())
    for tip, recs in view.branches.items():
        marked_at = [i for i, r in enumerate(recs) if r.marked_for(ws_id)]
        pending = [r.node_id for r in recs[(marked_at[-1] + 1 if marked_at else 0):]]
        blocked = memory.blocked.for_branch(sid, tip, pending)
        if blocked is not None:
            view.problems.append(Problem(
                "blocked", sid, tip,
                f"{len(pending)} turn(s) cannot be written: {blocked['reason_code']}: "
                f"{blocked['message']} -> {blocked['hint']}", dict(blocked)))
    seen: set[str] = set()
    archive = memory.workspace.sources
    for recs in view.branches.values():
        for r in recs:
            if not r.marked_for(ws_id) or r.node_id in seen:
                continue
            seen.add(r.node_id)
            if archive.lookup(r.source_id) is None:
                view.problems.append(Problem(
                    "marked_not_archived", sid, r.node_id,
                    f"marked for {ws_id} but {r.source_id} is not in the evidence archive"))
            elif r.source_id not in cited:
                view.problems.append(Problem(
                    "marked_not_cited", sid, r.node_id,
                    f"marked for {ws_id} (handed to the writer) but no topic cites "
                    f"{r.source_id}", {"source_id": r.source_id}))
    if count is not None:
        count.marked_turns += len(seen)
    return view


def _check(memory: "MemoryView", ids: list[str], ws_id: str | None) -> tuple[VerifyReport, dict]:
    ws = memory.workspace
    report = VerifyReport(workspace_id=ws_id)
    if ws.journal_path.exists():
        report.problems.append(Problem(
            "interrupted_install", None, None,
            f"{ws.journal_path} names an install a crash interrupted; the next writer (or "
            f"verify --repair) finishes or rolls it back"))
    cited, topic_problems = _citations(ws)
    report.problems.extend(topic_problems)
    report.problems.extend(Problem(kind, None, None, detail, extra)
                           for kind, detail, extra in archive_findings(ws))
    views = {}
    for sid in ids:
        report.sessions += 1
        views[sid] = _check_session(memory, sid, ws_id, cited, count=report)
        report.problems.extend(views[sid].problems)
    _find_lost_citations(ws, report.problems)
    return report, views


def _find_lost_citations(ws: "Workspace", problems: list[Problem]) -> None:
    """Turn ``marked_not_cited`` into ``citation_lost`` where the workspace history shows a
    topic once cited the turn (its archive anchor was on a line some commit added): the turn
    reached memory and its paragraph went since. A turn a writer folded into another's
    paragraph was never cited and stays information. One ``git log`` for the whole check,
    and only when some marked turn is uncited."""
    uncited = [p for p in problems if p.kind == "marked_not_cited"]
    if not uncited:
        return
    history = ws.git.added_matches(r"#(source-[0-9a-f]{16})\)", ["topics"])
    if not history:
        return
    for problem in uncited:
        frame = ws.sources.lookup(problem.extra.get("source_id", ""))
        if frame is not None and frame.anchor in history:
            problem.kind = "citation_lost"
            problem.detail = (f"topics cited {frame.source_id} once (the workspace history "
                              "shows it) and no topic cites it now: its paragraph was lost; "
                              "--repair offers the turn again")


def _session_ids(memory: "MemoryView", session_ids: Iterable[str] | None) -> list[str]:
    if session_ids is None:
        return sorted(row["session_id"] for row in memory.store.list_sessions())
    ids = list(session_ids)
    for sid in ids:
        if not memory.store.exists(sid):
            raise NotFound(f"unknown session {sid!r}")
    return ids


def verify(memory: "MemoryView", session_ids: Iterable[str] | None = None, *,
           repair: bool = False, lock_timeout: float = VERIFY_LOCK_TIMEOUT) -> VerifyReport:
    """Check every live branch of ``session_ids`` (default: every session); see the module
    docstring for the problem kinds. With ``repair``: finish an interrupted install and take
    back the marks that strand turns, then check again (``problems`` is what remains,
    ``found`` what was there before, ``repaired`` what was done)."""
    ids = _session_ids(memory, session_ids)
    ws = memory.workspace
    ws_id = _workspace_id(ws)
    if ws_id is None and not repair:
        return _check(memory, ids, None)[0]  # no identity, no lock file: nothing to race
    with ws.lock(timeout=lock_timeout):
        if not repair:
            return _check(memory, ids, ws_id)[0]
        before, views = _check(memory, ids, ws_id)
        repaired: list[dict[str, Any]] = []
        if ws.journal_path.exists():
            repaired.append({"kind": "interrupted_install", "done": ws.recover()})
        current = before
        if any(p.kind in ("archive_invalid", "source_missing") for p in before.problems):
            repaired.extend(repair_archive(memory, ids, memory.clock()))
            current, views = _check(memory, ids, ws_id)
        if ws_id is not None:
            unarchived = {(p.session_id, p.node_id) for p in current.problems
                          if p.kind in ("marked_not_archived", "citation_lost")}
            for sid, view in views.items():
                if not view.branches:
                    continue
                marked = {r.node_id for recs in view.branches.values() for r in recs
                          if r.marked_for(ws_id) and (sid, r.node_id) not in unarchived}
                take = {n for (s, n) in unarchived if s == sid}
                take.update(marks_to_take_back(view.branches.values(), marked))
                if not take:
                    continue
                depth = {r.node_id: i for recs in view.branches.values()
                         for i, r in enumerate(recs)}
                take = sorted(take, key=lambda n: (-depth.get(n, 0), n))  # newest first
                memory.store.merge_node_metadata_batch(sid, {n: {MARK_KEY: None} for n in take})
                repaired.append({"kind": "unmarked", "session_id": sid, "node_ids": take})
        after = _check(memory, ids, ws_id)[0]
    after.found = before.problems
    after.repaired = repaired
    return after
