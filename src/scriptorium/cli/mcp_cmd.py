"""``scriptorium mcp``: serve memory and sessions to an agent over the Model Context Protocol."""

from __future__ import annotations

import click

from ..errors import InvalidInput, ReasonCode
from .app import App, main


class McpUnavailable(InvalidInput):
    """The MCP server was asked for but the optional ``mcp`` SDK is not installed."""

    code = ReasonCode.MCP_UNAVAILABLE


@main.command("mcp")
@click.option("--home", "home", type=click.Path(file_okay=False), default=None,
              help="Scriptorium home (overrides the global --home).")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP at HOST:PORT (PORT alone: 127.0.0.1) instead of stdio.")
@click.option("--allow-write", is_flag=True,
              help="Also offer record_turn and write_memory (read-only without it).")
@click.pass_obj
def mcp_cmd(app: App, home: str | None, http: str | None, allow_write: bool) -> None:
    """Serve memory to an MCP client (stdio by default). Tools: search_memory, memory_context,
    follow_source, show_topic, memory_status; with --allow-write record_turn, write_memory."""
    try:
        from ..mcp_server import serve
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "mcp":
            raise McpUnavailable("the MCP server needs the optional extra: "
                                 "pip install 'scriptorium[mcp]'") from None
        raise
    serve(home if home is not None else app.home, http=http, allow_write=allow_write)
