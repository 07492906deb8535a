"""``scriptorium import claude-code|pi|codex [PATH…]`` and ``import chatgpt FILE``.

Each is one call of :meth:`~scriptorium.memory.writing.Memory.import_sessions`. The report
has one row per source file; a file that could not be read fully is listed with its path
and line, the others are imported anyway, and the command then exits 4.
"""

from __future__ import annotations

import sys

import click

from .app import App, _Group, command, main, output


@main.group("import", cls=_Group)
def import_group() -> None:
    """Bring conversations in from other tools, incrementally (safe to rerun)."""


def _run(app: App, kind: str, paths: tuple[str, ...], write: bool) -> None:
    data = app.memory().import_sessions(kind, list(paths) or None, write=write)

    def human(d: dict) -> str:
        lines = []
        for row in d["files"]:
            if row["unchanged"]:
                continue
            skipped = sum(row["skipped"].values())
            lines.append(f"{row['path']}: +{row['nodes_added']} node(s), "
                         f"{row['sessions_created']} new / {row['sessions_updated']} updated "
                         f"session(s), {row['forks']} fork(s), {skipped} line(s) skipped")
            lines.extend(f"  error: {e}" for e in row.get("errors", []))
        unchanged = sum(1 for row in d["files"] if row["unchanged"])
        lines.append(f"{len(d['files'])} file(s), {unchanged} unchanged, "
                     f"{d['nodes_added']} node(s) added to {len(d['changed_sessions'])} "
                     f"session(s)")
        for w in d.get("writes", []):
            if not w["failure"]:  # a failed write is reported on stderr below
                lines.append(f"memory {w['session_id']}: {len(w['marked'])} turn(s) written")
        return "\n".join(lines)

    output(app, data, human)
    errors = [e for row in data["files"] for e in row.get("errors", [])]
    if errors:
        click.echo(f"error: {len(errors)} problem(s) while importing; first: {errors[0]}",
                   err=True)
        sys.exit(4)
    failed = [w for w in data.get("writes", []) if w["failure"]]
    for w in failed:
        click.echo(f"error: {w['session_id']}: write failed: {w['failure']['reason_code']}: "
                   f"{w['failure']['message']}", err=True)
    if failed:
        sys.exit(1)


_WRITE = click.option("--write", is_flag=True,
                      help="Run the session-boundary memory write for every changed session.")


@command(import_group, "claude-code")
@click.argument("paths", nargs=-1, type=click.Path())
@_WRITE
def claude_code_cmd(app: App, paths: tuple[str, ...], write: bool) -> None:
    """Claude Code transcripts (default ~/.claude/projects)."""
    _run(app, "claude-code", paths, write)


@command(import_group, "pi")
@click.argument("paths", nargs=-1, type=click.Path())
@_WRITE
def pi_cmd(app: App, paths: tuple[str, ...], write: bool) -> None:
    """pi coding-agent sessions (default ~/.pi/agent/sessions)."""
    _run(app, "pi", paths, write)


@command(import_group, "codex")
@click.argument("paths", nargs=-1, type=click.Path())
@_WRITE
def codex_cmd(app: App, paths: tuple[str, ...], write: bool) -> None:
    """Codex CLI rollouts (default ~/.codex/sessions)."""
    _run(app, "codex", paths, write)


@command(import_group, "chatgpt")
@click.argument("files", nargs=-1, required=True, type=click.Path())
@_WRITE
def chatgpt_cmd(app: App, files: tuple[str, ...], write: bool) -> None:
    """A ChatGPT export: conversations.json or the export zip."""
    _run(app, "chatgpt", files, write)
