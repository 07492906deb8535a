"""``scriptorium memory write`` and ``memory watch``: the write paths from the shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Iterator

import click

from ..errors import ScriptoriumError, from_os_error
from .app import App, command, memory, output


def _progress(app: App, count: Callable[[], int]) -> tuple[Any, int] | None:
    """A rich progress bar (and its total) on a terminal for runs of two sessions or more;
    nothing under --json or in a pipe."""
    if app.as_json or not sys.stderr.isatty():
        return None
    total = count()
    if total < 2:
        return None
    from rich.console import Console
    from rich.progress import Progress

    return Progress(transient=True, console=Console(stderr=True)), total


REASONS = {"below_threshold": "below the threshold", "rejected_reply": "a rejected reply "
           "(retried reply only): waits for the threshold", "failure": "the write failed",
           "session_boundary": "waits for the session-boundary write",
           "archived_branch": "archived branch"}


def pending_lines(pending: list[dict]) -> list[str]:
    """The text view of what a session still owes after a write."""
    if not pending:
        return ["  nothing pending"]
    return [f"  still pending on {'the head' if p['head'] else 'branch'} {p['tip']}: "
            f"{p['pending_turns']} turn(s), {p['pending_tokens']} tokens — "
            f"{REASONS.get(p['reason'], p['reason'])}" for p in pending]


@command(memory, "write")
@click.argument("session_ids", nargs=-1)
@click.option("--all", "all_sessions", is_flag=True, help="Write every session.")
@click.option("--force", is_flag=True,
              help="Session-boundary write: the head branch whatever it holds, then every "
                   "other live branch whose pending turns reach the threshold.")
@click.option("--trigger-tokens", type=click.IntRange(min=1), default=None,
              help="Batch size threshold in tokens (default from config: 16000).")
@click.option("--writer", default=None, metavar="NAME",
              help="A registered writer (default from config: embedded).")
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint for --writer llm.")
@click.option("--llm-model", default=None, help="Model name for --writer llm.")
def write_cmd(app: App, session_ids: tuple[str, ...], all_sessions: bool, force: bool,
              trigger_tokens: int | None, writer: str | None, llm_base_url: str | None,
              llm_model: str | None) -> None:
    """Write pending turns of SESSION_IDS (or --all) into memory and mark them."""
    from ..errors import InvalidInput

    if bool(session_ids) == all_sessions:
        raise InvalidInput("name one or more sessions, or pass --all (not both)")
    mem = app.memory(trigger_tokens=trigger_tokens, writer_kind=writer,
                     llm_base_url=llm_base_url, llm_model=llm_model)
    ids = list(session_ids) if session_ids else None
    shown = _progress(app, lambda: len(ids) if ids else len(mem.store.list_sessions()))
    if shown is not None:
        bar, total = shown
        with bar:
            task = bar.add_task("writing memory", total=total)
            failed = _report_each(app, mem, mem.write_each(
                ids, force=force, progress=lambda _sid: bar.advance(task)))
    else:
        failed = _report_each(app, mem, mem.write_each(ids, force=force))
    for row in failed:  # the reason of a failed write is an error: stderr, in every mode
        click.echo(f"error: {row['session_id']}: write failed: "
                   f"{row['failure']['reason_code']}: {row['failure']['message']}", err=True)
    if failed:
        sys.exit(1)


def _report_each(app: App, mem: Any, results: Iterator[Any]) -> list[dict]:
    """Print each session's result as it comes and let it go (a write of thousands of
    sessions holds one result at a time); return the failed rows.

    Under ``--json`` stdout is still one document, ``{"workspace_id", "sessions": [...]}``,
    written row by row; an error that stops the run midway closes it with ``"error"`` (the
    document is whole, the rows say what was written) before the usual one line on stderr."""
    failed: list[dict] = []
    opened = False
    try:
        for result in results:
            row = result.to_dict()
            if row["failure"]:
                failed.append({"session_id": row["session_id"], "failure": row["failure"]})
            if app.as_json:
                text = json.dumps(row, ensure_ascii=False, default=str)
                click.echo(f", {text}" if opened else f"{_json_head(mem)}[{text}", nl=False)
            else:
                click.echo("\n".join([f"{row['session_id']}: {row['batches']} batch(es), "
                                      f"{len(row['marked'])} turn(s) written",
                                      *pending_lines(row.get("pending") or [])]))
            opened = True
            for warning in row.get("warnings") or []:
                click.echo(f"warning: {row['session_id']}: {warning}", err=True)
    except (ScriptoriumError, OSError) as exc:
        if not (app.as_json and opened):
            raise
        error = exc if isinstance(exc, ScriptoriumError) else from_os_error(exc)
        click.echo(f"], \"error\": {json.dumps(error.to_dict(), ensure_ascii=False)}}}")
        click.echo(f"error: {error}", err=True)
        sys.exit(error.exit_code)
    if app.as_json:
        click.echo("]}" if opened else f"{_json_head(mem)}[]}}")
    elif not opened:
        click.echo("no sessions")
    return failed


def _json_head(mem: Any) -> str:
    """``{"workspace_id": "…", "sessions": `` exactly as ``json.dumps`` of the whole writes it."""
    return json.dumps({"workspace_id": mem.workspace_id, "sessions": []},
                      ensure_ascii=False)[:-3]


@command(memory, "watch")
@click.option("--once", is_flag=True, help="Run one polling pass and exit.")
@click.option("--idle-seconds", type=click.FloatRange(min=0), default=None,
              help="How long a session must be quiet before it is written (default 1800).")
@click.option("--interval", type=click.FloatRange(min=0.01), default=None,
              help="Seconds between safety-net polls of every session (default 10800); head "
                   "moves are followed as they are announced.")
@click.option("--retry-failed", is_flag=True,
              help="Retry sessions whose last write failed for good (e.g. a missing API key).")
def watch_cmd(app: App, once: bool, idle_seconds: float | None, interval: float | None,
              retry_failed: bool) -> None:
    """Write branches as the head leaves them and sessions as they go quiet (told by the
    head-move log), with a slow poll of every session as a safety net. SIGTERM stops it
    between steps (a write under way finishes) and exits 0. On a PostgreSQL home it runs as
    a queue worker (as `memory work`): its state is in the home, so a restarted watcher
    resumes and several (on any hosts) share the sessions."""
    import os
    import signal
    import threading

    mem = app.memory(watcher_idle_seconds=idle_seconds, watcher_interval_seconds=interval)
    watcher = mem.watcher()

    def show(report: Any) -> None:
        def human(d: dict[str, Any]) -> str:
            if not d["ran"]:
                return "another watcher pass is running; skipped"
            lines = report.lines()
            return "\n".join(lines) if lines else f"considered {d['considered']}, nothing to do"

        output(app, report.to_dict(), human)

    if once:
        report = watcher.run_once(retry_failed=retry_failed)
        show(report)
        sys.exit(1 if report.terminal else 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wake_r, wake_w = os.pipe()  # a signal writes here, ending the watcher's sleep at once
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    if retry_failed:
        show(watcher.run_once(retry_failed=True))
    if isinstance(mem.home, Path):
        click.echo(f"watching {mem.home} (idle {watcher.idle_seconds:g} s, safety-net poll "
                   f"every {watcher.interval:g} s)", err=True)
    else:  # the URL's display form: no password on screen
        click.echo(f"watching {mem.store.root} as a queue worker, as `memory work` does: "
                   f"state in the home, shared with other watchers (idle "
                   f"{watcher.idle_seconds:g} s, safety-net wake every {watcher.interval:g} s)",
                   err=True)
    try:
        watcher.run_forever(stop, on_report=show, wake_fds=[wake_r])
    except KeyboardInterrupt:
        pass


@command(memory, "work")
@click.option("--drain", is_flag=True,
              help="Write everything pending now (every owed session-boundary write), then "
                   "exit.")
@click.option("--until-idle", is_flag=True,
              help="Exit once nothing is owed (sessions still moving are waited for).")
@click.option("--idle-seconds", type=click.FloatRange(min=0), default=None,
              help="How long a session must be quiet before its session-boundary write "
                   "(default: the watcher's, 1800).")
@click.option("--interval", type=click.FloatRange(min=0.01), default=None,
              help="Safety-net wake-up in seconds when nothing is announced (default 60); "
                   "head moves wake the worker at once (LISTEN).")
def work_cmd(app: App, drain: bool, until_idle: bool, idle_seconds: float | None,
             interval: float | None) -> None:
    """Run a worker of a PostgreSQL home: claim due (session, branch) jobs (SKIP LOCKED, so
    any number of workers on any hosts share them) and write them. SIGTERM stops it between
    jobs (a job under way finishes) and exits 0."""
    import os
    import signal
    import threading

    mem = app.memory()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wake_r, wake_w = os.pipe()  # a signal writes here, ending the worker's sleep at once
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    failed = []

    def show(report: Any) -> None:
        if report.failure:
            failed.append(report)
        output(app, report.to_dict(), lambda _d: report.line())

    try:
        summary = mem.work(stop=stop, until_idle=until_idle or drain, drain=drain,
                           idle_seconds=idle_seconds, interval_seconds=interval,
                           on_report=show, wake_fds=[wake_r],
                           on_ready=lambda: click.echo("working (SIGTERM stops between jobs)",
                                                       err=True))
    except KeyboardInterrupt:
        return
    output(app, summary.to_dict(), lambda d: f"worker {d['worker']}: {d['jobs']} job(s), "
                                             f"{d['failed']} failed ({d['stopped_by']})")
    if failed and (drain or until_idle):
        sys.exit(1)
