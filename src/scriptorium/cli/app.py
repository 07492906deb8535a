"""The click application: the root group, the ``session`` and ``memory`` groups and the
conventions every command follows.

Conventions: every command takes ``--json`` (stdout is then exactly one JSON document);
any :class:`~scriptorium.errors.ScriptoriumError` (or an OSError such as a full disk) becomes
one line on stderr and the error's exit code; what the library logs on the way is a
``warning: …`` line each. Commands are thin: parse arguments, make one library call, print
the result.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from typing import TYPE_CHECKING, Any, Callable, Sequence

import click

from ..config import Home, Settings, load_settings, resolve_location
from ..errors import NotFound, ReasonCode, ScriptoriumError, from_os_error

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.writing import Memory
    from ..sessions import SessionStore
    from ..sessions.pg_store import PgSessionStore


class App:
    """What every command needs: the home (a directory, or a PostgreSQL home URL) and lazily
    built library objects."""

    def __init__(self, home: str | None):
        self._home_arg = home
        self._home: Home | None = None
        self.as_json = False
        self._warned: set[str] = set()
        self._pg_store: PgSessionStore | None = None
        self._memories: list[Memory] = []

    @property
    def home(self) -> Home:
        """Resolved when a command first needs it, so a bad ``--home`` URL is reported like
        any other error of that command (under ``--json`` too)."""
        if self._home is None:
            self._home = resolve_location(self._home_arg)
        return self._home

    def require_home(self) -> None:
        """Refuse a home that does not exist (read-only commands must not create one): a
        missing directory, or a PostgreSQL home whose schema was never created."""
        home = self.home
        if isinstance(home, str):
            from ..postgres.connect import home_exists
            from ..postgres.url import parse_home_url

            if not home_exists(home):
                raise NotFound(f"no scriptorium home at {parse_home_url(home).display} "
                               f"(check --home or $SCRIPTORIUM_HOME)")
            return
        if not home.is_dir():
            raise NotFound(f"no scriptorium home at {home} (check --home or "
                           f"$SCRIPTORIUM_HOME)")

    def settings(self, **overrides: Any) -> Settings:
        settings = load_settings(self.home, overrides)
        for warning in settings.warnings:
            if warning not in self._warned:
                self._warned.add(warning)
                click.echo(f"warning: {warning}", err=True)
        return settings

    def store(self) -> "SessionStore | PgSessionStore":
        """The home's session store: the directory store, or (for a URL) one PostgreSQL
        store per command, its connection pool closed when the command ends."""
        home = self.home
        if isinstance(home, str):
            if self._pg_store is None:
                from ..sessions.pg_store import PgSessionStore

                self._pg_store = PgSessionStore.open(home)
            return self._pg_store
        from ..sessions import SessionStore

        return SessionStore(home / "sessions")

    def close(self) -> None:
        for memory in self._memories:
            memory.close()
        self._memories = []
        if self._pg_store is not None:
            self._pg_store.close()
            self._pg_store = None

    def memory(self, *, create: bool = True, recover: bool = True,
               **overrides: Any) -> "Memory":
        """The home's :class:`~scriptorium.memory.writing.Memory`, with flag overrides of the
        settings (see :meth:`Memory.open` for ``create`` and ``recover``)."""
        from ..memory.writing import Memory

        memory = Memory.open(self.home, settings=self.settings(**overrides), create=create,
                             recover=recover)
        self._memories.append(memory)  # a PostgreSQL home's connections end with the command
        return memory


class _WarningLines(logging.Handler):
    """The library's log records (a search index rebuilt, …) as ``warning: …`` lines on the
    stderr of the moment (tests swap it), instead of Python's bare last-resort output."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"warning: {' '.join(record.getMessage().split())}", err=True)


def _route_library_logs() -> None:
    logger = logging.getLogger("scriptorium")
    if not any(isinstance(h, _WarningLines) for h in logger.handlers):
        logger.addHandler(_WarningLines(logging.WARNING))  # Python's bare fallback then stays
        # silent; records still propagate to whatever the embedding program configured


