"""``scriptorium view --serve``: the same pages for every session of a home, on loopback only.

Routes: ``/`` an index of sessions, ``/session/<id>`` one session's page (built fresh per
request, so it shows what memory holds now). A session id from the URL passes the same check
as every id (one path component, no ``..``), so a request never reads outside the home.
"""

from __future__ import annotations

import html
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote, urlsplit

from ..errors import InvalidInput, NotFound, ScriptoriumError
from .model import session_model
from .page import asset, render_page

if TYPE_CHECKING:  # pragma: no cover
    from ..memory.writing import Memory

HOST = "127.0.0.1"


def index_page(memory: "Memory") -> str:
    """The list of sessions, newest first, each linking to its page."""
    rows = sorted(memory.store.list_sessions(), key=lambda r: -(r.get("updated_at") or 0))
    items = []
    for row in rows:
        sid = row["session_id"]
        title = row.get("title") or sid
        updated = row.get("updated_at")
        when = (time.strftime(" · updated %Y-%m-%d %H:%M UTC", time.gmtime(updated))
                if isinstance(updated, (int, float)) else "")
        items.append(f'<li><a href="/session/{quote(sid, safe="")}">{html.escape(title)}</a> '
                     f'<span class="muted">{html.escape(sid)}{when}</span></li>')
    body = "\n".join(items) or '<li class="muted">No sessions in this home yet.</li>'
    return (asset("index.html").replace("/*{{CSS}}*/", asset("view.css"))
            .replace("{{HOME}}", html.escape(str(memory.home)))
            .replace("{{COUNT}}", str(len(rows))).replace("{{ITEMS}}", body))


class _Handler(BaseHTTPRequestHandler):
    server: "ViewServer"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the CLI prints the URL
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        try:
            if path in ("/", "/index.html"):
                with self.server.lock:
                    self._send(200, index_page(self.server.memory))
                return
            if path.startswith("/session/"):
                sid = unquote(path[len("/session/"):])
                with self.server.lock:
                    page = render_page(session_model(self.server.memory, sid), index_href="/")
                self._send(200, page)
                return
            self._send(404, "<p>not found</p>")
        except InvalidInput as exc:
            self._send(400, f"<p>{html.escape(str(exc))}</p>")
        except NotFound as exc:
            self._send(404, f"<p>{html.escape(str(exc))}</p>")
        except ScriptoriumError as exc:
            self._send(500, f"<p>{html.escape(str(exc))}</p>")

    def _send(self, status: int, body: str) -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)


class ViewServer(ThreadingHTTPServer):
    """An HTTP server on 127.0.0.1 that serves the pages of one home."""

    daemon_threads = True

    def __init__(self, memory: "Memory", port: int = 0):
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise InvalidInput(f"invalid port {port!r}: expected 0..65535")
        self.memory = memory
        self.lock = threading.Lock()  # one model at a time: the store cache is shared
        try:
            super().__init__((HOST, port), _Handler)
        except OSError as exc:
            raise InvalidInput(f"cannot listen on {HOST}:{port}: {exc.strerror or exc}") from None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server_address[1]}/"
