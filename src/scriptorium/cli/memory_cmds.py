"""``scriptorium memory …`` commands (thin wrappers over scriptorium.memory)."""

from __future__ import annotations

from typing import Any

import click

from .app import App, command, memory, output


def _human_status(d: dict[str, Any]) -> str:
    c = d["counts"]
    lines = [f"workspace {d['workspace_id']}  revision {d['revision']}",
             f"{c['topics']} topic file(s), {c['blocks']} block(s), {c['evidence']} footnote(s); "
             f"{c['sources']} archived source(s) in {c['source_files']} file(s)"]
    for p in d.get("invalid_topics", []):
        lines.append(f"invalid: {p['path']}:{p['line']}: {p['message']}")
    if d.get("interrupted_install"):
        lines.append("an interrupted install is pending recovery (the next writer finishes it)")
    if d.get("migration_pending"):
        lines.append("legacy position cursors present: the next write (or `memory migrate`) "
                     "migrates them; until then whole sessions show as pending")
    for session in d.get("sessions", []):
        lines.append(f"session {session['session_id']}:")
        if session.get("error"):
            lines.append(f"  cannot be read: {session['error']}")
        for b in session["branches"]:
            mark = "*" if b["head"] else " "
            lines.append(f"  {mark} {b['tip']}: {b['pending_turns']} pending turn(s), "
                         f"{b['pending_tokens']} token(s)")
            if b.get("blocked"):
                blocked = b["blocked"]
                lines.append(f"    BLOCKED {blocked['reason_code']}: {blocked['message']}")
                lines.append(f"    what to do: {blocked['hint']}")
    return "\n".join(lines)


@command(memory, "status")
@click.argument("session_ids", nargs=-1, metavar="[SID]...")
def status_cmd(app: App, session_ids: tuple[str, ...]) -> None:
    """Workspace id, revision, what memory holds and, per session and live branch, what is
    still pending (read-only). Without SID: every session."""
    app.require_home()
    output(app, app.memory(create=False).status(session_ids), _human_status)


def _human_show(d: dict[str, Any]) -> str:
    if d["kind"] == "topic":
        return d["text"].rstrip("\n")
    head = f"{d['path']}:{d['line']}  ^{d['block_id']}"
    if d["aliases"]:
        head += "  (aliases: " + ", ".join("^" + a for a in d["aliases"]) + ")"
    return head + "\n\n" + d["markdown"]


@command(memory, "show")
@click.argument("ref", metavar="PATH|BLOCK_ID")
def show_cmd(app: App, ref: str) -> None:
    """Print a topic file (path relative to topics/ or the workspace) or one block with its
    footnotes."""
    app.require_home()
    output(app, app.memory(create=False).show(ref), _human_show)
