"""``scriptorium memory …`` commands (thin wrappers over scriptorium.memory)."""

from __future__ import annotations

from typing import Any

import click

from .app import App, command, memory, output


def _open_workspace(app: App):
    """The home's memory workspace, opened without laying anything out (read-only use)."""
    from ..memory.workspace import Workspace

    return Workspace.open(app.home / "memory", create=False)


def _human_status(d: dict[str, Any]) -> str:
    c = d["counts"]
    lines = [f"workspace {d['workspace_id']}  revision {d['revision']}",
             f"{c['topics']} topic file(s), {c['blocks']} block(s), {c['evidence']} footnote(s); "
             f"{c['sources']} archived source(s) in {c['source_files']} file(s)"]
    for p in d.get("invalid_topics", []):
        lines.append(f"invalid: {p['path']}:{p['line']}: {p['message']}")
    if d.get("interrupted_install"):
        lines.append("an interrupted install is pending recovery (the next writer finishes it)")
    return "\n".join(lines)


@command(memory, "status")
def status_cmd(app: App) -> None:
    """Workspace id, revision and what memory holds (read-only)."""
    from ..memory.status import workspace_status

    output(app, workspace_status(_open_workspace(app)), _human_status)


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
    from ..memory.status import show

    output(app, show(_open_workspace(app), ref), _human_show)
