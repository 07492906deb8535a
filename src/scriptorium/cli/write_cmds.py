"""``scriptorium memory write`` and ``memory watch``: the write paths from the shell."""

from __future__ import annotations

import sys

import click

from .app import App, command, memory, output


def open_memory(app: App, **overrides):
    """A :class:`~scriptorium.memory.writing.Memory` for the app's home and flag overrides."""
    from ..memory.writing import Memory

    return Memory(app.home, settings=app.settings(**overrides))


def _progress(app: App, total: int):
    """A rich progress bar on a terminal for long runs; nothing under --json or in a pipe."""
    if app.as_json or total < 2 or not sys.stderr.isatty():
        return None
    from rich.progress import Progress

    return Progress(transient=True, console=None)


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
@click.option("--writer", type=click.Choice(["embedded", "llm"]), default=None)
@click.option("--llm-base-url", default=None, help="OpenAI-compatible endpoint for --writer llm.")
@click.option("--llm-model", default=None, help="Model name for --writer llm.")
def write_cmd(app: App, session_ids: tuple[str, ...], all_sessions: bool, force: bool,
              trigger_tokens: int | None, writer: str | None, llm_base_url: str | None,
              llm_model: str | None) -> None:
    """Write pending turns of SESSION_IDS (or --all) into memory and mark them."""
    from ..errors import InvalidInput

    if bool(session_ids) == all_sessions:
        raise InvalidInput("name one or more sessions, or pass --all (not both)")
    mem = open_memory(app, trigger_tokens=trigger_tokens, writer_kind=writer,
                      llm_base_url=llm_base_url, llm_model=llm_model)
    ids = list(session_ids) if session_ids else [r["session_id"] for r in mem.store.list_sessions()]
    for sid in session_ids:
        if not mem.store.exists(sid):
            from ..sessions.errors import SessionNotFound

            raise SessionNotFound(f"unknown session {sid!r}")
    bar = _progress(app, len(ids))
    if bar is not None:
        with bar:
            task = bar.add_task("writing memory", total=len(ids))
            results = mem.write(ids, force=force, progress=lambda _sid: bar.advance(task))
    else:
        results = mem.write(ids, force=force)
    data = {"workspace_id": mem.workspace_id, "sessions": [r.to_dict() for r in results]}

    def human(d):
        lines = []
        for row in d["sessions"]:
            state = (f"FAILED {row['failure']['reason_code']}: {row['failure']['message']}"
                     if row["failure"] else f"{len(row['marked'])} turn(s) written")
            lines.append(f"{row['session_id']}: {row['batches']} batch(es), {state}")
            lines += pending_lines(row.get("pending") or [])
        return "\n".join(lines) or "no sessions"

    output(app, data, human)
    if any(r.failure for r in results):
        sys.exit(1)


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
    between steps (a write under way finishes) and exits 0."""
    import os
    import signal
    import threading

    from ..memory.watcher import IdleWatcher

    mem = open_memory(app, watcher_idle_seconds=idle_seconds,
                      watcher_interval_seconds=interval)
    watcher = IdleWatcher(mem)

    def human(d: dict) -> str:
        if not d["ran"]:
            return "another watcher pass is running; skipped"
        from ..memory.watcher import PassReport

        lines = PassReport(**d).lines()
        return "\n".join(lines) if lines else f"considered {d['considered']}, nothing to do"

    if once:
        report = watcher.run_once(retry_failed=retry_failed)
        output(app, report.to_dict(), human)
        sys.exit(1 if report.terminal else 0)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    wake_r, wake_w = os.pipe()  # a signal writes here, ending the watcher's sleep at once
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    if retry_failed:
        output(app, watcher.run_once(retry_failed=True).to_dict(), human)
    click.echo(f"watching {mem.home} (idle {watcher.idle_seconds:g} s, safety-net poll every "
               f"{watcher.interval:g} s)", err=True)
    try:
        watcher.run_forever(stop, on_report=lambda r: output(app, r.to_dict(), human),
                            wake_fds=[wake_r])
    except KeyboardInterrupt:
        pass