def report_error(exc: ScriptoriumError, *, as_json: bool) -> None:
    """One line on stderr; under ``--json`` also ``{"error": {...}}`` on stdout."""
    if as_json:
        click.echo(json.dumps({"error": exc.to_dict()}, ensure_ascii=False))
    click.echo(f"error: {exc}", err=True)


class _Group(click.Group):
    """A group that reports library errors as one line and the error family's exit code."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ScriptoriumError as exc:
            app = ctx.find_object(App)
            report_error(exc, as_json=bool(app and app.as_json))
            ctx.exit(exc.exit_code)
        except OSError as exc:  # a full disk mid-write, an unreadable file: one line too
            error = from_os_error(exc)
            app = ctx.find_object(App)
            report_error(error, as_json=bool(app and app.as_json))
            ctx.exit(error.exit_code)
        except KeyboardInterrupt:
            click.echo("error: interrupted", err=True)
            ctx.exit(130)


class _Root(_Group):
    """The root group: click's own usage errors become one line too (not usage + hint +
    message), with the same JSON document under ``--json``."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        _route_library_logs()
        try:
            rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except click.ClickException as exc:
            as_json = "--json" in argv
            if as_json:
                click.echo(json.dumps({"error": {"code": ReasonCode.INVALID_INPUT,
                                                 "message": exc.format_message(),
                                                 "retryable": False}}))
            message = " ".join(exc.format_message().split())
            where = getattr(getattr(exc, "ctx", None), "command_path", "")
            click.echo(f"error: {where + ': ' if where else ''}{message}", err=True)
            rv = exc.exit_code
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            rv = 1
        if not standalone_mode:
            return rv
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Root)
@click.option("--home", type=click.Path(file_okay=False), default=None,
              help="Scriptorium home: a directory, or postgresql://…[?home=NAME] "
                   "(default: $SCRIPTORIUM_HOME or ~/.scriptorium).")
@click.version_option(package_name="scriptorium")
@click.pass_context
def main(ctx: click.Context, home: str | None) -> None:
    """Exactly-once, branch-aware long-term memory for agent conversations."""
    ctx.obj = App(home)
    ctx.call_on_close(ctx.obj.close)


@main.group(cls=_Group)
def session() -> None:
    """Conversation sessions: a DAG of turns on disk."""


@main.group(cls=_Group)
def memory() -> None:
    """The memory workspace: write, search and inspect long-term memory."""


def command(group: click.Group, name: str | None = None, **kwargs: Any) -> Callable:
    """Register a command on ``group`` with the shared ``--json`` flag and the App passed in.

    The wrapped function receives ``app`` first; it returns a JSON-able value plus an optional
    human renderer, via :func:`output`.
    """

    def decorate(fn: Callable) -> click.Command:
        @click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document.")
        @click.pass_obj
        @functools.wraps(fn)
        def wrapper(app: App, as_json: bool, *args: Any, **kw: Any) -> Any:
            app.as_json = as_json
            return fn(app, *args, **kw)

        return group.command(name, **kwargs)(wrapper)

    return decorate


def output(app: App, data: Any, human: Callable[[Any], str] | str | None = None) -> None:
    """Print ``data`` as JSON under ``--json``, else as the human rendering. Warnings (a
    ``warnings`` list in ``data`` or in its ``sessions`` rows) also go to stderr, one line
    each, unless the human rendering already shows them."""
    if app.as_json:
        text = json.dumps(data, ensure_ascii=False, sort_keys=False, default=str)
    elif human is None:
        text = json.dumps(data, ensure_ascii=False, indent=2, default=str)
    else:
        text = human(data) if callable(human) else human
    for warning in _warnings(data):
        if app.as_json or warning not in text:
            click.echo(f"warning: {warning}", err=True)
    if text:
        click.echo(text)


def _warnings(data: Any) -> list[str]:
    if not isinstance(data, dict):
        return []
    found = list(data.get("warnings") or [])
    for row in data.get("sessions") or []:
        if isinstance(row, dict):
            found += [f"{row.get('session_id')}: {w}" for w in row.get("warnings") or []]
    return found

