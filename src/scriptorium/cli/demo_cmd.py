"""``scriptorium demo``: the main job, end to end, in a temporary home."""

from __future__ import annotations

import click

from .app import App, command, main, output


@command(main, "demo")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Build the demo here instead of a new temporary directory (must be empty).")
def demo_cmd(app: App, directory: str | None) -> None:
    """Build a branching session (retry, edit, sub-agent), write memory, explain the result."""
    from pathlib import Path

    from ..demo import render_report, run_demo
    from ..errors import InvalidInput

    if directory and Path(directory).exists() and any(Path(directory).iterdir()):
        raise InvalidInput(f"demo directory {directory} is not empty")
    report = run_demo(Path(directory) if directory else None)
    output(app, report.to_dict(), lambda _d: render_report(report))
