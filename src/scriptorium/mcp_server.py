"""The MCP server: memory and sessions as tools and resources an agent can call.

An agent cannot import a Python library from inside its model loop; it can talk the Model
Context Protocol. This module puts the library's read operations (and, on request, the two
write operations) behind the official ``mcp`` SDK (optional extra ``[mcp]``):

- tools ``search_memory``, ``memory_context``, ``follow_source``, ``show_topic``,
  ``memory_status``; with ``allow_write`` also ``record_turn`` and ``write_memory``;
- every topic file as a resource ``memory://topics/<path>``.

Each tool is one library call. Arguments are validated by the same rules as the CLI (the
library does it) plus size bounds here; a :class:`ScriptoriumError` becomes a tool error whose
text is the CLI's one line (``CODE: message``), so a bad argument never ends the server.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.types import Resource as MCPResource
from pydantic import Field, ValidationError

from .errors import InvalidInput, ScriptoriumError
from .memory.status import memory_status, show
from .memory.writing import Memory

TOPIC_SCHEME = "memory://topics/"
MAX_QUERY_CHARS = 2_000          # a search query, a session or node id, a topic reference
MAX_TEXT_CHARS = 1_000_000      # one recorded turn (about 250k tokens)
MAX_TOP_K = 100

Query = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS,
                             description="Words to look for (BM25 over topic claims).")]
Ident = Annotated[str, Field(min_length=1, max_length=MAX_QUERY_CHARS)]

INSTRUCTIONS = (
    "Long-term memory for this agent's conversations. Call search_memory before answering "
    "questions about earlier work; pass your session (and head) so claims said on your own "
    "branch of the conversation rank first. Every claim cites source ids: follow_source turns "
    "one into the conversation turn it came from."
)


def _one_line(exc: ScriptoriumError) -> ToolError:
    """The CLI's one-line error, as a tool error the model can read and act on."""
    return ToolError(f"{exc.code}: {exc.message}")


def build_server(memory: Memory, *, allow_write: bool = False) -> MCPServer:
    """An MCP server over ``memory`` (its home's sessions and workspace).

    Read-only unless ``allow_write``: the write tools are then not even listed.
    """
    server = _TopicServer(memory, name="scriptorium", instructions=INSTRUCTIONS,
                          log_level="WARNING")

    @server.tool()
    def search_memory(query: Query,
                      session: Ident | None = None,
                      head: Ident | None = None,
                      top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K)] = 5,
                      path: Ident | None = None,
                      since: Ident | None = None,
                      until: Ident | None = None,
                      speaker: Ident | None = None,
                      include_sources: bool = False) -> dict[str, Any]:
        """Search long-term memory. Returns ranked hits: topic path, block id, claim text and
        the source ids it cites. With `session` (and optionally `head`, default the session's
        head) each hit says whether it holds on that branch (`branch`: on_line, alternative,
        elsewhere); alternatives rank lower. `path` limits to a topic folder; `since`/`until`
        (YYYY[-MM[-DD]]) to dated evidence; `include_sources` also searches archived turns."""
        if head is not None and session is None:
            raise ToolError("INVALID_INPUT: head needs a session")
        try:
            hits = memory.search(query, session=session, head=head, top_k=top_k,
                                 path_prefix=path, since=since, until=until, speaker=speaker,
                                 include_sources=include_sources)
        except ScriptoriumError as exc:
            raise _one_line(exc) from None
        return {"hits": [h.to_dict() for h in hits]}

    @server.tool()
    def memory_context(session: Ident, head: Ident | None = None,
                       budget: Annotated[int, Field(ge=50, le=200_000)] = 2_000
                       ) -> dict[str, Any]:
        """The memory a model on this branch of `session` should see now: one Markdown block
        (claims relevant to the branch's recent turns, on-line first, alternatives labelled,
        each with its block id) within `budget` tokens. Put `markdown` in your prompt."""
        try:
            return memory.context(session, head=head, budget=budget).to_dict()
        except ScriptoriumError as exc:
            raise _one_line(exc) from None

    @server.tool()
    def follow_source(source_id: Ident) -> dict[str, Any]:
        """The conversation turn a cited source id (`openprogram/<session>/<node>`) came from:
        session, node, archived text, time and speaker."""
        try:
            return memory.follow(source_id)
        except ScriptoriumError as exc:
            raise _one_line(exc) from None

    @server.tool()
    def show_topic(ref: Ident) -> dict[str, Any]:
        """A topic file (`projects/x.md`) with its blocks, or one block by id (`^f888f60e`)
        with its footnotes and cited sources."""
        try:
            return show(memory.workspace, ref)
        except ScriptoriumError as exc:
            raise _one_line(exc) from None

    @server.tool()
    def memory_status(sessions: list[Ident] | None = None) -> dict[str, Any]:
        """Workspace id and revision, and per session and live branch: the tip, whether it is
        the head, and the turns memory still owes (ids and tokens). Read-only."""
        if sessions is not None and len(sessions) > MAX_TOP_K:
            raise ToolError(f"INVALID_INPUT: at most {MAX_TOP_K} sessions per call")
        try:
            return _status(memory, sessions)
        except ScriptoriumError as exc:
            raise _one_line(exc) from None

    if allow_write:
        _add_write_tools(server, memory)
    return server


