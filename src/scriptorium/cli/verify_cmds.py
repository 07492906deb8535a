"""``scriptorium memory verify [SID…] [--repair]``: are the marks a prefix on every branch?"""

from __future__ import annotations

import sys
from typing import Any

import click

from .app import App, command, memory, output


def _human(d: dict[str, Any]) -> str:
    lines = []
    for fix in d.get("repaired", []):
        if fix["kind"] == "unmarked":
            lines.append(f"repaired {fix['session_id']}: took back {len(fix['node_ids'])} "
                         f"mark(s), those turns are offered again")
        elif fix["kind"] == "archive_cut":
            lines.append(f"repaired {fix['path']}: cut back to {fix['valid_frames']} valid "
                         f"frame(s); the damaged file is kept at {fix['damaged_copy']}")
        elif fix["kind"] == "rearchived":
            lines.append(f"repaired {fix['session_id']}: archived "
                         f"{len(fix['source_ids'])} cited turn(s) again from the session")
        elif fix["kind"] == "unblocked":
            lines.append(f"unblocked {', '.join(fix['session_ids'])}: write again")
        else:
            lines.append(f"repaired: interrupted install {fix['done']}")
    for p in d["problems"]:
        where = "/".join(x for x in (p["session_id"], p["node_id"]) if x) or "workspace"
        lines.append(f"{p['severity']}: {p['kind']} {where}: {p['detail']}")
    c = d["checked"]
    lines.append(f"{'ok' if d['ok'] else 'NOT OK'}: {c['sessions']} session(s), "
                 f"{c['branches']} live branch(es), {c['marked_turns']} marked turn(s) checked")
    return "\n".join(lines)


@command(memory, "verify")
@click.argument("session_ids", nargs=-1, metavar="[SID]...")
@click.option("--repair", is_flag=True,
              help="Take back the marks that strand turns behind a gap (and marks of turns "
                   "with no archived evidence or whose citation was lost), so the next write "
                   "offers those turns again.")
def verify_cmd(app: App, session_ids: tuple[str, ...], repair: bool) -> None:
    """Check that on every live branch this workspace's marks form a prefix, that every
    marked turn is archived, and list marked turns no topic cites. Read-only without
    --repair; exits non-zero while an error-level problem remains."""
    # Without --repair nothing may change: no layout, no identity, no crash recovery.
    mem = app.memory(create=repair, recover=repair)
    report = mem.verify(session_ids, repair=repair)
    output(app, report.to_dict(), _human)
    if not report.ok:
        sys.exit(1)
