"""Read-only views of a workspace: ``memory status`` and ``memory show``.

Both only read (status may create the workspace identity on first use, so the id it reports
is the one marks will carry). Broken topic files are reported, not fatal: status is what you
run to find out what is wrong.
"""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInput, NotFound, ScriptoriumError
from ..fsutil import regular_files, safe_join
from .topics import BLOCK_ID_RE, Block, Evidence, TopicDoc, render_block, render_evidence
from .migrate import has_cursors
from .workspace import Workspace

if TYPE_CHECKING:  # pragma: no cover
    from .view import MemoryView


def source_files(ws: Workspace) -> list[str]:
    """Workspace-relative ``sources/**.md`` regular files (no symlinks), sorted."""
    return regular_files(ws.root, ws.sources_dir, ".md")


def workspace_status(ws: Workspace) -> dict[str, Any]:
    """Identity, revision and what the workspace holds (plus any topic format problems), as
    of now: a database home's mirror first pulls what other processes installed."""
    ws.refresh()
    docs = ws.topic_docs(strict=False)
    frames = list(ws.sources.iter_frames())
    problems = [{"path": p.path, "line": p.line, "message": p.what}
                for doc in docs for p in doc.problems[:1]]
    history = ws.git.problem()
    warnings = [f"memory history is not recorded: {history} (the next write re-creates it "
                f"when it holds no history; otherwise move it aside)"] if history else []
    return {
        "workspace_id": ws.workspace_id,
        "revision": ws.revision(),
        "counts": {
            "topics": len(docs),
            "blocks": sum(len(d.blocks) for d in docs),
            "evidence": sum(len(d.evidence) for d in docs),
            "sources": len(frames),
            "source_files": len(source_files(ws)),
        },
        "invalid_topics": problems,
        "interrupted_install": ws.journal_path.exists(),
        **({"warnings": warnings} if warnings else {}),
    }


def _source_view(ws: Workspace, doc: TopicDoc, evidence: Evidence) -> dict[str, Any]:
    return {"fid": evidence.fid, "when": evidence.when, "line": evidence.line,
            "sources": [{"label": s.label, "target": s.target,
                         "source_id": ws.sources.resolve_target(doc.path, s.target)}
                        for s in evidence.sources]}


def block_view(ws: Workspace, doc: TopicDoc, block: Block) -> dict[str, Any]:
    """One block with its footnotes, each source resolved to its id (None if missing)."""
    evidence = [doc.evidence[fid] for fid in dict.fromkeys(block.citations)
                if fid in doc.evidence]
    return {
        "path": doc.path,
        "block_id": block.id,
        "aliases": list(block.aliases),
        "line": block.line,
        "headings": list(block.headings),
        "text": block.text,
        "claims": [{"text": c.text, "citations": list(c.citations)} for c in block.claims],
        "evidence": [_source_view(ws, doc, ev) for ev in evidence],
        "markdown": "\n".join([render_block(block), ""] + [render_evidence(ev) for ev in evidence]),
    }


def _topic_rel(ws: Workspace, ref: str) -> str | None:
    """The topic file ``ref`` names (relative to topics/ or to the workspace), or None.
    A path that escapes the workspace is refused outright."""
    if not ref or "/" not in ref and not ref.endswith(".md"):
        return None
    if ref.startswith("topics/"):
        safe_join(ws.root, ref, "topic path")
        rel = posixpath.normpath(ref)
    else:
        safe_join(ws.topics_dir, ref, "topic path")
        rel = posixpath.normpath(posixpath.join("topics", ref))
    if not rel.startswith("topics/"):
        raise InvalidInput(f"invalid topic path {ref!r}: not under topics/")
    return rel if rel in set(ws.topic_paths()) else None


def show(ws: Workspace, ref: str) -> dict[str, Any]:
    """``ref`` is a topic file (``projects/x.md`` or ``topics/projects/x.md``) or a block id
    (``f888f60e`` or ``^f888f60e``; aliases too). Unknown ⇒ NotFound."""
    if not isinstance(ref, str) or not ref.strip():
        raise InvalidInput("memory show needs a topic path or a block id")
    ref = ref.strip()
    ws.refresh()  # a long-lived reader of a database home sees other processes' installs
    rel = _topic_rel(ws, ref)
    if rel is not None:
        data = (ws.root / rel).read_bytes()
        doc = ws.read_topic(rel, strict=False)
        return {
            "kind": "topic",
            "path": rel,
            "text": data.decode("utf-8", errors="replace"),
            "blocks": [{"block_id": b.id, "aliases": list(b.aliases), "line": b.line,
                        "headings": list(b.headings), "text": b.text} for b in doc.blocks],
            "problems": [{"line": p.line, "message": p.what} for p in doc.problems],
        }
    block_id = ref[1:] if ref.startswith("^") else ref
    if BLOCK_ID_RE.fullmatch(block_id):
        found = ws.find_block(block_id)
        if found is not None:
            return {"kind": "block", **block_view(ws, *found)}
    raise NotFound(f"no topic file or block named {ref!r} in {ws.location}")


def memory_status(memory: "MemoryView", session_ids: list[str] | None = None) -> dict[str, Any]:
    """``memory status``: the workspace view plus, per session and live branch, the tip and
    what it still owes (turns, tokens, ids). Read-only: no migration, no mark, no write.

    ``migration_pending`` says the workspace still carries legacy position cursors: until the
    first write (or ``memory migrate``) runs, whole sessions show as pending.
    """
    data = workspace_status(memory.workspace)
    ids = session_ids if session_ids else [r["session_id"] for r in memory.store.list_sessions()]
    for sid in ids:
        if not memory.store.exists(sid):
            raise NotFound(f"unknown session {sid!r}")
    data["migration_pending"] = has_cursors(memory.workspace)
    data["sessions"] = [_session_status(memory, sid) for sid in ids]
    return data


def _session_status(memory: Any, sid: str) -> dict[str, Any]:
    """One session's row; a session that cannot be read is reported, not fatal to the rest."""
    try:
        return memory.session_status(sid)
    except ScriptoriumError as exc:
        return {"session_id": sid, "branches": [], "error": str(exc), "reason_code": exc.code}