def _status(memory: Memory, sessions: list[str] | None) -> dict[str, Any]:
    return memory_status(memory, list(sessions) if sessions else None)


def _add_write_tools(server: MCPServer, memory: Memory) -> None:
    @server.tool()
    def record_turn(session: Ident, role: Literal["user", "assistant"],
                    text: Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)],
                    after: Ident | None = None, node_id: Ident | None = None,
                    title: Annotated[str, Field(max_length=MAX_QUERY_CHARS)] = ""
                    ) -> dict[str, Any]:
        """Append one user or assistant turn to `session` (created if new, with `title`),
        after the head or, with `after`, as a fork after that node (it becomes the head).
        Returns the node id and the new head. Call write_memory afterwards."""
        try:
            return memory.record_turn(session, role, text, after=after, node_id=node_id,
                                      title=title)
        except ScriptoriumError as exc:
            raise _one_line(exc) from None

    @server.tool()
    def write_memory(session: Ident, boundary: bool = False) -> dict[str, Any]:
        """Write what `session` owes to memory. Default: the per-turn path (writes only when a
        batch is due); `boundary=true`: the session-boundary write of every branch. Returns
        the marked turn ids and the failure, if any (reason code, retryable)."""
        try:
            if not memory.store.exists(session):
                from .sessions.errors import SessionNotFound

                raise SessionNotFound(f"unknown session {session!r}")
            result = (memory.write_session(session) if boundary
                      else memory.write_turn(session))
        except ScriptoriumError as exc:
            raise _one_line(exc) from None
        return result.to_dict()


class _TopicServer(MCPServer):
    """An MCPServer whose resource list is the workspace's topic files at the time of asking
    (topics come and go with every write, so a list fixed at start-up would go stale)."""

    def __init__(self, memory: Memory, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._memory = memory

        @self.resource(TOPIC_SCHEME + "{+path}", name="topic", mime_type="text/markdown",
                       description="A memory topic file (Markdown), by its path under topics/.")
        def topic(path: str) -> str:
            try:
                data = show(memory.workspace, path)
            except ScriptoriumError as exc:
                raise ResourceError(f"{exc.code}: {exc.message}") from None
            if data["kind"] != "topic":
                raise ResourceError(f"NOT_FOUND: no topic file {path!r}")
            return str(data["text"])

    async def call_tool(self, name: str, arguments: dict[str, Any],
                        context: Any = None) -> Any:
        """As the SDK's, but an argument that fails the schema is reported on one line, in the
        CLI's words (``INVALID_INPUT: tool: field: problem``), not as pydantic's report."""
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if not isinstance(cause, ValidationError):
                raise
            problems = "; ".join(
                f"{'.'.join(str(part) for part in err['loc'])}: {err['msg']}"
                for err in cause.errors(include_url=False, include_input=False))
            raise ToolError(f"INVALID_INPUT: {name}: {problems}") from None

    async def list_resources(self) -> list[MCPResource]:
        ws = self._memory.workspace
        listed = await super().list_resources()
        for rel in ws.topic_paths():
            path = rel.removeprefix("topics/")
            listed.append(MCPResource(uri=TOPIC_SCHEME + path, name=path,
                                      mime_type="text/markdown"))
        return listed


def parse_http(address: str) -> tuple[str, int]:
    """``HOST:PORT``, ``:PORT`` or ``PORT`` (loopback when no host is given)."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        raise InvalidInput(f"--http needs HOST:PORT, got {address!r}") from None
    if not 0 <= number <= 65535:
        raise InvalidInput(f"--http port out of range: {number}")
    return host, number


def serve(home: Path | str | None, *, http: str | None = None,
          allow_write: bool = False) -> None:
    """Run the server until the client goes away: stdio, or streamable HTTP at ``http``."""
    memory = Memory(home)
    server = build_server(memory, allow_write=allow_write)
    if http is None:
        server.run("stdio")
        return
    host, port = parse_http(http)
    anyio.run(_serve_http, server, host, port)


async def _serve_http(server: MCPServer, host: str, port: int) -> None:
    """Streamable HTTP on a socket bound here, so port 0 works and the address printed on
    stderr is the one actually served (clients and tests read it from there)."""
    import socket
    import sys

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise InvalidInput(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    # Listening before the address is printed: a client that connects as soon as it reads
    # the line waits in the backlog until the server accepts, instead of being refused.
    sock.listen(config.backlog)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    print(f"scriptorium mcp: serving http://{shown}:{bound}/mcp", file=sys.stderr, flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])
