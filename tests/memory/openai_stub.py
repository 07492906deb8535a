"""A scripted OpenAI-compatible chat-completions server for tests (127.0.0.1, port 0).

The script is a list of steps served in order, one per ``POST /v1/chat/completions``:
``reply(tool_call(...), ...)`` answers with tool calls, ``final("text")`` with a plain
message, ``error(429)`` with an HTTP error, ``delay(seconds, step)`` sleeps first (to trip the
client's timeout). A step may also be a callable ``(request_body) -> step``. When the script
runs out the server answers 500 "script exhausted", so a run that talks longer than the test
expected fails loudly. Every request body and its headers are kept in ``requests``.
"""

from __future__ import annotations

import itertools
import json
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

_ids = itertools.count(1)


@dataclass
class Step:
    status: int = 200
    body: dict[str, Any] | None = None
    delay: float = 0.0


def tool_call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": f"call_{next(_ids)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}


def raw_tool_call(name: str, arguments: str) -> dict[str, Any]:
    """A tool call whose arguments string is sent as given (e.g. not JSON)."""
    return {"id": f"call_{next(_ids)}", "type": "function",
            "function": {"name": name, "arguments": arguments}}


def _completion(message: dict[str, Any], finish: str, usage: tuple[int, int]) -> dict[str, Any]:
    return {"id": f"chatcmpl-{next(_ids)}", "object": "chat.completion", "created": 0,
            "model": "stub-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1],
                      "total_tokens": usage[0] + usage[1]}}


def reply(*calls: dict[str, Any], content: str | None = None,
          usage: tuple[int, int] = (100, 20)) -> Step:
    return Step(body=_completion({"role": "assistant", "content": content,
                                  "tool_calls": list(calls)}, "tool_calls", usage))


def final(text: str = "Done.", usage: tuple[int, int] = (50, 5)) -> Step:
    return Step(body=_completion({"role": "assistant", "content": text}, "stop", usage))


def error(status: int, message: str = "scripted failure", kind: str = "error") -> Step:
    return Step(status=status, body={"error": {"message": message, "type": kind,
                                               "code": None, "param": None}})


def delay(seconds: float, then: Step | None = None) -> Step:
    step = then or final()
    return Step(status=step.status, body=step.body, delay=seconds)


class ScriptedServer:
    """Serve a script on 127.0.0.1:<free port>; use as a context manager."""

    def __init__(self, script: list[Step | Callable[[dict[str, Any]], Step]]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,),
                                        daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def remaining(self) -> int:
        return len(self.script)

    def __enter__(self) -> "ScriptedServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._stop.set()  # releases any handler still sleeping in a delay step
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _next(self, body: dict[str, Any]) -> Step:
        with self._lock:
            self.requests.append(body)
            if not self.script:
                return error(500, "script exhausted")
            step = self.script.pop(0)
        return step(body) if callable(step) else step

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout): nothing to answer

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                try:
                    body = json.loads(raw)
                except ValueError:
                    self._send(400, {"error": {"message": "body is not JSON"}})
                    return
                with server._lock:
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                step = server._next(body)
                if step.delay and server._stop.wait(step.delay):
                    return
                self._send(step.status, step.body or {})

        return Handler
