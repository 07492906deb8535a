"""Verify's evidence part: archive files a write cannot append to, citations the archive
cannot resolve, and the repair that makes such a session writable again.

A damaged v2 file (garbage appended, a frame cut short) fails every later write of its session
(SOURCE_ARCHIVE_INVALID); a deleted one leaves topics citing evidence that is gone, and the
next install touching them fails (MISSING_SOURCE). Repair cuts a damaged file back to its
valid frames, keeping a copy of the whole damaged file under ``<runtime>/damaged-sources/``,
then archives again, from the session store, every turn a topic cites that the archive lost.
A marked turn that is then still not archived is left to verify's mark repair (its mark goes,
so the next write writes it again).
"""

from __future__ import annotations

import datetime as _dt
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import ScriptoriumError
from .sources import source_anchor
from .records import to_source_record

if TYPE_CHECKING:  # pragma: no cover
    from .view import MemoryView
    from .workspace import Workspace

KEEP_DIR = "damaged-sources"
# The failures this repair removes the cause of: the branches they blocked may write again.
ARCHIVE_CODES = {"SOURCE_ARCHIVE_INVALID", "MISSING_SOURCE"}


def archive_findings(ws: "Workspace") -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, detail, extra) per damaged archive file (``archive_invalid``) and per footnote
    source the archive cannot resolve (``source_missing``)."""
    out: list[tuple[str, str, dict[str, Any]]] = []
    for rel, status in ws.sources.damaged_files():
        out.append(("archive_invalid",
                    f"{rel}: {status.error}; {len(status.frames)} valid frame(s) before it, and "
                    "no write of this session can append until it is repaired",
                    {"path": rel, "valid_frames": len(status.frames), "error": status.error}))
    for path, line, fid, target in _unresolved(ws):
        out.append(("source_missing",
                    f"{path}:{line}: [^{fid}] cites {target}, which the archive does not hold",
                    {"path": path, "target": target}))
    return out


def _unresolved(ws: "Workspace") -> Iterable[tuple[str, int, str, str]]:
    for doc in ws.topic_docs(strict=False):
        for ev in doc.evidence.values():
            for link in ev.sources:
                if ws.sources.resolve_target(doc.path, link.target) is None:
                    yield doc.path, ev.line, ev.fid, link.target


def repair_archive(memory: "MemoryView", session_ids: list[str], now: float) -> list[dict[str, Any]]:
    """Cut damaged files back to their valid prefix and re-archive cited turns the archive
    lost (see the module docstring). Caller holds the workspace write lock."""
    ws = memory.workspace
    done: list[dict[str, Any]] = []
    stamp = _dt.datetime.fromtimestamp(now, _dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    keep_dir = ws.runtime_dir / KEEP_DIR / stamp
    for rel, _ in ws.sources.damaged_files():
        kept = ws.sources.cut_to_valid_prefix(rel, keep_dir)
        done.append({"kind": "archive_cut", "path": rel, "valid_frames": kept,
                     "damaged_copy": str((keep_dir / rel).relative_to(ws.root))})
    wanted = {target.rpartition("#")[2] for _, _, _, target in _unresolved(ws)}
    unblocked = memory.blocked.forget(ARCHIVE_CODES)
    if unblocked:
        done.append({"kind": "unblocked", "session_ids": unblocked})
    if not wanted:
        return done
    for sid in session_ids:
        try:
            tips = [t for t in memory.live_tips(sid) if t is not None]
            lost = {r.source_id: r for tip in tips for r in memory.branch_records(sid, tip)
                    if source_anchor(r.source_id) in wanted}
        except ScriptoriumError:  # an unreadable session is verify's own finding
            continue
        if lost:
            written = ws.sources.archive([to_source_record(r) for r in lost.values()])
            done.append({"kind": "rearchived", "session_id": sid, "source_ids": written})
    return done
