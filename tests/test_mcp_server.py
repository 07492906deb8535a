"""``scriptorium mcp``: the SDK's real client talks to the real server, over stdio (a
subprocess) and over streamable HTTP on 127.0.0.1, on a home holding a branching session
written to memory. Every tool's answer is checked against the library's own answer."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import anyio
import pytest

pytest.importorskip("mcp", reason="the [mcp] extra is not installed")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from scriptorium.config import load_settings  # noqa: E402
from scriptorium.demo import SESSION, build_session  # noqa: E402
from scriptorium.memory.search import search  # noqa: E402
from scriptorium.memory.status import memory_status, show  # noqa: E402
from scriptorium.memory.writing import Memory  # noqa: E402

READ_TOOLS = {"search_memory", "memory_context", "follow_source", "show_topic", "memory_status"}
WRITE_TOOLS = {"record_turn", "write_memory"}


def _memory(home: Path) -> Memory:
    return Memory(home, settings=load_settings(home))


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A home with the demo's branching session (retry, edit, sub-agent) written to memory."""
    root = tmp_path_factory.mktemp("mcp-home")
    memory = _memory(root)
    build_session(memory.store)
    result = memory.write_session(SESSION)
    assert result.failure is None and result.marked
    return root


def _stdio(home: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "scriptorium", "mcp", "--home", str(home), *extra],
                                 env={"PYTHONPATH": os.pathsep.join(sys.path)})


def _structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return result.structured_content


def _error_text(result: Any) -> str:
    assert result.is_error, result.structured_content
    return " ".join(getattr(c, "text", "") for c in result.content)


def _run(coro: Any) -> Any:
    return anyio.run(coro)


def test_stdio_server_is_read_only_and_lists_every_topic_as_a_resource(home: Path) -> None:
    memory = _memory(home)
    topics = sorted(p.removeprefix("topics/") for p in memory.workspace.topic_paths())
    assert topics

    async def main() -> tuple[set[str], list[str], str]:
        async with Client(_stdio(home)) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            listed = sorted(str(r.uri) for r in (await client.list_resources()).resources)
            read = await client.read_resource(f"memory://topics/{topics[0]}")
            return tools, listed, read.contents[0].text

    tools, listed, text = _run(main)
    assert tools == READ_TOOLS
    assert listed == [f"memory://topics/{t}" for t in topics]
    assert text == (memory.workspace.root / "topics" / topics[0]).read_text()


def test_every_read_tool_answers_what_the_library_answers(home: Path) -> None:
    memory = _memory(home)
    hits = [h.to_dict() for h in search(memory.workspace, "Dana vegetarian", top_k=3)]
    assert hits and hits[0]["sources"]
    source = hits[0]["sources"][0]
    block = hits[0]["block_id"]

    async def main() -> dict[str, Any]:
        async with Client(_stdio(home)) as client:
            return {
                "search": _structured(await client.call_tool(
                    "search_memory", {"query": "Dana vegetarian", "top_k": 3})),
                "follow": _structured(await client.call_tool(
                    "follow_source", {"source_id": source})),
                "block": _structured(await client.call_tool("show_topic", {"ref": block})),
                "topic": _structured(await client.call_tool(
                    "show_topic", {"ref": hits[0]["path"]})),
                "status": _structured(await client.call_tool(
                    "memory_status", {"sessions": [SESSION]})),
            }

    got = _run(main)
    assert got["search"] == json.loads(json.dumps({"hits": hits}))
    assert got["follow"] == json.loads(json.dumps(
        memory.follow(source)))
    assert got["follow"]["in_session_store"] is True
    assert got["block"] == json.loads(json.dumps(show(memory.workspace, block)))
    assert got["topic"]["kind"] == "topic" and got["topic"]["path"] == hits[0]["path"]
    assert got["status"] == json.loads(json.dumps(memory_status(memory, [SESSION])))


BAD_CALLS: list[tuple[str, dict[str, Any], str]] = [
    ("search_memory", {}, "query"),                                   # missing argument
    ("search_memory", {"query": "x", "top_k": 0}, "top_k"),           # out of range
    ("search_memory", {"query": "x", "top_k": "many"}, "top_k"),      # wrong type
    ("search_memory", {"query": "q" * 2_001}, "query"),                # oversized
    ("search_memory", {"query": "x", "since": "last tuesday"}, "INVALID_INPUT"),
    ("search_memory", {"query": "x", "head": "a1"}, "head needs a session"),
    ("show_topic", {"ref": "../../sessions/lisbon-offsite/meta.json"}, "INVALID_INPUT"),
    ("show_topic", {"ref": "nothing-here.md"}, "NOT_FOUND"),
    ("follow_source", {"source_id": "no-slashes"}, "INVALID_SOURCE_ID"),
    ("memory_status", {"sessions": ["no-such-session"]}, "NOT_FOUND"),
    ("memory_status", {"sessions": "lisbon-offsite"}, "sessions"),     # not a list
    ("record_turn", {"session": "s", "role": "user", "text": "hi"}, "record_turn"),  # not listed
]


def test_bad_arguments_are_error_results_and_the_server_keeps_serving(home: Path) -> None:
    async def main() -> list[str]:
        texts = []
        async with Client(_stdio(home)) as client:
            for name, args, _ in BAD_CALLS:
                texts.append(_error_text(await client.call_tool(name, args)))
                # still serving, and still right, after every bad call
                ok = _structured(await client.call_tool("search_memory", {"query": "Lisbon"}))
                assert ok["hits"]
            with pytest.raises(Exception):
                await client.read_resource("memory://topics/../sessions/x")
            assert _structured(await client.call_tool("memory_status", {}))["sessions"]
        return texts

    texts = _run(main)
    for (name, _, expected), text in zip(BAD_CALLS, texts):
        assert expected in text, (name, text)
        assert "\n" not in text.strip(), text


