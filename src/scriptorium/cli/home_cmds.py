"""``scriptorium home …`` commands: whole homes (a thin view of scriptorium.home_copy)."""

from __future__ import annotations

from typing import Any

import click

from ..errors import WriteFailed
from .app import App, _Group, command, main, output


@main.group(cls=_Group)
def home() -> None:
    """Whole homes: copy one into another (directory <-> PostgreSQL)."""


def _human_copy(d: dict[str, Any]) -> str:
    lines = [f"{d['source']} -> {d['destination']} (workspace {d['workspace_id']})",
             f"{d['revisions_copied']} install(s) replayed ({d['revisions_skipped']} already "
             f"there), {d['files_copied']} memory file(s) brought over",
             f"{d['blocked_branches']} blocked branch(es) kept blocked",
             f"{d['sessions_copied']} session(s) copied ({d['sessions_skipped']} already "
             f"there), {d['nodes_copied']} node(s)",
             f"import ledger: {d['import_ledger_rows']} row(s) (an import there reads only "
             f"what is new)",
             "search index: not copied, rebuilt in the destination from its topics and archive",
             *(["not copied (not memory scriptorium keeps): " + ", ".join(d["not_copied"])]
               if d["not_copied"] else []),
             "verified: both homes hold the same" if d["verified"] else "NOT verified:"]
    lines += [f"  {p}" for p in d["problems"]]
    return "\n".join(lines)


@command(home, "copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
def copy_cmd(app: App, src: str, dst: str) -> None:
    """Copy the home SRC (a directory or postgresql://… URL) into DST, keeping ids, marks,
    topics, archive, history and the import ledger; resumable (run it again after an interruption); verified
    at the end (exit 1 when the homes differ)."""
    from ..home_copy import copy_home

    report = copy_home(src, dst)
    output(app, report.to_dict(), _human_copy)
    if not report.verified:  # the report above is the one JSON document; the reason here
        click.echo(f"error: home copy: {len(report.problems)} difference(s) remain: "
                   f"{report.problems[0]}", err=True)
        click.get_current_context().exit(WriteFailed("").exit_code)
