"""``scriptorium memory migrate`` and ``memory backfill``: upgrading an old installation.

Both are one library call each. On a terminal they show a rich progress display on stderr;
under ``--json`` or in a pipe they print only the report. Both exit non-zero when work
remains or failed, so a script can loop until done.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Callable, Iterator

import click

from .app import App, command, memory, output


@contextlib.contextmanager
def progress_display(app: App, what: str) -> Iterator[Callable[[str], None] | None]:
    """A rich progress bar fed by the library's progress messages, or None (no TTY or
    --json). A :class:`~scriptorium.memory.progress.Step` message moves the bar; any other
    message only updates the text."""
    if app.as_json or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn,
                               TextColumn, TimeElapsedColumn)

    bar = Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                   MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True),
                   transient=True)
    with bar:
        task = bar.add_task(what, total=None)

        def update(message: str) -> None:
            total = getattr(message, "total", None)
            if total:
                bar.update(task, description=f"{what}: {message}", total=total,
                           completed=getattr(message, "done", 0))
            else:
                bar.update(task, description=f"{what}: {message}")

        yield update


@command(memory, "migrate")
def migrate_cmd(app: App) -> None:
    """Move an old position-cursor installation onto node marks (safe to rerun)."""
    # create=False: a home without a memory workspace has nothing to migrate, so make none
    mem = app.memory(create=False)
    with progress_display(app, "migrating") as progress:
        report = mem.migrate(progress=progress)
    data = report.to_dict()

    def human(d: dict) -> str:
        if not d["migrated"]:
            return "nothing to migrate (no legacy cursors)"
        lines = [f"{sid}: marked {len(ids)} turn(s)" for sid, ids in sorted(d["marked"].items())]
        lines += [f"{sid}: skipped ({why})" for sid, why in sorted(d["skipped"].items())]
        lines += [f"{sid}: FAILED {why}" for sid, why in sorted(d["errors"].items())]
        lines.append("cursors removed" if d["cursors_removed"]
                     else "cursors kept: rerun `scriptorium memory migrate`")
        return "\n".join(lines)

    output(app, data, human)
    if report.errors:
        session, why = sorted(report.errors.items())[0]
        click.echo(f"error: migration failed for session {session}: {why}", err=True)
        sys.exit(1)


@command(memory, "backfill")
@click.option("--budget", type=click.IntRange(min=1), default=None,
              help="Token budget of one writer batch (default 16000).")
@click.option("--writer", default=None, metavar="NAME",
              help="Writer to use (default from config).")
def backfill_cmd(app: App, budget: int | None, writer: str | None) -> None:
    """Write archived trusted sources that no topic cites (never touches sessions)."""
    mem = app.memory(writer_kind=writer)
    with progress_display(app, "backfilling") as progress:
        report = mem.backfill(budget_tokens=budget, progress=progress)
    data = report.to_dict()
    output(app, data, lambda d: (
        f"{d['status']}: {d['processed']} of {d['candidates']} source(s) written, "
        f"{d['remaining']} remaining, revision {d['revision']}"))
    if report.failure:
        click.echo(f"error: backfill batch failed: {report.failure.get('reason_code')}: "
                   f"{report.failure.get('message')}", err=True)
    if report.status != "ok" or report.remaining:
        sys.exit(1)