def test_write_tools_are_offered_only_with_allow_write_and_record_and_write_turns(
        tmp_path: Path) -> None:
    async def main() -> tuple[set[str], dict[str, Any], dict[str, Any], dict[str, Any], str,
                              str]:
        async with Client(_stdio(tmp_path, "--allow-write")) as client:
            tools = {t.name for t in (await client.list_tools()).tools}
            first = _structured(await client.call_tool("record_turn", {
                "session": "agent-1", "role": "user", "title": "Agent notes",
                "text": "The deploy window is Tuesday 14:00 UTC."}))
            second = _structured(await client.call_tool("record_turn", {
                "session": "agent-1", "role": "assistant",
                "text": "Noted: deploys go out Tuesday at 14:00 UTC."}))
            unwritten = _error_text(await client.call_tool(  # stored, not yet written
                "follow_source", {"source_id": f"openprogram/agent-1/{first['node_id']}"}))
            written = _structured(await client.call_tool(
                "write_memory", {"session": "agent-1", "boundary": True}))
            too_big = _error_text(await client.call_tool("record_turn", {
                "session": "agent-1", "role": "user", "text": "x" * 1_000_001}))
            return tools, first, second, written, too_big, unwritten

    tools, first, second, written, too_big, unwritten = _run(main)
    # as in the CLI: a stored turn memory has not written is not found, saying what to do
    assert "SOURCE_NOT_WRITTEN: " in unwritten and "memory write agent-1" in unwritten
    assert tools == READ_TOOLS | WRITE_TOOLS
    assert first["created_session"] is True and second["created_session"] is False
    assert second["head_id"] == second["node_id"]
    assert written["failure"] is None
    assert written["marked"] == [first["node_id"], second["node_id"]]
    assert "text" in too_big
    memory = Memory(tmp_path)
    assert [m["id"] for m in memory.store.get_branch("agent-1")] == written["marked"]
    assert memory.pending("agent-1") == []
    assert [h.block_id for h in search(memory.workspace, "deploy Tuesday")]


@contextlib.contextmanager
def _http_server(home: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``scriptorium mcp --http 127.0.0.1:0`` running, with the line it printed first."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "scriptorium", "--home", str(home), "mcp",
         "--http", "127.0.0.1:0"], stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert proc.stderr is not None
        yield proc, proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGCONT)  # a test may have stopped it
        proc.terminate()
        proc.wait(timeout=30)


def test_streamable_http_on_loopback_serves_the_same_tools(home: Path) -> None:
    with _http_server(home) as (_, line):
        assert "serving http://127.0.0.1:" in line, line
        url = line.split("serving ", 1)[1].strip()
        memory = _memory(home)
        expected = json.loads(json.dumps(
            {"hits": [h.to_dict() for h in search(memory.workspace, "hotel meeting room")]}))

        async def main() -> tuple[set[str], dict[str, Any], str]:
            async with Client(url) as client:
                tools = {t.name for t in (await client.list_tools()).tools}
                got = _structured(await client.call_tool(
                    "search_memory", {"query": "hotel meeting room"}))
                bad = _error_text(await client.call_tool("search_memory", {"query": ""}))
                return tools, got, bad

        tools, got, bad = _run(main)
        assert tools == READ_TOOLS
        assert got == expected
        assert "query" in bad


def test_the_printed_http_address_accepts_connections_as_soon_as_it_is_printed(
        home: Path) -> None:
    """The server is stopped the moment its line is read: the kernel still completes a
    connection to the printed address (it waits in the listen backlog), so a client that
    connects at once is never refused, however slowly the server goes on starting."""
    with _http_server(home) as (proc, line):
        proc.send_signal(signal.SIGSTOP)
        port = int(line.rsplit(":", 1)[1].split("/", 1)[0])
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            pass


def test_a_bad_http_address_is_a_one_line_error(home: Path) -> None:
    run = subprocess.run([sys.executable, "-m", "scriptorium", "--home", str(home), "mcp",
                          "--http", "127.0.0.1:http"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2
    assert run.stderr.strip().count("\n") == 0 and "--http needs HOST:PORT" in run.stderr


def test_branch_aware_search_and_context_answer_what_the_library_answers(home: Path) -> None:
    memory = _memory(home)
    head = memory.store.head(SESSION)
    left = "a3"  # the line the edit of u3 left behind (peanut allergy)
    expected = {tip: json.loads(json.dumps({"hits": [h.to_dict() for h in memory.search(
        "Dana dinner", session=SESSION, head=tip, top_k=3)]})) for tip in (head, left)}
    context = json.loads(json.dumps(memory.context(SESSION, head, budget=400).to_dict()))

    async def main() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], str]:
        async with Client(_stdio(home)) as client:
            on_head = _structured(await client.call_tool("search_memory", {
                "query": "Dana dinner", "session": SESSION, "top_k": 3}))
            on_left = _structured(await client.call_tool("search_memory", {
                "query": "Dana dinner", "session": SESSION, "head": left, "top_k": 3}))
            got = _structured(await client.call_tool("memory_context", {
                "session": SESSION, "budget": 400}))
            bad = _error_text(await client.call_tool("memory_context", {
                "session": SESSION, "head": "no-such-node"}))
            return on_head, on_left, got, bad

    on_head, on_left, got, bad = _run(main)
    assert on_head == expected[head] and on_left == expected[left]
    assert {h["branch"] for h in on_head["hits"]} <= {"on_line", "alternative", "elsewhere"}
    assert on_head["hits"][0]["branch"] == "on_line"
    assert got == context and got["markdown"] and got["tokens"] <= 400
    assert "NOT_FOUND" in bad
