"""``scriptorium view``: a session drawn as one self-contained HTML page, or every session
of the home served on 127.0.0.1."""

from __future__ import annotations

import click

from ..errors import InvalidInput
from .app import App, command, main, output

DEFAULT_PORT = 8765


@command(main, "view")
@click.argument("session_id", required=False)
@click.option("-o", "--output", "out", type=click.Path(dir_okay=False), default=None,
              help="Where to write the page (default: ./<SID>.html).")
@click.option("--serve", is_flag=True, help="Serve every session's page on 127.0.0.1.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True,
              help="Port for --serve (0: any free port).")
def view_cmd(app: App, session_id: str | None, out: str | None, serve: bool, port: int) -> None:
    """Draw SESSION_ID's branches and what memory holds of each, as an HTML page."""
    from ..view import ViewServer, write_page

    if serve == (session_id is not None):
        raise InvalidInput("give a SESSION_ID to write its page, or --serve (not both)")
    if not serve and port != DEFAULT_PORT:
        raise InvalidInput("--port only applies with --serve")
    memory = app.memory()
    if not serve:
        info = write_page(memory, session_id, out or f"{session_id}.html")
        output(app, info, lambda d: f"wrote {d['path']} ({d['nodes']} nodes, {d['bytes']} bytes)")
        return
    server = ViewServer(memory, port)
    output(app, {"url": server.url, "home": str(memory.home)},
           lambda d: f"serving {d['url']} (Ctrl-C stops)")
    click.get_text_stream("stdout").flush()
    try:
        server.serve_forever()
    finally:
        server.server_close()
